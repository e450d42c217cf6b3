"""What giving a module back costs (issue 14, item 2): ``result.release()`` of a module on the
DDO route leaves it with ordinary, private, writable tensors on the CPU. They are copy-on-write
views of ddod's copy, so release maps instead of copying; a page is copied when first written.

This measures, on one model, in one run:

- ``release``: the time of ``result.release()`` (copy-on-write views);
- ``copy_anchor``: the time to copy the same bytes once (what a copying release would cost at
  least), with torch's CPU copy, from pages already mapped;
- ``first_write_*``: the cost of the deferred copies: an in-place op over every weight after
  release (page faults copy the pages) against the same op on private memory.

Usage (ddod running, DDO_DAEMON set, or the client starts a private one)::

    python3 bench/bench_release.py --gib 2 --device cpu [--out results.json]

``--device cuda:0`` routes the module to the GPU (streamed weights, resident slab).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

import diffusers_dynamic_offloader as ddo


class _Stack(nn.Module):
    """Blocks of two Linears and a LayerNorm: ``gib`` GiB of bf16 weights."""

    def __init__(self, gib: float, width: int = 3072) -> None:
        super().__init__()
        per_block = 2 * width * width * 2
        blocks = max(1, int(gib * 2**30 // per_block))
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.Linear(width, width))
            for _ in range(blocks))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def _weight_bytes(module: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gib", type=float, default=2.0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = _Stack(args.gib).to(torch.bfloat16).eval()
    total = _weight_bytes(model)
    result = ddo.enable_offload(model, route="dynamic_offload", execution_device=args.device,
                                cache_key=f"bench-release-{args.gib}", environ={})
    with torch.no_grad():
        model(torch.zeros(1, 3072, dtype=torch.bfloat16, device=args.device))

    started = time.perf_counter()
    result.release()
    release_s = time.perf_counter() - started
    assert all(type(p) is nn.Parameter for p in model.parameters())

    source = [p.detach() for p in model.parameters()]
    for tensor in source:
        tensor.sum()  # fault the shared pages in: the anchor times the copy, not the mapping
    started = time.perf_counter()
    copies = [t.clone() for t in source]
    copy_s = time.perf_counter() - started

    started = time.perf_counter()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.0)  # first write: the pages are copied now
    first_write_s = time.perf_counter() - started
    started = time.perf_counter()
    with torch.no_grad():
        for tensor in copies:
            tensor.mul_(1.0)
    private_write_s = time.perf_counter() - started

    figures = {
        "device": args.device, "weight_bytes": total, "release_s": release_s,
        "copy_anchor_s": copy_s, "first_write_after_release_s": first_write_s,
        "same_write_on_private_memory_s": private_write_s,
        "torch": torch.__version__, "threads": torch.get_num_threads(),
    }
    print(f"weights {total / 2**30:.2f} GiB on {args.device}: release {release_s * 1e3:.1f} ms, "
          f"copying them once {copy_s * 1e3:.0f} ms ({copy_s / max(release_s, 1e-9):.0f}x), "
          f"first in-place pass after release {first_write_s * 1e3:.0f} ms vs "
          f"{private_write_s * 1e3:.0f} ms on private memory")
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(figures, handle, indent=2)


if __name__ == "__main__":
    main()
