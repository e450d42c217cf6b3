# ddo_os: the platform layer (ddo/os/*.h; docs/windows.md): one interface per concern the OS
# decides (named shared memory, watching a process; the Windows service's life cycle, which
# systemd's pieces in daemon/server are on Linux), with a POSIX and a Windows implementation
# chosen here. No gRPC, no protobuf and no daemon code, so that it cross-builds for Windows
# with absl alone (DDO_WINDOWS_CORE, tools/cross-windows.sh).
set(DDO_OS_SOURCES
  ${CMAKE_CURRENT_LIST_DIR}/src/os/mapped_view.cc
  ${CMAKE_CURRENT_LIST_DIR}/src/os/native_handle.cc
  ${CMAKE_CURRENT_LIST_DIR}/src/os/segment_name.cc)
if(WIN32)
  list(APPEND DDO_OS_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/src/os/windows/native_handle.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/windows/owner_only_security.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/windows/shared_word.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/windows/system_facts.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/windows/user_ids.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/windows/windows_instance_lock.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/windows/windows_pipe.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/windows/process_watch.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/windows/shared_memory.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/windows/windows_error.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/windows/windows_service.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/windows/windows_standby_purge.cc)
else()
  list(APPEND DDO_OS_SOURCES
    ${CMAKE_CURRENT_LIST_DIR}/src/os/posix/native_handle.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/posix/process_watch.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/posix/shared_memory.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/posix/shared_word.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/posix/system_facts.cc
    ${CMAKE_CURRENT_LIST_DIR}/src/os/posix/user_ids.cc)
endif()
add_library(ddo_os STATIC ${DDO_OS_SOURCES})
# PIC: may be linked into libddo_client_rpc.so.
set_target_properties(ddo_os PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(ddo_os PUBLIC ${CMAKE_CURRENT_LIST_DIR}/include)
target_link_libraries(ddo_os PUBLIC absl::status absl::statusor absl::strings absl::time
  ddo_wire_layout PRIVATE absl::str_format ddo_warnings)
if(WIN32)
  target_link_libraries(ddo_os PRIVATE advapi32 bcrypt)
else()
  # PosixError (ddo/wire/posix_error.h).
  target_link_libraries(ddo_os PRIVATE ddo_wire rt)
endif()

if(DDO_BUILD_TESTS)
  # Its own binary (not ddo_unit_tests): the tests start it again as a child process
  # ("--child ROLE"), on Linux and under wine64 alike.
  add_executable(ddo_os_tests
    ${CMAKE_CURRENT_LIST_DIR}/tests/os/os_test_main.cc
    ${CMAKE_CURRENT_LIST_DIR}/tests/os/child_process.cc
    ${CMAKE_CURRENT_LIST_DIR}/tests/os/process_watch_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/tests/os/shared_memory_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/tests/os/shared_word_test.cc
    ${CMAKE_CURRENT_LIST_DIR}/tests/os/system_facts_test.cc)
  if(WIN32)
    target_sources(ddo_os_tests PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tests/os/windows_instance_lock_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/tests/os/windows_pipe_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/tests/os/windows_service_test.cc
      ${CMAKE_CURRENT_LIST_DIR}/tests/os/windows_standby_purge_test.cc)
  endif()
  target_link_libraries(ddo_os_tests PRIVATE ddo_os GTest::gtest absl::time ddo_warnings)
  # Cross-built, the tests run under wine (tools/cross-windows.sh), not through CTest.
  if(NOT CMAKE_CROSSCOMPILING)
    set_target_properties(ddo_os_tests PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
    gtest_discover_tests(ddo_os_tests DISCOVERY_TIMEOUT 60)
  endif()
endif()
