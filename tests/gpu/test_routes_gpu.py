"""GPU only: the seed's routing entry points applied to real Diffusers models on a real ddod
(issue 5: "route application to real diffusers group offload is tested on the device").

A small FluxTransformer2DModel (the real class, random bf16 weights) goes through
enable_offload / enable_pipeline_offload: the transformer component streams through ddod, a
text_encoder component and a module with quantized weights get diffusers'
apply_group_offloading with the policy's arguments, and every route computes what the model
computes with all its weights on the GPU. Needs diffusers on PYTHONPATH (.device-deps/src).

    DDO_DDOD_BINARY=.bundle/bin/ddod PYTHONPATH=.device-deps/src:client-python/src \\
      python3 -m pytest -v tests/gpu/test_routes_gpu.py
"""

from __future__ import annotations

import copy

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
diffusers = pytest.importorskip("diffusers")

DEVICE = "cuda:0"
# FluxTransformer2DModel, shrunk: 2 double + 2 single blocks, 4 heads of 32.
CONFIG = dict(in_channels=16, num_layers=2, num_single_layers=2, attention_head_dim=32,
              num_attention_heads=4, joint_attention_dim=64, pooled_projection_dim=32,
              guidance_embeds=True, axes_dims_rope=(8, 12, 12))
# Routes must compute the same function; kernels may differ in the last bf16 bit.
TOLERANCE = dict(rtol=2e-2, atol=2e-2)


def flux_on_cpu() -> torch.nn.Module:
    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(**CONFIG).to(torch.bfloat16).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.05)
    return model.requires_grad_(False)


def inputs() -> dict:
    generator = torch.Generator(device=DEVICE).manual_seed(1)
    side, text = 8, 8
    img_ids = torch.zeros(side, side, 3, device=DEVICE)
    img_ids[..., 1] = torch.arange(side, device=DEVICE)[:, None]
    img_ids[..., 2] = torch.arange(side, device=DEVICE)[None, :]
    bf16 = torch.bfloat16
    return dict(
        hidden_states=torch.randn(1, side * side, 16, generator=generator, device=DEVICE, dtype=bf16),
        encoder_hidden_states=torch.randn(1, text, 64, generator=generator, device=DEVICE, dtype=bf16),
        pooled_projections=torch.randn(1, 32, generator=generator, device=DEVICE, dtype=bf16),
        timestep=torch.tensor([0.5], device=DEVICE, dtype=bf16),
        img_ids=img_ids.reshape(side * side, 3), txt_ids=torch.zeros(text, 3, device=DEVICE),
        guidance=torch.tensor([3.5], device=DEVICE), return_dict=False)


@pytest.fixture(scope="module")
def reference():
    model = flux_on_cpu().to(DEVICE)
    with torch.no_grad():
        expected = model(**inputs())[0]
    del model
    torch.cuda.empty_cache()
    return expected


def run(model) -> torch.Tensor:
    with torch.no_grad():
        return model(**inputs())[0]


def test_the_transformer_streams_through_ddod_with_the_devices_policy(client, reference):
    from diffusers_dynamic_offloader import enable_offload, remove_dynamic_offload

    model = flux_on_cpu()
    events = []
    # A cap on the planner's resident budget, so that this small model streams on a big GPU.
    result = enable_offload(model, component="transformer", execution_device=DEVICE,
                            client=client, environ={}, small_tensor_threshold_kb=0,
                            max_resident_module_budget_gb=0.0005,
                            record_event=lambda name, seconds, **payload: events.append(payload))
    try:
        assert result.route == "dynamic_offload" and result.hook is not None
        for _ in range(3):  # the learning forward, then streamed ones
            torch.testing.assert_close(run(model), reference, **TOLERANCE)
        decisions = events[0]["planner_decisions"]
        # The balanced planner ran on this device's VRAM (ddod's Attach, not just the client).
        assert float(decisions["cuda_total_vram_gb"]) > 8, decisions
        assert events[0]["patched_module_count"] == len(result.hook.resources.units)
        stats = result.hook.stats()
        assert stats["streamed_uses"] > 0, stats
    finally:
        remove_dynamic_offload(result)


def test_a_text_encoder_gets_real_diffusers_group_offload(client, reference):
    from diffusers_dynamic_offloader import enable_offload

    model = flux_on_cpu()
    result = enable_offload(model, component="text_encoder", execution_device=DEVICE,
                            client=client, environ={})
    assert result.route == "diffusers_group_offload"
    assert result.event_payload["offload_type"] == "leaf_level"
    # diffusers' hooks move each leaf to the GPU for its forward.
    assert any(getattr(module, "_diffusers_hook", None) is not None for module in model.modules())
    torch.testing.assert_close(run(model), reference, **TOLERANCE)


def test_quantized_weights_are_diverted_to_group_offload(client, reference):
    from diffusers_dynamic_offloader import enable_offload

    model = flux_on_cpu()
    # The seed's SDNQ marker on one Linear: its forward is the quantized backend's own.
    model.transformer_blocks[0].ff.net[2].sdnq_dequantizer = object()
    result = enable_offload(model, component="transformer", execution_device=DEVICE,
                            client=client, environ={})
    assert result.route == "diffusers_group_offload"
    assert result.event_payload["quantized_backend"]["sdnq_module_count"] == 1
    torch.testing.assert_close(run(model), reference, **TOLERANCE)


def test_a_pipeline_routes_each_real_component(client, reference):
    from diffusers_dynamic_offloader import enable_pipeline_offload, remove_dynamic_offload

    components = {"transformer": flux_on_cpu(), "text_encoder": flux_on_cpu(),
                  "scheduler": diffusers.FlowMatchEulerDiscreteScheduler()}
    results = enable_pipeline_offload(components, client=client, environ={},
                                      execution_device=DEVICE, small_tensor_threshold_kb=0,
                                      max_resident_module_budget_gb=0.0005)
    try:
        assert set(results) == {"transformer", "text_encoder"}
        assert results["transformer"].route == "dynamic_offload"
        assert results["text_encoder"].route == "diffusers_group_offload"
        assert results["transformer"].settings is results["text_encoder"].settings
        for name in ("transformer", "text_encoder"):
            torch.testing.assert_close(run(components[name]), reference, **TOLERANCE)
    finally:
        for result in results.values():
            remove_dynamic_offload(result)


@pytest.mark.parametrize("backend", ["bitsandbytes", "torchao", "optimum.quanto"])
def test_real_quantized_classes_are_recognised_where_installed(backend):
    pytest.importorskip(backend)
    from diffusers_dynamic_offloader import detect_quantized_backend_modules

    model = torch.nn.Sequential(torch.nn.Linear(64, 64))
    if backend == "bitsandbytes":
        import bitsandbytes as bnb

        model = torch.nn.Sequential(bnb.nn.Linear8bitLt(64, 64, has_fp16_weights=False))
    elif backend == "torchao":
        from torchao.quantization import int8_weight_only, quantize_

        quantize_(model, int8_weight_only())
    else:
        from optimum.quanto import qint8, quantize

        quantize(model, weights=qint8)
    assert detect_quantized_backend_modules(copy.deepcopy(model)), backend
