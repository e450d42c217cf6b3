"""GPU only: workload profiles measured on the device (issue 6).

- a calibration run (``build_profile=True``) of the small FLUX transformer streamed by ddod
  measures the device's peak (driver-sampled: ddod's ring and slab included; and the
  allocator's), saves ``total - peak - headroom``, and a later run with the same name keeps
  that much resident;
- a capacity run that ends in a real CUDA out-of-memory records a failure, and the next run at
  that size is warned.

    DDO_DDOD_BINARY=.bundle/bin/ddod PYTHONPATH=.device-deps/src:client-python/src \\
      python3 -m pytest -v tests/gpu/test_profiles_gpu.py
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
diffusers = pytest.importorskip("diffusers")

import small_flux  # noqa: E402  (tests/gpu is on sys.path: conftest.py)

GIB = 1024 ** 3
POLICY_OFF = {"DDO_AUTO_BUDGET_POLICY": "off"}  # the saved budget becomes the resident budget


def transformer():
    torch.manual_seed(0)
    return diffusers.FluxTransformer2DModel(**small_flux.TRANSFORMER).to(small_flux.DTYPE).eval()


def test_calibration_measures_the_device_and_a_later_run_applies_it(client, tmp_path,
                                                                     monkeypatch):
    from diffusers_dynamic_offloader import enable_offload

    monkeypatch.setenv("DDO_PROFILE_DIR", str(tmp_path / "profiles"))
    model = transformer()
    calibration = enable_offload(model, component="transformer", execution_device="cuda:0",
                                 client=client, environ=POLICY_OFF, small_tensor_threshold_kb=0,
                                 profile_name="small-flux-512", build_profile=True)
    try:
        assert calibration.route == "dynamic_offload"
        decided = {d.key: d.value for d in calibration.hook.plan.decisions}
        assert decided["profile_calibration"] == "zero_resident", decided
        free, total = torch.cuda.mem_get_info()
        used_before = total - free
        with calibration.profile_run() as report:
            with torch.no_grad():
                model(**small_flux.transformer_inputs())
        stats = calibration.hook.stats()
    finally:
        calibration.release()
    print(f"[profiles-gpu] calibration: {report}; uses {stats['uses']} of {stats['units']} units")
    assert report["status"] == "saved"
    # Calibration keeps nothing resident: the Linear weights streamed (the one forward is
    # the session's learning forward, whose uses are out of schedule).
    assert stats["units"] > 0 and stats["uses"] >= stats["units"], stats
    peak = report["peak_vram_gb"]
    assert peak * GIB >= used_before  # the driver's view: ddod's ring and slab included
    assert report["resident_budget_gb"] == pytest.approx(total / GIB - peak - 1.0, abs=0.01)

    later = enable_offload(transformer(), component="transformer", execution_device="cuda:0",
                           client=client, environ=POLICY_OFF, small_tensor_threshold_kb=0,
                           profile_name="small-flux-512")
    try:
        assert later.event_payload["profile"]["status"] == "applied"
        budget = float(later.settings.value("DDO_RESIDENT_MODULE_BUDGET_GB"))
        assert budget == pytest.approx(report["resident_budget_gb"], abs=0.01)
        with torch.no_grad():
            later.module(**small_flux.transformer_inputs())
        # The measured budget holds the whole 1.27 GB transformer: nothing streams.
        assert later.hook.stats()["streamed_uses"] == 0
    finally:
        later.release()


def test_a_real_out_of_memory_is_recorded_and_warned_next_time(client, tmp_path):
    from diffusers_dynamic_offloader import (get_dynamic_offload_profile_capacity,
                                             load_dynamic_offload_profile, profile_capacity_run)

    context = {"workload": "oom-probe", "device": torch.cuda.get_device_name()}
    folder = tmp_path / "profiles"
    _, total = torch.cuda.mem_get_info()
    with profile_capacity_run(context, "tokens", 4096, profile_dir=folder, client=client):
        torch.empty(GIB, dtype=torch.uint8, device="cuda:0")
    with pytest.raises(torch.cuda.OutOfMemoryError):
        with profile_capacity_run(context, "tokens", 1 << 20, profile_dir=folder, client=client):
            torch.empty(2 * total, dtype=torch.uint8, device="cuda:0")  # more than the device
    limits = get_dynamic_offload_profile_capacity(
        load_dynamic_offload_profile(context, folder, client), "tokens")
    assert limits == {"max_success": 4096.0, "min_failure": float(1 << 20)}
    with pytest.warns(RuntimeWarning, match="ran out of memory before"):
        with profile_capacity_run(context, "tokens", 1 << 20, profile_dir=folder, client=client,
                                  record_success=False):
            pass
