"""Named workload profiles (docs/seed.md, "Profiles") against a real ddod: calibration keeps
nothing resident and saves total - peak - headroom, later runs apply it, a manual budget
wins. The CUDA measurements are the seed's worked example, fed through torch.cuda's functions
(CI has no GPU)."""

import os

import pytest
import torch
from torch import nn

import diffusers_dynamic_offloader as ddo

GIB = 2**30


@pytest.fixture
def fake_cuda(monkeypatch, short_dir):
    """An 8 GiB card: 7 GiB free at the start and end, 0.5 GiB reserved by this process at the
    start, 5.5 GiB at its peak; profiles under a directory of the test."""
    monkeypatch.setenv("DDO_PROFILE_DIR", os.path.join(short_dir, "profiles"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: None)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *args: (7 * GIB, 8 * GIB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *args: GIB // 2)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *args: 11 * GIB // 2)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *args: None)


def _enable(client, module, **overrides):
    return ddo.enable_offload(module, component="transformer", execution_device="cuda:0",
                              client=client, environ={"DDO_AUTO_BUDGET_POLICY": "off"},
                              apply_hook=False, **overrides)


def test_calibration_saves_the_budget_that_fits_and_later_runs_apply_it(client, fake_cuda):
    module = nn.Linear(8, 8)
    calibration = _enable(client, module, profile_name="flux-1024", build_profile=True)
    assert calibration.settings.value("DDO_RESIDENT_MODULE_BUDGET_GB") == "0"
    assert calibration.event_payload["profile"]["status"] == "calibrating"
    with calibration.profile_run() as report:
        pass  # the workload
    assert report["status"] == "saved"
    assert report["peak_vram_gb"] == 6.0 and report["resident_budget_gb"] == 1.0  # 8 - 6 - 1
    # The next run with the name applies it (policy off: as the resident budget).
    later = _enable(client, nn.Linear(8, 8), profile_name="flux-1024")
    assert later.event_payload["profile"]["status"] == "applied"
    assert float(later.settings.value("DDO_RESIDENT_MODULE_BUDGET_GB")) == 1.0
    # With the balanced policy it goes to the planner instead.
    balanced = ddo.enable_offload(nn.Linear(8, 8), component="transformer",
                                  execution_device="cuda:0", client=client, environ={},
                                  apply_hook=False, profile_name="flux-1024")
    assert float(balanced.settings.value("DDO_PROFILE_RESIDENT_MODULE_BUDGET_GB")) == 1.0
    # A manual budget always wins.
    manual = _enable(client, nn.Linear(8, 8), profile_name="flux-1024",
                     resident_module_budget_gb=2.5)
    assert manual.event_payload["profile"]["status"] == "manual_budget"
    assert float(manual.settings.value("DDO_RESIDENT_MODULE_BUDGET_GB")) == 2.5
    # A run of another name has nothing to apply.
    other = _enable(client, nn.Linear(8, 8), profile_name="never-calibrated")
    assert other.event_payload["profile"]["status"] == "missing"
    # The profile is one of ddod's files.
    assert any(p.ref.name == "flux-1024" for p in client.rpc.unary(
        "ListProfiles", ddo._proto.profiles_pb2.ListProfilesRequest(
            profile_dir=os.environ["DDO_PROFILE_DIR"])).profiles)


def test_a_failed_calibration_saves_nothing(client, fake_cuda):
    calibration = _enable(client, nn.Linear(8, 8), profile_name="fails", build_profile=True)
    with pytest.raises(RuntimeError, match="boom"):
        with calibration.profile_run():
            raise RuntimeError("boom")
    assert calibration.event_payload["profile"]["status"] == "failed"
    assert _enable(client, nn.Linear(8, 8), profile_name="fails").event_payload[
        "profile"]["status"] == "missing"


def test_one_measurement_at_a_time(client, fake_cuda):
    first = _enable(client, nn.Linear(8, 8), profile_name="a", build_profile=True)
    second = _enable(client, nn.Linear(8, 8), profile_name="b", build_profile=True)
    with first.profile_run():
        with pytest.raises(RuntimeError, match="another DDO profile measurement"):
            with second.profile_run():
                pass


def test_calibration_errors_name_what_is_wrong(client, fake_cuda):
    with pytest.raises(ValueError, match="non-empty profile_name"):
        _enable(client, nn.Linear(8, 8), build_profile=True)
    with pytest.raises(ValueError, match="CUDA execution device"):
        ddo.enable_offload(nn.Linear(8, 8), component="transformer", execution_device="cpu",
                           client=client, environ={}, apply_hook=False, profile_name="x",
                           build_profile=True)
    with pytest.raises(ValueError, match="dynamic_offload route"):
        ddo.enable_offload(nn.Linear(8, 8), component="text_encoder", execution_device="cuda:0",
                           client=client, environ={}, apply_hook=False, profile_name="x",
                           build_profile=True)
    # Without a profile, profile_run() does nothing.
    with _enable(client, nn.Linear(8, 8)).profile_run() as nothing:
        assert nothing is None


def test_a_budget_from_the_environment_or_a_preset_is_manual_and_wins(client, fake_cuda):
    with _enable(client, nn.Linear(8, 8), profile_name="env", build_profile=True) as calibration:
        with calibration.profile_run():
            pass
    for environ in ({"DDO_AUTO_BUDGET_POLICY": "off", "DDO_RESIDENT_MODULE_BUDGET_GB": "2.5"},
                    {"DDO_AUTO_BUDGET_POLICY": "off", "DDO_PRESET": "low_ram_safe"}):
        later = ddo.enable_offload(nn.Linear(8, 8), component="transformer",
                                   execution_device="cuda:0", client=client, environ=environ,
                                   apply_hook=False, profile_name="env")
        assert later.event_payload["profile"]["status"] == "manual_budget", environ
        assert float(later.settings.value("DDO_RESIDENT_MODULE_BUDGET_GB")) > 1.0, environ


def test_a_calibration_session_keeps_nothing_resident_whatever_the_policy(client):
    from streaming_support import make_model

    model = make_model(torch.float32)
    plan = client.explain_plan(model, component="transformer", device="cpu", settings={
        "DDO_AUTO_BUDGET_POLICY": "balanced", "DDO_PROFILE_CALIBRATION": "1",
        "DDO_SMALL_TENSOR_THRESHOLD_KB": "0", "DDO_AVAILABLE_SYSTEM_RAM_GB": "64"})
    decisions = {d.key: d.value for d in plan.decisions}
    assert decisions["profile_calibration"] == "zero_resident"
    linear_bytes = sum(m.weight.numel() * 4 for m in model.modules() if type(m) is nn.Linear)
    assert plan.streamed_bytes == linear_bytes
