#!/usr/bin/env bash
# The Windows cross-build (issue 35; docs/windows.md): builds the platform layer (ddo_os, the
# Windows implementations), the daemon layers ported so far (common, config, layout, policy:
# DDO_WINDOWS_CORE) and their tests with Debian's mingw-w64 compilers, then runs both test
# programs under wine64. Prints the test counts; exits non-zero on any failure.
#
#   tools/cross-windows.sh            (DDO_WINDOWS_BUILD_DIR overrides build-windows)
#
# Needs g++-mingw-w64-x86-64-posix, wine64, googletest, unicode-data and the Linux build's
# -dev packages (tools/install-deps.sh installs them). Debian has no Windows builds of absl
# and RE2: their source packages (of the installed libabsl-dev and libre2-dev) are fetched
# once into the build directory (tools/windows/debian-source.sh: apt-get source through a
# private deb-src list; the system's apt configuration is not touched) and built as
# subprojects. spdlog, fmt and xxHash are used header-only from Debian's own headers.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDO_WINDOWS_BUILD_DIR:-$root/build-windows}
jobs=${DDO_JOBS:-$(nproc)}
deps="$build/deps"
mkdir -p "$deps"

echo "== abseil and RE2 sources (Debian's source packages of the installed -dev packages, fetched once)"
absl_source=$("$root/tools/windows/debian-source.sh" libabsl-dev "$deps")
re2_source=$("$root/tools/windows/debian-source.sh" libre2-dev "$deps")
echo "$absl_source"
echo "$re2_source"
if [[ ! -f "$re2_source/.ddo-tables" ]]; then
  # Debian's source drops RE2's generated tables; its build makes them again (REBUILD_TABLES),
  # from the unicode-data package's files.
  (cd "$re2_source" && perl re2/make_perl_groups.pl > re2/perl_groups.cc &&
   /usr/bin/python3 re2/make_unicode_casefold.py > re2/unicode_casefold.cc &&
   /usr/bin/python3 re2/make_unicode_groups.py > re2/unicode_groups.cc)
  touch "$re2_source/.ddo-tables"
fi

# Only these headers of /usr/include: the rest of it is the build machine's C library.
headers="$deps/headers"
mkdir -p "$headers"
for header in spdlog fmt xxhash.h; do
  ln -sfn "/usr/include/$header" "$headers/$header"
done

echo "== Windows cross-build (mingw-w64): the platform layer, the ported daemon layers, their tests"
# CMakePresets.json's windows-mingw-cross, with the source trees it reads from the environment.
(cd "$root" && DDO_ABSL_SOURCE_DIR="$absl_source" DDO_RE2_SOURCE_DIR="$re2_source" \
  DDO_GTEST_SOURCE_DIR=/usr/src/googletest DDO_HEADER_LIBRARIES_DIR="$headers" \
  cmake --preset windows-mingw-cross -B "$build" >/dev/null)
cmake --build "$build" -j "$jobs" --target ddo_os_tests ddo_core_tests

echo "== the tests under wine64"
wine=$(command -v wine64 || echo /usr/lib/wine/wine64)
export WINEPREFIX="$build/wine-prefix" WINEDEBUG=-all
# The first start makes the prefix (a few seconds); its messages are not the tests'.
"$wine" cmd /c exit >/dev/null 2>&1 || true
status=0
for tests in proto/wire/ddo_os_tests.exe daemon/ddo_core_tests.exe; do
  echo "-- $tests"
  "$wine" "$build/$tests" --gtest_color=no || status=1
done
"$(dirname "$wine")/wineserver" -k 2>/dev/null || true
exit $status
