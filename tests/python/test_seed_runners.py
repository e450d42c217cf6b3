"""Seed runners that crashed or behaved otherwise than in the seed (issue 30, item 4), against a
real ddod on the host backend:

- two live models of one class offloaded without a component name (the default cache key);
- WSL settings (``running_on_wsl`` with ``disable_pin_on_wsl``) turn group-offload streams off;
- ``enable_pipeline_offload(pipe, settings=S)`` hands every result S itself;
- the seed's module paths give every name a seed runner imports, or name the replacement;
- ``unfuse_lora`` gives the exact base weights back (PEFT's subtraction leaves rounding).
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any, Dict

import pytest
import torch
from torch import nn

import lora_support as lora
from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader.seed_compat.offload_api import (
    enable_offload,
    enable_pipeline_offload,
    remove_dynamic_offload,
)
from diffusers_dynamic_offloader.seed_compat.offload_settings import (
    DynamicOffloadConfig,
    load_dynamic_offload_settings_from_env,
)
from support import SOURCE_ROOT, install_fake_group_offloading
from test_weight_edits import (LORA_TARGETS, assert_same_outputs, differing, make_model,
                               offload, reference_of, run_isolated)

MODULE = os.path.splitext(os.path.basename(__file__))[0]


@pytest.fixture
def fake_diffusers(monkeypatch):
    """diffusers.hooks.apply_group_offloading recording its arguments (diffusers is carried to
    the GPU machine only)."""
    calls = []
    install_fake_group_offloading(monkeypatch, lambda module, kwargs: calls.append(kwargs))
    return calls


# ---------------------------------------------------------------------------------------------
# Two live models of one class, no component name.


def _sequential(seed: int, widths=(256, 256, 64)) -> nn.Sequential:
    torch.manual_seed(seed)
    layers = []
    for index, (inputs, outputs) in enumerate(zip(widths, widths[1:])):
        if index:
            layers.append(nn.GELU())
        layers.append(nn.Linear(inputs, outputs))
    return nn.Sequential(*layers).eval()


def _streamed(module: nn.Module, client) -> Any:
    result = enable_offload(module, execution_device="cpu", client=client, environ={},
                            small_tensor_threshold_kb=0)
    assert result.route == "dynamic_offload" and result.hook is not None, result
    return result


def test_two_models_of_one_class_offload_and_compute_without_a_component_name(client):
    # Same class and structure, other weights; then the same class with another structure.
    models = [_sequential(1), _sequential(2), _sequential(3, widths=(256, 128, 64))]
    references = [reference_of(model) for model in models]
    inputs = torch.randn(4, 256, generator=torch.Generator().manual_seed(7))
    results = [_streamed(model, client) for model in models]
    try:
        keys = [result.event_payload["cache_key"] for result in results]
        assert len(set(keys)) == 3, keys
        with torch.no_grad():
            for index, (model, reference) in enumerate(zip(models, references)):
                assert torch.equal(model(inputs), reference(inputs)), f"model {index}"
        stored = {component.cache_key for component in client.components()}
        assert set(keys) <= stored, (keys, stored)
    finally:
        for result in results:
            remove_dynamic_offload(result)


def test_the_same_weights_are_a_warm_hit_under_the_same_default_key(daemon, monkeypatch):
    warm = []
    with DdoClient.connect(daemon.address) as first:
        model = _sequential(1)
        result = _streamed(model, first)
        key = result.event_payload["cache_key"]
        remove_dynamic_offload(result)
    with DdoClient.connect(daemon.address) as second:
        register = second.register_module

        def recording(*args, **kwargs):
            stored = register(*args, **kwargs)
            warm.append(stored.warm_hit)
            return stored

        monkeypatch.setattr(second, "register_module", recording)
        again = _streamed(_sequential(1), second)
        try:
            assert again.event_payload["cache_key"] == key
            assert warm == [True], "the same weights were uploaded again"
        finally:
            remove_dynamic_offload(again)


def test_the_default_key_is_the_same_in_another_process():
    code = ("import torch\n"
            "from torch import nn\n"
            "from diffusers_dynamic_offloader.seed_compat.component_keys import default_cache_key\n"
            "torch.manual_seed(1)\n"
            "print(default_cache_key(nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 2)), 'model'))\n")
    env = dict(os.environ, PYTHONPATH=SOURCE_ROOT)
    keys = [subprocess.run([sys.executable, "-c", code], env=env, check=True, text=True,
                           capture_output=True).stdout.strip() for _ in range(2)]
    assert keys[0] == keys[1], keys
    assert keys[0].startswith(f"torch.nn.modules.container.Sequential/model/uid-{os.geteuid()}/")


def test_a_staged_run_hashes_each_streamed_component_once(client, monkeypatch):
    from diffusers_dynamic_offloader.seed_compat import component_keys
    from diffusers_dynamic_offloader.seed_compat.staged import run_staged
    from test_staged import NO_DIFFUSERS, SyntheticPipeline, synthetic_stages

    routing = {"environ": {}, "execution_device": "cpu", "small_tensor_threshold_kb": 0,
               "component_policies": NO_DIFFUSERS}
    hashed = []
    content_hash = component_keys.content_hash
    monkeypatch.setattr(component_keys, "content_hash",
                        lambda tensors: hashed.append(len(tensors)) or content_hash(tensors))
    with torch.no_grad():
        first = run_staged(SyntheticPipeline(), synthetic_stages(), client=client,
                           offload_kwargs=routing, prompt="a cat", num_inference_steps=2)
    # Cold: enable_offload hashed the transformer and the VAE, each once.
    assert len(hashed) == 2, hashed
    stored = {component.cache_key for component in client.components()}
    hashed.clear()
    with torch.no_grad():
        second = run_staged(SyntheticPipeline(), synthetic_stages(), client=client,
                            offload_kwargs=routing, prompt="a cat", num_inference_steps=2)
    # Warm: hashed before their passes (for ddod's hints), routed under those keys, found warm.
    assert len(hashed) == 2, hashed
    assert {component.cache_key for component in client.components()} == stored
    assert torch.equal(first.images, second.images)


# ---------------------------------------------------------------------------------------------
# WSL settings on the group-offload route.


@pytest.mark.parametrize("preset", ["one_shot_fast", "warm_process"])
def test_wsl_settings_turn_group_streams_off(client, fake_diffusers, preset):
    # The seed's test 17: the settings say WSL; enable_offload is given no running_on_wsl.
    settings = load_dynamic_offload_settings_from_env(
        running_on_wsl=True, environ={"DDO_PRESET": preset}, client=client)
    assert settings.running_on_wsl and settings.disable_pin_on_wsl
    result = enable_offload(nn.Linear(4, 4), settings=settings, component="text_encoder",
                            client=client)
    assert result.route == "diffusers_group_offload"
    assert (fake_diffusers[-1]["use_stream"], fake_diffusers[-1]["record_stream"]) == (False, False)
    assert (result.event_payload["use_stream"], result.event_payload["record_stream"]) == (
        False, False)


def test_wsl_settings_keep_streams_when_pinning_stays_on(client, fake_diffusers):
    settings = load_dynamic_offload_settings_from_env(
        running_on_wsl=True, client=client,
        environ={"DDO_PRESET": "one_shot_fast", "DDO_DISABLE_PIN_ON_WSL": "0"})
    enable_offload(nn.Linear(4, 4), settings=settings, component="text_encoder", client=client)
    assert fake_diffusers[-1]["use_stream"] is True


# ---------------------------------------------------------------------------------------------
# enable_pipeline_offload(settings=S).


class _FakePipeline:
    def __init__(self) -> None:
        self.components = {"text_encoder": nn.Linear(2, 2), "transformer": nn.Linear(2, 2),
                           "scheduler": object()}


def test_a_pipeline_hands_every_result_the_callers_settings(client, fake_diffusers):
    # The seed's test 13, with settings resolved for no component (as from_env() gives them).
    settings = load_dynamic_offload_settings_from_env(
        running_on_wsl=False, environ={"DDO_PRESET": "one_shot_fast"}, client=client)
    results = enable_pipeline_offload(_FakePipeline(), settings=settings, apply_hook=False,
                                      client=client)
    assert set(results) == {"text_encoder", "transformer"}
    assert results["text_encoder"].route == "diffusers_group_offload"
    assert results["transformer"].route == "dynamic_offload"
    for name, result in results.items():
        assert result.settings is settings, name


def test_a_pipeline_with_other_values_gets_new_settings(client, fake_diffusers):
    settings = load_dynamic_offload_settings_from_env(environ={"DDO_PRESET": "one_shot_fast"},
                                                      client=client)
    results = enable_pipeline_offload(_FakePipeline(), settings=settings, apply_hook=False,
                                      client=client, resident_module_budget_gb=2)
    for result in results.values():
        assert result.settings is not settings
        assert result.settings.config.resident_module_budget_gb == 2


# ---------------------------------------------------------------------------------------------
# The seed's module paths.


def test_the_seeds_profile_names_resolve_at_its_module_paths(daemon, monkeypatch, tmp_path):
    from diffusers_dynamic_offloader.default_client import close_default_client
    from diffusers_dynamic_offloader.dynamic_offload import _NamedProfile as from_api_module
    from diffusers_dynamic_offloader.profiles import (
        _CudaPeakSampler,
        _NamedProfile,
        load_dynamic_offload_profile,
        record_dynamic_offload_profile,
    )

    assert from_api_module is _NamedProfile and callable(_CudaPeakSampler)
    monkeypatch.setenv("DDO_DAEMON", daemon.address)
    monkeypatch.setenv("DDO_PROFILE_DIR", str(tmp_path))
    try:
        # The seed's calibration: nothing resident, whatever the config asked.
        calibrating = _NamedProfile(nn.Linear(2, 2), DynamicOffloadConfig(
            profile_name="example", build_profile=True, execution_mode="linear_runtime",
            execution_device="cuda", resident_module_budget_gb=4))
        assert calibrating.prepare().resident_module_budget_gb == 0
        assert calibrating.report["status"] == "calibrating"
        record_dynamic_offload_profile(calibrating.context, {"status": "success"},
                                       recommendation={"profile_resident_module_budget_gb": 1.5})
        assert load_dynamic_offload_profile(calibrating.context)["recommendation"] == {
            "profile_resident_module_budget_gb": 1.5}
        # A later run applies it: as the manual budget under policy off, for the planner
        # under balanced; a manual budget wins.
        applied = _NamedProfile(nn.Linear(2, 2), DynamicOffloadConfig(profile_name="example"))
        config = applied.prepare()
        assert config.resident_module_budget_gb == 1.5 and config._profile_budget_applied
        assert applied.config is config and applied.report["status"] == "applied"
        balanced = _NamedProfile(nn.Linear(2, 2), DynamicOffloadConfig(
            profile_name="example", auto_budget_policy="balanced"))
        assert balanced.prepare().profile_resident_module_budget_gb == 1.5
        manual = _NamedProfile(nn.Linear(2, 2), DynamicOffloadConfig(
            profile_name="example", resident_module_budget_gb=2)).prepare()
        assert manual.resident_module_budget_gb == 2 and not manual._profile_budget_applied
        unnamed = DynamicOffloadConfig()
        assert _NamedProfile(nn.Linear(2, 2), unnamed).prepare() is unnamed
        with pytest.raises(ValueError, match="non-empty profile_name"):
            _NamedProfile(nn.Linear(2, 2), DynamicOffloadConfig(build_profile=True)).prepare()
    finally:
        close_default_client()


@pytest.mark.parametrize("module, name, replacement", [
    ("dynamic_offload", "_DYNAMIC_OFFLOAD_PLAN_CACHE", "clear_dynamic_offload_plan_cache"),
    ("dynamic_offload", "_DYNAMIC_OFFLOAD_PRESET_VALUES", "get_dynamic_offload_presets"),
    ("profiles", "_json_value", "normalize_dynamic_offload_profile_context"),
    ("profiles", "_SDNQ_PROBE_MIN_SAFE_BUDGET_GB", "Diffusers group offload"),
])
def test_a_seed_name_ddo_replaced_names_the_replacement(module, name, replacement):
    with pytest.raises(ImportError, match=replacement):
        exec(f"from diffusers_dynamic_offloader.{module} import {name}", {})


def test_an_unknown_name_is_an_ordinary_attribute_error():
    from diffusers_dynamic_offloader import dynamic_offload, profiles

    assert not hasattr(dynamic_offload, "no_such_name")
    assert not hasattr(profiles, "no_such_name")


# ---------------------------------------------------------------------------------------------
# unfuse_lora: the exact base weights back.


def check_unfuse_gives_the_exact_base_back(client, fused_lora: str) -> Dict[str, Any]:
    """A LoRA fused then unfused, on a DDO-routed model and on a plain copy, both with PEFT's
    merge and unmerge (``base + delta - delta``): the plain copy keeps a rounding residue,
    the DDO-routed model has the base weights back bit for bit."""
    model = make_model()
    lora.inject_lora(model, LORA_TARGETS, "a", rank=8, seed=3, lora_alpha=16)
    plain, base = reference_of(model), reference_of(model)
    result = offload(model, client, f"unfuse/{fused_lora}", fused_lora=fused_lora)
    for target in (model, plain):
        lora.merge_all(target, ["a"])
        lora.unmerge_all(target)
    residue = differing(plain, base)
    assert residue, "PEFT's unmerge left no rounding on the plain copy: nothing to compare"
    assert differing(model, base) == [], "the DDO-routed model's weights are not the base's"
    assert_same_outputs(model, base, "unfused")
    largest = max((plain.state_dict()[name] - base.state_dict()[name]).abs().max().item()
                  for name in residue)
    result.release()
    return {"residue_tensors": len(residue), "largest_residue": largest}


@pytest.mark.parametrize("fused_lora", ["on_arrival", "stored"])
def test_unfuse_gives_the_exact_base_weights_back(daemon, fused_lora):
    figures = run_isolated(daemon, "check_unfuse_gives_the_exact_base_back", module=MODULE,
                           fused_lora=fused_lora)
    assert figures["largest_residue"] > 0, figures

