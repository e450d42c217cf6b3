"""The pre-faulted reserve (issue 33, item 3): ddod keeps one shared-memory segment whose pages
exist already, a load reads its files straight into it and it is cut to the load's size (an
upload's commit copy does not use it). The reserve is part of the RAM budget but gives its
room to anything that needs it: against a real ddod on the host backend, loads and uploads
that together fill the budget evict nothing, the bytes served equal the files, and ddod's
memory (RssAnon + RssShmem) stays within the budget plus its own heap."""

from __future__ import annotations

import os
import re
import subprocess
import time

import torch

from diffusers_dynamic_offloader import DdoClient
from tower_support import MemorySampler, built_tower, write_checkpoint

MIB = 1 << 20
WIDTH, LAYERS = 512, 64  # 64 MiB of fp32 weights
SETTINGS = {"DDO_SMALL_TENSOR_THRESHOLD_KB": "0", "DDO_RESIDENT_MODULE_BUDGET_GB": "0.001"}


def start(daemon_factory, short_dir, budget_gb: str, reserve_gb: str):
    return daemon_factory(os.path.join(short_dir, "run", "ddod.sock"),
                          "--ram-budget-gb", budget_gb, "--prefaulted-reserve-gb", reserve_gb,
                          "--state-dir", os.path.join(short_dir, "state"),
                          "--spill-budget-gb", "0")


def wait_ready(client, nbytes: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while client.stats().pool.prefaulted_ready_bytes < nbytes and time.monotonic() < deadline:
        time.sleep(0.05)
    return client.stats().pool.prefaulted_ready_bytes


def expect_equal_streams(client, towers, x, expected) -> None:
    for name, tower in towers.items():
        with client.stream(tower, name, device="cpu", settings=SETTINGS):
            with torch.no_grad():
                assert torch.equal(tower(x), expected[name]), name


def test_loads_and_uploads_fill_the_reserve_and_it_yields_its_room(daemon_factory, short_dir,
                                                                    ddoctl_binary):
    daemon = start(daemon_factory, short_dir, "0.25", "0.125")
    towers = {name: built_tower(WIDTH, LAYERS, seed)
              for seed, name in enumerate(("loaded", "uploaded", "third"))}
    x = torch.randn(2, WIDTH, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = {name: tower(x) for name, tower in towers.items()}
    paths = {}
    for name in ("loaded", "third"):
        paths[name] = os.path.join(short_dir, f"{name}.safetensors")
        write_checkpoint(paths[name], towers[name])
    with DdoClient.connect(daemon.address, timeout=60) as client, \
            MemorySampler(daemon.proc.pid) as memory:
        assert wait_ready(client, 128 * MIB) == 128 * MIB
        pool = client.stats().pool
        assert pool.prefaulted_bytes == 128 * MIB and pool.reserved_bytes == 0
        shown = subprocess.run([ddoctl_binary, "--daemon", daemon.address, "stats"],
                               capture_output=True, text=True, check=True).stdout
        assert "128.0 MiB pre-faulted for the next load (ready)" in shown, shown
        client.load_safetensors("loaded", paths["loaded"], progress=False)
        pool = client.stats().pool
        assert pool.reserved_bytes == 64 * MIB  # the reserve's segment, cut to the load
        assert pool.prefaulted_ready_bytes == 0
        # Made again in the room left (128 of 256 MiB free); an upload beside it.
        assert wait_ready(client, 128 * MIB) == 128 * MIB
        client.register_module("uploaded", towers["uploaded"])
        # 128 MiB in the pool and a reserve made again: a third component of 64 MiB needs
        # part of the reserve's room, which it gets, and nothing is evicted.
        wait_ready(client, 128 * MIB, timeout=10)
        client.load_safetensors("third", paths["third"], progress=False)
        pool = client.stats().pool
        assert pool.evictions == 0
        assert pool.reserved_bytes == 192 * MIB
        assert pool.reserved_bytes + pool.prefaulted_bytes <= 256 * MIB
        expect_equal_streams(client, towers, x, expected)
    baseline = memory.samples[0] if memory.samples else 0
    # The budget holds: the reserve never adds to what the components take.
    assert max(memory.samples) - baseline <= 256 * MIB + 32 * MIB


def test_without_a_reserve_nothing_is_prefaulted(daemon_factory, short_dir):
    daemon = start(daemon_factory, short_dir, "0.25", "0")
    tower = built_tower(WIDTH, LAYERS, 0)
    path = os.path.join(short_dir, "m.safetensors")
    write_checkpoint(path, tower)
    with DdoClient.connect(daemon.address, timeout=60) as client:
        time.sleep(0.3)
        assert client.stats().pool.prefaulted_bytes == 0
        client.load_safetensors("m", path, progress=False)
        x = torch.randn(2, WIDTH)
        with torch.no_grad():
            expected = tower(x)
        expect_equal_streams(client, {"m": tower}, x, {"m": expected})
        assert client.stats().pool.prefaulted_bytes == 0


def test_a_stopped_ddod_leaves_its_components_and_not_its_reserve(daemon_factory, short_dir):
    """The reserve's segment holds nothing a later ddod could adopt: a SIGTERM removes it from
    /dev/shm at once, while a component's segment stays there for the next ddod."""
    daemon = start(daemon_factory, short_dir, "0.25", "0.125")
    tower = built_tower(WIDTH, LAYERS, 0)
    with DdoClient.connect(daemon.address, timeout=60) as client:
        client.register_module("kept", tower)
        assert wait_ready(client, 128 * MIB) == 128 * MIB
    namespace = re.search(r"host pool ([0-9a-f]+)", daemon.log()).group(1)
    prefix = f"ddo-{os.geteuid()}-{namespace}-"

    def segments():
        return {name: os.path.getsize(os.path.join("/dev/shm", name))
                for name in os.listdir("/dev/shm") if name.startswith(prefix)}

    before = segments()
    assert sorted(before.values()) == [64 * MIB, 128 * MIB], before
    started = time.monotonic()
    assert daemon.terminate() == 0
    assert time.monotonic() - started < 3.0, "a stop waits for nothing"
    after = segments()
    try:
        assert list(after.values()) == [64 * MIB], f"before {before}, after {after}"
    finally:
        for name in after:
            os.unlink(os.path.join("/dev/shm", name))
