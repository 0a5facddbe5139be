# Runs one conformance vector through sluice-trace and checks the result.
#
#   cmake -DTRACE_EXE=... -DTRACECMP=... -DTRACE=x.trace -DEXPECTED=x.expected
#         -DMODE=output|error -DOUT_PREFIX=dir/x -P run_vector.cmake
#
# MODE=output: exit status 0 and stdout equal to EXPECTED per key in order,
#              as a multiset, with non-decreasing times (see ctests/tools/tracecmp.c).
# MODE=error:  exit status 2, empty stdout, stderr equal to the line in
#              EXPECTED (x.expected-error).
cmake_minimum_required(VERSION 3.20)
foreach(_var TRACE_EXE TRACECMP TRACE EXPECTED MODE OUT_PREFIX)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "run_vector.cmake: ${_var} is not set")
  endif()
endforeach()
if(NOT EXISTS "${EXPECTED}")
  message(FATAL_ERROR "missing expected file for ${TRACE}: ${EXPECTED}")
endif()

get_filename_component(_out_dir "${OUT_PREFIX}" DIRECTORY)
file(MAKE_DIRECTORY "${_out_dir}")
set(_stdout "${OUT_PREFIX}.stdout")
set(_stderr "${OUT_PREFIX}.stderr")

execute_process(COMMAND "${TRACE_EXE}" "${TRACE}"
                RESULT_VARIABLE _rc
                OUTPUT_FILE "${_stdout}" ERROR_FILE "${_stderr}"
                TIMEOUT 60)
file(READ "${_stdout}" _out)
file(READ "${_stderr}" _err)

# Drops the trailing line break(s) of a text.
function(_chomp var)
  string(REGEX REPLACE "(\r?\n)+$" "" _v "${${var}}")
  set(${var} "${_v}" PARENT_SCOPE)
endfunction()

if(MODE STREQUAL "error")
  file(READ "${EXPECTED}" _want)
  _chomp(_want)
  _chomp(_err)
  set(_problems "")
  if(NOT _rc STREQUAL "2")
    string(APPEND _problems "  exit status: ${_rc} (want 2)\n")
  endif()
  if(NOT _out STREQUAL "")
    string(APPEND _problems "  stdout is not empty:\n${_out}\n")
  endif()
  if(NOT _err STREQUAL _want)
    string(APPEND _problems "  stderr:      '${_err}'\n  want stderr: '${_want}'\n")
  endif()
  if(_problems)
    message(FATAL_ERROR "vector ${TRACE} failed:\n${_problems}")
  endif()
  message(STATUS "OK: ${TRACE} -> exit 2, '${_want}'")
  return()
endif()

if(NOT MODE STREQUAL "output")
  message(FATAL_ERROR "run_vector.cmake: MODE must be output or error, not '${MODE}'")
endif()
if(NOT _rc STREQUAL "0")
  message(FATAL_ERROR "sluice-trace ${TRACE} exited with '${_rc}' (want 0)\nstderr:\n${_err}\nstdout:\n${_out}")
endif()
if(NOT _err STREQUAL "")
  message(WARNING "sluice-trace wrote to stderr:\n${_err}")
endif()
execute_process(COMMAND "${TRACECMP}" "${EXPECTED}" "${_stdout}" RESULT_VARIABLE _cmp_rc)
if(NOT _cmp_rc STREQUAL "0")
  message(FATAL_ERROR "vector ${TRACE}: output differs from ${EXPECTED} (tracecmp exit ${_cmp_rc})")
endif()
