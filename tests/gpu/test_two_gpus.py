"""GPU only, two GPUs: one ddod serves both from one host copy (issue 7). Runner processes on
cuda:0 and cuda:1 bind the small FLUX transformer from ddod, stream it at the same time, and
compute bitwise what the first GPU computes alone; ddod's pool holds the component once.
Skipped on a machine with fewer than two GPUs (the figures: bench/bench_two_gpus.py).

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
    DDO_DDOD_BINARY=.bundle/bin/ddod PYTHONPATH=.device-deps/src:client-python/src \\
      python3 -m pytest -v tests/gpu/test_two_gpus.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
diffusers = pytest.importorskip("diffusers")

import small_flux  # noqa: E402  (tests/gpu is on sys.path: conftest.py)

RUNNER = Path(__file__).with_name("warm_runner.py")
BUDGET_GB = "0.5"  # most of the 1.27 GB transformer streams


def runner(address: str, folder: Path, output: Path, device: str) -> subprocess.Popen:
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1",
               PYTHONPATH=os.pathsep.join([str(RUNNER.parent)] + [p for p in sys.path if p]))
    return subprocess.Popen([sys.executable, str(RUNNER), address, str(folder), str(output),
                             BUDGET_GB, device], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finished(process: subprocess.Popen) -> dict:
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err[-4000:]
    return json.loads(out.strip().splitlines()[-1])


def test_two_gpus_stream_one_host_copy_at_once(client, daemon, tmp_path):
    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(**small_flux.TRANSFORMER).to(small_flux.DTYPE)
    model.save_pretrained(tmp_path / "transformer")
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    del model
    alone = finished(runner(daemon.address, tmp_path, tmp_path / "alone.pt", "cuda:0"))
    together = [runner(daemon.address, tmp_path, tmp_path / f"gpu{i}.pt", f"cuda:{i}")
                for i in (0, 1)]
    results = [finished(process) for process in together]
    uuids = [result["device_uuid"] for result in results]
    # Named by UUID in the protocol, one per GPU.
    assert all(uuid.startswith("GPU-") for uuid in uuids) and len(set(uuids)) == 2, uuids
    reference = torch.load(tmp_path / "alone.pt")
    for i in (0, 1):
        assert torch.equal(torch.load(tmp_path / f"gpu{i}.pt"), reference), f"cuda:{i}"
    pool = client.stats().pool
    assert pool.components == 1
    assert pool.used_bytes <= size * 1.01  # one host copy, not one per GPU
    print(f"[two-gpus] alone {alone}; together {results}; pool {pool.used_bytes} bytes for a "
          f"{size}-byte component")
