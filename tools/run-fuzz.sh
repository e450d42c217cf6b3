#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz (clang, AddressSanitizer) into build-fuzz and runs
# each for SECONDS (default 20) over a scratch copy of its committed corpus
# (tests/fuzz/corpus/<target without its _fuzz suffix>/), so that a run never changes the tree. Fails on any crash,
# sanitizer report, leak, timeout or out-of-memory; the input that did it is kept under
# build-fuzz/fuzz/artifacts/.
#
#   tools/run-fuzz.sh [SECONDS]      (DDO_FUZZ_BUILD_DIR overrides build-fuzz)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-20}
build=${DDO_FUZZ_BUILD_DIR:-$root/build-fuzz}
jobs=${DDO_JOBS:-$(nproc)}
cd "$root"

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DDDO_FUZZ=ON -DDDO_WITH_CUDA=OFF \
  -DDDO_BUILD_TESTS=OFF -DDDO_WERROR=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$jobs" --target ddo_fuzz_all

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
artifacts="$build/fuzz/artifacts"
mkdir -p "$artifacts"
while read -r target; do
  [[ -n "$target" ]] || continue
  corpus="$scratch/$target"
  mkdir -p "$corpus"
  seeds="tests/fuzz/corpus/${target%_fuzz}"
  if [[ -d "$seeds" ]]; then
    cp -R "$seeds/." "$corpus/"
  fi
  echo "== fuzz $target for ${seconds} s ($(find "$corpus" -type f | wc -l) seed inputs)"
  if ! "$build/fuzz/$target" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 \
      -artifact_prefix="$artifacts/$target-" -print_final_stats=1 "$corpus" \
      >"$scratch/$target.log" 2>&1; then
    tail -n 60 "$scratch/$target.log"
    echo "run-fuzz: $target failed; the input is in $artifacts/" >&2
    exit 1
  fi
  grep -E "^(stat::number_of_executed_units|stat::new_units_added|Done)" "$scratch/$target.log" || true
done <"$build/fuzz/targets.txt"
echo "run-fuzz: every target ran ${seconds} s without a failure"
