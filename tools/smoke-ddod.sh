#!/usr/bin/env bash
# Starts BUILD_DIR/bin/ddod on a private socket, asks it for its status with
# BUILD_DIR/bin/ddoctl and stops it with SIGTERM: a build's daemon serves and stops cleanly.
# run-tests.sh runs it on the host-only build, whose code paths the main build's tests already
# cover on a machine without a GPU (the host backend).
#
#   tools/smoke-ddod.sh BUILD_DIR
set -euo pipefail
build=$1
dir=$(mktemp -d /tmp/ddo-smoke-XXXXXX)
pid=""
cleanup() {
  [[ -n "$pid" ]] && kill -KILL "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
"$build/bin/ddod" --socket "$dir/run/ddod.sock" --state-dir "$dir/state" --discard \
  > "$dir/ddod.log" 2>&1 &
pid=$!
for _ in $(seq 400); do
  [[ -S "$dir/run/ddod.sock" && -S "$dir/run/ddod.sock.id" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$dir/ddod.log"; echo "smoke: ddod exited" >&2; exit 1; }
  sleep 0.05
done
if ! "$build/bin/ddoctl" --daemon "unix:$dir/run/ddod.sock" status; then
  cat "$dir/ddod.log"
  echo "smoke: ddoctl status failed" >&2
  exit 1
fi
kill -TERM "$pid"
code=0
wait "$pid" || code=$?
pid=""
if [[ $code -ne 0 ]]; then
  cat "$dir/ddod.log"
  echo "smoke: ddod exited with $code on SIGTERM" >&2
  exit 1
fi
echo "smoke: the ddod of $build served and stopped cleanly"
