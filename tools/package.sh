#!/usr/bin/env bash
# Builds DDO's Debian packages from an existing build (tools/build.sh) with debhelper
# (deploy/debian), into the directory $1 (default: build/debs, emptied first), and prints their
# paths, one a line:
#
#   ddod_<version>_amd64.deb                ddod, ddoctl, units, configuration, man pages, docs
#   libddo-client-rpc0_<version>_amd64.deb  libddo_client_rpc.so.0 (the C++ client, no torch)
#   libddo-client0_<version>_amd64.deb      libddo_client.so.0 (the C++ client's torch layer)
#   libddo-client-dev_<version>_amd64.deb   headers, .so links, find_package(ddo_client)
#   python3-diffusers-dynamic-offloader_<version>_amd64.deb   the Python client
#
#   tools/package.sh && sudo apt install ./build/debs/*.deb
#
# The build is configured for the prefix /usr while the packages are made (nothing recompiles:
# only the install rules change) and given its own prefix back after. deploy/debian is copied
# to build/debian-src/ddo-<version>/debian and dpkg-buildpackage runs there: debian/rules
# installs the build (DDO_BUILD_DIR) into debian/tmp and dh splits it into the packages.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDO_BUILD_DIR:-$root/build}
build=$(cd "$build" 2>/dev/null && pwd || echo "$build")
out=${1:-$build/debs}
if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "package: no build in $build; run tools/build.sh first" >&2
  exit 2
fi
for tool in dpkg-buildpackage dh dh_python3; do
  if ! command -v "$tool" > /dev/null; then
    echo "package: $tool is missing; tools/install-deps.sh installs it (dpkg-dev, debhelper," \
         "dh-python)" >&2
    exit 2
  fi
done
previous=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")
restore() { cmake -S "$root" -B "$build" -DCMAKE_INSTALL_PREFIX="$previous" > /dev/null; }
trap restore EXIT
cmake -S "$root" -B "$build" -DCMAKE_INSTALL_PREFIX=/usr > /dev/null
cmake --build "$build"

version=$(dpkg-parsechangelog -l "$root/deploy/debian/changelog" -S Version)
stage="$build/debian-src"
rm -rf "$stage"
mkdir -p "$stage/ddo-$version"
cp -a "$root/deploy/debian" "$stage/ddo-$version/debian"
log="$build/package.log"
# -b: binary packages only; -us -uc: unsigned; --no-pre-clean: there is nothing to clean.
(cd "$stage/ddo-$version" &&
   DDO_BUILD_DIR="$build" dpkg-buildpackage -b -us -uc --no-pre-clean > "$log" 2>&1) || {
  tail -50 "$log" >&2
  echo "package: dpkg-buildpackage failed; the whole log is $log" >&2
  exit 1
}
mkdir -p "$out"
rm -f "$out"/*.deb
mv "$stage"/*.deb "$out"/
rm -rf "$stage"
ls "$out"/*.deb
