"""GPU only: the file tier (issue 33) on the CUDA backend.

A ddod whose RAM budget (``--ram-budget-gb 0.5``) is smaller than the model keeps it in its
safetensors files; its CUDA sessions read each streamed unit in the files into page-locked
staging buffers and copy it to the ring. Two models:

1. a real FluxTransformer2DModel (tests/gpu/small_flux.py's size, about 1.2 GB in bf16),
   saved by Diffusers itself (``save_pretrained``), loaded from that folder by ddod with
   ``file_tier="prefer"``: all of it in the files (tier FILE), the pool holds none of it;
2. a tower of bf16 Linears twice the budget, loaded with the default ``file_tier="auto"``:
   what the pool can give stays in the pool, the rest in the file (tier SPLIT).

Each streams bitwise equal to the same module all on the GPU, with both consumers (python,
cpp).

    DDO_DDOD_BINARY=.bundle/bin/ddod PYTHONPATH=.device-deps/src:client-python/src \\
      python3 -m pytest -v tests/gpu/test_file_tier_gpu.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest
import torch
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))

from conftest import started_daemon  # noqa: E402
from streaming_support import CONSUMERS, use_consumer  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

DEVICE = "cuda:0"
BF16 = torch.bfloat16
BUDGET_GB = 0.5
SETTINGS = {"DDO_RESIDENT_MODULE_BUDGET_GB": "0"}


@pytest.fixture(scope="module")
def small_ram_client():
    """A ddod with a 0.5 GiB RAM budget (CUDA backend) and a client of it."""
    from diffusers_dynamic_offloader import DdoClient

    for daemon in started_daemon("--ram-budget-gb", str(BUDGET_GB)):
        with DdoClient.connect(daemon.address, timeout=60) as client:
            yield client, os.path.dirname(daemon.socket)


@pytest.fixture(autouse=True, params=CONSUMERS)
def consumer(request, monkeypatch) -> str:
    use_consumer(monkeypatch, request.param)
    return request.param


def test_a_diffusers_flux_saved_by_diffusers_streams_from_its_file(small_ram_client, consumer):
    diffusers = pytest.importorskip("diffusers")
    from small_flux import TRANSFORMER, transformer_inputs

    client, work = small_ram_client
    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(**TRANSFORMER).to(BF16).eval().requires_grad_(False)
    folder = os.path.join(work, f"flux-{consumer}")
    model.save_pretrained(folder)  # Diffusers' own safetensors
    reference = model.to(DEVICE)
    with torch.no_grad():
        expected = reference(**transformer_inputs())[0]
    model = reference.to("cpu")
    torch.cuda.empty_cache()

    key = f"file-tier/flux-{consumer}"
    loaded = client.load_safetensors(key, folder, progress=False, file_tier="prefer")
    assert loaded.tier == "FILE" and loaded.pool_bytes == 0
    with client.stream(model, key, device=DEVICE, settings=SETTINGS) as session:
        assert session.resources.units, "nothing streams"
        started = time.perf_counter()
        for step in range(3):
            with torch.no_grad():
                output = model(**transformer_inputs())[0]
            assert torch.equal(output, expected), f"forward {step} differs"
        seconds = time.perf_counter() - started
        streamed = session.stats()["streamed_uses"]
    stats = client.stats()
    assert stats.stream.file_bytes_read > 0
    assert stats.pool.reserved_bytes <= int(BUDGET_GB * (1 << 30))
    print(f"flux from its file ({consumer}): 3 forwards in {seconds:.2f} s, {streamed} uses, "
          f"{stats.stream.file_bytes_read / 2**30:.2f} GiB read from files, "
          f"{stats.stream.staging_waits} staging waits")
    client.evict(key)


class Tower(nn.Module):
    def __init__(self, width: int = 2048, depth: int = 128) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width, dtype=BF16) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def test_a_tower_twice_the_ram_budget_streams_bitwise_equal(small_ram_client, consumer):
    from store_support import write_safetensors

    client, work = small_ram_client
    torch.manual_seed(1)
    model = Tower().eval().requires_grad_(False)
    total = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    assert total >= 2 * BUDGET_GB * (1 << 30) * 0.99
    path = write_safetensors(os.path.join(work, f"tower-{consumer}.safetensors"),
                             model.state_dict())
    x = torch.randn(8, 2048, generator=torch.Generator().manual_seed(2)).to(DEVICE, BF16)
    with torch.no_grad():
        expected = model.to(DEVICE)(x)
    model.to("cpu")
    key = f"file-tier/tower-{consumer}"
    loaded = client.load_safetensors(key, path, progress=False)
    assert loaded.tier == "SPLIT" and 0 < loaded.pool_bytes < BUDGET_GB * (1 << 30)
    with client.stream(model, key, device=DEVICE, settings=SETTINGS):
        for step in range(3):
            with torch.no_grad():
                assert torch.equal(model(x), expected), step
    client.evict(key)
    os.unlink(path)
