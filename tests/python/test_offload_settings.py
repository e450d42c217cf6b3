"""The seed's settings objects, built from ddod's resolution."""

import pytest

from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader.seed_compat.offload_settings import (
    DynamicOffloadConfig,
    DynamicOffloadSettings,
    load_dynamic_offload_settings_from_env,
)


def test_one_shot_fast_as_the_seed_reports_it(daemon):
    with DdoClient.connect(daemon.address) as client:
        settings = load_dynamic_offload_settings_from_env(
            default_preset="auto", environ={}, client=client, running_on_wsl=False)
    assert (settings.requested_preset, settings.effective_preset) == ("auto", "one_shot_fast")
    assert settings.enabled and not settings.plan
    assert settings.execution_mode == "linear_runtime"
    config = settings.config
    assert config.small_tensor_threshold_bytes == 1024 * 1024
    assert config.pin_cpu_workers == 4
    assert config.auto_budget_policy == "balanced"
    assert config.max_resident_module_budget_gb == 0
    assert config.resident_module_patterns == ("auto",)
    assert config.always_resident_modules_pattern[0].startswith("(^|\\.)(proj_in")
    assert settings.requested_pin_cpu_memory and settings.effective_pin_cpu_memory
    metrics = settings.as_metrics()
    assert metrics["dynamic_offload_small_tensor_threshold_kb"] == 1024
    assert metrics["dynamic_offload_effective_preset"] == "one_shot_fast"
    assert metrics["dynamic_offload_target_module_classes"] == ["Linear", "Embedding"]


def test_wsl_requests_but_does_not_pin(daemon):
    with DdoClient.connect(daemon.address) as client:
        settings = DynamicOffloadSettings.from_resolved(
            client.resolve_settings("one_shot_fast", environ={}), running_on_wsl=True)
    assert settings.requested_pin_cpu_memory and not settings.effective_pin_cpu_memory
    assert settings.config.pin_cpu_memory is False


def test_no_preset_is_plan_mode_and_disabled(daemon):
    with DdoClient.connect(daemon.address) as client:
        settings = load_dynamic_offload_settings_from_env(environ={}, client=client)
        assert settings.effective_preset == "" and not settings.enabled
        enabled = load_dynamic_offload_settings_from_env(environ={"DDO_PLAN": "yes"}, client=client)
        assert enabled.enabled and enabled.plan


def test_preset_value_reads_the_environment_then_the_preset(daemon, monkeypatch):
    from diffusers_dynamic_offloader.default_client import close_default_client

    monkeypatch.setenv("DDO_DAEMON", daemon.address)
    try:
        with DdoClient.connect(daemon.address) as client:
            settings = load_dynamic_offload_settings_from_env(default_preset="low_ram_safe",
                                                              environ={}, client=client)
        assert settings.preset_value("DDO_RESIDENT_MODULE_BUDGET_GB", environ={}) == "3"
        assert settings.preset_value("DDO_RESIDENT_MODULE_BUDGET_GB",
                                     environ={"DDO_RESIDENT_MODULE_BUDGET_GB": ""}) == ""
        assert settings.preset_value("DDO_NOPE", "x", environ={}) == "x"
        assert settings.preset_bool("DDO_RUNNER_TEXT_ENCODER_GROUP_OFFLOAD", environ={}) is True
    finally:
        close_default_client()


def test_the_config_has_the_seeds_fields_and_no_removed_one():
    config = DynamicOffloadConfig()
    assert config.small_tensor_threshold_bytes == 16 * 1024 and config.pin_cpu_workers == 1
    assert not hasattr(config, "auto_full_pin_resident_budget_gb")
    with pytest.raises(Exception):
        config.execution_mode = "x"  # frozen
