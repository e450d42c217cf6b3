# The libraries DDO_WINDOWS_CORE's daemon layers use besides absl and GoogleTest (CMakeLists.txt
# adds those): RE2 and spdlog (with fmt) as targets of the names the Linux build finds, and
# xxHash's header.
#
# The mingw cross-build (tools/cross-windows.sh) has no Windows packages of them: RE2 is built
# from its source tree (DDO_RE2_SOURCE_DIR), spdlog, fmt and xxHash are used header-only from
# DDO_HEADER_LIBRARIES_DIR, a directory that holds only their headers (Debian's, which are
# portable: nothing of the build machine's C library comes with them). Without these, the
# packages an MSVC build installs with vcpkg (vcpkg.json).
if(DDO_RE2_SOURCE_DIR)
  set(RE2_BUILD_TESTING OFF CACHE BOOL "" FORCE)
  add_subdirectory(${DDO_RE2_SOURCE_DIR} re2 EXCLUDE_FROM_ALL SYSTEM)
else()
  find_package(re2 CONFIG REQUIRED)
endif()

if(DDO_HEADER_LIBRARIES_DIR)
  add_library(spdlog::spdlog INTERFACE IMPORTED)
  # Debian's spdlog is configured for an external fmt (tweakme.h); both go header-only here.
  set_target_properties(spdlog::spdlog PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES ${DDO_HEADER_LIBRARIES_DIR}
    INTERFACE_SYSTEM_INCLUDE_DIRECTORIES ${DDO_HEADER_LIBRARIES_DIR}
    INTERFACE_COMPILE_DEFINITIONS "SPDLOG_FMT_EXTERNAL;FMT_HEADER_ONLY")
  set(DDO_XXHASH_INCLUDE ${DDO_HEADER_LIBRARIES_DIR})
else()
  find_package(spdlog CONFIG REQUIRED)
  find_path(DDO_XXHASH_INCLUDE xxhash.h REQUIRED)
endif()
