#!/usr/bin/env bash
# Regenerates the Python protobuf/gRPC stubs of client-python from proto/.
#
# The stubs are committed so that the client imports on machines without protoc. They are
# generated with Debian 12's protoc 3.21 and grpc_python_plugin 1.51, whose output loads under
# protobuf 4.21 through 7.x and grpcio 1.51 through 1.8x. Imports are rewritten to relative
# ones so the generated modules live inside the package (no sys.path tricks, and no clash
# with the grpc package's own grpc.health namespace).
#
#   tools/gen_python_stubs.sh           regenerate in place
#   tools/gen_python_stubs.sh --check   exit 1 if the committed stubs differ from proto/
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/client-python/src/diffusers_dynamic_offloader/_proto"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for tool in protoc grpc_python_plugin; do
  command -v "$tool" >/dev/null || { echo "gen_python_stubs: $tool not found (apt-get install protobuf-compiler protobuf-compiler-grpc)" >&2; exit 2; }
done

cd "$root/proto"
protoc -I . --python_out="$work" --grpc_out="$work" \
  --plugin=protoc-gen-grpc="$(command -v grpc_python_plugin)" \
  ddo/v1/*.proto grpc/health/v1/health.proto

out="$work/flat"
mkdir -p "$out"
for f in "$work"/ddo/v1/*.py "$work"/grpc/health/v1/*.py; do
  name=$(basename "$f")
  # "from ddo.v1 import info_pb2 as ..." -> "from . import info_pb2 as ..."
  sed -E -e 's/^from (ddo\.v1|grpc\.health\.v1) import /from . import /' "$f" > "$out/$name"
done
cat > "$out/__init__.py" <<'PY'
"""Generated protobuf and gRPC stubs (tools/gen_python_stubs.sh). Do not edit."""
PY

if [[ "${1:-}" == "--check" ]]; then
  if ! diff -r -q "$out" "$dest" >/dev/null 2>&1; then
    diff -r "$out" "$dest" | head -40 >&2 || true
    echo "gen_python_stubs: committed stubs are out of date; run tools/gen_python_stubs.sh" >&2
    exit 1
  fi
  echo "gen_python_stubs: stubs match proto/"
  exit 0
fi

rm -rf "$dest"
mkdir -p "$dest"
cp "$out"/*.py "$dest/"
echo "gen_python_stubs: wrote $(ls "$dest" | wc -l) files to ${dest#$root/}"
