#!/usr/bin/env bash
# Foundation checks on a GPU machine, with binaries carried by tools/bundle.sh:
#   1. the C++ unit tests with a real GPU (the CUDA probe must find devices with UUIDs);
#   2. ddod reporting the GPU, read by ddoctl and by that machine's own Python/grpcio/protobuf;
#   3. the black-box Python suite against the bundled ddod.
#
#   tests/gpu/run_foundation.sh [BUNDLE_DIR]      (default .bundle)
set -uo pipefail
bundle=$(cd "${1:-.bundle}" && pwd)
export LD_LIBRARY_PATH="$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PYTHONPATH="$PWD/client-python/src${PYTHONPATH:+:$PYTHONPATH}"
failures=0
step() { echo; echo "== $*"; }
check() { "$@" || { echo "FAILED: $*"; failures=$((failures + 1)); }; }

step "machine"
nvidia-smi -L
python3 -c "import sys, grpc, google.protobuf, torch; print('python', sys.version.split()[0], '| grpcio', grpc.__version__, '| protobuf', google.protobuf.__version__, '| torch', torch.__version__)"

step "C++ unit tests"
check "$bundle/bin/ddo_unit_tests" --gtest_brief=1

step "ddod with the GPU"
run_dir=$(mktemp -d /tmp/ddo-gpu-XXXXXX)
socket="$run_dir/ddod.sock"
"$bundle/bin/ddod" --preset warm_process --socket "$socket" --state-dir "$run_dir/state" &
ddod_pid=$!
for _ in $(seq 200); do [[ -S "$socket" ]] && break; sleep 0.05; done
check "$bundle/bin/ddoctl" --daemon "unix:$socket" status
check env DDO_DAEMON="unix:$socket" python3 -m diffusers_dynamic_offloader.demo
check env DDO_DAEMON="unix:$socket" python3 - <<'PY'
from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader._proto import info_pb2
with DdoClient.connect() as client:
    info = client.info()
    print("backend", info_pb2.Backend.Name(info.backend), "|", info.backend_detail)
    for device in info.devices:
        print(f"device {device.ordinal}: {device.name} {device.uuid} "
              f"total {device.total_bytes / 2**30:.1f} GiB free {device.free_bytes / 2**30:.1f} GiB")
    assert info.backend == info_pb2.BACKEND_CUDA, "expected the CUDA backend on a GPU machine"
    assert info.devices and all(d.uuid.startswith("GPU-") and d.total_bytes > 0 for d in info.devices)
PY
kill -TERM "$ddod_pid"; wait "$ddod_pid"; echo "ddod exited with $?"
rm -rf "$run_dir"

step "Python suite against the bundled ddod"
check env DDO_DDOD_BINARY="$bundle/bin/ddod" DDO_DDOCTL_BINARY="$bundle/bin/ddoctl" \
  python3 -m pytest -q -p no:cacheprovider tests/python

step "GPU Python tests"
check python3 -m pytest -q -p no:cacheprovider tests/gpu

echo
echo "run_foundation: $failures failure(s)"
exit $(( failures > 0 ))
