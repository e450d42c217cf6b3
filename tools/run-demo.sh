#!/usr/bin/env bash
# The README's main command: installs what is missing, builds, starts ddod with the
# warm_process preset on a private socket, and runs the demo client against it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDO_BUILD_DIR:-$root/build}
cd "$root"

tools/install-deps.sh
tools/build.sh "$@"

run_dir=$(mktemp -d /tmp/ddo-demo-XXXXXX)
socket="$run_dir/ddod.sock"
"$build/bin/ddod" --preset warm_process --discard --socket "$socket" --state-dir "$run_dir/state" &
ddod_pid=$!
cleanup() {
  kill -TERM "$ddod_pid" 2>/dev/null && wait "$ddod_pid" || true
  rm -rf "$run_dir"
}
trap cleanup EXIT

for _ in $(seq 100); do
  [[ -S "$socket" ]] && break
  sleep 0.05
done
echo "== ddoctl status"
"$build/bin/ddoctl" --daemon "unix:$socket" status
echo
echo "== demo client (Python)"
PYTHONPATH="$root/client-python/src" DDO_DAEMON="unix:$socket" \
  /usr/bin/python3 -m diffusers_dynamic_offloader.demo
