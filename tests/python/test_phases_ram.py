"""Phases across components under a RAM budget (issue 33, item 2), on the host backend.

A real ddod with ``--ram-budget-gb 0.25`` and two components loaded with ``load_safetensors``
whose sum is 1.5 times the budget: a text encoder and a transformer of 192 MiB each. Loading
the transformer demotes the text encoder to its file (it stays loaded: READY, tier FILE).
A staged run (prompt: the text encoder; denoise: the transformer; decode, which prefetches
the text encoder for the next prompt) keeps the transformer in the pool: prompt and decode
passes run their components once, so the text encoder streams from its file and comes back
only into free room. A denoising phase that needs a component on its files demotes the
others for it and reads it back whole. Every streamed output equals the unstreamed
module's, and ddod's resident memory (RssAnon + RssShmem, sampled every 20 ms) and the
pool's reserved bytes stay within the budget.
"""

from __future__ import annotations

import os
import time
from typing import List

import pytest
import torch

import diffusers_dynamic_offloader as ddo
from diffusers_dynamic_offloader import DdoClient
from test_file_tier import SETTINGS
from tower_support import MemorySampler, Tower, write_checkpoint
from tower_support import built_tower as build_tower

GIB = 1 << 30
MIB = 1 << 20
BUDGET_GB = 0.25
WIDTH, LAYERS = 512, 192  # 192 fp32 512x512 weights: 192 MiB, 3/4 of the budget


@pytest.fixture
def small_ram_daemon(daemon_factory, short_dir):
    return daemon_factory(os.path.join(short_dir, "run", "ddod.sock"),
                          "--ram-budget-gb", str(BUDGET_GB))


def wait_for_tier(client, key: str, tiers, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while True:
        tier = client.component(key).tier
        if tier in tiers or time.monotonic() > deadline:
            return tier
        time.sleep(0.05)


def stream_equals(client, tower: Tower, key: str, x: torch.Tensor, reserved: List[int]) -> None:
    with torch.no_grad():
        expected = tower(x)
    with client.stream(tower, key, device="cpu", settings=SETTINGS):
        with torch.no_grad():
            assert torch.equal(tower(x), expected), key
        reserved.append(client.stats().pool.reserved_bytes)


def test_a_staged_run_moves_pool_bytes_between_components_within_the_budget(
        small_ram_daemon, short_dir):
    budget = int(BUDGET_GB * GIB)
    te, transformer = build_tower(WIDTH, LAYERS, 1), build_tower(WIDTH, LAYERS, 2)
    paths = {}
    for key, tower in (("te", te), ("transformer", transformer)):
        paths[key] = os.path.join(short_dir, f"{key}.safetensors")
        assert write_checkpoint(paths[key], tower) == 192 * MIB
    x = torch.randn(4, WIDTH, generator=torch.Generator().manual_seed(7))
    reserved: List[int] = []

    with DdoClient.connect(small_ram_daemon.address, timeout=60) as client:
        with MemorySampler(small_ram_daemon.proc.pid) as memory:
            time.sleep(0.1)
            baseline = min(memory.samples)
            assert client.load_safetensors("te", paths["te"], progress=False).tier == "POOL"
            # The transformer needs the text encoder's room: the text encoder goes to its file.
            assert client.load_safetensors("transformer", paths["transformer"],
                                           progress=False).tier == "POOL"
            assert client.component("te").tier == "FILE"
            assert client.stats().pool.evictions == 0

            for _ in range(2):  # two images: the second finds the pool as the first left it
                # Prompt: the text encoder streams from its file; the transformer, prefetched,
                # is in the pool already.
                prompt = ddo.enter_phase("prompt", needed=["te"], prefetch=["transformer"],
                                         client=client)
                assert prompt["demoted_bytes"] == 0 and prompt["promoted_bytes"] == 0
                stream_equals(client, te, "te", x, reserved)

                denoise = ddo.enter_phase("denoise", needed=["transformer"], client=client)
                assert denoise["demoted_bytes"] == 0 and denoise["promoted_bytes"] == 0
                stream_equals(client, transformer, "transformer", x, reserved)

                # Decode prefetches the text encoder for the next prompt, into free room only:
                # the transformer stays in the pool.
                decode = ddo.enter_phase("decode", prefetch=["te"], client=client)
                assert decode["demoted_bytes"] == 0, decode["notes"]
                assert client.component("transformer").tier == "POOL"
                assert client.component("te").tier in ("FILE", "SPLIT")

            # A denoising phase that needs the text encoder (a pipeline denoising with it):
            # the transformer, unused, goes to its file and the text encoder is read back
            # whole before the phase answers; then the other way round.
            denoise = ddo.enter_phase("denoise", needed=["te"], client=client)
            assert denoise["demoted_bytes"] == 192 * MIB, denoise["notes"]
            assert denoise["promoted_bytes"] > 0, denoise["notes"]
            assert any("'transformer': 192.0 MiB to its files" in note
                       for note in denoise["notes"]), denoise["notes"]
            assert client.component("te").tier == "POOL"
            assert client.component("transformer").tier == "FILE"
            stream_equals(client, te, "te", x, reserved)
            denoise = ddo.enter_phase("denoise", needed=["transformer"], client=client)
            assert denoise["demoted_bytes"] > 0, denoise["notes"]
            assert client.component("transformer").tier == "POOL"
            stream_equals(client, transformer, "transformer", x, reserved)
            stats = client.stats()
        peak = max(memory.samples)

    print(f"ddod grew by {(peak - baseline) / GIB:.3f} GiB (budget {BUDGET_GB}); reserved at "
          f"most {max(reserved) / GIB:.3f} GiB; {stats.stream.file_bytes_read / GIB:.2f} GiB "
          f"read from the files")
    assert stats.pool.evictions == 0
    assert max(reserved) <= budget
    assert peak - baseline <= budget, (
        f"ddod grew by {(peak - baseline) / GIB:.3f} GiB over a {BUDGET_GB} GiB budget")


def test_keep_pool_bytes_leaves_the_pool_as_it_is(small_ram_daemon, short_dir):
    te, transformer = build_tower(WIDTH, LAYERS, 1), build_tower(WIDTH, LAYERS, 2)
    with DdoClient.connect(small_ram_daemon.address, timeout=60) as client:
        for key, tower in (("te", te), ("transformer", transformer)):
            path = os.path.join(short_dir, f"{key}.safetensors")
            write_checkpoint(path, tower)
            client.load_safetensors(key, path, progress=False)
        decode = ddo.enter_phase("decode", prefetch=["te"], move_pool_bytes=False,
                                 client=client)
        assert decode["demoted_bytes"] == 0 and decode["promoting_bytes"] == 0
        assert client.component("te").tier == "FILE"
        assert client.component("transformer").tier == "POOL"
