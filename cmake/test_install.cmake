# ctest `install-consumer`: installs the build into a temporary prefix and
# builds the programs of ctests/consumer against the installed files, the way
# a user would (the README's C API lines):
#   1. the core alone, consumer.c:
#        cc consumer.c $(pkg-config --cflags --libs sluice-core) -Wl,-rpath,LIBDIR   (libsluice-core.so)
#        cc consumer.c $(pkg-config --static --cflags --libs sluice-core)            (libsluice-core.a)
#      neither link line may name libevent or pthreads;
#   2. the loop layer, loop_consumer.c (which also calls libevent itself):
#        cc loop_consumer.c $(pkg-config --cflags --libs sluice) -Wl,-rpath,LIBDIR   (libsluice.so)
#        cc loop_consumer.c $(pkg-config --static --cflags --libs sluice)            (libsluice.a)
#      and consumer.c through `pkg-config sluice` too;
#   3. the trace library, trace_consumer.c (WITH_TRACE), and the fleet
#      limiter, fleet_consumer.c (WITH_FLEET: the build found hiredis):
#        cc trace_consumer.c $(pkg-config [--static] --cflags --libs sluice-trace)
#        cc fleet_consumer.c $(pkg-config [--static] --cflags --libs sluice-fleet)
#   4. a CMake project with find_package(sluice): sluice::sluice_shared,
#      sluice::sluice_static, sluice::sluice, sluice::sluice_core_shared,
#      sluice::sluice_core_static, sluice::sluice_trace and (WITH_FLEET)
#      sluice::sluice_fleet.
# Shared programs run with LD_LIBRARY_PATH unset (the rpath finds the
# library); static ones must not need any libsluice*.so.
#
#   cmake -DBUILD_DIR=build -DSOURCE_DIR=. -DWORK_DIR=build/install-consumer
#         -DC_COMPILER=cc -DPKG_CONFIG=pkg-config -DGENERATOR="Unix Makefiles"
#         -DVERSION=0.1.0 [-DEXTRA_FLAGS="-fsanitize=..."] [-DWITH_TRACE=1]
#         [-DWITH_FLEET=1] -P test_install.cmake
cmake_minimum_required(VERSION 3.20)
foreach(_var BUILD_DIR SOURCE_DIR WORK_DIR C_COMPILER PKG_CONFIG GENERATOR VERSION)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "test_install.cmake: ${_var} is not set")
  endif()
endforeach()
separate_arguments(_extra UNIX_COMMAND "${EXTRA_FLAGS}")

function(step text)
  message(STATUS "[install-consumer] ${text}")
endfunction()

# Runs a command; fails the test with its output when it fails.
function(run)
  cmake_parse_arguments(R "" "OUTPUT" "COMMAND" ${ARGN})
  execute_process(COMMAND ${R_COMMAND} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
  if(NOT _rc STREQUAL "0")
    list(JOIN R_COMMAND " " _cmd)
    message(FATAL_ERROR "command failed (${_rc}): ${_cmd}\n--- stdout\n${_out}\n--- stderr\n${_err}")
  endif()
  if(R_OUTPUT)
    set(${R_OUTPUT} "${_out}" PARENT_SCOPE)
  endif()
endfunction()

# Runs a consumer binary and checks it reports the expected version.
function(run_consumer exe)
  run(COMMAND ${ARGN} "${exe}" OUTPUT _out)
  if(NOT _out MATCHES "sluice ${VERSION}")
    message(FATAL_ERROR "${exe} printed:\n${_out}\nwant a line 'sluice ${VERSION}'")
  endif()
  string(STRIP "${_out}" _out)
  step("  ${exe}: ${_out}")
endfunction()

# Checks whether an executable needs a Sluice shared library at run time:
# `want` is the library's name (libsluice or libsluice-core), or FALSE for
# a program linked statically (no libsluice*.so at all).
function(check_needs_shared exe want libdir)
  file(GET_RUNTIME_DEPENDENCIES EXECUTABLES "${exe}" DIRECTORIES "${libdir}"
       RESOLVED_DEPENDENCIES_VAR _resolved UNRESOLVED_DEPENDENCIES_VAR _unresolved)
  set(_found "")
  foreach(_dep IN LISTS _resolved _unresolved)
    if(_dep MATCHES "libsluice(-core)?\\.so")
      list(APPEND _found "${_dep}")
    endif()
  endforeach()
  if(want AND NOT _found)
    message(FATAL_ERROR "${exe} does not link ${want}.so (deps: ${_resolved};${_unresolved})")
  endif()
  if(want)
    string(FIND "${_found}" "${libdir}/${want}.so" _at)
    if(NOT _at EQUAL 0)
      message(FATAL_ERROR "${exe} loads '${_found}', not ${want}.so installed in ${libdir}")
    endif()
  endif()
  if(NOT want AND _found)
    message(FATAL_ERROR "${exe} should be linked statically but needs ${_found}")
  endif()
endfunction()

# Builds a program with the flags of `pkg-config [--static] --cflags --libs
# <module>` (as the README shows), checks it, runs it.
#   pkg_consumer(NAME exe SOURCE file.c MODULE sluice|sluice-core|sluice-trace|sluice-fleet
#                [STATIC] [NO_LIBEVENT])
function(pkg_consumer)
  cmake_parse_arguments(P "STATIC;NO_LIBEVENT" "NAME;SOURCE;MODULE" "" ${ARGN})
  if(P_STATIC)
    run(COMMAND ${_pkg} --static --cflags --libs ${P_MODULE} OUTPUT _flags)
  else()
    run(COMMAND ${_pkg} --cflags --libs ${P_MODULE} OUTPUT _flags)
  endif()
  string(STRIP "${_flags}" _flags)
  if(P_NO_LIBEVENT AND _flags MATCHES "event|pthread")
    message(FATAL_ERROR "pkg-config ${P_MODULE} gives '${_flags}': the core needs libc alone")
  endif()
  if(NOT P_NO_LIBEVENT AND NOT _flags MATCHES "-levent_core" )
    message(FATAL_ERROR "pkg-config ${P_MODULE} gives '${_flags}': no -levent_core for a loop program")
  endif()
  separate_arguments(_flag_list UNIX_COMMAND "${_flags}")
  if(P_MODULE STREQUAL "sluice-core")
    set(_lib libsluice-core)
  else()
    set(_lib libsluice) # sluice, and sluice-trace and sluice-fleet through it
  endif()
  if(P_STATIC)
    # -lsluice would pick libsluice.so next to libsluice.a: name the archive.
    list(TRANSFORM _flag_list REPLACE "^-l(sluice|sluice-core)$" "-l:lib\\1.a")
  else()
    # A custom prefix is not on the loader's path: record it in the program.
    run(COMMAND ${_pkg} --variable=libdir ${P_MODULE} OUTPUT _pc_libdir)
    string(STRIP "${_pc_libdir}" _pc_libdir)
    list(APPEND _flag_list "-Wl,-rpath,${_pc_libdir}")
  endif()
  list(JOIN _flag_list " " _shown)
  get_filename_component(_src_name "${P_SOURCE}" NAME)
  step("${P_NAME}: ${C_COMPILER} ${_src_name} ${_shown}")
  set(_exe "${WORK_DIR}/${P_NAME}")
  run(COMMAND "${C_COMPILER}" ${_extra} -o "${_exe}" "${P_SOURCE}" ${_flag_list})
  if(P_STATIC)
    check_needs_shared("${_exe}" FALSE "${_libdir}")
  else()
    check_needs_shared("${_exe}" "${_lib}" "${_libdir}")
  endif()
  run_consumer("${_exe}" "${CMAKE_COMMAND}" -E env --unset=LD_LIBRARY_PATH)
endfunction()

set(_prefix "${WORK_DIR}/prefix")
file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# --- install ---------------------------------------------------------------
step("cmake --install ${BUILD_DIR} --prefix ${_prefix}")
run(COMMAND "${CMAKE_COMMAND}" --install "${BUILD_DIR}" --prefix "${_prefix}")

# GNUInstallDirs may pick lib/, lib64/ or lib/<multiarch>/: accept any.
file(GLOB _pcs "${_prefix}/lib*/pkgconfig/sluice.pc" "${_prefix}/lib/*/pkgconfig/sluice.pc")
list(LENGTH _pcs _npcs)
if(NOT _npcs EQUAL 1)
  message(FATAL_ERROR "want exactly one installed sluice.pc under ${_prefix}, found: '${_pcs}'")
endif()
get_filename_component(_pcdir "${_pcs}" DIRECTORY)
get_filename_component(_libdir "${_pcdir}" DIRECTORY)
step("libdir: ${_libdir}")

foreach(_f "${_prefix}/include/sluice.h" "${_prefix}/include/sluice_loop.h"
           "${_libdir}/libsluice.a" "${_libdir}/libsluice.so" "${_libdir}/libsluice.so.0"
           "${_libdir}/libsluice-core.a" "${_libdir}/libsluice-core.so" "${_libdir}/libsluice-core.so.0"
           "${_pcdir}/sluice-core.pc"
           "${_libdir}/cmake/sluice/sluiceConfig.cmake"
           "${_libdir}/cmake/sluice/sluiceConfigVersion.cmake"
           "${_libdir}/cmake/sluice/sluiceTargets.cmake")
  if(NOT EXISTS "${_f}")
    message(FATAL_ERROR "not installed: ${_f}")
  endif()
endforeach()
set(_optional "")
if(WITH_TRACE)
  list(APPEND _optional "${_prefix}/include/sluice_trace.h" "${_libdir}/libsluice-trace.a"
                        "${_pcdir}/sluice-trace.pc")
endif()
if(WITH_FLEET)
  list(APPEND _optional "${_prefix}/include/sluice_fleet.h" "${_libdir}/libsluice-fleet.a"
                        "${_pcdir}/sluice-fleet.pc" "${_libdir}/cmake/sluice/sluiceFleetTargets.cmake")
endif()
foreach(_f IN LISTS _optional)
  if(NOT EXISTS "${_f}")
    message(FATAL_ERROR "not installed: ${_f}")
  endif()
endforeach()
file(READ "${_pcs}" _pc_text)
string(FIND "${_pc_text}" "prefix=${_prefix}\n" _at)
if(NOT _at EQUAL 0)
  message(FATAL_ERROR "sluice.pc does not point at the install prefix ${_prefix}:\n${_pc_text}")
endif()

# --- the installed trace runner ----------------------------------------------
if(EXISTS "${BUILD_DIR}/sluice-trace")
  if(NOT EXISTS "${_prefix}/bin/sluice-trace")
    message(FATAL_ERROR "not installed: ${_prefix}/bin/sluice-trace")
  endif()
  file(WRITE "${WORK_DIR}/smoke.trace" "policy throttle interval=100\n0 call A a\n")
  run(COMMAND "${CMAKE_COMMAND}" -E env --unset=LD_LIBRARY_PATH
              "${_prefix}/bin/sluice-trace" "${WORK_DIR}/smoke.trace" OUTPUT _trace_out)
  if(NOT _trace_out STREQUAL "0 emit A a\n")
    message(FATAL_ERROR "installed sluice-trace printed '${_trace_out}', want '0 emit A a'")
  endif()
  step("installed sluice-trace runs")
endif()

# --- pkg-config --------------------------------------------------------------
set(_pkg "${CMAKE_COMMAND}" -E env "PKG_CONFIG_PATH=${_pcdir}" "${PKG_CONFIG}")
run(COMMAND ${_pkg} --modversion sluice OUTPUT _pc_version)
string(STRIP "${_pc_version}" _pc_version)
if(NOT _pc_version STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config --modversion sluice gives '${_pc_version}', want '${VERSION}'")
endif()

run(COMMAND ${_pkg} --modversion sluice-core OUTPUT _pc_version)
string(STRIP "${_pc_version}" _pc_version)
if(NOT _pc_version STREQUAL VERSION)
  message(FATAL_ERROR "pkg-config --modversion sluice-core gives '${_pc_version}', want '${VERSION}'")
endif()

set(_consumer_c "${SOURCE_DIR}/ctests/consumer/consumer.c")
set(_loop_consumer_c "${SOURCE_DIR}/ctests/consumer/loop_consumer.c")

pkg_consumer(NAME core-pkgconfig-shared SOURCE "${_consumer_c}" MODULE sluice-core NO_LIBEVENT)
pkg_consumer(NAME core-pkgconfig-static SOURCE "${_consumer_c}" MODULE sluice-core NO_LIBEVENT STATIC)
pkg_consumer(NAME loop-pkgconfig-shared SOURCE "${_loop_consumer_c}" MODULE sluice)
pkg_consumer(NAME loop-pkgconfig-static SOURCE "${_loop_consumer_c}" MODULE sluice STATIC)
pkg_consumer(NAME consumer-pkgconfig-shared SOURCE "${_consumer_c}" MODULE sluice)
pkg_consumer(NAME consumer-pkgconfig-static SOURCE "${_consumer_c}" MODULE sluice STATIC)
if(WITH_TRACE)
  set(_trace_consumer_c "${SOURCE_DIR}/ctests/consumer/trace_consumer.c")
  pkg_consumer(NAME trace-pkgconfig-shared SOURCE "${_trace_consumer_c}" MODULE sluice-trace)
  pkg_consumer(NAME trace-pkgconfig-static SOURCE "${_trace_consumer_c}" MODULE sluice-trace STATIC)
endif()
if(WITH_FLEET)
  set(_fleet_consumer_c "${SOURCE_DIR}/ctests/consumer/fleet_consumer.c")
  pkg_consumer(NAME fleet-pkgconfig-shared SOURCE "${_fleet_consumer_c}" MODULE sluice-fleet)
  pkg_consumer(NAME fleet-pkgconfig-static SOURCE "${_fleet_consumer_c}" MODULE sluice-fleet STATIC)
endif()

# --- find_package(sluice) -----------------------------------------------------
set(_cbuild "${WORK_DIR}/cmake-consumer")
step("find_package(sluice) project in ${_cbuild}")
run(COMMAND "${CMAKE_COMMAND}" -S "${SOURCE_DIR}/ctests/consumer" -B "${_cbuild}" -G "${GENERATOR}"
            "-DCMAKE_PREFIX_PATH=${_prefix}"
            "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"
            "-DCMAKE_C_COMPILER=${C_COMPILER}"
            "-DCMAKE_C_FLAGS=${EXTRA_FLAGS}"
            "-DCMAKE_EXE_LINKER_FLAGS=${EXTRA_FLAGS}")
file(STRINGS "${_cbuild}/CMakeCache.txt" _sluice_dir REGEX "^sluice_DIR:")
if(NOT _sluice_dir STREQUAL "sluice_DIR:PATH=${_libdir}/cmake/sluice")
  message(FATAL_ERROR "find_package(sluice) found '${_sluice_dir}', not the one in ${_libdir}")
endif()
run(COMMAND "${CMAKE_COMMAND}" --build "${_cbuild}")
set(_names consumer_shared consumer_static consumer_default consumer_core_shared consumer_core_static
           loop_consumer_shared loop_consumer_static)
if(WITH_TRACE)
  list(APPEND _names trace_consumer)
endif()
if(WITH_FLEET)
  list(APPEND _names fleet_consumer)
endif()
foreach(_name IN LISTS _names)
  run_consumer("${_cbuild}/${_name}" "${CMAKE_COMMAND}" -E env --unset=LD_LIBRARY_PATH)
endforeach()
check_needs_shared("${_cbuild}/consumer_shared" libsluice "${_libdir}")
check_needs_shared("${_cbuild}/consumer_static" FALSE "${_libdir}")
check_needs_shared("${_cbuild}/consumer_core_shared" libsluice-core "${_libdir}")
check_needs_shared("${_cbuild}/consumer_core_static" FALSE "${_libdir}")
check_needs_shared("${_cbuild}/loop_consumer_shared" libsluice "${_libdir}")
check_needs_shared("${_cbuild}/loop_consumer_static" FALSE "${_libdir}")
if(WITH_TRACE)
  check_needs_shared("${_cbuild}/trace_consumer" FALSE "${_libdir}")
endif()
if(WITH_FLEET)
  check_needs_shared("${_cbuild}/fleet_consumer" FALSE "${_libdir}")
endif()

step("all consumers built and ran against the installed sluice ${VERSION}")
