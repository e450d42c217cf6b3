#!/usr/bin/env bash
# The GPU checks of a device session, each bounded, writing its output under OUT (default
# ./device-out). STAGES picks them, in order (default "tests unit rules"):
#   tests   pytest tests/gpu (routes on real diffusers models, the FluxPipeline runs,
#           profiles, streaming; the two-GPU test runs where there are two GPUs)
#   unit    the C++ unit tests with the GPU
#   rules   the resident-rule comparison on the FLUX benchmark (seed against bandwidth)
#   demo    the README main command's daemon and demo runner, on the GPU
#   twogpu  bench/bench_two_gpus.py (TWO_GPU_DEVICES, default cuda:0,cuda:1)
#   release bench/bench_release.py on cuda:0 (what giving a module back costs)
#   lora    bench/bench_lora_swap.py (LoRA hot swap at a 12 GiB cap; LORA_PARTS, default
#           "group,ddo")
#   cpp     the C++ client's torch layer built here against torch's libtorch (CUDA) and the
#           bundle's libddo_client_rpc.so.0, its gtests and the C++-and-Python runner test on
#           cuda:0, then bench/bench_client_cpp.py (docs/client-cpp.md)
#   consumer the Python client's C++ consumer (DDO_CLIENT_CONSUMER): the extension built with
#           torch's cpp_extension, tests/python/test_cpp_consumer.py, the GPU streaming tests
#           on both consumers, the compile tests on it, then bench_flux_stream.py at one cap
#           with each consumer (CONSUMER_CAPS, default 16)
#   archsmoke bench/bench_architectures.py --smoke --arch all (every architecture with one or
#           two blocks: the code paths, no figures)
#   arch    bench/bench_architectures.py for ARCH (default wan2.1) with ARCH_ARGS (e.g.
#           "--caps 8,16 --steps 2"), then its plot (bench/plot_results.py --arch)
#
#   tools/bundle.sh build .bundle      # here (it packs .device-deps/src, where diffusers' and
#   tools/device-check.sh              # peft's src/ are exported), then on the device machine,
#                                      # carrying .bundle only
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/device-out}"
STAGES="${STAGES:-tests unit rules}"
# One device call may run 600 s: the benchmarks get what the tests leave (BUDGET_S in all).
BUDGET_S="${BUDGET_S:-585}"
mkdir -p "$OUT"
# The Python sources the bundle carries (tools/bundle.sh), unless they are here already.
if [[ ! -d .device-deps/src && -f .bundle/device-deps.tar.xz ]]; then
  mkdir -p .device-deps && tar -xJf .bundle/device-deps.tar.xz -C .device-deps
fi
export LD_LIBRARY_PATH="$PWD/.bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/.device-deps/src:$PWD/client-python/src"
export DDO_DDOD_BINARY="$PWD/.bundle/bin/ddod"
export DDO_GPU_REPORT_DIR="$OUT"
# NVLink multicast stays off (the device machine's rule), in every process started here.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1

left() { echo $((BUDGET_S - SECONDS)); }

stage_tests() {
  timeout 400 python3 -m pytest -q -rA -p no:cacheprovider tests/gpu > "$OUT/tests-gpu.log" 2>&1
  echo "tests/gpu: rc=$?"; grep -E "passed|failed|error" "$OUT/tests-gpu.log" | tail -4
  grep -E "\[(pipeline-gpu|profiles-gpu|two-gpus|lora-gpu|activation-gpu)\]" "$OUT/tests-gpu.log"
}

stage_unit() {
  timeout 60 .bundle/bin/ddo_unit_tests --gtest_brief=1 > "$OUT/unit.log" 2>&1
  echo "unit tests: rc=$?"; tail -3 "$OUT/unit.log"
}

stage_rules() {
  echo "resident rules bench: $(left) s left"
  timeout "$(left)" python3 bench/bench_flux_stream.py --ddod .bundle/bin/ddod --caps 16,12 \
    --skip-diffusers --skip-warm --steps 3 \
    --variant DDO_AUTO_BUDGET_POLICY=balanced,DDO_RESIDENT_BUDGET_RULE=seed \
    --variant DDO_AUTO_BUDGET_POLICY=balanced,DDO_RESIDENT_BUDGET_RULE=bandwidth \
    --json-out "$OUT/rules.json" > "$OUT/rules.log" 2>&1
  echo "resident rules: rc=$?"; grep "DDO at\|variant\|^C \|^B " "$OUT/rules.log"
}

stage_demo() {
  local run_dir socket
  run_dir=$(mktemp -d /tmp/ddo-demo-XXXXXX)
  socket="$run_dir/ddod.sock"
  .bundle/bin/ddod --preset warm_process --discard --socket "$socket" \
    --state-dir "$run_dir/state" > "$OUT/demo-ddod.log" 2>&1 &
  local pid=$!
  for _ in $(seq 200); do [[ -S "$socket" ]] && break; sleep 0.05; done
  {
    echo "== ddoctl status"; .bundle/bin/ddoctl --daemon "unix:$socket" status
    echo; echo "== demo client (Python)"
    DDO_DAEMON="unix:$socket" timeout 180 python3 -m diffusers_dynamic_offloader.demo
  } > "$OUT/demo.log" 2>&1
  echo "demo: rc=$?"; tail -25 "$OUT/demo.log"
  kill -TERM "$pid"; wait "$pid"; echo "ddod exit: $?"
  rm -rf "$run_dir"
}

stage_twogpu() {
  echo "two-GPU bench: $(left) s left"
  timeout "$(left)" python3 bench/bench_two_gpus.py --ddod .bundle/bin/ddod \
    --devices "${TWO_GPU_DEVICES:-cuda:0,cuda:1}" --steps 3 --json-out "$OUT/two-gpus.json" \
    > "$OUT/two-gpus.log" 2>&1
  echo "two-GPU bench: rc=$?"; tail -14 "$OUT/two-gpus.log"
}

stage_release() {
  timeout 120 python3 bench/bench_release.py --gib 8 --device cuda:0 \
    --out "$OUT/release.json" > "$OUT/release.log" 2>&1
  echo "release bench: rc=$?"; tail -3 "$OUT/release.log"
}

stage_lora() {
  echo "LoRA hot-swap bench: $(left) s left"
  timeout "$(left)" python3 bench/bench_lora_swap.py --ddod .bundle/bin/ddod \
    --parts "${LORA_PARTS:-group,ddo}" ${LORA_ARGS:-} --json-out "$OUT/lora_swap.json" > "$OUT/lora_swap.log" 2>&1
  echo "LoRA bench: rc=$?"; tail -45 "$OUT/lora_swap.log"
}

stage_cpp() {
  local torch_prefix torch_lib
  torch_prefix=$(python3 -c "import torch; print(torch.utils.cmake_prefix_path)")
  torch_lib=$(python3 -c "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))")
  # libtorch and Debian's protobuf in one process: libtorch must not export protobuf symbols.
  echo "libtorch_cpu.so exports $(nm -D --defined-only "$torch_lib/libtorch_cpu.so" | grep -c 'google8protobuf') protobuf symbols"
  { cmake -S . -B build-device -G Ninja -DCMAKE_BUILD_TYPE=Release -DDDO_WERROR=OFF \
      -DDDO_CLIENT_RPC_PREBUILT="$PWD/.bundle/lib/libddo_client_rpc.so.0" \
      -DCMAKE_PREFIX_PATH="$torch_prefix;$PWD/.bundle/sdk" \
      -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DTORCH_CUDA_ARCH_LIST=9.0 \
    && cmake --build build-device -j "$(nproc)"; } > "$OUT/cpp-build.log" 2>&1
  echo "cpp build: rc=$?, $(grep -c "warning:" "$OUT/cpp-build.log") warnings"
  grep -E "DDO:|error:|warning:" "$OUT/cpp-build.log" | head -20; tail -2 "$OUT/cpp-build.log"
  ln -sf "$PWD/.bundle/bin/ddod" build-device/bin/ddod
  DDO_TEST_DEVICE=cuda:0 timeout 300 build-device/bin/ddo_client_tests --gtest_brief=1 \
    > "$OUT/cpp-client-tests.log" 2>&1
  echo "ddo_client_tests on cuda:0: rc=$?"; grep -E "FAILED|PASSED|Failure" "$OUT/cpp-client-tests.log" | head -20
  timeout 120 build-device/bin/ddo_consumer_tests --gtest_brief=1 > "$OUT/cpp-consumer-tests.log" 2>&1
  echo "ddo_consumer_tests: rc=$?"; grep -E "FAILED|PASSED|SKIPPED|Failure" "$OUT/cpp-consumer-tests.log" | head -20
  DDO_TEST_DEVICE=cuda:0 DDO_DDOD_BINARY="$PWD/build-device/bin/ddod" timeout 300 \
    python3 -m pytest -q -rA -p no:cacheprovider tests/python/test_client_cpp.py \
    > "$OUT/cpp-python-tests.log" 2>&1
  echo "test_client_cpp.py on cuda:0: rc=$?"; tail -4 "$OUT/cpp-python-tests.log"
  # No DDO_DAEMON: the runner starts a private ddod and removes its directory at the end.
  (unset DDO_DAEMON; timeout 120 build-device/bin/transformer_runner --device cuda:0 --steps 3 \
    --check) > "$OUT/cpp-embedded-runner.log" 2>&1
  echo "runner with a private ddod on cuda:0: rc=$?"; tail -2 "$OUT/cpp-embedded-runner.log"
  echo "C++ client bench: $(left) s left"
  timeout "$(left)" python3 bench/bench_client_cpp.py --ddod .bundle/bin/ddod \
    --runner build-device/bin/transformer_runner --json-out "$OUT/client_cpp.json" \
    > "$OUT/client-cpp-bench.log" 2>&1
  echo "C++ client bench: rc=$?"; grep -v "^\[bench" "$OUT/client-cpp-bench.log" | tail -20
}

stage_consumer() {
  local started=$SECONDS
  python3 -m diffusers_dynamic_offloader.cpp_consumer --build > "$OUT/consumer-build.log" 2>&1
  echo "C++ consumer extension: rc=$?, $((SECONDS - started)) s"; tail -2 "$OUT/consumer-build.log"
  export DDO_REQUIRE_CPP_CONSUMER=1
  timeout 200 python3 -m pytest -q -rA -p no:cacheprovider tests/python/test_cpp_consumer.py \
    > "$OUT/consumer-tests.log" 2>&1
  echo "test_cpp_consumer.py: rc=$?"; tail -2 "$OUT/consumer-tests.log"
  timeout 400 python3 -m pytest -q -rA -p no:cacheprovider tests/gpu/test_streaming_gpu.py \
    tests/gpu/test_compile_gpu.py > "$OUT/consumer-gpu-tests.log" 2>&1
  echo "GPU streaming (both consumers) and compile tests: rc=$?"
  grep -E "passed|failed|error" "$OUT/consumer-gpu-tests.log" | tail -3
  for consumer in python cpp; do
    echo "FLUX-size bench, $consumer consumer: $(left) s left"
    DDO_CLIENT_CONSUMER=$consumer timeout "$(left)" python3 bench/bench_flux_stream.py \
      --ddod .bundle/bin/ddod --caps "${CONSUMER_CAPS:-16}" --skip-diffusers --skip-warm \
      --steps 3 --json-out "$OUT/flux-$consumer.json" > "$OUT/flux-$consumer.log" 2>&1
    echo "rc=$?"; sed -n '/^FLUX transformer/,/^  S: /p' "$OUT/flux-$consumer.log" | head -12
  done
}

stage_archsmoke() {
  echo "architectures smoke: $(left) s left"
  timeout "$(left)" python3 bench/bench_architectures.py --smoke --arch all \
    --ddod .bundle/bin/ddod > "$OUT/arch-smoke.log" 2>&1
  echo "architectures smoke: rc=$?"; grep -E "^=== |bitwise (True|False|None)|failed|Error" \
    "$OUT/arch-smoke.log" | head -60
}

stage_arch() {
  local arch="${ARCH:-wan2.1}"
  echo "architecture $arch: $(left) s left"
  # ARCH_ARGS is a list of arguments: split on purpose.
  # shellcheck disable=SC2086
  timeout "$(left)" python3 bench/bench_architectures.py --arch "$arch" --ddod .bundle/bin/ddod \
    ${ARCH_ARGS:-} --json-out "$OUT/arch-$arch.json" > "$OUT/arch-$arch.log" 2>&1
  echo "architecture $arch: rc=$?"; sed -n '/ 1 forward per step/,$p' "$OUT/arch-$arch.log"
  python3 bench/plot_results.py --arch "$OUT/arch-$arch.json" --out "$OUT" 2>&1 | tail -2
}

for stage in $STAGES; do
  "stage_$stage"
done
