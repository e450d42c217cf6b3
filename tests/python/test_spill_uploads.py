"""Uploads spilled to ddod's own files (issue 33, item 1): a seed runner's upload
(``register_module``, what ``enable_offload`` does) has no files to go to, so under a RAM budget
it could only be evicted to make room. Once the pool is 3/4 full, ddod writes uploads to
unnamed files in its state directory; a later upload that needs room then sends the least
recently used one to its file (tier FILE), from which it still streams with equal outputs.
Against a real ddod with ``--ram-budget-gb 0.25`` on the host backend."""

from __future__ import annotations

import os
import time

import pytest
import torch

from diffusers_dynamic_offloader import DdoClient
from tower_support import built_tower

MIB = 1 << 20
WIDTH, LAYERS = 512, 96  # 96 MiB of fp32 weights
SETTINGS = {"DDO_SMALL_TENSOR_THRESHOLD_KB": "0", "DDO_RESIDENT_MODULE_BUDGET_GB": "0.001"}


def start(daemon_factory, short_dir, *flags):
    return daemon_factory(os.path.join(short_dir, "run", "ddod.sock"), "--ram-budget-gb", "0.25",
                          "--state-dir", os.path.join(short_dir, "state"), *flags)


def wait_for_spill(client, nbytes: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while client.stats().pool.spilled_bytes < nbytes and time.monotonic() < deadline:
        time.sleep(0.05)
    return client.stats().pool.spilled_bytes


def test_an_upload_goes_to_its_spill_file_instead_of_being_evicted(daemon_factory, short_dir):
    daemon = start(daemon_factory, short_dir)
    towers = {name: built_tower(WIDTH, LAYERS, seed) for seed, name in enumerate(("te", "dit", "vae"))}
    x = torch.randn(2, WIDTH, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        expected = {name: tower(x) for name, tower in towers.items()}
    with DdoClient.connect(daemon.address, timeout=60) as client:
        client.register_module("te", towers["te"])
        client.register_module("dit", towers["dit"])  # 192 of 256 MiB: both spilled
        assert wait_for_spill(client, 192 * MIB) >= 192 * MIB
        assert os.listdir(os.path.join(short_dir, "state", "spill")) == []  # unnamed files
        client.register_module("vae", towers["vae"])
        assert client.component("te").tier == "FILE"
        assert client.stats().pool.evictions == 0
        for name in ("te", "dit", "vae"):
            with client.stream(towers[name], name, device="cpu", settings=SETTINGS):
                with torch.no_grad():
                    assert torch.equal(towers[name](x), expected[name]), name
        assert client.stats().pool.reserved_bytes <= 256 * MIB


def test_without_a_spill_budget_the_upload_is_evicted(daemon_factory, short_dir):
    daemon = start(daemon_factory, short_dir, "--spill-budget-gb", "0")
    towers = [built_tower(WIDTH, LAYERS, seed) for seed in range(3)]
    with DdoClient.connect(daemon.address, timeout=60) as client:
        for index, tower in enumerate(towers):
            client.register_module(f"m{index}", tower)
        assert client.stats().pool.spilled_bytes == 0
        assert client.stats().pool.evictions == 1
        with pytest.raises(Exception, match="NOT_FOUND|no component"):
            client.component("m0")
