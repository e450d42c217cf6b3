"""GPU only: fp8 weights on the DDO route (issue 30 item 2).

1. A real FluxTransformer2DModel (tests/gpu/small_flux.py's size) with Diffusers'
   ``enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16)``
   streams through ddod: every output is bitwise equal to the same cast model all on the GPU,
   Diffusers' casting hook computes (it runs on the ring's fp8 views), and every weight the
   hook stores in fp8 streams at one byte a parameter: half of the same model's bf16 units.
2. An fp8 checkpoint with per-tensor scales (``weight`` in F8_E4M3, ``scale_weight`` in F32)
   loaded from safetensors by ddod, run by a Linear subclass with its own forward: streamed at
   its stored size, bitwise equal to the module all on the GPU.

    DDO_DDOD_BINARY=.bundle/bin/ddod PYTHONPATH=.device-deps/src:client-python/src \\
      python3 -m pytest -v tests/gpu/test_fp8_gpu.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Dict

import pytest
import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "python"))

from streaming_support import CONSUMERS, use_consumer  # noqa: E402

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or not hasattr(torch, "float8_e4m3fn"),
    reason="needs a CUDA device and a torch with float8")

DEVICE = "cuda:0"
FP8, BF16 = getattr(torch, "float8_e4m3fn", None), torch.bfloat16
#: Everything streams but what the planner keeps resident by itself.
SETTINGS = {"DDO_RESIDENT_MODULE_BUDGET_GB": "0"}


@pytest.fixture(autouse=True, params=CONSUMERS)
def consumer(request, monkeypatch) -> str:
    use_consumer(monkeypatch, request.param)
    return request.param


def flux(cast: bool) -> nn.Module:
    """small_flux's transformer (seed 0, bf16), with fp8 layerwise casting when ``cast``."""
    import diffusers

    from small_flux import TRANSFORMER

    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(**TRANSFORMER).to(BF16).eval()
    model.requires_grad_(False)
    if cast:
        model.enable_layerwise_casting(storage_dtype=FP8, compute_dtype=BF16)
    return model


def count_casting_hooks(model: nn.Module, calls: list) -> int:
    """Makes every layerwise-casting hook of ``model`` append its module's weight name to
    ``calls`` before it casts; returns how many modules carry one."""
    count = 0
    for path, module in model.named_modules():
        registry = getattr(module, "_diffusers_hook", None)
        if registry is None or registry.get_hook("layerwise_casting") is None:
            continue
        reference = registry._fn_refs[registry._hook_order.index("layerwise_casting")]
        casting = reference.pre_forward

        def counting(hooked, *args, _cast=casting, _name=f"{path}.weight", **kwargs):
            calls.append(_name)
            return _cast(hooked, *args, **kwargs)

        reference.pre_forward = counting
        count += 1
    assert count, "enable_layerwise_casting hooked nothing"
    return count


def unit_bytes(session) -> Dict[str, int]:
    """Bytes of every streamed tensor, by name."""
    return {tensor.name: tensor.byte_size for layout in session.resources.units
            for tensor in layout.tensors}


def test_a_layerwise_cast_flux_streams_fp8_bitwise_equal_to_all_on_the_gpu(client, consumer):
    pytest.importorskip("diffusers")
    from small_flux import transformer_inputs

    reference = flux(cast=True).to(DEVICE)
    with torch.no_grad():
        expected = reference(**transformer_inputs())[0]
    del reference
    torch.cuda.empty_cache()

    model = flux(cast=True)
    stored = {name: tensor.dtype for name, tensor in model.state_dict().items()}
    assert FP8 in stored.values()
    key = f"fp8/flux-small-layerwise-{consumer}"
    client.register_module(key, model)
    calls = []
    counted = count_casting_hooks(model, calls)
    with client.stream(model, key, device=DEVICE, settings=SETTINGS) as session:
        fp8_units = unit_bytes(session)
        assert fp8_units, "nothing streams"
        for step in range(3):
            with torch.no_grad():
                output = model(**transformer_inputs())[0]
            assert torch.equal(output, expected), f"forward {step} differs"
        # A plain Linear with the casting hook alone runs DDO's forward, which computes what
        # the hook would (casting_hooks.py); the hook casts every other hooked module.
        plain_linears = sum(1 for module in model.modules()
                            if type(module) is nn.Linear and hasattr(module, "_diffusers_hook"))
        assert plain_linears > 0
        assert len(calls) == 3 * (counted - plain_linears)
        assert session.stats()["streamed_uses"] > 0
    fp8_streamed = {name for name in fp8_units if stored[name] == FP8}
    assert fp8_streamed, "no fp8 weight streams"

    plain = flux(cast=False)
    bf16_key = f"fp8/flux-small-bf16-{consumer}"
    client.register_module(bf16_key, plain)
    with client.stream(plain, bf16_key, device=DEVICE, settings=SETTINGS) as session:
        bf16_units = unit_bytes(session)
    assert set(bf16_units) == set(fp8_units)
    for name in fp8_streamed:  # stored fp8: half the bytes of its bf16 unit
        assert fp8_units[name] * 2 == bf16_units[name], name
    print(f"streamed per pass: fp8 storage {sum(fp8_units.values()) / 2**20:.1f} MiB, "
          f"bf16 {sum(bf16_units.values()) / 2**20:.1f} MiB")


class ScaledFp8Linear(nn.Linear):
    """A Linear of an fp8 checkpoint: float8_e4m3fn weight, float32 per-tensor scale."""

    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__(in_features, out_features, dtype=BF16)
        self.weight = nn.Parameter(torch.empty(out_features, in_features, dtype=FP8),
                                   requires_grad=False)
        self.register_buffer("scale_weight", torch.ones((), dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight = self.weight.to(x.dtype) * self.scale_weight.to(x.dtype)
        return F.linear(x, weight, self.bias)


class ScaledModel(nn.Module):
    def __init__(self, width: int = 1024, depth: int = 6) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"up": ScaledFp8Linear(width, 4 * width),
                           "down": ScaledFp8Linear(4 * width, width)}) for _ in range(depth))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block["down"](F.gelu(block["up"](x)))
        return x


def scaled_checkpoint(model: ScaledModel) -> Dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(4)
    tensors = {}
    for name, tensor in model.state_dict().items():
        if name.endswith("scale_weight"):
            tensors[name] = torch.rand((), generator=generator) * 0.02 + 0.01
        else:
            values = torch.randn(tuple(tensor.shape), generator=generator)
            tensors[name] = (values * (0.02 if name.endswith("bias") else 1.0)).to(tensor.dtype)
    return tensors


def test_an_fp8_checkpoint_with_scales_streams_at_its_stored_size(client, consumer, tmp_path):
    from store_support import write_safetensors

    model = ScaledModel().eval()
    tensors = scaled_checkpoint(model)
    path = write_safetensors(os.path.join(tmp_path, "scaled-fp8.safetensors"), tensors)
    key = f"fp8/scaled-checkpoint-{consumer}"
    client.load_safetensors(key, path)
    model.load_state_dict(tensors)
    reference = ScaledModel().eval()
    reference.load_state_dict(tensors)
    reference.to(DEVICE)
    x = torch.randn(4, 77, 1024, generator=torch.Generator().manual_seed(5)).to(DEVICE, BF16)
    with torch.no_grad():
        expected = reference(x)
    with client.stream(model, key, device=DEVICE, settings=SETTINGS) as session:
        units = unit_bytes(session)
        assert sorted(units) == sorted(name for name in tensors if name.endswith(".weight"))
        for name, size in units.items():  # one byte a parameter
            assert size == tensors[name].numel(), name
        for _ in range(3):
            with torch.no_grad():
                assert torch.equal(model(x), expected)
        assert session.stats()["streamed_uses"] > 0
