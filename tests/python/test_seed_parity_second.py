"""Seed parity, second pass (issue 15, items 1-5): a runner written from the seed's README,
through the package's own connection (``DDO_DAEMON``), against both a private ddod the client
starts and a shared ddod the test starts (docs/seed.md says what the seed is)."""

import json
import logging
import os
import re
import subprocess
import sys
import textwrap
import types

import pytest
import torch
from torch import nn

import diffusers_dynamic_offloader as ddo
from diffusers_dynamic_offloader.default_client import close_default_client
from support import python_env
from test_seed_parity import fake_diffusers  # noqa: F401  (a fixture)


@pytest.fixture(params=["private", "shared"])
def runner_daemon(request, monkeypatch, daemon_factory, short_dir):
    """The daemon a seed runner's calls reach: a private ddod started by the client at first
    use (``DDO_DAEMON=embedded``), or a shared ddod started here, before the test sets any
    DDO_* variable."""
    close_default_client()
    if request.param == "shared":
        shared = daemon_factory(os.path.join(short_dir, "run", "ddod.sock"))
        monkeypatch.setenv("DDO_DAEMON", shared.address)
    else:
        monkeypatch.setenv("DDO_DAEMON", "embedded")
    yield request.param
    close_default_client()




def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(512, 512), nn.Linear(512, 512))


# --- item 1: the runner's environment is read at every call -------------------------------


def test_1_the_environment_counts_at_every_call_not_at_first_use(runner_daemon, monkeypatch):
    monkeypatch.setenv("DDO_PIN_CPU_WORKERS", "9")
    monkeypatch.setenv("DDO_TRANSFORMER_ROUTE", "none")
    # First use: the private ddod starts now, with these variables in the environment.
    assert ddo.DynamicOffloadSettings.from_env(default_preset="auto").config.pin_cpu_workers == 9
    assert ddo.enable_offload(nn.Linear(4, 4), component="transformer", execution_device="cpu",
                              apply_hook=False).route == "none"
    # environ={} and use_environment=False see none of them.
    ignored = ddo.DynamicOffloadSettings.from_env(default_preset="auto", environ={})
    assert ignored.config.pin_cpu_workers == 4
    assert ignored.resolved.values["DDO_PIN_CPU_WORKERS"].source == "preset"
    assert ddo.enable_offload(nn.Linear(4, 4), component="transformer", execution_device="cpu",
                              apply_hook=False, use_environment=False).route == "dynamic_offload"
    # Deleted and changed variables take effect at the next call.
    monkeypatch.delenv("DDO_PIN_CPU_WORKERS")
    monkeypatch.delenv("DDO_TRANSFORMER_ROUTE")
    again = ddo.DynamicOffloadSettings.from_env(default_preset="auto")
    assert again.config.pin_cpu_workers == 4
    assert again.resolved.values["DDO_PIN_CPU_WORKERS"].source == "preset"
    assert ddo.enable_offload(nn.Linear(4, 4), component="transformer", execution_device="cpu",
                              apply_hook=False).route == "dynamic_offload"
    monkeypatch.setenv("DDO_PIN_CPU_WORKERS", "2")
    assert ddo.DynamicOffloadSettings.from_env(default_preset="auto").config.pin_cpu_workers == 2


def test_1_settings_keep_their_library_values_and_read_component_variables_at_call_time(
        runner_daemon, monkeypatch):
    settings = ddo.DynamicOffloadSettings.from_env(default_preset="auto")
    # Set after from_env: the component's route applies (read at the call, as in the seed);
    # a library setting does not (the settings were resolved before it was set).
    monkeypatch.setenv("DDO_TRANSFORMER_ROUTE", "none")
    monkeypatch.setenv("DDO_SMALL_TENSOR_THRESHOLD_KB", "0")
    result = ddo.enable_offload(nn.Linear(4, 4), settings=settings, component="transformer",
                                execution_device="cpu", apply_hook=False)
    assert result.route == "none"
    assert result.settings.value("DDO_SMALL_TENSOR_THRESHOLD_KB") == settings.value(
        "DDO_SMALL_TENSOR_THRESHOLD_KB") == "1024"
    # With use_environment=False the component's variables are not read either.
    kept = ddo.enable_offload(nn.Linear(4, 4), settings=settings, component="transformer",
                              execution_device="cpu", apply_hook=False, use_environment=False)
    assert kept.route == "dynamic_offload"


def test_1_a_private_ddod_inherits_settings_only_when_asked(monkeypatch):
    close_default_client()
    monkeypatch.setenv("DDO_DAEMON", "embedded")
    monkeypatch.setenv("DDO_EMBEDDED_INHERIT_SETTINGS", "1")
    monkeypatch.setenv("DDO_PIN_CPU_WORKERS", "9")
    try:
        ddo.DynamicOffloadSettings.from_env(default_preset="auto")
        monkeypatch.delenv("DDO_PIN_CPU_WORKERS")
        kept = ddo.DynamicOffloadSettings.from_env(default_preset="auto")
        assert kept.config.pin_cpu_workers == 9
        assert kept.resolved.values["DDO_PIN_CPU_WORKERS"].source == "daemon"
    finally:
        close_default_client()


# --- item 2: invalid settings are the call's ValueError, whatever the daemon ----------------


@pytest.mark.parametrize("name, value, named", [
    ("DDO_PRESET", "bogus", "DDO_PRESET"),
    ("DDO_PIN_CPU_WORKERS", "abc", "DDO_PIN_CPU_WORKERS"),
    ("DDO_SYSTEM_RAM_HEADROOM_GB", "-1", "DDO_SYSTEM_RAM_HEADROOM_GB"),
])
def test_2_an_invalid_value_set_before_first_use_is_a_value_error(runner_daemon, monkeypatch,
                                                                  name, value, named):
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=named):
        ddo.DynamicOffloadSettings.from_env(default_preset="auto")
    with pytest.raises(ValueError, match=named):
        ddo.enable_offload(nn.Linear(4, 4), component="transformer", execution_device="cpu",
                           apply_hook=False)
    # The daemon is fine: once the variable is gone, the next call works.
    monkeypatch.delenv(name)
    assert ddo.DynamicOffloadSettings.from_env(default_preset="auto").effective_preset == "one_shot_fast"


def test_2_zero_pin_workers_are_clamped_to_one_as_in_the_seed(runner_daemon, monkeypatch):
    monkeypatch.setenv("DDO_PIN_CPU_WORKERS", "0")
    assert ddo.DynamicOffloadSettings.from_env(default_preset="auto").config.pin_cpu_workers == 1
    assert ddo.DynamicOffloadSettings.from_env(
        environ={"DDO_PIN_CPU_WORKERS": "-3"}).config.pin_cpu_workers == 1


# --- item 3: the settings' execution device -------------------------------------------------


def test_3_the_settings_execution_device_is_used(runner_daemon):
    settings = ddo.DynamicOffloadSettings.from_env(default_preset="auto", execution_device="cpu")
    model = _model()
    results = ddo.enable_pipeline_offload(types.SimpleNamespace(components={"transformer": model}),
                                          settings=settings)
    try:
        result = results["transformer"]
        assert result.route == "dynamic_offload" and result.hook is not None
        assert str(result.hook.device) == "cpu"
        assert result.settings.config.execution_device == "cpu"
    finally:
        results["transformer"].release()
    single = ddo.enable_offload(_model(), settings=settings, component="transformer")
    try:
        assert str(single.hook.device) == "cpu"
    finally:
        single.release()


# --- item 4: the hook -------------------------------------------------------------------------


def test_4_the_hook_constructs_from_a_config_as_in_the_seed():
    config = ddo.DynamicOffloadConfig(execution_device="cpu", execution_mode="linear_runtime",
                                      resident_module_budget_gb=0.5)
    hook = ddo.DynamicOffloadHook(config)
    assert hook.config is config
    assert hook.execution_device == torch.device("cpu")
    assert hook.offload_device == torch.device("cpu")
    assert hook.execution_mode == "linear_runtime"
    assert hook.linear_runtime_strategy == "functional"
    assert hook.resident_module_budget_bytes == 2**29
    assert hook.pre_forward(None, 1, x=2) == ((1,), {"x": 2})
    assert ddo.DynamicOffloadHook().execution_mode == "plan"  # the seed's default config
    with pytest.raises(ValueError, match="resident_module_selection"):
        ddo.DynamicOffloadHook(ddo.DynamicOffloadConfig(resident_module_selection="middle"))
    try:
        from diffusers.hooks.hooks import ModelHook
    except ImportError:
        return
    assert isinstance(hook, ModelHook)


def test_4_the_hook_is_a_diffusers_model_hook_when_diffusers_is_there(tmp_path):
    # A stand-in diffusers with the module the seed imported its base class from.
    hooks = tmp_path / "diffusers" / "hooks"
    hooks.mkdir(parents=True)
    (tmp_path / "diffusers" / "__init__.py").write_text("")
    (hooks / "__init__.py").write_text("")
    (hooks / "hooks.py").write_text("class ModelHook:\n    def __init__(self):\n        self.fn_ref = 1\n")
    script = textwrap.dedent("""
        import sys
        sys.path.insert(0, sys.argv[1])
        from diffusers.hooks.hooks import ModelHook
        from diffusers_dynamic_offloader import DynamicOffloadConfig, DynamicOffloadHook
        hook = DynamicOffloadHook(DynamicOffloadConfig(execution_device="cpu"))
        assert isinstance(hook, ModelHook) and hook.fn_ref == 1, hook
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=python_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_4_plan_mode_installs_a_plan_only_hook(runner_daemon):
    config = ddo.DynamicOffloadConfig(execution_device="cpu", execution_mode="plan")
    model = _model()
    result = ddo.enable_dynamic_offload(model, config=config, preset="off")
    assert isinstance(result.hook, ddo.DynamicOffloadHook) and result.hook.session is None
    assert result.should_move_to_execution_device
    assert result.hook.state is ddo.get_dynamic_offload_state(model)
    ddo.remove_dynamic_offload(model)
    assert ddo.get_dynamic_offload_state(model) is None
    applied = ddo.apply_dynamic_offload(_model(), config)
    assert isinstance(applied, ddo.DynamicOffloadHook) and applied.execution_mode == "plan"
    loaded = ddo.from_pretrained_with_dynamic_offload(
        "x", model_loader=lambda path: _model(), dynamic_offload_config=config,
        apply_dynamic=True)
    assert isinstance(loaded.hook, ddo.DynamicOffloadHook)
    assert loaded.should_move_to_execution_device


def test_4_initialize_hook_routes_its_module(runner_daemon):
    """The seed's registration step: the hook routes its module itself (route.py's steps,
    handed the hook's class) and answers for the session that opened."""
    config = ddo.DynamicOffloadConfig(execution_device="cpu", execution_mode="linear_runtime",
                                      small_tensor_threshold_bytes=0)
    model = _model()
    hook = ddo.DynamicOffloadHook(config)
    assert hook.initialize_hook(model) is model
    try:
        assert hook.session is not None and not hook.closed
        assert hook.state is ddo.get_dynamic_offload_state(model)
        with torch.no_grad():
            model(torch.randn(2, 512))
        assert len(hook.resources.units) == 2
    finally:
        ddo.remove_dynamic_offload(model)
    assert hook.closed

def test_4_5_the_hook_of_a_streamed_module_answers_for_its_session(runner_daemon):
    config = ddo.DynamicOffloadConfig(execution_device="cpu", execution_mode="linear_runtime",
                                      small_tensor_threshold_bytes=0)
    model = _model()
    reference = [p.detach().clone() for p in model.parameters()]
    hook = ddo.apply_dynamic_offload(model, config)
    try:
        assert isinstance(hook, ddo.DynamicOffloadHook) and hook.session is not None
        inputs = torch.randn(2, 512)
        with torch.no_grad():
            expected = torch.nn.functional.linear(
                torch.nn.functional.linear(inputs, reference[0], reference[1]),
                reference[2], reference[3])
            for _ in range(3):  # the first pass learns the schedule, the next stream it
                assert torch.allclose(model(inputs), expected)
        assert hook.stats()["streamed_uses"] > 0
        assert len(hook.resources.units) == 2
    finally:
        ddo.remove_dynamic_offload(model)
    assert hook.closed


def test_4_5_the_swap_strategy_is_refused_not_ignored(runner_daemon):
    with pytest.raises(ValueError, match="swap"):
        ddo.DynamicOffloadHook(ddo.DynamicOffloadConfig(execution_mode="linear_runtime",
                                                        linear_runtime_strategy="swap"))
    with pytest.raises(ValueError, match="DDO_LINEAR_RUNTIME_STRATEGY='swap'"):
        ddo.enable_offload(_model(), component="transformer", execution_device="cpu",
                           environ={"DDO_LINEAR_RUNTIME_STRATEGY": "swap"})
    with pytest.raises(ValueError, match="linear_runtime_strategy"):
        ddo.DynamicOffloadHook(ddo.DynamicOffloadConfig(linear_runtime_strategy="bogus"))


# --- item 5: values -----------------------------------------------------------------------------


def test_5_planner_decisions_are_numbers_and_report_the_plan_cache(runner_daemon):
    ddo.clear_dynamic_offload_plan_cache()
    result = ddo.enable_offload(_model(), component="transformer", execution_device="cpu",
                                environ={})
    try:
        decisions = result.event_payload["planner_decisions"]
        assert decisions["auto_full_pin_min_model_to_vram_ratio"] == 4.0
        assert isinstance(decisions["candidate_weight_gb"], float)
        assert isinstance(decisions["available_system_ram_gb"], float)
        assert decisions["unsupported_linear_module_count"] == 0
        assert decisions["plan_cache"] == "miss"
        json.dumps(decisions)
    finally:
        result.release()


def test_5_the_plan_cache_answers_a_structure_planned_before(runner_daemon):
    ddo.clear_dynamic_offload_plan_cache()
    environ = {"DDO_PLAN": "1"}
    kwargs = dict(component="transformer", execution_device="cpu", execution_mode="plan")
    first = ddo.enable_offload(_model(), environ=environ, **kwargs)
    second = ddo.enable_offload(_model(), environ=environ, **kwargs)
    assert first.event_payload["planner_decisions"]["plan_cache"] == "miss"
    assert second.event_payload["planner_decisions"]["plan_cache"] == "hit"
    assert second.hook.state.bytes_by_placement == first.hook.state.bytes_by_placement
    off = ddo.enable_offload(_model(), environ={**environ, "DDO_CACHE_PLAN": "0"}, **kwargs)
    assert off.event_payload["planner_decisions"]["plan_cache"] == "disabled"
    ddo.clear_dynamic_offload_plan_cache()
    assert ddo.enable_offload(_model(), environ=environ, **kwargs).event_payload[
        "planner_decisions"]["plan_cache"] == "miss"


def test_5_ddo_presets_is_a_plain_dict(runner_daemon, monkeypatch):
    from diffusers_dynamic_offloader.seed_compat import presets

    monkeypatch.delitem(presets.__dict__, "DDO_PRESETS", raising=False)
    table = ddo.DDO_PRESETS
    assert type(table) is dict
    assert table.copy()["low_ram_safe"]["DDO_RESIDENT_MODULE_BUDGET_GB"] == "3"
    assert json.loads(json.dumps(table)) == table
    assert ddo.DDO_PRESETS is table


def test_5_hand_built_settings_are_used_as_given(runner_daemon):
    settings = ddo.DynamicOffloadSettings(
        requested_preset="", effective_preset="", enabled=False, plan=False,
        config=ddo.DynamicOffloadConfig(execution_device="cpu"), requested_pin_cpu_memory=False,
        effective_pin_cpu_memory=False, disable_pin_on_wsl=True, running_on_wsl=False)
    result = ddo.enable_offload(nn.Linear(4, 4), settings=settings, component="transformer",
                                apply_hook=False)
    # No preset, plan mode, not enabled: the seed routes the component to none.
    assert result.route == "none" and result.should_move_to_execution_device
    assert result.settings is settings
    assert result.event_payload["preset"] == ""


def test_5_low_cpu_mem_usage_is_only_a_default(runner_daemon, fake_diffusers):
    ddo.enable_offload(nn.Linear(4, 4), component="text_encoder", execution_device="cpu",
                       low_cpu_mem_usage=False,
                       environ={"DDO_TEXT_ENCODER_OFFLOAD_LOW_CPU_MEM_USAGE": "1"})
    assert fake_diffusers[-1]["low_cpu_mem_usage"] is True  # the component variable wins
    ddo.enable_offload(nn.Linear(4, 4), component="text_encoder", execution_device="cpu",
                       low_cpu_mem_usage=False, environ={})
    assert fake_diffusers[-1]["low_cpu_mem_usage"] is False  # nobody set it: the argument


def test_5_build_profile_off_the_dynamic_route_says_so_first(runner_daemon, fake_diffusers):
    with pytest.raises(ValueError, match="requires the dynamic_offload route"):
        ddo.enable_offload(nn.Linear(4, 4), component="text_encoder", execution_device="cpu",
                           environ={}, profile_name="p", build_profile=True)
    assert fake_diffusers == []


def test_5_the_seeds_plan_helpers_exist():
    expected = (torch.cuda.get_device_properties(0).total_memory / 2**30
                if torch.cuda.is_available() else 0.0)
    assert ddo.get_cuda_total_vram_gb() == pytest.approx(expected)
    assert ddo.get_cuda_total_vram_gb("cpu") == 0.0
    model = nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64))
    model.add_module("proj_out", nn.Linear(8, 8))
    config = ddo.DynamicOffloadConfig(small_tensor_threshold_bytes=1024,
                                      always_resident_modules_pattern=(r"(^|\.)proj_out$",))
    state = ddo.build_dynamic_offload_plan(model, config)
    placements = {entry.tensor_name if not entry.module_name else
                  f"{entry.module_name}.{entry.tensor_name}": entry.placement
                  for entry in state.entries}
    assert placements == {"0.weight": "streamed_large", "0.bias": "resident_small",
                          "proj_out.weight": "resident_module", "proj_out.bias": "resident_module"}
    assert state.module_count == 2  # LayerNorm is no target class
    assert state.total_bytes == (64 * 64 + 64 + 8 * 8 + 8) * 4


def test_5_verbose_logs_the_setup(runner_daemon, caplog):
    caplog.set_level(logging.INFO, logger="diffusers_dynamic_offloader")
    result = ddo.enable_offload(_model(), component="transformer", execution_device="cpu",
                                environ={"DDO_VERBOSE": "1", "DDO_SMALL_TENSOR_THRESHOLD_KB": "0"})
    try:
        lines = [r.getMessage() for r in caplog.records if r.name == "diffusers_dynamic_offloader"]
        assert any(line.startswith("[ddo] transformer: mode=linear_runtime") for line in lines), lines
        assert any("auto plan:" in line for line in lines), lines
    finally:
        result.release()
    caplog.clear()
    quiet = ddo.enable_offload(_model(), component="transformer", execution_device="cpu",
                               environ={})
    quiet.release()
    lines = [r.getMessage() for r in caplog.records if r.name == "diffusers_dynamic_offloader"]
    assert len(lines) == 1 and "dynamic_offload on cpu" in lines[0], lines  # item 6's line


# --- item 6: the runner sees what happens --------------------------------------------------


def _ddo_lines(caplog) -> list:
    return [r.getMessage() for r in caplog.records if r.name == "diffusers_dynamic_offloader"]


def test_6_every_component_gets_one_setup_line(runner_daemon, caplog):
    caplog.set_level(logging.INFO, logger="diffusers_dynamic_offloader")
    environ = {"DDO_SMALL_TENSOR_THRESHOLD_KB": "0", "DDO_RESIDENT_MODULE_BUDGET_GB": "0"}
    first = ddo.enable_offload(_model(), component="transformer", execution_device="cpu",
                               environ=environ)
    try:
        (line,) = _ddo_lines(caplog)
        assert re.fullmatch(
            r"\[ddo\] transformer: dynamic_offload on cpu, [0-9.]+ [MG]iB resident, 2\.0 MiB "
            r"streamed in 2 units through a \d+-slot ring \([0-9.]+ [MG]iB\), weights "
            r"(uploaded to|warm in) ddod; set up in [0-9.]+ s", line), line
        caplog.clear()
        again = ddo.enable_offload(_model(), component="transformer", execution_device="cpu",
                                   environ=environ)
        again.release()
        (line,) = _ddo_lines(caplog)
        assert "weights warm in ddod" in line, line  # the same weights: ddod had them
    finally:
        first.release()
    caplog.clear()
    kept = ddo.enable_offload(nn.Linear(8, 8), component="vae", execution_device="cpu",
                              route="none", environ={})
    assert _ddo_lines(caplog) and re.fullmatch(r"\[ddo\] vae: none on cpu; set up in [0-9.]+ s",
                                               _ddo_lines(caplog)[0]), _ddo_lines(caplog)
    assert kept.route == "none"


def test_6_verbose_logs_one_line_per_pass(runner_daemon, caplog):
    caplog.set_level(logging.INFO, logger="diffusers_dynamic_offloader")
    model = _model()
    streamed_bytes = 2 * 512 * 512 * 4
    for verbose in ("0", "1"):
        result = ddo.enable_offload(model, component="transformer", execution_device="cpu",
                                    environ={"DDO_VERBOSE": verbose,
                                             "DDO_SMALL_TENSOR_THRESHOLD_KB": "0",
                                             "DDO_RESIDENT_MODULE_BUDGET_GB": "0"})
        try:
            caplog.clear()
            with torch.no_grad():
                for _ in range(3):
                    model(torch.ones(2, 512))
            lines = [line for line in _ddo_lines(caplog) if " pass " in line]
        finally:
            result.release()
        if verbose == "0":
            assert lines == [], lines
            continue
        assert len(lines) == 3, lines
        for number, line in enumerate(lines, start=1):
            assert re.fullmatch(rf"\[ddo\] transformer: pass {number} streamed "
                                rf"{streamed_bytes / 2**20:.1f} MiB in [0-9.]+ s \([0-9.]+ GB/s\), "
                                rf"waited [0-9.]+ s for ddod(, 2 units out of schedule)?", line), line
