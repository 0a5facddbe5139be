# ctest `c-flags-match`: CMake and SwiftPM compile Sluice's C sources with the
# same feature macros. SwiftPM takes them from the cSettings of each C target
# of Package.swift (`.define("NAME", to: "VALUE")`); CMake from
# SLUICE_C_DEFINITIONS (CMakeLists.txt). The test fails when:
#   - a C target CMake builds (TARGETS) is missing from Package.swift, or its
#     defines are not exactly DEFINITIONS (in any order);
#   - Package.swift gives a C target flags CMake cannot match (unsafeFlags);
#   - Package.swift names a C language standard other than CMake's (c11
#     with extensions off, gnu11 with them on).
# When Package.swift names no standard, SwiftPM uses the compiler's default
# dialect: the test says so and passes (the feature macros, which decide the
# library API a source sees, are the same, and CMake's strict C11 is the
# stricter check of the two).
#
#   cmake -DPACKAGE_SWIFT=Package.swift "-DDEFINITIONS=_POSIX_C_SOURCE=200809L"
#         "-DTARGETS=CSluice|CSluiceLoop" -DC_STANDARD=11 -DC_EXTENSIONS=OFF
#         -P check_c_flags.cmake
cmake_minimum_required(VERSION 3.20)
foreach(_var PACKAGE_SWIFT DEFINITIONS TARGETS C_STANDARD C_EXTENSIONS)
  if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
    message(FATAL_ERROR "check_c_flags.cmake: ${_var} is not set")
  endif()
endforeach()
string(REPLACE "|" ";" _targets "${TARGETS}")
string(REPLACE "|" ";" _want "${DEFINITIONS}")
list(SORT _want)

# One pass over the lines: a `name: "X"` line starts target X; the defines
# and unsafe flags that follow, up to the next name, are X's.
# (CMake lists: brackets would glue lines together and semicolons split them,
# so both are neutralised before the text is cut into lines.)
file(READ "${PACKAGE_SWIFT}" _text)
string(REGEX REPLACE "[][;]" " " _lines "${_text}")
string(REPLACE "\n" ";" _lines "${_lines}")
set(_current "")
set(_names "")
foreach(_line IN LISTS _lines)
  string(REGEX REPLACE "^[ \t]*//.*" "" _line "${_line}")
  if(_line MATCHES "name:[ \t]*\"([A-Za-z0-9_]+)\"")
    set(_current "${CMAKE_MATCH_1}")
    list(APPEND _names "${_current}")
    set(_defs_${_current} "")
  endif()
  string(REGEX MATCHALL "\\.define\\(\"[^\"]+\"(,[ \t]*to:[ \t]*\"[^\"]*\")?" _found "${_line}")
  foreach(_d IN LISTS _found)
    string(REGEX MATCH "\\.define\\(\"([^\"]+)\"(,[ \t]*to:[ \t]*\"([^\"]*)\")?" _d "${_d}")
    if(CMAKE_MATCH_2)
      list(APPEND _defs_${_current} "${CMAKE_MATCH_1}=${CMAKE_MATCH_3}")
    else()
      list(APPEND _defs_${_current} "${CMAKE_MATCH_1}")
    endif()
  endforeach()
  if(_line MATCHES "\\.unsafeFlags\\(" AND _current IN_LIST _targets)
    message(FATAL_ERROR "Package.swift gives ${_current} unsafeFlags: CMake does not pass them")
  endif()
endforeach()

set(_bad "")
foreach(_t IN LISTS _targets)
  if(NOT _t IN_LIST _names)
    list(APPEND _bad "${_t}: not a target of Package.swift")
    continue()
  endif()
  set(_have "${_defs_${_t}}")
  list(SORT _have)
  if(NOT _have STREQUAL _want)
    list(APPEND _bad "${_t}: Package.swift defines '${_have}', CMake '${_want}'")
  endif()
endforeach()
if(_bad)
  list(JOIN _bad "\n  " _msg)
  message(FATAL_ERROR "CMake and SwiftPM compile the C sources with different feature macros:\n  ${_msg}\n"
                      "Keep SLUICE_C_DEFINITIONS (CMakeLists.txt) and the cSettings of Package.swift the same.")
endif()

if(C_EXTENSIONS)
  set(_std "gnu${C_STANDARD}")
else()
  set(_std "c${C_STANDARD}")
endif()
if(_text MATCHES "cLanguageStandard:[ \t]*\\.([A-Za-z0-9_]+)")
  if(NOT CMAKE_MATCH_1 STREQUAL _std)
    message(FATAL_ERROR "Package.swift compiles C as .${CMAKE_MATCH_1}, CMake as ${_std}")
  endif()
  message(STATUS "C standard: ${_std} in both")
else()
  message(STATUS "C standard: CMake ${_std}; Package.swift names none (the compiler's default)")
endif()
message(STATUS "feature macros of ${TARGETS}: '${_want}' in both")
