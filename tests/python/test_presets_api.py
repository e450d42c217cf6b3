"""The seed's preset functions, answered by a real ddod."""

import json
import pytest

from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader.seed_compat.presets import (
    format_dynamic_offload_presets,
    get_dynamic_offload_presets,
    get_available_system_ram_gb,
    is_wsl_environment,
    resolve_dynamic_offload_preset,
)

SEED_PRESETS = {"off", "one_shot_fast", "low_ram_safe", "wsl_compat", "warm_process",
                "diffusers_offload_compat", "diffusers_leaf_offload_compat"}
REMOVED = {"compat", "windows_fast", "linux_native_fast", "linux_safe", "planner_balanced",
           "planner_slim_resident", "warm_server", "low_ram", "diffusers_group_offload",
           "group_offload_compat", "diffusers_leaf_group_offload", "leaf_offload_compat"}


def test_presets_are_the_seeds_and_a_copy(daemon):
    with DdoClient.connect(daemon.address) as client:
        presets = get_dynamic_offload_presets(client)
        assert set(presets) == SEED_PRESETS
        assert not REMOVED & set(presets)
        assert presets["one_shot_fast"]["DDO_EXECUTION_MODE"] == "linear_runtime"
        assert presets["warm_process"]["DDO_CACHE_PINNED_WEIGHTS"] == "1"
        presets["one_shot_fast"]["DDO_EXECUTION_MODE"] = "changed"
        assert get_dynamic_offload_presets(client)["one_shot_fast"]["DDO_EXECUTION_MODE"] == "linear_runtime"


@pytest.mark.parametrize("wsl", [False, True])
def test_auto_is_one_shot_fast_everywhere(daemon, wsl):
    with DdoClient.connect(daemon.address) as client:
        assert resolve_dynamic_offload_preset(" AUTO ", running_on_wsl=wsl, client=client) == "one_shot_fast"
        assert resolve_dynamic_offload_preset("", client=client) == ""
        assert resolve_dynamic_offload_preset("Low_Ram_Safe", client=client) == "low_ram_safe"


def test_an_unknown_preset_is_a_value_error_listing_the_valid_ones(daemon):
    with DdoClient.connect(daemon.address) as client:
        with pytest.raises(ValueError) as raised:
            resolve_dynamic_offload_preset("compat", client=client)
    assert str(raised.value).startswith("Invalid DDO_PRESET='compat'. Valid values: auto, ")
    assert "diffusers_leaf_offload_compat" in str(raised.value)


def test_the_listing_has_the_seeds_shape(daemon):
    with DdoClient.connect(daemon.address) as client:
        text = format_dynamic_offload_presets(client=client)
    lines = text.splitlines()
    assert lines[0] == "DDO presets"
    assert "  auto -> one_shot_fast" in lines
    assert any(line.startswith("  one_shot_fast (default)") for line in lines)
    assert "    DDO_EXECUTION_MODE=linear_runtime" in lines
    names = [line.split()[0].rstrip(":") for line in lines if line.startswith("  ") and not line.startswith("    ") and "->" not in line]
    assert names == sorted(names)


def test_platform_facts():
    assert isinstance(is_wsl_environment(), bool)
    assert get_available_system_ram_gb() > 0


def test_ddo_presets_loads_from_the_processs_daemon(daemon, monkeypatch):
    from diffusers_dynamic_offloader.seed_compat import presets
    from diffusers_dynamic_offloader.default_client import close_default_client

    monkeypatch.setenv("DDO_DAEMON", daemon.address)
    fresh = presets._load_ddo_presets()
    try:
        # A plain dict, as the seed's module constant (issue 15).
        assert type(fresh) is dict and set(fresh) == SEED_PRESETS
        assert fresh["low_ram_safe"]["DDO_RESIDENT_MODULE_BUDGET_GB"] == "3"
        assert json.loads(json.dumps(fresh)) == fresh.copy()
    finally:
        close_default_client()
