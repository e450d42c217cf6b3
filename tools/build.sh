#!/usr/bin/env bash
# Configures and builds DDO into build/ (or $DDO_BUILD_DIR). Extra arguments go to cmake's
# configure step, e.g. tools/build.sh -DDDO_WITH_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDO_BUILD_DIR:-$root/build}
jobs=${DDO_JOBS:-$(nproc)}

cmake -S "$root" -B "$build" -G Ninja -DDDO_WERROR=ON "$@"
cmake --build "$build" -j "$jobs"
