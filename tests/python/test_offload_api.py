"""The seed's entry points against a real ddod: routing by ddod's resolved settings, the DDO
route streaming on the host backend, the Diffusers group route's arguments, quantized
diversion, pipelines."""

import sys
import time
import types

import pytest
import torch
from torch import nn

from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader.seed_compat.offload_api import (
    enable_diffusers_group_offload,
    enable_offload,
    enable_pipeline_offload,
    get_dynamic_offload_state,
    remove_dynamic_offload,
)
from diffusers_dynamic_offloader.seed_compat.offload_settings import load_dynamic_offload_settings_from_env
from streaming_support import frozen_copy, make_model, mismatches
from support import install_fake_group_offloading


@pytest.fixture
def fake_diffusers(monkeypatch):
    """A stand-in for diffusers.hooks that records apply_group_offloading's arguments (the real
    call is exercised on the GPU machine, where diffusers is carried)."""
    calls = []
    install_fake_group_offloading(
        monkeypatch, lambda module, kwargs: calls.append((module, kwargs)))
    return calls


def test_the_transformer_streams_and_computes_exactly(daemon):
    model = make_model(torch.float32)
    reference = frozen_copy(model)
    events = []
    with DdoClient.connect(daemon.address) as client:
        result = enable_offload(
            model, component="transformer", execution_device="cpu", client=client,
            environ={}, small_tensor_threshold_kb=0,
            record_event=lambda name, seconds, **payload: events.append((name, payload)))
        try:
            assert result.route == "dynamic_offload"
            assert result.hook is not None and not result.should_move_to_execution_device
            assert result.settings.effective_preset == "one_shot_fast"
            assert mismatches(model, reference, range(3), torch.float32) == []
            assert events[0][0] == "setup_transformer_dynamic_offload"
            payload = events[0][1]
            assert payload["route"] == "dynamic_offload"
            # The seed's payload keys (docs/seed.md, "the event payload").
            # ddod's balanced planner kept a block resident (seed rule: a quarter of the
            # candidates to start with, the device's VRAM being unknown on the host backend).
            assert payload["planner_decisions"]["auto_resident_module_decision"] == "start_fraction"
            assert payload["patched_module_count"] == len(result.hook.resources.units) == 20
            assert payload["bytes_by_placement"]["streamed_large"] > 0
            assert set(payload["bytes_by_placement"]) <= {"resident_module", "resident_small",
                                                          "streamed_large"}
            for key in ("module_count", "total_gb", "pin_cpu_memory", "sdnq_parameter_pinning",
                        "resolved_resident_module_patterns", "cache_pinned_weights",
                        "pin_weight_selection", "available_system_ram_gb"):
                assert key in payload, key
            assert payload["execution_mode"] == "linear_runtime"
            assert payload["auto_budget_policy"] == "balanced"
            assert "stream_unit" in payload["planner_decisions"]
            assert payload["setup_runtime"]["open_session"]["seconds"] > 0
        finally:
            remove_dynamic_offload(result)
        assert result.hook is None


def test_the_text_encoder_gets_group_offload_with_the_seeds_arguments(daemon, fake_diffusers):
    encoder = nn.Sequential(nn.Linear(8, 8))
    with DdoClient.connect(daemon.address) as client:
        result = enable_offload(encoder, component="text_encoder", client=client, environ={})
        assert result.route == "diffusers_group_offload"
        module, kwargs = fake_diffusers[-1]
        assert module is encoder
        assert kwargs["offload_type"] == "leaf_level"
        assert (kwargs["use_stream"], kwargs["record_stream"], kwargs["low_cpu_mem_usage"]) == (True, False, True)
        assert "num_blocks_per_group" not in kwargs
        assert kwargs["onload_device"] == torch.device("cuda:0")

        enable_offload(encoder, component="text_encoder", client=client, environ={},
                       offload_type="block_level", num_blocks_per_group=2)
        assert fake_diffusers[-1][1]["num_blocks_per_group"] == 2


def test_quantized_weights_divert_an_automatic_route_only(daemon, fake_diffusers):
    model = nn.Sequential(nn.Linear(8, 8))
    model[0].sdnq_dequantizer = object()
    with DdoClient.connect(daemon.address) as client:
        result = enable_offload(model, component="transformer", client=client, environ={})
        assert result.route == "diffusers_group_offload"
        assert result.event_payload["quantized_backend"]["sdnq_module_count"] == 1
        forced = enable_offload(model, component="transformer", client=client, environ={},
                                route="dynamic_offload", apply_hook=False)
        assert forced.route == "dynamic_offload"


def test_the_off_preset_moves_the_module_itself(daemon):
    model = nn.Linear(4, 4)
    with DdoClient.connect(daemon.address) as client:
        result = enable_offload(model, component="vae", preset="off", client=client, environ={},
                                execution_device="cpu")
        assert result.route == "none"
        assert result.event_payload["unmanaged_module_moved_to_execution_device"] is True
        untouched = enable_offload(model, component="vae", preset="off", client=client,
                                   environ={}, apply_hook=False)
        assert untouched.should_move_to_execution_device


def test_bad_arguments(daemon):
    with DdoClient.connect(daemon.address) as client:
        with pytest.raises(ValueError, match="DDO_MODEL_ROUTE=.gpu. must be one of auto, dynamic_offload"):
            enable_offload(nn.Linear(2, 2), route="gpu", client=client)
        with pytest.raises(TypeError, match="Unknown DynamicOffloadConfig override"):
            enable_offload(nn.Linear(2, 2), client=client, not_a_field=1)


def test_a_components_variables_are_named_by_ddod(daemon):
    # "Text-Encoder 2" -> ddod's DDO_TEXT_ENCODER_2_: the route keyword is sent under it, and
    # the component's variables (DDO_RUNNER_ form too) are read from the call's environment.
    name = "Text-Encoder 2"
    with DdoClient.connect(daemon.address) as client:
        routed = enable_offload(nn.Linear(4, 4), component=name, route="off", environ={},
                                apply_hook=False, client=client)
        assert routed.route == "none"
        resolved = routed.settings.resolved
        assert resolved.variable_prefix(name) == "DDO_TEXT_ENCODER_2_"
        assert resolved.inputs.overrides["DDO_TEXT_ENCODER_2_ROUTE"] == "off"
        # Settings resolved without the component: the call's variables of it still count.
        settings = load_dynamic_offload_settings_from_env(environ={}, client=client)
        assert name not in settings.components
        read = enable_offload(nn.Linear(4, 4), component=name, settings=settings,
                              environ={"DDO_RUNNER_TEXT_ENCODER_2_ROUTE": "none",
                                       "DDO_TEXT_ENCODER_ROUTE": "ddo"},
                              apply_hook=False, client=client)
        assert read.route == "none"
        assert read.settings.resolved.components[name]["DDO_TEXT_ENCODER_2_ROUTE"].source == "environment"
        assert "DDO_TEXT_ENCODER_ROUTE" not in read.settings.resolved.inputs.environ


def test_a_pipeline_shares_one_resolution(daemon, fake_diffusers):
    components = {"transformer": make_model(torch.float32), "text_encoder": nn.Linear(4, 4),
                  "scheduler": object(), "tokenizer": "not a module"}
    with DdoClient.connect(daemon.address) as client:
        results = enable_pipeline_offload(types.SimpleNamespace(components=components),
                                          client=client, environ={}, apply_hook=False)
    assert set(results) == {"transformer", "text_encoder"}
    assert results["transformer"].settings is results["text_encoder"].settings
    assert results["transformer"].route == "dynamic_offload"
    assert results["text_encoder"].route == "diffusers_group_offload"


def test_config_fields_for_a_whole_pipeline_are_resolved_once(daemon, fake_diffusers):
    components = {"transformer": make_model(torch.float32), "text_encoder": nn.Linear(4, 4)}
    with DdoClient.connect(daemon.address) as client:
        results = enable_pipeline_offload(components, client=client, environ={},
                                          apply_hook=False, small_tensor_threshold_kb=0,
                                          max_resident_module_budget_gb=0.5)
    shared = results["transformer"].settings
    assert shared is results["text_encoder"].settings
    assert shared.resolved.value("DDO_MAX_RESIDENT_MODULE_BUDGET_GB") == "0.5"
    assert shared.resolved.value("DDO_SMALL_TENSOR_THRESHOLD_KB") == "0"


def test_group_offload_without_diffusers_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "diffusers", None)
    with pytest.raises(Exception, match="needs the diffusers package"):
        enable_diffusers_group_offload(nn.Linear(2, 2))


def test_seed_style_settings_and_removal_by_module(daemon):
    model = make_model(torch.float32)
    reference = frozen_copy(model)
    with DdoClient.connect(daemon.address) as client:
        settings = load_dynamic_offload_settings_from_env(
            default_preset="auto", environ={"DDO_SMALL_TENSOR_THRESHOLD_KB": "0"},
            components=("transformer",), client=client)
        result = enable_offload(model, settings=settings, component="transformer",
                                execution_device="cpu", client=client)
        assert result.route == "dynamic_offload"
        assert mismatches(model, reference, range(2), torch.float32) == []
        state = get_dynamic_offload_state(model)
        assert state is not None and state is result.hook.state
        summary = state.as_dict()
        assert summary["copy_runtime"]["streamed"]["calls"] > 0
        placements = {entry["placement"] for entry in summary["entries"]}
        assert "streamed_large" in placements and "resident_small" in placements
        assert summary["patched_module_count"] == len(result.hook.resources.units)
        assert set(summary["setup_runtime"]) == {"register_module", "open_session"}
        assert state.clone_for_runtime().copy_calls_by_name == {}
        # The seed's hook surface: its config and a printed summary.
        assert result.hook.config is result.settings.config
        result.hook.print_profile_summary(top_n=2)
        remove_dynamic_offload(model)
        assert get_dynamic_offload_state(model) is None
        # The module runs on its host views again.
        assert mismatches(model, reference, range(1), torch.float32) == []


def _listed_sessions(client):
    from diffusers_dynamic_offloader._proto import sessions_pb2

    return {s.session_id for s in client.rpc.unary("ListSessions",
                                                 sessions_pb2.ListSessionsRequest()).sessions}


def test_releasing_a_result_or_dropping_everything_frees_the_session(daemon):
    import gc
    import weakref

    with DdoClient.connect(daemon.address) as client:
        # release(), or a with block.
        with enable_offload(make_model(torch.float32), component="transformer",
                            execution_device="cpu", client=client, environ={}) as result:
            session_id = result.hook.session_id[:8]
            assert session_id in _listed_sessions(client)
        assert result.hook is None and session_id not in _listed_sessions(client)
        # Nothing global keeps a module alive: dropping the result and the module without
        # releasing them frees the session when they are collected (the seed's 50 GB leak).
        model = make_model(torch.float32)
        result = enable_offload(model, component="transformer", execution_device="cpu",
                                client=client, environ={})
        session_id = result.hook.session_id[:8]
        collected = weakref.ref(model)
        del result, model
        gc.collect()
        assert collected() is None
        deadline = time.monotonic() + 5
        while session_id in _listed_sessions(client) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert session_id not in _listed_sessions(client)
