"""ResolveSettings against a real ddod: the precedence of every layer, the seed's routes,
and invalid values named in the error."""

import os

import pytest

from diffusers_dynamic_offloader import DaemonError, DdoClient
from diffusers_dynamic_offloader._proto import info_pb2


def test_every_layer_wins_over_the_ones_below(daemon_factory, short_dir, monkeypatch):
    # ddod's own environment is a layer: it holds DDO_SYSTEM_RAM_HEADROOM_GB=9.
    monkeypatch.setenv("DDO_SYSTEM_RAM_HEADROOM_GB", "9")
    daemon = daemon_factory(os.path.join(short_dir, "run", "ddod.sock"))
    monkeypatch.delenv("DDO_SYSTEM_RAM_HEADROOM_GB")
    with DdoClient.connect(daemon.address) as client:
        def headroom(**kwargs):
            resolved = client.resolve_settings("one_shot_fast", **kwargs)
            value = resolved.values["DDO_SYSTEM_RAM_HEADROOM_GB"]
            return value.value, value.source

        assert headroom(environ={}) == ("9", "daemon")
        assert headroom(environ={"DDO_SYSTEM_RAM_HEADROOM_GB": "10"}) == ("10", "environment")
        assert headroom(environ={"DDO_SYSTEM_RAM_HEADROOM_GB": "10"},
                        overrides={"DDO_SYSTEM_RAM_HEADROOM_GB": 11}) == ("11", "override")
        # Below ddod's environment: the preset, then the default.
        resolved = client.resolve_settings("one_shot_fast", environ={})
        assert resolved.values["DDO_PIN_CPU_WORKERS"].source == "preset"
        assert resolved.values["DDO_PROFILE_VRAM_HEADROOM_GB"].source == "default"


def test_the_environment_picks_the_preset_and_auto_is_one_shot_fast(daemon):
    with DdoClient.connect(daemon.address) as client:
        resolved = client.resolve_settings("auto", environ={})
        assert (resolved.requested_preset, resolved.effective_preset) == ("auto", "one_shot_fast")
        resolved = client.resolve_settings("auto", environ={"DDO_PRESET": "wsl_compat"})
        assert resolved.effective_preset == "wsl_compat"
        assert resolved.value("DDO_RESIDENT_MODULE_BUDGET_GB") == "6"
        assert client.resolve_settings("", environ={}).value("DDO_EXECUTION_MODE") == "plan"


def test_components_get_the_seeds_routes_and_policies(daemon):
    with DdoClient.connect(daemon.address) as client:
        resolved = client.resolve_settings(
            "one_shot_fast", environ={}, components=["transformer", "text_encoder", "vae"],
            component_policies={"vae": {"route": "group", "offload_type": "block_level",
                                        "num_blocks_per_group": 2}},
        )
        routes = {name: values[f"DDO_{name.upper()}_ROUTE"].value
                  for name, values in resolved.components.items()}
        assert routes == {"transformer": "dynamic_offload",
                          "text_encoder": "diffusers_group_offload",
                          "vae": "diffusers_group_offload"}
        vae = resolved.components["vae"]
        assert vae["DDO_VAE_OFFLOAD_TYPE"].value == "block_level"
        assert vae["DDO_VAE_NUM_BLOCKS_PER_GROUP"].value == "2"
        assert vae["DDO_VAE_NUM_BLOCKS_PER_GROUP"].source == "component_policy"


@pytest.mark.parametrize(
    "kwargs,expected",
    [
        ({"preset": "fastest"}, "fastest"),
        ({"environ": {"DDO_PIN_CPU_WORKERS": "many"}}, "DDO_PIN_CPU_WORKERS='many'"),
        ({"overrides": {"DDO_EXECUTION_MODE": "turbo"}}, "plan, linear_runtime, sdnq_runtime"),
        ({"environ": {"DDO_VAE_ROUTE": "gpu"}, "components": ["vae"]}, "DDO_VAE_ROUTE='gpu'"),
    ],
)
def test_invalid_values_are_named(daemon, kwargs, expected):
    with DdoClient.connect(daemon.address) as client:
        preset = kwargs.pop("preset", "")
        kwargs.setdefault("environ", {})
        with pytest.raises(DaemonError) as raised:
            client.resolve_settings(preset, **kwargs)
        assert raised.value.code.name == "INVALID_ARGUMENT"
        assert expected in str(raised.value)
        # ddod keeps serving.
        assert client.resolve_settings("off", environ={}).effective_preset == "off"


def test_a_simulated_wsl_turns_off_pinning_and_group_streams(daemon_factory, short_dir, monkeypatch):
    monkeypatch.setenv("DDO_PLATFORM", "wsl")
    daemon = daemon_factory(os.path.join(short_dir, "wsl", "ddod.sock"))
    monkeypatch.delenv("DDO_PLATFORM")
    with DdoClient.connect(daemon.address) as client:
        assert client.info().platform.os == info_pb2.OS_KIND_WSL
        resolved = client.resolve_settings("one_shot_fast", environ={}, components=["text_encoder"])
        pin = resolved.values["DDO_PIN_CPU_MEMORY"]
        assert (pin.value, pin.source) == ("0", "platform")
        encoder = resolved.components["text_encoder"]
        assert encoder["DDO_TEXT_ENCODER_OFFLOAD_STREAM"].value == "0"
        assert encoder["DDO_TEXT_ENCODER_OFFLOAD_RECORD_STREAM"].value == "0"
        # Unless the client keeps pinning allowed on WSL.
        allowed = client.resolve_settings("one_shot_fast", environ={"DDO_DISABLE_PIN_ON_WSL": "0"})
        assert allowed.values["DDO_PIN_CPU_MEMORY"].value == "1"


def test_a_bad_platform_is_refused_at_start(ddod_binary, short_dir):
    import subprocess

    result = subprocess.run([ddod_binary, "--socket", os.path.join(short_dir, "x.sock")],
                            env=dict(os.environ, DDO_PLATFORM="beos"), capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 2
    assert "DDO_PLATFORM" in result.stderr and "linux, wsl or windows" in result.stderr


def test_each_component_gets_ddods_variable_prefix(daemon):
    # The DDO_<C>_ prefix is ddod's rule; the client reads it from the answer.
    with DdoClient.connect(daemon.address) as client:
        resolved = client.resolve_settings(
            "", environ={"DDO_TEXT_ENCODER_2_OFFLOAD_TYPE": "block_level"},
            components=["Text-Encoder 2", "transformer", "---"])
    assert resolved.variable_prefix("Text-Encoder 2") == "DDO_TEXT_ENCODER_2_"
    assert resolved.variable_prefix("transformer") == "DDO_TRANSFORMER_"
    assert resolved.variable_prefix("---") == "DDO_MODEL_"
    values = resolved.components["Text-Encoder 2"]
    assert values["DDO_TEXT_ENCODER_2_OFFLOAD_TYPE"].value == "block_level"
    names = resolved.component_variables("Text-Encoder 2")
    assert "DDO_TEXT_ENCODER_2_ROUTE" in names and "DDO_RUNNER_TEXT_ENCODER_2_ROUTE" in names
    assert set(names) == set(values) | {"DDO_RUNNER_" + name[len("DDO_"):] for name in values}
    with pytest.raises(KeyError):
        resolved.variable_prefix("vae")


def test_an_answer_without_a_prefix_is_named():
    from diffusers_dynamic_offloader.errors import DdoError
    from diffusers_dynamic_offloader.resolved_settings import ResolvedSettings

    old = ResolvedSettings("", "", {}, components={"vae": {}}, variable_prefixes={"vae": ""})
    with pytest.raises(DdoError, match="older than this client"):
        old.variable_prefix("vae")
