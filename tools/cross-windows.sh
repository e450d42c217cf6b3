#!/usr/bin/env bash
# The Windows cross-build (issue 35; docs/windows.md): builds the platform layer (ddo_os, the
# Windows implementations) and its tests with Debian's mingw-w64 compilers, absl from Debian's
# abseil source package and GoogleTest from /usr/src/googletest, then runs the tests under
# wine64. Prints the test counts; exits non-zero on any failure.
#
#   tools/cross-windows.sh            (DDO_WINDOWS_BUILD_DIR overrides build-windows)
#
# Needs g++-mingw-w64-x86-64-posix, wine64 and googletest (tools/install-deps.sh installs
# them). The abseil source is fetched once into the build directory with apt-get source,
# through a private deb-src list: the system's apt configuration is not touched.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDO_WINDOWS_BUILD_DIR:-$root/build-windows}
jobs=${DDO_JOBS:-$(nproc)}
deps="$build/deps"
mkdir -p "$deps"

# The abseil version of the installed libabsl-dev: the Windows build uses the same sources.
absl_version=$(dpkg-query -W -f '${source:Version}' libabsl-dev)
absl_upstream=${absl_version%-*}
absl_source="$deps/abseil-cpp-$absl_upstream"

fetch_abseil_source() {
  local apt_dir="$deps/apt"
  local mirror codename
  # The system's Debian mirror: the first "URIs:" of a deb822 file, or of a one-line "deb" entry.
  mirror=$( { sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null
              sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p' \
                /etc/apt/sources.list 2>/dev/null; } | grep -v security | head -n 1 || true)
  codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/etc"
  echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${mirror:-http://deb.debian.org/debian} $codename main" \
    > "$apt_dir/etc/sources.list"
  local options=(-o "Dir::Etc::SourceList=$apt_dir/etc/sources.list" -o "Dir::Etc::SourceParts=-"
                 -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
                 -o "APT::Sandbox::User=root" -q)
  apt-get "${options[@]}" update >/dev/null
  (cd "$deps" && apt-get "${options[@]}" source --download-only "abseil=$absl_version" >/dev/null)
  local tarball
  tarball=$(ls "$deps"/abseil_"$absl_upstream".orig.tar.* | head -n 1)
  mkdir -p "$absl_source"
  tar -xf "$tarball" -C "$absl_source" --strip-components=1
}

if [[ ! -f "$absl_source/CMakeLists.txt" ]]; then
  echo "== abseil $absl_version source (apt-get source, once)"
  fetch_abseil_source
fi

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
