"""A fused LoRA on a DDO-routed module is added to each weight as it arrives
(fused_on_arrival.py, DDO_FUSED_LORA=on_arrival, the default), on ddod's CPU host backend.

Fusing, unfusing and switching fused LoRAs store nothing in ddod and upload nothing; the
module computes bit for bit what a plain copy with PEFT's writes into its weights computes
(streamed and resident Linears alike); ``state_dict()`` gives the fused weights; released, the
module holds PEFT's fused weights and PEFT's own methods; what PEFT fused stays fused (a hot
swap into the adapter, the adapter deleted, a state dict loaded back). What cannot be added on
arrival (an adapter whose delta is not PEFT's plain formula, a tied weight) is fused the
ordinary way, stored in ddod.
The model, the PEFT-shaped LoRA layer and the child-process runner are test_weight_edits.py's.
"""

from __future__ import annotations

import os
from typing import Any, Dict

import pytest
import torch
from torch import nn

import lora_support as lora
from test_weight_edits import (LORA_TARGETS, assert_same_outputs, derived_components,
                               differing, forward, make_model, offload, reference_of,
                               reserved_bytes, run_isolated, weight_edit_error)

MODULE = os.path.splitext(os.path.basename(__file__))[0]
#: Every LoRA layer of the model (two blocks, three targets each: to_q and to_out stream,
#: ff_up is resident).
LORA_LAYERS = 6


def _adapters(model: nn.Module, names=("a", "b", "c")) -> None:
    for seed, name in enumerate(names, start=1):
        lora.inject_lora(model, LORA_TARGETS, name, rank=4 * seed, seed=seed, lora_alpha=8)


def _streamed_on_arrival(client, key: str, names=("a", "b", "c")):
    model = make_model()
    _adapters(model, names)
    reference = reference_of(model)
    result = offload(model, client, key, fused_lora="on_arrival")
    assert result.hook.fused_lora == "on_arrival"
    base = {name: tensor.clone() for name, tensor in reference.state_dict().items()}
    return model, reference, result, base


def _unfuse(model: nn.Module, reference: nn.Module, base: Dict[str, torch.Tensor]) -> None:
    """Unfuses both; the plain copy gets its saved base back (PEFT's subtraction leaves
    rounding behind, DDO's unfuse has nothing to subtract)."""
    for target in (model, reference):
        lora.unmerge_all(target)
    reference.load_state_dict(base)


# ---------------------------------------------------------------------------------------------
# Checks run in a child interpreter (run_isolated).


def check_switching_fused_loras_uploads_nothing(client) -> Dict[str, Any]:
    key = "on-arrival/switch"
    model, reference, result, base = _streamed_on_arrival(client, key)
    hook = result.hook
    reserved = reserved_bytes(client)
    for step, adapter in enumerate(("a", "b", "a", "c")):
        _unfuse(model, reference, base)
        for target in (model, reference):
            lora.merge_all(target, [adapter])
        assert_same_outputs(model, reference, f"switch {step} to {adapter}")
        assert differing(model, reference) == [], "state_dict() is not the fused weights"
        assert hook.stats()["linears_fused_on_arrival"] == LORA_LAYERS, hook.stats()
    # Two adapters fused together, in order.
    _unfuse(model, reference, base)
    for target in (model, reference):
        lora.merge_all(target, ["b", "c"])
    assert_same_outputs(model, reference, "b and c fused")
    _unfuse(model, reference, base)
    assert_same_outputs(model, reference, "unfused")
    assert hook.stats()["linears_fused_on_arrival"] == 0
    stats = hook.stats()
    assert stats["edit_syncs"] == 0 and stats["uploaded_edit_bytes"] == 0, stats
    assert hook.cache_key == key and derived_components(client, key) == []
    assert reserved_bytes(client) == reserved, "ddod's pool grew"
    result.release()
    return {"edit_syncs": stats["edit_syncs"]}


def check_release_leaves_what_peft_would(client) -> Dict[str, Any]:
    """Released while fused: the module's own weights are fused, PEFT's methods are back, and a
    later unmerge subtracts as PEFT does on the plain copy."""
    model, reference, result, _base = _streamed_on_arrival(client, "on-arrival/release")
    for target in (model, reference):
        lora.merge_all(target, ["a"])
    assert_same_outputs(model, reference, "fused")
    result.release()
    assert differing(model, reference) == []
    for layer in lora.lora_layers(model):
        assert "merge" not in layer.__dict__ and "unmerge" not in layer.__dict__
        assert "forward" not in layer.base_layer.__dict__
    assert_same_outputs(model, reference, "released")
    for target in (model, reference):
        lora.unmerge_all(target)
    assert_same_outputs(model, reference, "unmerged after release")
    return {}


def check_fused_adapters_outlive_their_layers(client) -> Dict[str, Any]:
    """Fused, then the LoRA layers removed (diffusers' ``unload_lora_weights`` after
    ``fuse_lora``): the fused weights stay; a scale set after the fuse changes nothing."""
    model, reference, result, _base = _streamed_on_arrival(client, "on-arrival/unload")
    for target in (model, reference):
        lora.merge_all(target, ["a"])
        lora.set_adapters(target, ["a"], [0.25])
    assert_same_outputs(model, reference, "fused, scale changed after")
    for target in (model, reference):
        for path, layer in list(target.named_modules()):
            if isinstance(layer, lora.LoraLinear):
                parent, _, child = path.rpartition(".")
                setattr(target.get_submodule(parent), child, layer.base_layer)
    assert not lora.lora_layers(model)
    assert_same_outputs(model, reference, "LoRA layers removed")
    assert differing(model, reference) == []
    result.release()
    assert_same_outputs(model, reference, "released")
    return {}


def check_a_fused_weight_stays_as_fused(client) -> Dict[str, Any]:
    """What PEFT fused stays fused: a hot swap into the adapter afterwards (``.data.copy_``, as
    PEFT's hotswap writes), the adapter deleted and then unfused (PEFT leaves its delta in the
    weight), a state dict saved and loaded back (not fused twice)."""
    model, reference, result, _base = _streamed_on_arrival(client, "on-arrival/frozen", ("a",))
    for target in (model, reference):
        lora.merge_all(target, ["a"])
    forward(model)
    for target in (model, reference):
        for layer in lora.lora_layers(target):
            weight = layer.lora_B["a"].weight
            weight.data.copy_(torch.full_like(weight, 0.01))
    assert_same_outputs(model, reference, "fused, then the adapter hot-swapped")
    for target in (model, reference):
        target.load_state_dict(target.state_dict())
    assert_same_outputs(model, reference, "fused, state dict saved and loaded back")
    for target in (model, reference):
        state = {k: v for k, v in target.state_dict().items() if "lora_" not in k}
        target.load_state_dict(state, strict=False)
    assert_same_outputs(model, reference, "fused, base weights loaded back")
    for target in (model, reference):
        lora.delete_adapter(target, "a")
        lora.unmerge_all(target)
    assert_same_outputs(model, reference, "deleted while fused, then unfused")
    result.release()
    assert_same_outputs(model, reference, "released")
    return {}


def check_a_tied_weight_gets_every_users_delta(client) -> Dict[str, Any]:
    """The model's two ``ff_down`` share one weight: PEFT adds both Linears' deltas into it, so
    both compute with both. Tied weights are fused the ordinary way (stored)."""
    key = "on-arrival/tied"
    model = make_model()
    lora.inject_lora(model, r"blocks\.\d+\.ff_down", "a", rank=4, seed=7, lora_alpha=8)
    reference = reference_of(model)
    result = offload(model, client, key, fused_lora="on_arrival")
    for target in (model, reference):
        lora.merge_all(target, ["a"])
    assert_same_outputs(model, reference, "fused into both users of a tied weight")
    assert differing(model, reference) == []
    assert result.hook.stats()["linears_fused_on_arrival"] == 0
    result.release()
    return {}


def check_a_safe_merge_refuses_what_is_not_finite(client) -> Dict[str, Any]:
    model, reference, result, _base = _streamed_on_arrival(client, "on-arrival/safe", ("a",))
    outcomes = []
    for target in (model, reference):
        layer = lora.lora_layers(target)[0]
        with torch.no_grad():
            layer.lora_B["a"].weight[0, 0] = float("inf")
        try:
            layer.merge(safe_merge=True, adapter_names=["a"])
        except ValueError as caught:
            outcomes.append(str(caught))
        assert layer.merged_adapters == [], layer.merged_adapters
    assert len(outcomes) == 2 and "NaNs detected" in outcomes[0], outcomes
    assert_same_outputs(model, reference, "refused safe merge")
    result.release()
    return {"message": outcomes[0]}


class _OtherDelta(lora.LoraLinear):
    """A LoRA layer whose delta is not PEFT's plain formula (as DoRA's is not)."""

    def get_delta_weight(self, adapter: str) -> torch.Tensor:
        return super().get_delta_weight(adapter) * 0.5


def check_other_deltas_are_stored(client) -> Dict[str, Any]:
    key = "on-arrival/other-delta"
    model = make_model()
    _adapters(model, ("a",))
    for layer in lora.lora_layers(model)[:2]:
        layer.__class__ = _OtherDelta
    reference = reference_of(model)
    result = offload(model, client, key, fused_lora="on_arrival")
    for target in (model, reference):
        lora.merge_all(target, ["a"])
    assert_same_outputs(model, reference, "fused")
    stats = result.hook.stats()
    assert stats["linears_fused_on_arrival"] == LORA_LAYERS - 2, stats
    assert stats["edit_syncs"] == 1 and stats["uploaded_edit_bytes"] > 0, stats
    assert [c.cache_key for c in derived_components(client, key)] == [result.hook.cache_key]
    result.release()
    assert_same_outputs(model, reference, "released")
    return {"uploaded_edit_bytes": stats["uploaded_edit_bytes"]}


def check_an_all_resident_module_adds_on_arrival(client) -> Dict[str, Any]:
    """Nothing streams (every tensor under the small-tensor threshold): resident Linears add
    their fused adapters in a forward of their own."""
    import diffusers_dynamic_offloader as ddo

    key = "on-arrival/all-resident"
    model = make_model()
    _adapters(model, ("a", "b"))
    reference = reference_of(model)
    result = ddo.enable_offload(model, route="dynamic_offload", execution_device="cpu",
                                cache_key=key, client=client, environ={},
                                small_tensor_threshold_kb=1048576)
    assert result.hook.stats()["units"] == 0, result.hook.stats()
    base = {name: tensor.clone() for name, tensor in reference.state_dict().items()}
    for adapter in ("a", "b"):
        _unfuse(model, reference, base)
        for target in (model, reference):
            lora.merge_all(target, [adapter])
        assert_same_outputs(model, reference, f"{adapter} fused")
        assert result.hook.stats()["linears_fused_on_arrival"] == LORA_LAYERS
    assert derived_components(client, key) == [] and result.hook.stats()["edit_syncs"] == 0
    result.release()
    assert_same_outputs(model, reference, "released")
    return {}


def check_an_unknown_mode_is_refused(client) -> Dict[str, Any]:
    from diffusers_dynamic_offloader import DaemonError

    model = make_model()
    try:
        offload(model, client, "on-arrival/bad-mode", fused_lora="sometimes")
    except DaemonError as caught:
        message = str(caught)
    else:
        raise AssertionError("DDO_FUSED_LORA=sometimes was accepted")
    assert "DDO_FUSED_LORA='sometimes' must be one of on_arrival, stored" in message, message
    return {"message": message}


@pytest.mark.parametrize("check", [
    "check_switching_fused_loras_uploads_nothing",
    "check_release_leaves_what_peft_would",
    "check_fused_adapters_outlive_their_layers",
    "check_a_fused_weight_stays_as_fused",
    "check_a_tied_weight_gets_every_users_delta",
    "check_a_safe_merge_refuses_what_is_not_finite",
    "check_other_deltas_are_stored",
    "check_an_all_resident_module_adds_on_arrival",
    "check_an_unknown_mode_is_refused",
])
def test_fused_lora_on_arrival(daemon, check):
    run_isolated(daemon, check, module=MODULE)
