#!/usr/bin/env bash
# Regenerates the PTX of DDO's byte-cast kernels (client-cpp/src/consumer/kernels/byte_cast.cu)
# into the Python package, where both consumers load it with the CUDA driver
# (cuModuleLoadData): no compiler and no CUDA runtime on a user's machine.
#
#   tools/gen_byte_cast_ptx.sh           regenerate in place
#   tools/gen_byte_cast_ptx.sh --check   exit 1 if the committed PTX differs from the source
#   tools/gen_byte_cast_ptx.sh --stdout  write the PTX to stdout only
#
# nvcc 13 writes `.version 9.0` (PTX ISA 9.0), which only drivers of CUDA 13 can JIT. The
# kernels use plain loads, stores, integer arithmetic and bar.sync, all in PTX ISA 6.3, the
# oldest that knows `.target sm_75` (ptxas refuses 6.2 for it). So the header is lowered to
# `.version 6.3`: drivers from CUDA 10.0 on load the file, for sm_75 and every GPU after it.
# ptxas assembles the lowered file for sm_75 and sm_90 before it is written (it refuses an
# instruction the declared ISA lacks; tests/python/test_byte_cast.py checks the committed file
# again). If a later edit of the kernel needs a newer ISA, raise PTX_VERSION to what ptxas asks.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
ptxas=${PTXAS:-$(dirname "$nvcc")/ptxas}
source="$root/client-cpp/src/consumer/kernels/byte_cast.cu"
dest="$root/client-python/src/diffusers_dynamic_offloader/kernels/byte_cast.ptx"
PTX_VERSION=6.3

for tool in "$nvcc" "$ptxas"; do
  [[ -x "$tool" ]] || { echo "gen_byte_cast_ptx: $tool not found (the CUDA toolkit's nvcc)" >&2; exit 2; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Compiled from inside the source's directory with a relative name: the PTX names no path of
# this machine, so every checkout generates the same bytes.
(cd "$(dirname "$source")" && "$nvcc" -ptx -arch=compute_75 -o "$work/raw.ptx" "$(basename "$source")")
grep -q '^\.version ' "$work/raw.ptx" || { echo "gen_byte_cast_ptx: no .version line in nvcc's PTX" >&2; exit 1; }
sed "s/^\.version .*/.version $PTX_VERSION/" "$work/raw.ptx" > "$work/byte_cast.ptx"
for gpu in sm_75 sm_90; do
  "$ptxas" --gpu-name "$gpu" -o /dev/null "$work/byte_cast.ptx" || {
    echo "gen_byte_cast_ptx: ptxas refuses the PTX lowered to .version $PTX_VERSION for $gpu" >&2
    exit 1
  }
done

case "${1:-}" in
  --check)
    if ! cmp -s "$work/byte_cast.ptx" "$dest"; then
      echo "gen_byte_cast_ptx: $dest differs from what $source generates; run tools/gen_byte_cast_ptx.sh" >&2
      exit 1
    fi ;;
  --stdout) cat "$work/byte_cast.ptx" ;;
  "") cp "$work/byte_cast.ptx" "$dest" ;;
  *) echo "usage: $0 [--check|--stdout]" >&2; exit 2 ;;
esac
