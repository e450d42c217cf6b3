"""Diffusers' layerwise casting on the DDO route (issue 30 item 2): the component holds the
storage dtype, the streamed units carry it at its size, and the casting hook computes.

On the GPU the storage dtype is float8_e4m3fn (tests/gpu/test_fp8_gpu.py); torch 1.13 has no
float8, so here the storage is bfloat16 and the compute float32, with a hook that does what
Diffusers' does (casting_support). Every test runs the real ddod on the host backend and
compares bitwise with the same model, cast the same way, without DDO.
"""

from __future__ import annotations

import pytest
import torch

import diffusers_dynamic_offloader as ddo
from casting_support import LayerwiseCastingHook, apply_layerwise_casting, register_other_hook
from diffusers_dynamic_offloader import ConfigurationError
from streaming_support import (CACHE_KEY, CONSUMERS, DEPTH, LINEARS_PER_BLOCK, STREAM_ALL,
                               make_model, mismatches, run, use_consumer)

STORAGE, COMPUTE = torch.bfloat16, torch.float32
#: proj_in, proj_out and every block Linear carry the hook; the norms are skipped.
HOOKED = 2 + DEPTH * LINEARS_PER_BLOCK


@pytest.fixture(autouse=True, params=CONSUMERS)
def consumer(request, monkeypatch) -> str:
    use_consumer(monkeypatch, request.param)
    return request.param


def cast_model():
    model = make_model(COMPUTE)
    apply_layerwise_casting(model, STORAGE, COMPUTE)
    return model.requires_grad_(False)


def hooked_forward(module):
    return module.__dict__.get("forward")


def hook_calls_of_one_forward(model, step: int) -> int:
    before = LayerwiseCastingHook.calls
    run(model, step, COMPUTE)
    return LayerwiseCastingHook.calls - before


@pytest.mark.parametrize("unit", ["linear", "block"])
def test_a_layerwise_cast_model_streams_its_storage_dtype_and_computes_bitwise_equal(
        client, unit):
    model, reference = cast_model(), cast_model()
    assert model.blocks[0].to_q.weight.dtype == STORAGE
    hooks = {name: hooked_forward(module) for name, module in model.named_modules()
             if hooked_forward(module) is not None}
    assert len(hooks) == HOOKED
    client.register_module(CACHE_KEY, model)
    settings = dict(STREAM_ALL, DDO_STREAM_UNIT=unit)
    with client.stream(model, CACHE_KEY, device="cpu", settings=settings) as session:
        streamed = {tensor.name for layout in session.resources.units
                    for tensor in layout.tensors}
        assert len(streamed) == DEPTH * LINEARS_PER_BLOCK
        assert not mismatches(model, reference, range(6), COMPUTE)
        # The hook did the casting, on every hooked module (streamed or resident).
        # Every hooked module is a plain Linear with the casting hook alone: DDO's own forward
        # computes what the hook would (weight and bias cast to the compute dtype), without
        # the hook's casts of the whole module there and back.
        assert hook_calls_of_one_forward(model, 7) == 0
        # The units carry the stored bytes: 2 per parameter, half of the compute dtype's.
        parameters = sum(model.get_parameter(name).numel() for name in streamed)
        assert session.stats()["streamed_bytes_per_cycle"] == parameters * 2
        assert session.stats()["uses"] > 0
    # Given back: the hooks' forwards again, and still the same results.
    assert {name: hooked_forward(module) for name, module in model.named_modules()
            if hooked_forward(module) is not None} == hooks
    assert not mismatches(model, reference, [8], COMPUTE)


def test_enable_dynamic_offload_runs_a_layerwise_cast_model(client):
    model, reference = cast_model(), cast_model()
    result = ddo.enable_dynamic_offload(model, component="transformer", execution_device="cpu",
                                        client=client, environ={}, small_tensor_threshold_kb=0)
    try:
        assert result.route == "dynamic_offload"
        # Some blocks stream, the resident budget keeps others (their hooks run on the slab).
        assert 0 < result.hook.session.stats()["units"] <= DEPTH * LINEARS_PER_BLOCK
        assert not mismatches(model, reference, range(3), COMPUTE)
    finally:
        ddo.remove_dynamic_offload(result)


def test_a_forward_replaced_by_another_hook_is_still_refused(client):
    model = cast_model()
    register_other_hook(model.blocks[2].ff_up, "group_offloading")
    client.register_module(CACHE_KEY, model)
    with pytest.raises(ConfigurationError, match="blocks.2.ff_up.*'group_offloading'"):
        client.stream(model, CACHE_KEY, device="cpu", settings=STREAM_ALL)
    # Nothing stays patched.
    assert not mismatches(model, cast_model(), [0], COMPUTE)


def test_an_input_of_another_dtype_still_goes_through_the_hook(client):
    model, reference = cast_model(), cast_model()
    reference.load_state_dict(model.state_dict())
    client.register_module(CACHE_KEY, model)
    # proj_in stays resident, blocks[0].to_q streams.
    for path in ("proj_in", "blocks.0.to_q"):
        linear, twin = model.get_submodule(path), reference.get_submodule(path)
        sample = torch.randn(2, linear.in_features, dtype=torch.float64)
        with pytest.raises(RuntimeError) as expected:
            twin(sample)
        with client.stream(model, CACHE_KEY, device="cpu", settings=STREAM_ALL):
            before = LayerwiseCastingHook.calls
            with pytest.raises(RuntimeError) as got:
                linear(sample)  # the hook casts the module to float32; F.linear refuses
            assert LayerwiseCastingHook.calls == before + 1, path
            assert type(got.value) is type(expected.value), path
            assert not mismatches(model, reference, [3], COMPUTE), "the call changed nothing"
