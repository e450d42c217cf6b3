"""A runner written for the seed, unchanged: every name it imports from the package root, its
pre-resolved settings, its DDO_RUNNER_* lookups, its staged loading and its profile context,
against a real ddod (docs/seed.md)."""

import contextlib
import sys
import types

import pytest
import torch
from torch import nn

import diffusers_dynamic_offloader as ddo
from diffusers_dynamic_offloader import DdoClient

# The seed's §1.1 names that issue 5 covers (profiles and the Windows purge are issue 6's).
SEED_NAMES = [
    "DDO_PRESETS", "DynamicOffloadApplyResult", "DynamicOffloadConfig", "DynamicOffloadLoadResult",
    "DynamicOffloadSettings", "DiffusersGroupOffloadResult", "build_dynamic_offload_event_payload",
    "clear_dynamic_offload_pinned_tensor_cache", "detect_quantized_backend_modules",
    "dynamic_offload_env_value", "dynamic_offload_preset_env_value",
    "enable_diffusers_group_offload", "enable_dynamic_offload", "enable_offload",
    "enable_pipeline_offload", "format_dynamic_offload_presets",
    "from_pretrained_with_dynamic_offload", "get_available_system_ram_gb",
    "get_dynamic_offload_presets", "get_dynamic_offload_state", "is_wsl_environment",
    "load_dynamic_offload_settings_from_env", "remove_dynamic_offload",
    "resolve_dynamic_offload_preset", "apply_dynamic_offload", "clear_dynamic_offload_plan_cache",
    "DynamicOffloadHook", "DynamicOffloadState", "DynamicOffloadPlanEntry",
]


@pytest.fixture
def client(daemon):
    with DdoClient.connect(daemon.address) as connected:
        yield connected


def test_every_seed_name_imports_from_the_package_root():
    missing = [name for name in SEED_NAMES if not hasattr(ddo, name)]
    assert missing == []
    assert set(SEED_NAMES) <= set(ddo.__all__)


def test_pre_resolved_settings_keep_their_preset_environment_and_policies(client):
    # The seed's pattern: resolve once (no component list), then route each component.
    settings = ddo.DynamicOffloadSettings.from_env(
        default_preset="low_ram_safe", environ={"DDO_SMALL_TENSOR_THRESHOLD_KB": "0"},
        component_policies={"transformer": {"route": "none"}}, client=client)
    assert settings.effective_preset == "low_ram_safe"
    result = ddo.enable_offload(nn.Linear(4, 4), settings=settings, component="transformer",
                                execution_device="cpu", client=client)
    assert result.route == "none"  # the policy given to from_env
    assert result.settings.effective_preset == "low_ram_safe"
    assert result.settings.value("DDO_SMALL_TENSOR_THRESHOLD_KB") == "0"  # its environment
    # An override added by this call is applied on top of the same inputs.
    again = ddo.enable_offload(nn.Linear(4, 4), settings=settings, component="vae",
                               execution_device="cpu", client=client, execution_mode="plan")
    assert again.settings.effective_preset == "low_ram_safe"
    assert again.settings.value("DDO_EXECUTION_MODE") == "plan"
    assert again.settings.value("DDO_SMALL_TENSOR_THRESHOLD_KB") == "0"


def test_an_unknown_preset_is_a_value_error_naming_it(client):
    with pytest.raises(ValueError, match="DDO_PRESET=.windows_fast"):
        ddo.DynamicOffloadSettings.from_env(default_preset="windows_fast", client=client)
    with pytest.raises(ValueError, match="DDO_PRESET=.windows_fast"):
        ddo.enable_offload(nn.Linear(4, 4), preset="windows_fast", execution_device="cpu",
                           client=client)


def test_runner_values_come_from_the_environment_then_the_preset(client):
    environ = {"DDO_RUNNER_STAGED": "", "DDO_PRESET": "warm_process"}
    assert ddo.dynamic_offload_env_value("DDO_RUNNER_STAGED", "x", environ) == ""
    assert ddo.dynamic_offload_env_value("DDO_RUNNER_OTHER", "x", environ) == "x"
    # Set (even empty) wins; else DDO_PRESET's value; else the default.
    assert ddo.dynamic_offload_preset_env_value("DDO_RUNNER_STAGED", "d", environ=environ,
                                                client=client) == ""
    presets = ddo.get_dynamic_offload_presets(client)
    name, value = sorted(presets["warm_process"].items())[0]
    assert ddo.dynamic_offload_preset_env_value(name, "d", environ={"DDO_PRESET": "warm_process"},
                                                client=client) == value
    assert ddo.dynamic_offload_preset_env_value(name, "d", requested_preset="auto", environ={},
                                                client=client) == presets["one_shot_fast"].get(name, "d")
    assert ddo.dynamic_offload_preset_env_value("DDO_NOT_A_PRESET_KEY", "d", environ={},
                                                effective_preset="off", client=client) == "d"
    with pytest.raises(ValueError, match="nope"):
        ddo.dynamic_offload_preset_env_value(name, environ={"DDO_PRESET": "nope"}, client=client)


class _Loader:
    """A model class as diffusers has them: from_pretrained(path, **kwargs)."""

    calls = []

    @classmethod
    def from_pretrained(cls, path, **kwargs):
        cls.calls.append((path, kwargs))
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 8))


def test_staged_loading_passes_the_keywords_through_and_can_stream_at_once(client):
    _Loader.calls.clear()
    loaded = ddo.from_pretrained_with_dynamic_offload(
        "some/model", model_loader=_Loader, subfolder="transformer", torch_dtype=torch.float32)
    assert _Loader.calls == [("some/model", {"subfolder": "transformer",
                                             "torch_dtype": torch.float32})]
    assert loaded.hook is None and loaded.should_move_to_execution_device
    with loaded.profile_run():
        pass
    with pytest.raises(ValueError, match="apply_dynamic=True"):
        ddo.from_pretrained_with_dynamic_offload("some/model", model_loader=_Loader,
                                                 profile_name="x")
    # A plain callable is a loader too; apply_dynamic streams the result through ddod.
    reference = _Loader.from_pretrained("some/model")
    config = ddo.DynamicOffloadConfig(execution_device="cpu", small_tensor_threshold_bytes=0,
                                      execution_mode="linear_runtime")
    with ddo.from_pretrained_with_dynamic_offload(
            "some/model", model_loader=lambda path: _Loader.from_pretrained(path),
            dynamic_offload_config=config, apply_dynamic=True, client=client) as streamed:
        assert streamed.hook is not None and not streamed.should_move_to_execution_device
        inputs = torch.randn(3, 64)
        with torch.no_grad():
            for _ in range(3):
                assert torch.equal(streamed.module(inputs), reference(inputs))
    # Leaving the block released the session: ddod lists none, the module still computes.
    from diffusers_dynamic_offloader._proto import sessions_pb2

    listed = client.rpc.unary("ListSessions", sessions_pb2.ListSessionsRequest()).sessions
    assert [s for s in listed if s.device_uuid] == []
    assert streamed.hook is None and ddo.get_dynamic_offload_state(streamed.module) is None
    with torch.no_grad():
        assert torch.equal(streamed.module(inputs), reference(inputs))


def test_an_unknown_safetensors_backend_is_refused():
    config = ddo.DynamicOffloadConfig(load_safetensors_backend="gds")
    with pytest.raises(ValueError, match="gds"):
        ddo.from_pretrained_with_dynamic_offload("x", model_loader=_Loader,
                                                 dynamic_offload_config=config)


def test_the_backend_is_switched_only_during_the_load(monkeypatch):
    seen = []
    fake = types.ModuleType("safetensors")
    fake_torch = types.ModuleType("safetensors.torch")

    def safe_open(path, framework="pt", **kwargs):
        seen.append(("safe_open", kwargs.get("backend")))

    def load_file(path, **kwargs):
        seen.append(("load_file", kwargs.get("backend")))

    fake.safe_open, fake_torch.load_file, fake.torch = safe_open, load_file, fake_torch
    importer = types.ModuleType("diffusers.models.model_loading_utils")
    importer.safe_open, importer.safe_load_file = safe_open, load_file
    for name, module in (("safetensors", fake), ("safetensors.torch", fake_torch),
                         ("diffusers.models.model_loading_utils", importer)):
        monkeypatch.setitem(sys.modules, name, module)

    def loader(path):
        importer.safe_open(path)
        importer.safe_load_file(path)
        fake_torch.load_file(path, backend="mmap")  # the caller's choice stays
        return nn.Linear(2, 2)

    config = ddo.DynamicOffloadConfig(load_safetensors_backend="pread")
    ddo.from_pretrained_with_dynamic_offload("x", model_loader=loader,
                                             dynamic_offload_config=config)
    assert seen == [("safe_open", "pread"), ("load_file", "pread"), ("load_file", "mmap")]
    assert importer.safe_open is safe_open and fake_torch.load_file is load_file


def test_the_seed_config_field_for_profile_budgets_is_accepted(client):
    config = ddo.DynamicOffloadConfig(_profile_budget_applied=True)
    assert config._profile_budget_applied
    result = ddo.enable_offload(nn.Linear(4, 4), preset="off", execution_device="cpu",
                                client=client, _profile_budget_applied=True)
    assert isinstance(result.profile_run(), contextlib.AbstractContextManager)


def test_clearing_the_pinned_cache_evicts_what_no_session_uses(client, daemon):
    model = nn.Sequential(nn.Linear(256, 256))
    client.register_module("dropin/unused", model)
    busy = nn.Sequential(nn.Linear(256, 256))
    client.register_module("dropin/busy", busy)
    # Another runner's component, idle: a shared ddod keeps it warm for that runner.
    with DdoClient.connect(daemon.address) as other:
        other.register_module("dropin/other-runner", nn.Sequential(nn.Linear(256, 256)))
    with client.stream(busy, "dropin/busy", device="cpu"):
        freed = ddo.clear_dynamic_offload_pinned_tensor_cache(client)
        keys = {component.cache_key for component in client.components()}
    assert freed > 0
    assert "dropin/unused" not in keys and "dropin/busy" in keys
    assert "dropin/other-runner" in keys


def _pipeline_parts():
    torch.manual_seed(0)
    return {"transformer": nn.Sequential(nn.Linear(512, 512), nn.Linear(512, 512)),
            "vae": nn.Linear(8, 8), "scheduler": object(), "tokenizer": "not a module"}


def test_a_pipeline_shares_the_settings_object_it_was_given(client):
    settings = ddo.DynamicOffloadSettings.from_env(
        default_preset="auto", environ={}, component_policies={"vae": {"route": "none"}},
        client=client)
    parts = _pipeline_parts()
    results = ddo.enable_pipeline_offload(types.SimpleNamespace(components=parts),
                                          settings=settings, client=client,
                                          execution_device="cpu")
    try:
        assert set(results) == {"transformer", "vae"}  # non-modules skipped
        assert results["transformer"].settings is results["vae"].settings
        assert results["vae"].route == "none"  # the policy given to from_env
        assert results["transformer"].route == "dynamic_offload"
        assert results["transformer"].settings.effective_preset == "one_shot_fast"
    finally:
        for result in results.values():
            ddo.remove_dynamic_offload(result)


@pytest.mark.parametrize("form", ["mapping", "names"])
def test_a_pipeline_can_be_a_mapping_or_named_attributes(client, form):
    parts = _pipeline_parts()
    if form == "mapping":
        pipeline, components = parts, None
    else:
        pipeline, components = types.SimpleNamespace(**parts), ["vae", "scheduler"]
    results = ddo.enable_pipeline_offload(pipeline, components=components, client=client,
                                          environ={"DDO_EXECUTION_MODE": "plan"},
                                          execution_device="cpu")
    expected = {"transformer", "vae"} if form == "mapping" else {"vae"}
    assert set(results) == expected
    for result in results.values():
        # Nothing placed them (plan mode): the pipeline helper moved them to the device.
        assert not result.should_move_to_execution_device


def test_plan_mode_keeps_a_state_with_ddods_decisions(client):
    model = nn.Sequential(nn.Linear(512, 512), nn.Linear(512, 512))
    events = []
    result = ddo.enable_offload(model, component="transformer", client=client,
                                environ={"DDO_PLAN": "1"}, execution_device="cpu",
                                execution_mode="plan",
                                record_event=lambda name, *args, **kwargs: events.append(name))
    # The seed's plan-only hook: the plan is recorded, nothing streams.
    assert isinstance(result.hook, ddo.DynamicOffloadHook) and result.hook.session is None
    assert result.should_move_to_execution_device
    state = ddo.get_dynamic_offload_state(model)
    assert state is not None and state.session is None
    assert "stream_unit" in state.planner_decisions
    assert state.bytes_by_placement["streamed_large"] + state.bytes_by_placement["resident_module"] > 0
    payload = ddo.build_dynamic_offload_event_payload(result.settings, state)
    assert payload["planner_decisions"] == state.planner_decisions
    assert payload["pin_cpu_memory"] == result.settings.effective_pin_cpu_memory
    assert events == ["setup_transformer_dynamic_offload"]
    ddo.remove_dynamic_offload(model)
    assert ddo.get_dynamic_offload_state(model) is None


def test_an_edited_config_on_pre_resolved_settings_is_applied(client):
    import dataclasses

    settings = ddo.DynamicOffloadSettings.from_env(default_preset="auto", environ={}, client=client)
    edited = dataclasses.replace(settings, config=dataclasses.replace(
        settings.config, resident_module_selection="first", execution_mode="plan"))
    result = ddo.enable_offload(nn.Linear(4, 4), settings=edited, component="transformer",
                                execution_device="cpu", client=client, apply_hook=False)
    assert result.settings.value("DDO_RESIDENT_MODULE_SELECTION") == "first"
    assert result.settings.config.execution_mode == "plan"
    # Unedited settings serve as they are.
    same = ddo.enable_offload(nn.Linear(4, 4), settings=settings, component="transformer",
                              execution_device="cpu", client=client, apply_hook=False)
    assert same.settings.value("DDO_RESIDENT_MODULE_SELECTION") == settings.value(
        "DDO_RESIDENT_MODULE_SELECTION")


def _streamed_names(result):
    return sorted(p.name for unit in result.hook.resources.units for p in unit.tensors)


def test_config_fields_decide_what_streams(client):
    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 64), nn.Embedding(10, 64))

    config = ddo.DynamicOffloadConfig(execution_device="cpu", execution_mode="linear_runtime",
                                      small_tensor_threshold_bytes=0)
    # The config's 0-byte threshold reaches ddod: 16 KiB weights stream.
    first = model()
    result = ddo.enable_offload(first, config=config, component="transformer", client=client,
                                environ={}, execution_device="cpu")
    try:
        assert _streamed_names(result) == ["0.weight", "1.weight"]
    finally:
        ddo.remove_dynamic_offload(result)
    # skip_modules_pattern keeps matching modules resident.
    second = model()
    result = ddo.enable_offload(second, config=config, component="transformer", client=client,
                                environ={}, execution_device="cpu", skip_modules_pattern=("^1$",))
    try:
        assert _streamed_names(result) == ["0.weight"]
        assert result.hook.state.bytes_by_placement["resident_module"] == 64 * 64 * 4
    finally:
        ddo.remove_dynamic_offload(result)
    # Targets without nn.Linear: nothing streams.
    third = model()
    result = ddo.enable_offload(third, config=config, component="transformer", client=client,
                                environ={}, execution_device="cpu",
                                target_module_classes=(nn.Embedding,))
    try:
        assert result.hook is not None and _streamed_names(result) == []
    finally:
        ddo.remove_dynamic_offload(result)


def test_none_means_the_default_always_resident_pattern(client):
    result = ddo.enable_offload(nn.Linear(4, 4), component="transformer", client=client,
                                environ={}, execution_device="cpu", apply_hook=False,
                                always_resident_modules_pattern=None)
    assert "proj_out" in result.settings.value("DDO_ALWAYS_RESIDENT_MODULE_PATTERNS")


def test_apply_dynamic_offload_streams_as_the_config_says(client):
    from streaming_support import frozen_copy, make_model, mismatches

    model = make_model(torch.float32)
    reference = frozen_copy(model)
    config = ddo.DynamicOffloadConfig(execution_device="cpu", execution_mode="linear_runtime",
                                      small_tensor_threshold_bytes=0)
    hook = ddo.apply_dynamic_offload(model, config, client=client, environ={})
    try:
        assert isinstance(hook, ddo.DynamicOffloadHook)
        assert hook.state is ddo.get_dynamic_offload_state(model)
        assert isinstance(hook.state, ddo.DynamicOffloadState)
        assert all(isinstance(e, ddo.DynamicOffloadPlanEntry) for e in hook.state.entries)
        assert mismatches(model, reference, range(3), torch.float32) == []
        assert hook.stats()["streamed_uses"] > 0
    finally:
        ddo.remove_dynamic_offload(model)
    ddo.clear_dynamic_offload_plan_cache()  # the seed's call: nothing to clear, no error


def test_the_result_objects_keep_the_seeds_fields_and_defaults():
    result = ddo.DynamicOffloadApplyResult(nn.Linear(2, 2))
    assert result.hook is None and result.settings is None
    assert result.should_move_to_execution_device is True
    assert result.event_payload == {} and result.route == "dynamic_offload"
    loaded = ddo.DynamicOffloadLoadResult(nn.Linear(2, 2))
    assert loaded.hook is None and loaded.should_move_to_execution_device is True
