#!/usr/bin/env bash
# The GPU checks of a device session, in order of importance, each bounded, writing its output
# under OUT (default ./device-out): the GPU tests (routes on real diffusers models first), the
# C++ unit tests with the GPU, then the resident-rule comparison on the FLUX benchmark.
#
#   tools/bundle.sh build .bundle      # here, then on the device machine (carry .bundle and
#   tools/device-check.sh              # .device-deps, where diffusers' src/ is exported)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/device-out}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="$PWD/.bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/.device-deps/src:$PWD/client-python/src"
export DDO_DDOD_BINARY="$PWD/.bundle/bin/ddod"

# One device call may run 600 s: the bench gets what the tests leave (BUDGET_S in all).
BUDGET_S="${BUDGET_S:-585}"
export DDO_GPU_REPORT_DIR="$OUT"
timeout 330 python3 -m pytest -q -rA -p no:cacheprovider tests/gpu > "$OUT/tests-gpu.log" 2>&1
echo "tests/gpu: rc=$?"; grep -E "passed|failed|error" "$OUT/tests-gpu.log" | tail -4
grep "\[pipeline-gpu\]" "$OUT/tests-gpu.log"
timeout 60 .bundle/bin/ddo_unit_tests --gtest_brief=1 > "$OUT/unit.log" 2>&1
echo "unit tests: rc=$?"; tail -3 "$OUT/unit.log"
left=$((BUDGET_S - SECONDS))
echo "resident rules bench: ${left} s left"
timeout "$left" python3 bench/bench_flux_stream.py --ddod .bundle/bin/ddod --caps 16,12 \
  --skip-diffusers --skip-warm --steps 3 \
  --variant DDO_AUTO_BUDGET_POLICY=balanced,DDO_RESIDENT_BUDGET_RULE=seed \
  --variant DDO_AUTO_BUDGET_POLICY=balanced,DDO_RESIDENT_BUDGET_RULE=bandwidth \
  --json-out "$OUT/rules.json" > "$OUT/rules.log" 2>&1
echo "resident rules: rc=$?"; grep "DDO at\|variant\|^C \|^B " "$OUT/rules.log"
