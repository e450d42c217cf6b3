"""The seed's own preset and routing tests (its tests/test_dynamic_offload_presets.py; docs/seed.md,
"Where parity is tested"), rewritten against ddod. Numbers in the test names are the seed's."""


import pytest
import torch
from torch import nn

from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader.seed_compat.offload_api import (
    enable_diffusers_group_offload,
    enable_dynamic_offload,
    enable_offload,
)
from diffusers_dynamic_offloader.seed_compat.offload_settings import (
    DynamicOffloadConfig,
    load_dynamic_offload_settings_from_env,
)
from support import install_fake_group_offloading


@pytest.fixture
def fake_diffusers(monkeypatch):
    calls = []
    install_fake_group_offloading(monkeypatch, lambda module, kwargs: calls.append(kwargs))
    return calls


@pytest.fixture
def client(daemon):
    with DdoClient.connect(daemon.address) as connected:
        yield connected


def sdnq_module():
    module = nn.Sequential(nn.Linear(4, 4))
    module[0].sdnq_dequantizer = object()
    return module


def test_04_05_environment_beats_the_preset_and_reaches_the_metrics(client):
    settings = load_dynamic_offload_settings_from_env(
        default_preset="one_shot_fast", client=client,
        environ={"DDO_PIN_CPU_WORKERS": "9", "DDO_AVAILABLE_SYSTEM_RAM_GB": "64",
                 "DDO_PROFILE_VRAM_HEADROOM_GB": "1.25"})
    assert settings.config.pin_cpu_workers == 9
    assert settings.config.available_system_ram_gb == 64.0
    assert settings.config.profile_vram_headroom_gb == 1.25
    assert settings.as_metrics()["dynamic_offload_profile_vram_headroom_gb"] == 1.25


def test_09_a_component_policy_shows_in_the_result(client, fake_diffusers):
    result = enable_offload(
        nn.Linear(4, 4), component="vae", client=client, environ={},
        component_policies={"vae": {"route": "group", "offload_type": "block_level",
                                    "num_blocks_per_group": 2, "offload_stream": False,
                                    "offload_record_stream": True}})
    assert result.route == "diffusers_group_offload"
    assert fake_diffusers[-1]["offload_type"] == "block_level"
    assert fake_diffusers[-1]["num_blocks_per_group"] == 2
    assert (fake_diffusers[-1]["use_stream"], fake_diffusers[-1]["record_stream"]) == (False, True)
    assert result.event_payload["num_blocks_per_group"] == 2


def test_10_an_explicit_route_none_beats_the_policy(client):
    result = enable_offload(nn.Linear(4, 4), component="vae", client=client, environ={},
                            route="none", apply_hook=False,
                            component_policies={"vae": {"route": "group"}})
    assert result.route == "none" and result.should_move_to_execution_device


def test_11_12_sdnq_goes_to_group_offload_unless_the_preset_is_off(client, fake_diffusers):
    routed = enable_offload(sdnq_module(), component="transformer", client=client, environ={})
    assert routed.route == "diffusers_group_offload"
    assert routed.event_payload["quantized_backend"]["sdnq_status"] == "detected_forward_preserved"
    off = enable_offload(sdnq_module(), component="transformer", client=client, environ={},
                         preset="off", apply_hook=False)
    assert off.route == "none" and off.should_move_to_execution_device


def test_14_15_compat_and_warm_process_routes(client, fake_diffusers):
    compat = enable_offload(nn.Linear(4, 4), component="transformer", client=client, environ={},
                            preset="diffusers_offload_compat")
    assert compat.route == "diffusers_group_offload"
    assert fake_diffusers[-1]["offload_type"] == "block_level"
    warm = enable_offload(nn.Linear(4, 4), component="text_encoder", client=client, environ={},
                          preset="warm_process")
    assert warm.route == "diffusers_group_offload"
    assert fake_diffusers[-1]["use_stream"] is True


@pytest.mark.parametrize("preset", ["low_ram_safe", "one_shot_fast"])
def test_16_17_wsl_turns_group_streams_off(client, fake_diffusers, preset):
    result = enable_offload(nn.Linear(4, 4), component="text_encoder", client=client, environ={},
                            preset=preset, running_on_wsl=True)
    assert result.route == "diffusers_group_offload"
    assert (fake_diffusers[-1]["use_stream"], fake_diffusers[-1]["record_stream"]) == (False, False)


def test_18_group_offload_payload_without_a_hook():
    events = []
    result = enable_diffusers_group_offload(
        nn.Linear(4, 4), offload_type="block_level", num_blocks_per_group=2, use_stream=False,
        apply_hook=False, record_event=lambda name, seconds, **payload: events.append((name, payload)))
    assert result.event_payload["num_blocks_per_group"] == 2
    assert events[0][0] == "setup_diffusers_group_offload"
    assert events[0][1]["use_stream"] is False


def test_19_overrides_without_a_hook(client):
    result = enable_dynamic_offload(nn.Linear(4, 4), client=client, environ={}, apply_hook=False,
                                    available_system_ram_gb=64, show_profile=True)
    assert result.hook is None
    assert result.event_payload["available_system_ram_gb"] == 64
    # Applied to the settings (ddod resolved them, so its planner sees the RAM too).
    assert result.settings.config.available_system_ram_gb == 64
    assert result.settings.config.show_profile is True
    assert result.settings.value("DDO_AVAILABLE_SYSTEM_RAM_GB") == "64"


def test_20_an_explicit_plan_config_beats_the_off_preset(client):
    events = []
    result = enable_dynamic_offload(
        nn.Linear(4, 4), client=client, environ={}, preset="off",
        config=DynamicOffloadConfig(execution_mode="plan"),
        record_event=lambda name, seconds, **payload: events.append((name, payload)))
    assert result.route == "dynamic_offload"
    assert result.should_move_to_execution_device
    assert events[0][0] == "setup_dynamic_offload"
    assert events[0][1]["execution_mode"] == "plan"
