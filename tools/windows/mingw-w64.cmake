# CMake toolchain for the Windows cross-build (tools/cross-windows.sh): Debian's mingw-w64
# compilers with POSIX threads (std::thread and std::mutex, which absl needs), static runtime
# libraries so that the .exe runs under wine64 with nothing beside it.
set(CMAKE_SYSTEM_NAME Windows)
set(CMAKE_SYSTEM_PROCESSOR x86_64)
set(CMAKE_C_COMPILER x86_64-w64-mingw32-gcc-posix)
set(CMAKE_CXX_COMPILER x86_64-w64-mingw32-g++-posix)
set(CMAKE_RC_COMPILER x86_64-w64-mingw32-windres)
set(CMAKE_FIND_ROOT_PATH /usr/x86_64-w64-mingw32)
# Libraries cross-built earlier and installed under this prefix (tools/windows/cross-build-grpc.sh).
if(DEFINED ENV{DDO_CROSS_PREFIX})
  list(APPEND CMAKE_FIND_ROOT_PATH $ENV{DDO_CROSS_PREFIX})
endif()
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
set(CMAKE_EXE_LINKER_FLAGS_INIT "-static -static-libgcc -static-libstdc++")
