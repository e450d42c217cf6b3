#!/usr/bin/env bash
# Builds the Debian package from an existing build (tools/build.sh): ddo_<version>_amd64.deb in
# the build directory (or $1). The build is configured for the prefix /usr while CPack runs
# (nothing recompiles: only the install rules change) and given its own prefix back after.
#
#   tools/package.sh            # -> build/ddo_0.1.0_amd64.deb
#   sudo apt install ./build/ddo_0.1.0_amd64.deb
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDO_BUILD_DIR:-$root/build}
out=${1:-$build}
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "package: no build in $build; run tools/build.sh first" >&2
  exit 2
fi
previous=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
restore() { cmake -S "$root" -B "$build" -DCMAKE_INSTALL_PREFIX="$previous" > /dev/null; }
trap restore EXIT
cmake -S "$root" -B "$build" -DCMAKE_INSTALL_PREFIX=/usr > /dev/null
cmake --build "$build"
(cd "$build" && cpack -G DEB -B "$out" > "$build/cpack.log" 2>&1) || {
  cat "$build/cpack.log" >&2
  exit 1
}
rm -rf "$out/_CPack_Packages"
ls "$out"/ddo_*.deb
