"""Helpers of the streaming tests: a small synthetic transformer, its inputs, and a runner
script for child processes.

Child interpreters import this module too (the tests' directory is on their PYTHONPATH), so it
imports only torch, the package under test and the standard library.
"""

from __future__ import annotations

import copy
from typing import Dict, List, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

WIDTH, HIDDEN, FEATURES, DEPTH = 64, 96, 16, 6
CACHE_KEY = "tiny-transformer"

#: Every Linear of the blocks streams (the default threshold would keep these small weights
#: resident); proj_in and proj_out stay resident by the default always-resident patterns.
STREAM_ALL = {"DDO_SMALL_TENSOR_THRESHOLD_KB": "0"}

#: The consumers a runner streams with (DDO_CLIENT_CONSUMER): the tests run on both.
CONSUMERS = ("python", "cpp")


def use_consumer(monkeypatch, consumer: str) -> None:
    """Streams with ``consumer`` from here on. For ``cpp`` the extension is built first (once
    per process); where it cannot be built the test is skipped with the reason, or fails when
    DDO_REQUIRE_CPP_CONSUMER=1 (tools/run-tests.sh sets it: every machine it runs on has the
    compiler and headers)."""
    monkeypatch.setenv("DDO_CLIENT_CONSUMER", consumer)
    if consumer != "cpp":
        return
    import os

    import pytest
    from diffusers_dynamic_offloader import cpp_consumer

    try:
        cpp_consumer.extension()
    except Exception as error:  # noqa: B902 - reported either way
        if os.environ.get("DDO_REQUIRE_CPP_CONSUMER") == "1":
            pytest.fail(f"the C++ consumer is required here: {error}")
        pytest.skip(f"no C++ consumer here: {error}")


#: Streamed Linear modules per block.
LINEARS_PER_BLOCK = 4


class Block(nn.Module):
    """A transformer-like block: a LayerNorm, an attention-like and a feed-forward path;
    Linear modules with and without bias."""

    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.to_q = nn.Linear(WIDTH, WIDTH)
        self.to_out = nn.Linear(WIDTH, WIDTH)
        self.ff_up = nn.Linear(WIDTH, HIDDEN)
        self.ff_down = nn.Linear(HIDDEN, WIDTH, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        x = x + self.to_out(torch.tanh(self.to_q(h)))
        return x + self.ff_down(F.gelu(self.ff_up(h)))


class TinyTransformer(nn.Module):
    """proj_in, ``DEPTH`` blocks and proj_out. ``route`` picks the blocks a forward runs (a
    branch: skip one, run one twice); default: all, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.proj_in = nn.Linear(FEATURES, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(DEPTH))
        self.proj_out = nn.Linear(WIDTH, FEATURES)
        self.register_buffer("scale", torch.tensor(0.5))
        self.register_buffer("offsets", torch.linspace(-1, 1, WIDTH), persistent=False)

    def forward(self, x: torch.Tensor, route: Optional[Sequence[int]] = None) -> torch.Tensor:
        x = self.proj_in(x) + self.offsets.to(x.dtype)
        for index in range(DEPTH) if route is None else route:
            x = self.blocks[index](x)
        return self.proj_out(x) * self.scale.to(x.dtype)


def make_model(dtype: torch.dtype = torch.float32, seed: int = 0) -> TinyTransformer:
    """The same weights for the same seed in every process."""
    torch.manual_seed(seed)
    model = TinyTransformer()
    with torch.no_grad():
        for block in model.blocks:  # non-trivial LayerNorm parameters
            block.norm.weight.add_(torch.randn(WIDTH) * 0.1)
            block.norm.bias.add_(torch.randn(WIDTH) * 0.1)
    return model.to(dtype).eval()


def frozen_copy(model: nn.Module) -> nn.Module:
    """An independent copy with parameters that do not require grad, as a session binds
    them (some torch builds pick another CPU kernel for frozen weights)."""
    copied = copy.deepcopy(model)
    copied.requires_grad_(False)
    return copied


def make_input(step: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1000 + step)
    return torch.randn(2, 5, FEATURES, generator=generator).to(dtype)


def run(model: nn.Module, step: int, dtype: torch.dtype, route=None) -> torch.Tensor:
    with torch.no_grad():
        return model(make_input(step, dtype), route=route)


def mismatches(
    streamed: nn.Module, reference: nn.Module, steps: Sequence[int], dtype: torch.dtype,
    route=None,
) -> List[int]:
    """The steps whose streamed output is not bitwise equal to the reference's."""
    return [
        step for step in steps
        if not torch.equal(run(streamed, step, dtype, route), run(reference, step, dtype, route))
    ]


# A child runner: connects to DDO_DAEMON, streams the registered model, runs forwards and
# reports JSON lines on stdout. argv: dtype, forwards ("forever": until killed), unit.
RUNNER_SCRIPT = r"""
import json, select, sys, torch
from diffusers_dynamic_offloader import DdoClient
import streaming_support as support

dtype = getattr(torch, sys.argv[1])
forwards = sys.argv[2]
settings = dict(support.STREAM_ALL, DDO_STREAM_UNIT=sys.argv[3])
device = sys.argv[4] if len(sys.argv) > 4 else "cpu"
model = support.make_model(dtype)
reference = support.frozen_copy(model)

def say(**fields):
    print(json.dumps(fields), flush=True)

with DdoClient.connect(timeout=10) as client:
    with client.stream(model, support.CACHE_KEY, device=device, settings=settings) as session:
        say(event="open", session_id=session.session_id,
            device=session.resources.device_uuid)
        step = 0
        # "forever"; "until-told": until a line arrives on stdin (at least 3 forwards); N.
        def more():
            if forwards == "until-told":
                return step < 3 or not select.select([sys.stdin], [], [], 0)[0]
            return forwards == "forever" or step < int(forwards)
        while more():
            bad = support.mismatches(model, reference, [step], dtype)
            if bad:
                say(event="mismatch", step=step)
                sys.exit(3)
            step += 1
            if step == 3:
                say(event="streaming", stats=session.stats())
        say(event="done", forwards=step, stats=session.stats())
"""


def stats_summary(stats: Dict[str, object]) -> str:
    keys = ("uses", "streamed_uses", "sync_uses", "skipped_uses", "schedule_length")
    return ", ".join(f"{key}={stats[key]}" for key in keys)
