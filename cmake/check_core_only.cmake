# ctest `core-only-link`: the core builds and links against libc alone.
#   - no file under Sources/CSluice includes a libevent header;
#   - libsluice-core.a leaves no libevent or pthread symbol undefined;
#   - libsluice-core.so needs no library but libc (and the loader);
#   - the test program test_core_only was linked with libsluice-core and
#     nothing else: its link line names no libevent, no pthread.
#
#   cmake -DSOURCE_DIR=. -DNM=nm -DCORE_STATIC=libsluice-core.a -DCORE_SHARED=libsluice-core.so
#         -DEXE=test_core_only -DLINK_TXT=.../test_core_only.dir/link.txt -P check_core_only.cmake
cmake_minimum_required(VERSION 3.20)
foreach(_var SOURCE_DIR NM CORE_STATIC CORE_SHARED EXE)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "check_core_only.cmake: ${_var} is not set")
  endif()
endforeach()

# 1. sources
file(GLOB_RECURSE _core_files "${SOURCE_DIR}/Sources/CSluice/*.c" "${SOURCE_DIR}/Sources/CSluice/*.h")
foreach(_f IN LISTS _core_files)
  file(STRINGS "${_f}" _hits REGEX "#[ \t]*include[ \t]*[<\"](event2/|event\\.h|pthread\\.h)")
  if(_hits)
    message(FATAL_ERROR "${_f} includes a libevent or pthread header: ${_hits}")
  endif()
endforeach()

# 2. the archive's undefined symbols
execute_process(COMMAND "${NM}" -u "${CORE_STATIC}" RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "${NM} -u ${CORE_STATIC} failed: ${_err}")
endif()
string(REGEX MATCHALL "[ \t]U[ \t]+(event_|evthread_|evutil_|pthread_)[A-Za-z0-9_]*" _bad "${_out}")
if(_bad)
  message(FATAL_ERROR "${CORE_STATIC} needs libevent or pthreads: ${_bad}")
endif()

# 3. the shared library's dependencies
file(GET_RUNTIME_DEPENDENCIES LIBRARIES "${CORE_SHARED}"
     RESOLVED_DEPENDENCIES_VAR _resolved UNRESOLVED_DEPENDENCIES_VAR _unresolved)
foreach(_dep IN LISTS _resolved _unresolved)
  get_filename_component(_name "${_dep}" NAME)
  if(NOT _name MATCHES "^(libc\\.so|ld-linux|ld64|libc\\.musl|ld-musl|linux-vdso)")
    # Sanitizer builds add their runtimes; anything else is a dependency too many.
    if(NOT _name MATCHES "^(libasan|libubsan|libtsan|libclang_rt|libm\\.so|libgcc_s|libstdc\\+\\+|libdl|librt|libpthread|libdispatch|libBlocksRuntime)")
      message(FATAL_ERROR "${CORE_SHARED} depends on ${_dep}: the core must need libc alone")
    endif()
    if(_name MATCHES "^libpthread" )
      message(STATUS "note: ${_name} (a sanitizer runtime's dependency, or glibc < 2.34)")
    endif()
  endif()
  if(_name MATCHES "libevent")
    message(FATAL_ERROR "${CORE_SHARED} depends on ${_dep}")
  endif()
endforeach()

# 4. the test program's link line
if(DEFINED LINK_TXT AND EXISTS "${LINK_TXT}")
  file(READ "${LINK_TXT}" _link)
  if(_link MATCHES "event|pthread|libsluice\\.a")
    message(FATAL_ERROR "test_core_only's link line names more than libsluice-core:\n${_link}")
  endif()
  if(NOT _link MATCHES "libsluice-core\\.a")
    message(FATAL_ERROR "test_core_only's link line does not name libsluice-core.a:\n${_link}")
  endif()
  message(STATUS "link line: ${_link}")
else()
  message(STATUS "no link.txt (not a Makefile generator): the link line is not inspected")
endif()
file(GET_RUNTIME_DEPENDENCIES EXECUTABLES "${EXE}"
     RESOLVED_DEPENDENCIES_VAR _eres UNRESOLVED_DEPENDENCIES_VAR _eunres)
foreach(_dep IN LISTS _eres _eunres)
  if(_dep MATCHES "libevent|libsluice")
    message(FATAL_ERROR "${EXE} needs ${_dep}")
  endif()
endforeach()
message(STATUS "the core links against libc alone")
