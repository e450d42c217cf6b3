# ddo_core_tests: the gtests of the daemon layers the Windows build has (DDO_WINDOWS_CORE), run
# under wine64 by tools/cross-windows.sh (there is no CTest of a cross-build). The same files
# run on Linux in ddo_unit_tests; a test of a file not yet ported is left out with its file.
if(NOT DDO_BUILD_TESTS)
  return()
endif()
set(DDO_CORE_TEST_SOURCES ${DDO_UNIT_TEST_SOURCES})
list(FILTER DDO_CORE_TEST_SOURCES INCLUDE REGEX "^(common|config|identity|layout|platform|policy|session)/")
foreach(source IN LISTS DDO_NOT_YET_ON_WINDOWS)
  string(REGEX REPLACE "\\.cc$" "_test.cc" test_source ${source})
  list(REMOVE_ITEM DDO_CORE_TEST_SOURCES ${test_source})
endforeach()
add_executable(ddo_core_tests ${DDO_CORE_TEST_SOURCES})
target_link_libraries(ddo_core_tests PRIVATE ddo_common ddo_config ddo_identity ddo_layout
  ddo_platform ddo_policy ddo_session
  ddo_warnings GTest::gtest GTest::gmock GTest::gtest_main)
