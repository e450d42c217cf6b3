"""The file tier (issue 33): a component larger than ddod's RAM budget still streams.

A real ddod with a small ``--ram-budget-gb`` loads a safetensors file twice that size: the
pool cannot hold it, so ddod keeps what the pool can give in the pool and the rest in its file
(tier SPLIT; FILE when asked to keep it all in files), and its sessions read each streamed
unit in the file into a staging buffer as they go. On the host backend (device ``cpu``) the
streamed module's outputs equal the unstreamed module's, while ddod's resident memory
(RssAnon + RssShmem, sampled every 20 ms) and the pool's accounting stay within the budget.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import time
from typing import List

import grpc
import pytest
import torch
from torch import nn

from diffusers_dynamic_offloader import ConfigurationError, DaemonError
from support import ddoctl_path
from tower_support import MemorySampler, built_tower as build_tower, write_checkpoint

GIB = 1 << 30
BUDGET_GB = 0.25
WIDTH, LAYERS = 1024, 128  # 128 fp32 1024x1024 weights: 512 MiB, twice the budget
KEY = "larger-than-ram"
#: Every weight streams: nothing of the model is kept resident by size.
SETTINGS = {"DDO_SMALL_TENSOR_THRESHOLD_KB": "0"}


@pytest.fixture
def small_ram_daemon(daemon_factory, short_dir):
    return daemon_factory(os.path.join(short_dir, "run", "ddod.sock"),
                          "--ram-budget-gb", str(BUDGET_GB))


def inputs(step: int) -> torch.Tensor:
    return torch.randn(4, WIDTH, generator=torch.Generator().manual_seed(step))


@pytest.mark.parametrize("file_tier", ["auto", "prefer"])
def test_a_component_twice_the_ram_budget_streams_from_its_file_within_the_budget(
        small_ram_daemon, short_dir, file_tier):
    from diffusers_dynamic_offloader import DdoClient

    budget = int(BUDGET_GB * GIB)
    tower = build_tower(WIDTH, LAYERS, 33)
    path = os.path.join(short_dir, "tower.safetensors")
    total = write_checkpoint(path, tower)
    assert total == 2 * budget
    with torch.no_grad():
        expected = [tower(inputs(step)) for step in range(3)]

    with DdoClient.connect(small_ram_daemon.address, timeout=30) as client:
        with MemorySampler(small_ram_daemon.proc.pid) as memory:
            time.sleep(0.1)
            baseline = min(memory.samples)
            reserved: List[int] = []
            loaded = client.load_safetensors(KEY, path, progress=False, file_tier=file_tier)
            if file_tier == "prefer":
                assert loaded.tier == "FILE"
                assert (loaded.file_bytes, loaded.pool_bytes) == (total, 0)
            else:  # what the pool can give, with room left for the session
                assert loaded.tier == "SPLIT"
                assert loaded.file_bytes + loaded.pool_bytes == total
                assert budget // 2 < loaded.pool_bytes < budget
            with client.stream(tower, KEY, device="cpu", settings=SETTINGS) as session:
                assert session.resources.units, "nothing streams"
                with torch.no_grad():
                    for step, output in enumerate(expected):
                        assert torch.equal(tower(inputs(step)), output), step
                        reserved.append(client.stats().pool.reserved_bytes)
                stats = client.stats()
        peak = max(memory.samples)

    print(f"ddod grew by {(peak - baseline) / GIB:.3f} GiB (budget {BUDGET_GB}); reserved at "
          f"most {max(reserved) / GIB:.3f} GiB, held {stats.pool.held_bytes / GIB:.3f} GiB; "
          f"{stats.stream.file_bytes_read / GIB:.2f} GiB read from the file")
    # The streamed bytes in the file came from it, through staging that the budget counts.
    assert stats.pool.file_bytes == loaded.file_bytes
    assert stats.pool.backing_files == 1
    streamed = sum(u.byte_size for u in session.resources.units)
    if file_tier == "prefer":
        assert stats.pool.used_bytes == 0
        assert stats.stream.file_bytes_read >= 3 * streamed
    else:
        assert stats.pool.used_bytes >= loaded.pool_bytes
        assert 0 < stats.stream.file_bytes_read < 4 * streamed
    assert 0 < stats.pool.held_bytes <= budget
    assert stats.pool.pinned_bytes == 0
    assert max(reserved) <= budget
    assert peak - baseline <= budget, (
        f"ddod grew by {(peak - baseline) / GIB:.3f} GiB over a {BUDGET_GB} GiB budget")


def test_the_file_tier_is_reported_and_never_refuses_what_it_can_not_hold(
        small_ram_daemon, short_dir):
    from diffusers_dynamic_offloader import DdoClient

    tower = build_tower(WIDTH, LAYERS, 33)
    path = os.path.join(short_dir, "tower.safetensors")
    total = write_checkpoint(path, tower)
    with DdoClient.connect(small_ram_daemon.address, timeout=30) as client:
        # The old answer, for a client that asks for it.
        with pytest.raises(DaemonError) as refused:
            client.load_safetensors(KEY, path, progress=False, file_tier="never")
        assert refused.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "raise --ram-budget-gb" in refused.value.details
        loaded = client.load_safetensors(KEY, path, progress=False)
        assert loaded.tier == "SPLIT"
        listed = subprocess.run([ddoctl_path(), "--daemon", small_ram_daemon.address,
                                 "components"], capture_output=True, text=True, timeout=30)
        assert listed.returncode == 0, listed.stderr
        assert "read from its files as it streams" in listed.stdout
        shown = subprocess.run([ddoctl_path(), "--daemon", small_ram_daemon.address, "--json",
                                "stats"], capture_output=True, text=True, timeout=30)
        assert shown.returncode == 0, shown.stderr
        pool = json.loads(shown.stdout)["pool"]
        assert int(pool["file_bytes"]) == loaded.file_bytes and int(pool["backing_files"]) == 1
        metrics = subprocess.run([ddoctl_path(), "--daemon", small_ram_daemon.address,
                                  "metrics"], capture_output=True, text=True, timeout=30)
        assert metrics.returncode == 0, metrics.stderr
        assert f"ddo_pool_file_bytes {loaded.file_bytes}" in metrics.stdout
        # Evicting it closes the file.
        client.evict(KEY)
        assert client.stats().pool.backing_files == 0
        # ddoctl load says where the bytes stay, and refuses a tier it does not know.
        kept = subprocess.run([ddoctl_path(), "--daemon", small_ram_daemon.address, "load",
                               "by-ddoctl", path, "file-tier=prefer"], capture_output=True,
                              text=True, timeout=60)
        assert kept.returncode == 0, kept.stderr
        assert kept.stdout.startswith("kept in its files 'by-ddoctl'"), kept.stdout
        never = subprocess.run([ddoctl_path(), "--daemon", small_ram_daemon.address, "load",
                                "never", path, "file-tier=never"], capture_output=True,
                               text=True, timeout=60)
        assert never.returncode != 0 and "raise --ram-budget-gb" in never.stderr, never.stderr
        wrong = subprocess.run([ddoctl_path(), "--daemon", small_ram_daemon.address, "load",
                                "wrong", path, "file-tier=sometimes"], capture_output=True,
                               text=True, timeout=60)
        assert wrong.returncode != 0 and "file-tier takes auto" in wrong.stderr, wrong.stderr


def test_a_small_component_may_be_kept_in_its_files_on_request(small_ram_daemon, short_dir):
    from diffusers_dynamic_offloader import DdoClient

    small = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 8)).eval().requires_grad_(False)
    path = os.path.join(short_dir, "small.safetensors")
    state = small.state_dict()
    header, data, offset = {}, [], 0
    for name, tensor in state.items():
        raw = tensor.contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
        data.append(raw)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(encoded)) + encoded + b"".join(data))
    x = torch.randn(3, 64)
    with torch.no_grad():
        expected = small(x)
    with DdoClient.connect(small_ram_daemon.address, timeout=30) as client:
        loaded = client.load_safetensors("small", path, progress=False, file_tier="prefer")
        assert loaded.tier == "FILE" and loaded.pool_bytes == 0
        with client.stream(small, "small", device="cpu", settings=SETTINGS):
            with torch.no_grad():
                assert torch.equal(small(x), expected)
        assert client.stats().pool.file_bytes > 0
        with pytest.raises(ConfigurationError, match="file_tier"):
            client.load_safetensors("other", path, progress=False, file_tier="sometimes")
