"""What the RAM budget bounds (``--ram-budget-scope``, issue 33's memory goal).

By default (``pool``) the budget bounds the pool's segments and holds. With ``runners`` it
bounds the pool together with ddod's own private memory and that of every runner holding a
lease, so that the machine keeps what the budget leaves: the runner's Python, torch and CUDA
context take their place in the budget, and the pool gets the rest. Against a real ddod on the
host backend whose budget is this test process's private memory and 512 MiB more:

- with ``runners``, a runner (a child process of this test) that holds a lease and 640 MiB of
  its own memory shows in ``ddoctl stats`` and the metrics, and leaves the pool less room: a
  load the pool alone would hold goes partly to its file (tier SPLIT or FILE); once the runner
  exits, the room comes back;
- by default the same load stays whole in the pool.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Callable

import pytest

from support import ddoctl_path

MIB = 1 << 20
SPARE_BYTES = 512 * MIB
CHILD_BYTES = 640 * MIB

#: A runner that holds a lease and `argv[2]` bytes of its own memory until its stdin closes.
RUNNER = r"""
import sys
from diffusers_dynamic_offloader import DdoClient

client = DdoClient.connect(sys.argv[1], timeout=30)
held = b"\x01" * int(sys.argv[2])  # written, so every page is resident
print("ready", flush=True)
sys.stdin.read()
client.close()
"""


def write_safetensors(path: str, tensors: int, seed: int) -> int:
    """`tensors` float32 1024x1024 tensors of seeded bytes, written 4 MiB at a time; returns
    the tensor bytes. Nothing of it stays in this process."""
    size = 1024 * 1024 * 4
    header = {f"layer{i}.weight": {"dtype": "F32", "shape": [1024, 1024],
                                   "data_offsets": [i * size, (i + 1) * size]}
              for i in range(tensors)}
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    block = bytes((seed * 131 + i) % 251 for i in range(size // 64)) * 64
    with open(path, "wb") as out:
        out.write(len(encoded).to_bytes(8, "little") + encoded)
        for i in range(tensors):
            out.write(i.to_bytes(8, "little") + block[8:])
    return tensors * size


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}: {condition}"
        time.sleep(0.05)


def start_runner(address: str) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.join(
        os.path.dirname(__file__), "..", "..", "client-python", "src"), env.get("PYTHONPATH")]))
    runner = subprocess.Popen([sys.executable, "-c", RUNNER, address, str(CHILD_BYTES)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    assert runner.stdout.readline().strip() == "ready"
    return runner


def stop_runner(runner: subprocess.Popen) -> None:
    runner.stdin.close()
    assert runner.wait(timeout=30) == 0


def own_private_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no RssAnon in /proc/self/status")


def outside(client) -> int:
    return client.stats().pool.outside_bytes


@pytest.mark.parametrize("scope", ["runners", "pool"])
def test_a_runners_memory_takes_its_place_in_the_budget(daemon_factory, short_dir, scope):
    from diffusers_dynamic_offloader import DdoClient

    first = os.path.join(short_dir, "first.safetensors")
    second = os.path.join(short_dir, "second.safetensors")
    first_bytes = write_safetensors(first, 16, seed=1)    # 64 MiB
    second_bytes = write_safetensors(second, 64, seed=2)  # 256 MiB
    # This test process (Python, torch, pytest: how much depends on what ran before it) and
    # 512 MiB more: room for both loads beside it, none beside the runner too.
    budget = own_private_bytes() + SPARE_BYTES
    scope_flags = ["--ram-budget-scope", scope] if scope == "runners" else []  # pool: default
    daemon = daemon_factory(os.path.join(short_dir, "run", "ddod.sock"),
                            "--ram-budget-gb", f"{budget / (1 << 30):.4f}",
                            "--prefaulted-reserve-gb", "0", *scope_flags)
    with DdoClient.connect(daemon.address, timeout=30) as client:
        if scope == "pool":
            time.sleep(0.6)  # two of the meter's periods, had it run
            assert outside(client) == 0
        else:
            # ddod and this test process (Python, torch, pytest): a few hundred MiB.
            mine = own_private_bytes()
            wait_for(lambda: outside(client) >= mine * 9 // 10,
                     f"this process's {mine // MIB} MiB in the budget")
        alone = outside(client)
        assert alone + first_bytes + second_bytes < budget, (
            f"ddod and this process grew to {alone // MIB} MiB")

        # What the pool alone would hold whole: it does, beside ddod and this process.
        loaded = client.load_safetensors("first", first, progress=False)
        assert loaded.tier == "POOL"

        runner = start_runner(daemon.address)
        try:
            if scope == "runners":
                wait_for(lambda: outside(client) >= alone + CHILD_BYTES * 9 // 10,
                         "the runner's memory in the budget")
                stats = subprocess.run([ddoctl_path(), "--daemon", daemon.address, "stats"],
                                       capture_output=True, text=True, timeout=30)
                assert stats.returncode == 0, stats.stderr
                assert "held by ddod and its runners outside the pool" in stats.stdout
                status = subprocess.run([ddoctl_path(), "--daemon", daemon.address, "status"],
                                        capture_output=True, text=True, timeout=30)
                assert "(with ddod and its runners" in status.stdout, status.stdout
                metrics = subprocess.run([ddoctl_path(), "--daemon", daemon.address, "metrics"],
                                         capture_output=True, text=True, timeout=30)
                assert "ddo_pool_outside_bytes" in metrics.stdout, metrics.stdout[-2000:]
            else:
                time.sleep(0.6)
                assert outside(client) == 0
            loaded = client.load_safetensors("second", second, progress=False)
            pool = client.stats().pool
            if scope == "runners":
                # The pool has what the budget leaves beside ddod and the two runners.
                assert loaded.tier in ("SPLIT", "FILE"), loaded.tier
                assert loaded.pool_bytes < second_bytes
                assert loaded.pool_bytes + loaded.file_bytes == second_bytes
                assert pool.reserved_bytes <= max(0, budget - pool.outside_bytes) + first_bytes
            else:
                assert loaded.tier == "POOL"
        finally:
            stop_runner(runner)

        # The runner gone, its room comes back.
        wait_for(lambda: outside(client) < alone + 64 * MIB,
                 f"the runner's memory to leave ({alone // MIB} MiB before it)")
        third = os.path.join(short_dir, "third.safetensors")
        write_safetensors(third, 16, seed=3)
        assert client.load_safetensors("third", third, progress=False).tier == "POOL"
