#!/usr/bin/env bash
# Bundles ddod, ddoctl and the test binaries with the shared libraries they need, so they run
# on a machine that has none of the Debian gRPC stack (the GPU machine: see docs/benchmarks.md).
#
#   tools/bundle.sh BUILD_DIR OUT_DIR
#
# OUT_DIR/bin holds the programs, OUT_DIR/lib libddo_client_rpc.so.0 and every library ldd
# lists except the C runtime and libcuda (which must come from the target's own driver),
# OUT_DIR/sdk what the C++ client's torch layer builds against there besides torch,
# OUT_DIR/device-deps.tar.xz the Python sources of .device-deps/src when there are any. Run with
#   LD_LIBRARY_PATH=OUT_DIR/lib OUT_DIR/bin/ddod ...
set -euo pipefail
if [[ $# -ne 2 ]]; then
  echo "usage: tools/bundle.sh BUILD_DIR OUT_DIR" >&2
  exit 2
fi
build=$1
out=$2
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"

# Provided by every Linux system (or by the GPU driver): never bundled. libsystemd and what it
# links (compression, libgcrypt, libcap) are in every Debian and Ubuntu base system (apt needs
# them), with stable sonames.
system_lib='^(libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt|ld-linux.*|libcuda|libsystemd|libcap|libgcrypt|libgpg-error|liblzma|libzstd|liblz4)\.so'

# Copies what `binary` links, other than the system's libraries, into OUT_DIR/lib.
bundle_libraries() {
  ldd "$1" | awk '/=> \// { print $1, $3 }' | while read -r name path; do
    if [[ ! "$name" =~ $system_lib ]]; then
      cp -nL "$path" "$out/lib/$name"
    fi
  done
}

for program in ddod ddoctl ddo_unit_tests; do
  [[ -x "$build/bin/$program" ]] || { echo "bundle: $build/bin/$program not built" >&2; exit 1; }
  # Debug info stays home: the bundle travels to the device within a size limit.
  strip --strip-debug -o "$out/bin/$program" "$build/bin/$program"
  bundle_libraries "$build/bin/$program"
done
# The C++ client's connection library and what its torch layer's build there needs besides
# torch (tools/device-check.sh, stage cpp; docs/client-cpp.md): GoogleTest, GoogleMock and
# nlohmann/json, headers, static libraries and CMake packages, under OUT_DIR/sdk with Debian's
# layout (the packages' CMake files find their prefix relative to themselves).
rpc="$build/lib/libddo_client_rpc.so.0"
if [[ -f "$rpc" ]]; then
  strip --strip-debug -o "$out/lib/libddo_client_rpc.so.0" "$rpc"
  bundle_libraries "$rpc"
  multiarch=lib/x86_64-linux-gnu
  mkdir -p "$out/sdk/include" "$out/sdk/$multiarch/cmake" "$out/sdk/share/cmake"
  cp -r /usr/include/gtest /usr/include/gmock /usr/include/nlohmann "$out/sdk/include/"
  cp /usr/$multiarch/libgtest.a /usr/$multiarch/libgtest_main.a /usr/$multiarch/libgmock.a \
    /usr/$multiarch/libgmock_main.a "$out/sdk/$multiarch/"
  cp -r /usr/$multiarch/cmake/GTest "$out/sdk/$multiarch/cmake/"
  cp -r /usr/share/cmake/nlohmann_json "$out/sdk/share/cmake/"
fi
# diffusers' and peft's sources for the GPU tests (.device-deps/src, exported from their
# repositories; DEVICE.md): compressed into the bundle, since raw they do not fit the device's
# 64 MiB carry beside it. tools/device-check.sh unpacks them.
deps="$(cd "$(dirname "$0")/.." && pwd)/.device-deps"
if [[ -d "$deps/src" ]]; then
  tar -cJf "$out/device-deps.tar.xz" -C "$deps" src
fi
echo "bundle: $(ls "$out/bin" | wc -l) programs, $(ls "$out/lib" | wc -l) libraries, $(du -sh "$out" | cut -f1)"
