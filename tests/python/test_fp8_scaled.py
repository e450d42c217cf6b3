"""Linear subclasses with a forward of their own stream their weight at its stored size (issue
30 item 2): the fp8-with-per-tensor-scale layout (weight in the storage dtype, a float32
``scale_weight`` beside it) loaded from a safetensors file by ddod.

torch 1.13 has no float8: here the weights are bfloat16 and the compute float32; the GPU test
(tests/gpu/test_fp8_gpu.py) runs the same layout in float8_e4m3fn. The real ddod streams on its
host backend; outputs are compared bitwise with the same module computing on its own.
"""

from __future__ import annotations

import json
import os
import struct

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from store_support import write_safetensors
from streaming_support import CONSUMERS, use_consumer

WIDTH, DEPTH = 48, 4
STORAGE, COMPUTE = torch.bfloat16, torch.float32
KEY = "scaled-linears"


@pytest.fixture(autouse=True, params=CONSUMERS)
def consumer(request, monkeypatch) -> str:
    use_consumer(monkeypatch, request.param)
    return request.param


class ScaledLinear(nn.Linear):
    """A Linear stored in a narrow dtype with a per-tensor scale (as fp8 checkpoints are)."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features, dtype=STORAGE)
        self.register_buffer("scale_weight", torch.ones((), dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.to(x.dtype) * self.scale_weight.to(x.dtype)
        return F.linear(x, weight, self.bias.to(x.dtype))


class ScaledModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"up": ScaledLinear(WIDTH, 2 * WIDTH),
                           "down": ScaledLinear(2 * WIDTH, WIDTH)}) for _ in range(DEPTH))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block["down"](torch.tanh(block["up"](x)))
        return x


def checkpoint(path: str) -> str:
    """A safetensors file as an fp8 exporter writes it: the quantized weight, its scale."""
    generator = torch.Generator().manual_seed(3)
    tensors = {}
    for index in range(DEPTH):
        for name, (out, inner) in (("up", (2 * WIDTH, WIDTH)), ("down", (WIDTH, 2 * WIDTH))):
            prefix = f"blocks.{index}.{name}"
            tensors[f"{prefix}.weight"] = torch.randn(out, inner, generator=generator).to(STORAGE)
            tensors[f"{prefix}.bias"] = torch.randn(out, generator=generator).to(STORAGE)
            tensors[f"{prefix}.scale_weight"] = torch.rand((), generator=generator) + 0.5
    return write_safetensors(path, tensors)


def loaded(path: str) -> ScaledModel:
    """The module with the checkpoint's tensors, as a runner builds it without DDO."""
    model = ScaledModel()
    with open(path, "rb") as file:
        length = struct.unpack("<Q", file.read(8))[0]
        header = json.loads(file.read(length))
        data = file.read()
    state = {}
    for name, entry in header.items():
        start, end = entry["data_offsets"]
        dtype = {"BF16": torch.bfloat16, "F32": torch.float32}[entry["dtype"]]
        state[name] = torch.frombuffer(bytearray(data[start:end]), dtype=dtype).reshape(
            entry["shape"])
    model.load_state_dict(state)
    return model.eval().requires_grad_(False)


def inputs(step: int) -> torch.Tensor:
    return torch.randn(3, 7, WIDTH, generator=torch.Generator().manual_seed(step))


def test_a_scaled_linear_subclass_streams_its_stored_weight_and_runs_its_own_forward(
        client, short_dir):
    path = checkpoint(os.path.join(short_dir, "scaled.safetensors"))
    model, reference = loaded(path), loaded(path)
    client.load_safetensors(KEY, path)
    settings = {"DDO_SMALL_TENSOR_THRESHOLD_KB": "0"}
    with client.stream(model, KEY, device="cpu", settings=settings) as session:
        units = session.resources.units
        streamed = sorted(tensor.name for layout in units for tensor in layout.tensors)
        assert streamed == sorted(f"blocks.{i}.{n}.weight" for i in range(DEPTH)
                                  for n in ("up", "down"))
        # Stored size: bfloat16, two bytes a parameter; the scales stay resident.
        assert sum(layout.byte_size for layout in units) == DEPTH * 2 * (2 * WIDTH * WIDTH) * 2
        with torch.no_grad():
            for step in range(5):
                assert torch.equal(model(inputs(step)), reference(inputs(step))), step
        assert session.stats()["streamed_uses"] > 0
        # In grad mode the forward runs; a backward through a streamed weight raises.
        x = inputs(9).requires_grad_(True)
        with pytest.raises(RuntimeError, match="cannot backpropagate through a Linear"):
            model(x).sum().backward()
    with torch.no_grad():
        assert torch.equal(model(inputs(10)), reference(inputs(10)))
