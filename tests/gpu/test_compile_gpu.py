"""GPU only: torch.compile and CUDA graphs on a DDO-streamed module (issue 15, item 7).

- ``torch.compile`` of a streamed module runs: each streamed Linear (and the root module's
  hooks) is a graph break that runs eagerly (compile_support.py). With the ``eager`` backend
  (TorchDynamo's tracing only) the small FLUX transformer's outputs equal the eager streamed
  module's bitwise; with the default Inductor backend the synthetic transformer's are equal
  within bf16 rounding (Inductor fuses the pointwise work between the Linears, which may round
  differently), and the streamed weights are still served by ddod's ring.
- A CUDA graph capture of a streamed module raises GraphCaptureError naming the DDO route
  before anything of the ring is captured, and the module then runs eagerly as before.

Figures go to $DDO_GPU_REPORT_DIR/compile.json when set, and to stdout (pytest -s).
"""

from __future__ import annotations

import copy
import gc
import time
from typing import Any

import pytest
import torch
from torch import nn

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(not hasattr(torch, "compile"), reason="needs torch.compile (torch 2)"),
]
diffusers = pytest.importorskip("diffusers")

import gpu_report  # noqa: E402  (tests/gpu is on sys.path: conftest.py)
import small_flux  # noqa: E402
import streaming_models  # noqa: E402

DEVICE = small_flux.DEVICE
# Most of the transformer streams; the rest is resident in ddod's slab.
ROUTING = dict(environ={}, small_tensor_threshold_kb=0, resident_module_budget_gb=0.25)
report = gpu_report.reporter("compile")


def offload(model: nn.Module, client, key: str, **routing: Any):
    from diffusers_dynamic_offloader import enable_offload

    result = enable_offload(model, route="dynamic_offload", execution_device=DEVICE,
                            cache_key=key, client=client, **(routing or ROUTING))
    assert result.route == "dynamic_offload" and result.hook is not None
    assert result.hook.stats()["units"] > 0, "nothing streams: the test would prove nothing"
    return result


@pytest.fixture(scope="module")
def flux() -> nn.Module:
    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(**small_flux.TRANSFORMER)
    return model.to(small_flux.DTYPE).eval().requires_grad_(False)


def flux_step(model) -> torch.Tensor:
    with torch.no_grad():
        return model(**small_flux.transformer_inputs())[0]


def test_compiled_flux_traces_around_the_streamed_linears(client, flux):
    torch._dynamo.reset()
    model = copy.deepcopy(flux)
    result = offload(model, client, "test/compile-flux")
    try:
        flux_step(model)  # learns the schedule
        eager = flux_step(model)
        compiled = torch.compile(model, backend="eager")
        started = time.perf_counter()
        first = flux_step(compiled)
        compile_s = time.perf_counter() - started
        uses = result.hook.stats()["streamed_uses"]
        second = flux_step(compiled)
        assert result.hook.stats()["streamed_uses"] > uses, "the compiled run streamed nothing"
        assert torch.equal(first, eager) and torch.equal(second, eager), (
            (first - eager).abs().max().item(), (second - eager).abs().max().item())
        assert torch.equal(flux_step(model), eager), "the eager module changed after compiling"
        report("flux_eager_backend", {"first_call_s": round(compile_s, 2), "bitwise": True})
    finally:
        result.release()
        gc.collect()
        torch.cuda.empty_cache()


def test_inductor_compiled_module_streams_and_matches(client):
    torch._dynamo.reset()
    model = streaming_models.make_model(torch.bfloat16)
    inputs = streaming_models.make_inputs(0, torch.bfloat16, DEVICE)
    result = offload(model, client, "test/compile-inductor",
                     environ={}, small_tensor_threshold_kb=0, resident_module_budget_gb=0)
    try:
        with torch.no_grad():
            model(**inputs)
            eager = model(**inputs)
            compiled = torch.compile(model)
            started = time.perf_counter()
            first = compiled(**inputs)
            compile_s = time.perf_counter() - started
            uses = result.hook.stats()["streamed_uses"]
            second = compiled(**inputs)
        assert result.hook.stats()["streamed_uses"] > uses, "the compiled run streamed nothing"
        difference = max((first - eager).abs().max().item(), (second - eager).abs().max().item())
        torch.testing.assert_close(first, eager, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(second, eager, rtol=2e-2, atol=2e-2)
        report("inductor", {"first_call_s": round(compile_s, 2),
                            "max_abs_difference": difference,
                            "bitwise": torch.equal(first, eager)})
    finally:
        result.release()
        gc.collect()
        torch.cuda.empty_cache()


def test_cuda_graph_capture_is_refused_and_the_module_runs_on(client, flux):
    from diffusers_dynamic_offloader import GraphCaptureError

    model = copy.deepcopy(flux)
    result = offload(model, client, "test/compile-capture")
    try:
        flux_step(model)
        eager = flux_step(model)
        inputs = small_flux.transformer_inputs()
        graph = torch.cuda.CUDAGraph()
        with pytest.raises(GraphCaptureError) as refused:
            with torch.no_grad(), torch.cuda.graph(graph):
                model(**inputs)
        message = str(refused.value)
        assert "DDO route" in message and "CUDA graph" in message, message
        report("capture_refusal", message)
        assert torch.equal(flux_step(model), eager), "the module changed after the refusal"
        assert torch.equal(flux_step(model), eager)
    finally:
        result.release()
        gc.collect()
        torch.cuda.empty_cache()
