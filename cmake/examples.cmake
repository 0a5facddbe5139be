# cmake/examples.cmake — the examples under Examples/ and their ctests.
# Included from the top-level CMakeLists.txt after the library targets
# (sluice_static, SLUICE_DEP_LIBS) and, for the tests, after enable_testing().
#
#  - Examples/http-server: sluice-http-example, a libevent evhttp server
#    embedding Sluice (needs libevent_extra, shipped by Debian's
#    libevent-dev; skipped with a message when pkg-config cannot find it).
#    Its ctest `example-http-server` drives it with curl on loopback.
option(SLUICE_BUILD_EXAMPLES "Build the examples under Examples/" ${_sluice_top_level})

if(SLUICE_BUILD_EXAMPLES)
  # Only evhttp is taken from libevent_extra: its .pc pulls in nothing else.
  pkg_check_modules(LIBEVENT_EXTRA IMPORTED_TARGET libevent_extra>=2.1)
  if(LIBEVENT_EXTRA_FOUND)
    add_executable(sluice-http-example "${CMAKE_CURRENT_SOURCE_DIR}/Examples/http-server/server.c")
    target_link_libraries(sluice-http-example PRIVATE sluice_static PkgConfig::LIBEVENT_EXTRA ${SLUICE_DEP_LIBS})

    if(SLUICE_BUILD_TESTS)
      find_program(SLUICE_CURL curl)
      if(SLUICE_CURL)
        add_test(NAME example-http-server
                 COMMAND sh "${CMAKE_CURRENT_SOURCE_DIR}/Examples/http-server/test_http_server.sh"
                         "$<TARGET_FILE:sluice-http-example>" "${CMAKE_CURRENT_BINARY_DIR}/example-http-server")
        set_tests_properties(example-http-server PROPERTIES LABELS "example" TIMEOUT 120
                             ENVIRONMENT "CURL=${SLUICE_CURL}")
      else()
        message(WARNING "sluice: curl not found: the example-http-server test is not registered "
                        "(apt-get install curl, or `make deps`)")
      endif()
    endif()
  else()
    message(STATUS "sluice: libevent_extra (evhttp) not found: Examples/http-server is not built")
  endif()
endif()
