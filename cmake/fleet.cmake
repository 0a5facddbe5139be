# Fleet rate limiter (Redis): Sources/CSluiceFleet -> libsluice_fleet.a, and
# the ctests/test_fleet_*.c programs (label "fleet"), which start their own
# redis-server on a free loopback port (ctests/support/redis_server.c).
#
# Needs hiredis (pkg-config "hiredis", Debian libhiredis-dev); without it the
# fleet limiter and its tests are left out and the rest of the build is unchanged.
pkg_check_modules(HIREDIS IMPORTED_TARGET hiredis)
# TLS (rediss://): OpenSSL and libevent's bufferevent_openssl. Not through
# pkg-config "libevent_openssl": its .pc adds -levent (all of libevent) beside
# libevent_core (two copies of the event loop in one process).
pkg_check_modules(OPENSSL IMPORTED_TARGET openssl)
find_library(SLUICE_EVENT_OPENSSL_LIB NAMES event_openssl HINTS ${LIBEVENT_CORE_LIBRARY_DIRS})
file(GLOB SLUICE_FLEET_TESTS CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/ctests/test_fleet_*.c")
if(NOT HIREDIS_FOUND OR NOT OPENSSL_FOUND OR NOT SLUICE_EVENT_OPENSSL_LIB)
  message(STATUS "sluice: hiredis, OpenSSL or libevent_openssl not found: no fleet limiter "
                 "(apt-get install libhiredis-dev libssl-dev libevent-dev)")
  foreach(_src IN LISTS SLUICE_FLEET_TESTS)
    get_filename_component(_name "${_src}" NAME_WE)
    if(TARGET ${_name})
      set_target_properties(${_name} PROPERTIES EXCLUDE_FROM_ALL TRUE)
      set_tests_properties(${_name} PROPERTIES DISABLED TRUE)
    endif()
  endforeach()
  return()
endif()

set(SLUICE_FLEET_DIR "${CMAKE_CURRENT_SOURCE_DIR}/Sources/CSluiceFleet")
file(GLOB SLUICE_FLEET_SOURCES CONFIGURE_DEPENDS "${SLUICE_FLEET_DIR}/*.c")
add_library(sluice_fleet STATIC ${SLUICE_FLEET_SOURCES})
add_library(sluice::sluice_fleet ALIAS sluice_fleet)
set_target_properties(sluice_fleet PROPERTIES OUTPUT_NAME sluice-fleet POSITION_INDEPENDENT_CODE ON)
target_include_directories(sluice_fleet
  PUBLIC $<BUILD_INTERFACE:${SLUICE_FLEET_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  PRIVATE "${SLUICE_FLEET_DIR}")
# The same name is recreated by sluiceConfig.cmake for installed consumers.
add_library(sluice_dep::event_openssl UNKNOWN IMPORTED)
set_target_properties(sluice_dep::event_openssl PROPERTIES IMPORTED_LOCATION "${SLUICE_EVENT_OPENSSL_LIB}")
target_link_libraries(sluice_fleet PUBLIC sluice_static PkgConfig::HIREDIS sluice_dep::event_openssl
                      PkgConfig::OPENSSL ${SLUICE_DEP_LIBS})

# Installed: libsluice-fleet.a with sluice_fleet.h, sluice-fleet.pc, and
# sluice::sluice_fleet in sluiceFleetTargets.cmake, which sluiceConfig.cmake
# loads when it exists and hiredis is found.
install(TARGETS sluice_fleet EXPORT sluiceFleetTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES "${SLUICE_FLEET_DIR}/include/sluice_fleet.h" "${SLUICE_FLEET_DIR}/include/sluice_fleet_timed.h"
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT sluiceFleetTargets NAMESPACE sluice:: FILE sluiceFleetTargets.cmake
        DESTINATION "${SLUICE_CMAKE_INSTALL_DIR}")
sluice_install_pkgconfig(sluice-fleet)

find_program(SLUICE_REDIS_SERVER NAMES redis-server)
if(SLUICE_BUILD_TESTS)
  foreach(_src IN LISTS SLUICE_FLEET_TESTS)
    get_filename_component(_name "${_src}" NAME_WE)
    if(NOT TARGET ${_name})
      continue()
    endif()
    target_link_libraries(${_name} PRIVATE sluice_fleet)
    target_include_directories(${_name} PRIVATE "${SLUICE_FLEET_DIR}")
    set(_env "${SLUICE_TEST_ENV}")
    if(SLUICE_REDIS_SERVER)
      list(APPEND _env "SLUICE_REDIS_SERVER=${SLUICE_REDIS_SERVER}")
    endif()
    # 77: redis-server is not installed (the test says so and is skipped).
    # Topology tests (Sentinel and Cluster failovers) take seconds of real time: label
    # "topology", left out of the default runs (make test-topology runs them).
    set(_labels "fleet")
    if(_name MATCHES "^test_fleet_(sentinel|cluster|cluster_failover|timed_procs)$")
      set(_labels "fleet;topology")
    endif()
    set(_timeout 180)
    if(_name STREQUAL "test_fleet_timed_procs")
      set(_timeout 600) # three runs of 8-20 s of load, each followed by seconds of draining
    endif()
    set_tests_properties(${_name} PROPERTIES LABELS "${_labels}" TIMEOUT ${_timeout} SKIP_RETURN_CODE 77
                         ENVIRONMENT "${_env}")
  endforeach()
endif()

# sluice-trace --redis URL (tools/sluice-trace/redis_run.c, redis_timed.c): the hook is
# compiled in only here, where the fleet limiter exists.
if(TARGET sluice-trace)
  target_sources(sluice-trace PRIVATE "${CMAKE_CURRENT_SOURCE_DIR}/tools/sluice-trace/redis_run.c"
                                      "${CMAKE_CURRENT_SOURCE_DIR}/tools/sluice-trace/redis_timed.c")
  target_compile_definitions(sluice-trace PRIVATE SLUICE_TRACE_WITH_REDIS=1)
  target_link_libraries(sluice-trace PRIVATE sluice_fleet)
endif()
