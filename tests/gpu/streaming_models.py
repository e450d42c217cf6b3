#!/usr/bin/env python3
"""A small synthetic transformer for the streaming GPU tests, and a runner process around it.

The model has the shapes that matter to DDO's planner: always-resident modules (``proj_in``,
``time_embed``, ``norm_out``, ``proj_out``), a streamed Linear outside any block
(``context_embedder``), and two kinds of repeated blocks (``transformer_blocks.N``,
``single_transformer_blocks.N``) made of dense ``nn.Linear`` layers (one without a bias).
Its forward can take branches that break a learned schedule: another block order (a block
skipped or run twice) and an early end.

Run as a script, it is one runner process of tests/gpu/test_streaming_gpu.py:

    python tests/gpu/streaming_models.py --address unix:/tmp/x/ddod.sock --key test/model \
        --dtype bf16 --unit linear --phases 4,4 [--wait-go]

It builds the model from the seed (the same weights as the parent's), computes the reference
outputs with a copy of the model fully on the GPU, opens a streaming session on the component
the parent registered, and runs the forwards of each phase, comparing every output bitwise
(torch.equal). With --wait-go it waits for a line "go" on stdin before each phase. Protocol on
stdout, one line each, flushed:

    READY <pid>                         the session is open
    STEP <n> OK|MISMATCH <json stats>   forward n done
    PHASE <k> DONE                      phase k done
    RESULT <json>                       the end: mismatches, forwards, stats
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
from typing import Dict, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}

IN_DIM = 32
DIM = 256
HIDDEN = 1024
HEADS = 4
DEPTH = 4
SINGLE_DEPTH = 4
TOKENS = 64
CONTEXT_TOKENS = 16
BATCH = 2
TIME_DIM = 64


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    if sdpa is not None:
        return sdpa(q, k, v)
    # torch < 2.0 (only for smoke runs on a CPU machine)
    weights = torch.softmax((q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1]), dim=-1)
    return weights @ v


def stream_settings(unit: str, extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The session settings of the tests: every Linear weight above 16 KiB streamed (the
    model is small), no resident blocks unless ``extra`` says otherwise."""
    settings = {
        "DDO_STREAM_UNIT": unit,
        "DDO_SMALL_TENSOR_THRESHOLD_KB": "16",
        "DDO_RESIDENT_MODULE_BUDGET_GB": "0",
    }
    settings.update(extra or {})
    return settings


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.to_qkv = nn.Linear(dim, 3 * dim)
        self.to_out = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.to_qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attended = _attention(qkv[0], qkv[1], qkv[2])
        return self.to_out(attended.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    """A double-stream-like block: adaLN modulation, attention, feed-forward."""

    def __init__(self, dim: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.mod = nn.Linear(dim, 2 * dim)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(
            nn.Linear(dim, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, dim)
        )

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        scale, shift = self.mod(F.silu(temb)).unsqueeze(1).chunk(2, dim=-1)
        x = x + self.attn(self.norm1(x) * (1 + scale) + shift)
        return x + self.ff(self.norm2(x))


class SingleBlock(nn.Module):
    """A single-stream-like block: parallel attention and MLP, one output projection."""

    def __init__(self, dim: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim, elementwise_affine=False)
        self.attn = Attention(dim, heads)
        self.proj_mlp = nn.Linear(dim, hidden)
        self.proj_out = nn.Linear(dim + hidden, dim)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        h = self.norm(x) + temb.unsqueeze(1)
        mixed = torch.cat([self.attn(h), F.gelu(self.proj_mlp(h), approximate="tanh")], dim=-1)
        return x + self.proj_out(mixed)


class SyntheticTransformer(nn.Module):
    def __init__(
        self,
        in_dim: int = IN_DIM,
        dim: int = DIM,
        hidden: int = HIDDEN,
        heads: int = HEADS,
        depth: int = DEPTH,
        single_depth: int = SINGLE_DEPTH,
    ) -> None:
        super().__init__()
        self.proj_in = nn.Linear(in_dim, dim)
        self.time_embed = nn.Sequential(nn.Linear(TIME_DIM, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.context_embedder = nn.Linear(dim, dim)
        self.transformer_blocks = nn.ModuleList(Block(dim, hidden, heads) for _ in range(depth))
        self.single_transformer_blocks = nn.ModuleList(
            SingleBlock(dim, hidden, heads) for _ in range(single_depth)
        )
        self.norm_out = nn.LayerNorm(dim)
        self.proj_out = nn.Linear(dim, in_dim)

    def forward(
        self,
        x: torch.Tensor,
        t: torch.Tensor,
        context: torch.Tensor,
        order: Optional[Sequence[int]] = None,
        single_blocks: Optional[int] = None,
    ) -> torch.Tensor:
        """``order``: the transformer_blocks to run, in order (default all, once each): leave
        one out to skip it, name one twice to repeat it. ``single_blocks``: how many of the
        single blocks to run (default all): fewer ends the forward early."""
        half = TIME_DIM // 2
        freqs = torch.exp(
            -math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / half
        )
        angles = t.float()[:, None] * 1000.0 * freqs[None, :]
        temb = self.time_embed(torch.cat([angles.cos(), angles.sin()], dim=-1).to(x.dtype))
        h = torch.cat([self.context_embedder(context), self.proj_in(x)], dim=1)
        for index in range(len(self.transformer_blocks)) if order is None else order:
            h = self.transformer_blocks[index](h, temb)
        count = len(self.single_transformer_blocks) if single_blocks is None else single_blocks
        for block in list(self.single_transformer_blocks)[:count]:
            h = block(h, temb)
        h = h[:, context.shape[1]:]
        return self.proj_out(self.norm_out(h))


def make_model(dtype: torch.dtype, seed: int = 0) -> SyntheticTransformer:
    """The model with weights drawn from ``seed`` on the CPU: the same in every process."""
    generator = torch.Generator().manual_seed(seed)
    model = SyntheticTransformer()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.05)
    return model.to(dtype).eval().requires_grad_(False)


def make_inputs(index: int, dtype: torch.dtype, device: str = "cuda") -> Dict[str, torch.Tensor]:
    """Inputs number ``index`` (different for every index, the same in every process)."""
    generator = torch.Generator().manual_seed(1000 + index)
    return {
        "x": torch.randn(BATCH, TOKENS, IN_DIM, generator=generator).to(device, dtype),
        "t": torch.rand(BATCH, generator=generator).to(device),
        "context": torch.randn(BATCH, CONTEXT_TOKENS, DIM, generator=generator).to(device, dtype),
    }


def reference_model(model: nn.Module, device: str = "cuda") -> nn.Module:
    """A copy of ``model`` with every weight on the GPU (made before the model is streamed)."""
    return copy.deepcopy(model).to(device)


def plain_stats(stats) -> Dict[str, float]:
    """The session's statistics as a JSON-able dict of numbers."""
    result = {}
    for name, value in dict(stats).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            result[name] = value
    return result


def _runner(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description="one streaming runner of the GPU tests")
    parser.add_argument("--address", required=True, help="ddod's address (unix:PATH)")
    parser.add_argument("--key", required=True, help="the component's cache key (registered)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    parser.add_argument("--unit", choices=("linear", "block"), default="linear")
    parser.add_argument("--seed", type=int, default=0, help="the model's weight seed")
    parser.add_argument("--phases", default="4", help="forwards per phase, comma-separated")
    parser.add_argument("--input-offset", type=int, default=0, help="first inputs index")
    parser.add_argument("--wait-go", action="store_true", help="wait for 'go' before phases")
    parser.add_argument("--device", default="cuda:0")
    args = parser.parse_args(argv)

    from diffusers_dynamic_offloader import DdoClient

    dtype = DTYPES[args.dtype]
    if args.device.startswith("cuda"):
        torch.cuda.set_device(torch.device(args.device))
    model = make_model(dtype, args.seed)
    reference = reference_model(model, args.device)
    phases = [int(n) for n in args.phases.split(",") if n.strip()]
    client = DdoClient.connect(args.address, timeout=60)
    session = client.stream(model, args.key, device=args.device,
                            settings=stream_settings(args.unit))
    print(f"READY {os.getpid()}", flush=True)
    mismatches = 0
    forward = 0
    first_stats = None
    with torch.no_grad():
        for phase, count in enumerate(phases):
            if args.wait_go:
                line = sys.stdin.readline()
                if line.strip() != "go":
                    print(f"RESULT {json.dumps({'error': f'expected go, read {line!r}'})}",
                          flush=True)
                    return 2
            for _ in range(count):
                inputs = make_inputs(args.input_offset + forward, dtype, args.device)
                out = model(**inputs)
                expected = reference(**inputs)
                same = torch.equal(out, expected)
                mismatches += 0 if same else 1
                stats = plain_stats(session.stats())
                if first_stats is None:
                    first_stats = stats
                print(f"STEP {forward} {'OK' if same else 'MISMATCH'} {json.dumps(stats)}",
                      flush=True)
                forward += 1
            print(f"PHASE {phase} DONE", flush=True)
    result = {"pid": os.getpid(), "forwards": forward, "mismatches": mismatches,
              "first_stats": first_stats, "stats": plain_stats(session.stats())}
    session.close()
    client.close()
    print(f"RESULT {json.dumps(result)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_runner())
