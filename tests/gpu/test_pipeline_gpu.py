"""GPU only: a real FluxPipeline (small random-weight components, tests/gpu/small_flux.py)
through DDO (issue 6).

- full (``enable_pipeline_offload`` then ``pipe(...)``), staged (``run_staged`` with
  ``flux_stages``) and modular (``FluxAutoBlocks`` through its components mapping) runs give
  the all-GPU run's image within bf16 tolerance;
- the staged run's peak device memory (driver-sampled, ddod's memory included) is lower than
  the full run's;
- a second runner process binds the transformer from ddod (no checkpoint read) and finishes
  its first step in about a second.

Figures go to $DDO_GPU_REPORT_DIR/pipeline.json when set, and to stdout (pytest -s).

    DDO_DDOD_BINARY=.bundle/bin/ddod PYTHONPATH=.device-deps/src:client-python/src \\
      python3 -m pytest -s tests/gpu/test_pipeline_gpu.py
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
diffusers = pytest.importorskip("diffusers")
pytest.importorskip("transformers")

import gpu_report  # noqa: E402  (tests/gpu is on sys.path: conftest.py)
import small_flux  # noqa: E402

DEVICE = small_flux.DEVICE
# The resident budget of each streamed component: most of the 1.2 GB transformer streams.
BUDGET_GB = 0.5
ROUTING = dict(environ={}, small_tensor_threshold_kb=0, resident_module_budget_gb=BUDGET_GB)
# bf16 images in [0, 1]: routes compute the same function; kernels may differ in a last bit.
TOLERANCE = dict(rtol=0, atol=2e-2)
GIB = 1024 ** 3
report = gpu_report.reporter("pipeline")


class DevicePeak:
    """The device's used memory while the block runs (the library's driver sampler, every
    millisecond: every process, ddod included) and the runner's allocator peak."""

    def __enter__(self) -> "DevicePeak":
        from diffusers_dynamic_offloader.seed_compat.named_profiles import DriverPeakSampler

        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self._sampler = DriverPeakSampler(DEVICE, interval_s=0.001).__enter__()
        return self

    def __exit__(self, *exc_info) -> None:
        torch.cuda.synchronize()
        self._sampler.__exit__(*exc_info)
        self.peak = self._sampler.peak_bytes
        self.allocator_peak = torch.cuda.max_memory_allocated()


def settle() -> int:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    return total - free


def release_all(results) -> None:
    for result in results.values():
        result.release()


@pytest.fixture(scope="module")
def pipe():
    return small_flux.pipeline()


@pytest.fixture(scope="module")
def reference(pipe):
    """The image with every component on the GPU, no DDO."""
    pipe.to(DEVICE)
    started = time.perf_counter()
    image = pipe(**small_flux.call()).images
    torch.cuda.synchronize()
    report("all_gpu_run_s", round(time.perf_counter() - started, 3))
    pipe.to("cpu")
    settle()
    # Random weights must still make a picture, or equality would prove nothing.
    assert torch.isfinite(image).all() and image.float().std() > 1e-3, image.float().std()
    return image.cpu()


def compare(name: str, image: torch.Tensor, expected: torch.Tensor) -> None:
    difference = (image.float().cpu() - expected.float()).abs().max().item()
    report(f"{name}_max_abs_difference", difference)
    torch.testing.assert_close(image.float().cpu(), expected.float(), **TOLERANCE)


def test_full_and_staged_runs_match_the_all_gpu_run_and_staged_peaks_lower(
        client, pipe, reference):
    from diffusers_dynamic_offloader import enable_pipeline_offload, enter_phase
    from diffusers_dynamic_offloader.seed_compat.staged import flux_stages, run_staged

    baseline = settle()
    results = enable_pipeline_offload(pipe, client=client, execution_device=DEVICE, **ROUTING)
    try:
        report("full_routes", {name: result.route for name, result in results.items()})
        assert results["transformer"].route == "dynamic_offload"
        with DevicePeak() as full:
            started = time.perf_counter()
            image = pipe(**small_flux.call()).images
            torch.cuda.synchronize()
        report("full_run_s", round(time.perf_counter() - started, 3))
        assert results["transformer"].hook.stats()["streamed_uses"] > 0
    finally:
        release_all(results)
    compare("full", image, reference)
    # Every result released: no component left on the device, ddod's warm slabs dropped.
    enter_phase("before_run", client=client)
    after_release = settle()
    report("full_released_leftover_gib", round((after_release - baseline) / GIB, 3))
    assert after_release - baseline < 0.25 * GIB

    events = []
    with DevicePeak() as staged:
        started = time.perf_counter()
        image = run_staged(pipe, flux_stages(), client=client, execution_device=DEVICE,
                           offload_kwargs=ROUTING, record_event=lambda name, s, **p:
                           events.append((name, p)), **small_flux.call())
        torch.cuda.synchronize()
    report("staged_run_s", round(time.perf_counter() - started, 3))
    compare("staged", image, reference)
    report("phases", {name: {k: p.get(k) for k in ("released_bytes", "prefetched_bytes")}
                      for name, p in events if name.startswith("phase_")})
    full_peak, staged_peak = (full.peak - baseline) / GIB, (staged.peak - baseline) / GIB
    report("full_peak_gib", round(full_peak, 3))
    report("staged_peak_gib", round(staged_peak, 3))
    report("full_allocator_peak_gib", round(full.allocator_peak / GIB, 3))
    report("staged_allocator_peak_gib", round(staged.allocator_peak / GIB, 3))
    assert staged_peak < full_peak
    enter_phase("before_run", client=client)


def test_a_modular_pipeline_routes_through_its_components(client, pipe, reference):
    from diffusers.modular_pipelines import FluxAutoBlocks

    from diffusers_dynamic_offloader import enable_pipeline_offload, enter_phase

    modular = FluxAutoBlocks().init_pipeline()
    modular.update_components(**{name: getattr(pipe, name) for name in (
        "text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2", "vae", "transformer",
        "scheduler")})
    # The modular blocks' own all-GPU image: how they prepare latents is theirs, not DDO's.
    pipe.to(DEVICE)
    expected = modular(**small_flux.call(), output="images").cpu()
    pipe.to("cpu")
    settle()
    report("modular_all_gpu_vs_pipeline_max_abs_difference",
           (expected.float() - reference.float()).abs().max().item())
    results = enable_pipeline_offload(modular, client=client, execution_device=DEVICE,
                                      **ROUTING)
    try:
        report("modular_routes", {name: result.route for name, result in results.items()})
        assert {"transformer", "vae", "text_encoder", "text_encoder_2"} <= set(results)
        started = time.perf_counter()
        image = modular(**small_flux.call(), output="images")
        torch.cuda.synchronize()
        report("modular_run_s", round(time.perf_counter() - started, 3))
    finally:
        release_all(results)
        enter_phase("before_run", client=client)
    compare("modular", image, expected)


def test_a_warm_second_runner_binds_from_ddod_and_steps_in_about_a_second(
        client, daemon, pipe, tmp_path):
    pipe.transformer.save_pretrained(tmp_path / "transformer")
    transformer = pipe.transformer.to(DEVICE)
    with torch.no_grad():
        expected = transformer(**small_flux.transformer_inputs())[0].float().cpu()
    pipe.transformer.to("cpu")
    settle()
    runner = Path(__file__).with_name("warm_runner.py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(runner.parent)] + [p for p in sys.path if p]))
    runs = []
    for label in ("cold", "warm"):
        output = tmp_path / f"{label}.pt"
        done = subprocess.run(
            [sys.executable, str(runner), daemon.address, str(tmp_path), str(output),
             str(BUDGET_GB)], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-4000:]
        timings = json.loads(done.stdout.strip().splitlines()[-1])
        report(f"{label}_runner", {k: round(v, 3) if isinstance(v, float) else v
                                   for k, v in timings.items()})
        torch.testing.assert_close(torch.load(output).float(), expected, rtol=0, atol=2e-2)
        runs.append(timings)
    assert runs[0]["warm"] is False and runs[1]["warm"] is True
    assert runs[0]["route"] == runs[1]["route"] == "dynamic_offload"
