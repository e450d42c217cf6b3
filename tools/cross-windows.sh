#!/usr/bin/env bash
# The Windows cross-build (issue 35; docs/windows.md): builds the platform layer (ddo_os, the
# Windows implementations) and its tests with Debian's mingw-w64 compilers, absl from Debian's
# abseil source package and GoogleTest from /usr/src/googletest, then runs the tests under
# wine64. Prints the test counts; exits non-zero on any failure.
#
#   tools/cross-windows.sh            (DDO_WINDOWS_BUILD_DIR overrides build-windows)
#
# Needs g++-mingw-w64-x86-64-posix, wine64 and googletest (tools/install-deps.sh installs
# them). The abseil source is fetched once into the build directory
# (tools/windows/debian-source.sh: apt-get source through a private deb-src list; the system's
# apt configuration is not touched).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDO_WINDOWS_BUILD_DIR:-$root/build-windows}
jobs=${DDO_JOBS:-$(nproc)}
deps="$build/deps"
mkdir -p "$deps"

echo "== abseil source (Debian's source package of the installed libabsl-dev, fetched once)"
absl_source=$("$root/tools/windows/debian-source.sh" libabsl-dev "$deps")
echo "$absl_source"

echo "== Windows cross-build (mingw-w64): the platform layer and its tests"
# CMakePresets.json's windows-mingw-cross, with the source trees it reads from the environment.
(cd "$root" && DDO_ABSL_SOURCE_DIR="$absl_source" DDO_GTEST_SOURCE_DIR=/usr/src/googletest \
  cmake --preset windows-mingw-cross -B "$build" >/dev/null)
cmake --build "$build" -j "$jobs" --target ddo_os_tests

echo "== the platform layer's tests under wine64"
wine=$(command -v wine64 || echo /usr/lib/wine/wine64)
export WINEPREFIX="$build/wine-prefix" WINEDEBUG=-all
# The first start makes the prefix (a few seconds); its messages are not the tests'.
"$wine" cmd /c exit >/dev/null 2>&1 || true
"$wine" "$build/proto/wire/ddo_os_tests.exe" --gtest_color=no
"$(dirname "$wine")/wineserver" -k 2>/dev/null || true
