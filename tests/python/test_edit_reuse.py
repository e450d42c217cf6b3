"""Switching between fused LoRAs reuses what ddod holds (edit_lineage.py, edit_versions.py), on
ddod's CPU host backend.

Unfusing a LoRA gives the base weights back bit for bit; fusing a LoRA the session fused before
binds the version ddod stored then, with nothing computed or uploaded; an edit that only looks
like an undo is computed; a version ddod evicted meanwhile is computed and stored again; a
session keeps at most KEPT_VERSIONS versions besides its base. The model, the PEFT-shaped LoRA
wrapper and the child-process runner are test_weight_edits.py's.
"""

from __future__ import annotations

import os
from typing import Any, Dict

import grpc
import pytest
import torch

import lora_support as lora
from diffusers_dynamic_offloader import edit_lineage
from diffusers_dynamic_offloader.edit_lineage import Lineage, fingerprint, recognize
from diffusers_dynamic_offloader.edit_versions import KEPT_VERSIONS
from diffusers_dynamic_offloader.shared_weights import edit_seconds
from test_weight_edits import (LORA_TARGETS, assert_same_outputs, derived_components,
                               differing, make_model, offload, reference_of, run_isolated)

MODULE = os.path.splitext(os.path.basename(__file__))[0]


def _adapters(model, names=("a", "b", "c")) -> None:
    for seed, name in enumerate(names, start=1):
        lora.inject_lora(model, LORA_TARGETS, name, rank=4 * seed, seed=seed, lora_alpha=8)


def _switch(model, reference, base: Dict[str, torch.Tensor], adapter: str) -> None:
    """Unfuse whatever is fused, fuse ``adapter``: on the DDO-routed module and on the plain
    copy, whose unfuse restores the saved base (as DDO's does)."""
    for target in (model, reference):
        lora.unmerge_all(target)
    reference.load_state_dict(base)
    for target in (model, reference):
        lora.merge_all(target, [adapter])


def _fused_once_then_unfused(client, key: str):
    """A model streamed under ``key`` that fused LoRA ``a`` (stored as a derived version) and
    unfused it again (back on ``key``), with its plain reference: (model, reference, base state,
    offload result, the fused version's key)."""
    model = make_model()
    _adapters(model, ("a",))
    reference = reference_of(model)
    result = offload(model, client, key)
    base = {name: tensor.clone() for name, tensor in reference.state_dict().items()}
    _switch(model, reference, base, "a")
    assert_same_outputs(model, reference, "fused a")
    fused_key = result.hook.cache_key
    for target in (model, reference):
        lora.unmerge_all(target)
    reference.load_state_dict(base)
    assert_same_outputs(model, reference, "unfused")
    assert result.hook.cache_key == key
    return model, reference, base, result, fused_key


# ---------------------------------------------------------------------------------------------
# Checks run in a child interpreter (run_isolated).


def check_switching_back_reuses_stored_versions(client) -> Dict[str, Any]:
    model = make_model()
    _adapters(model)
    reference = reference_of(model)
    key = "edit-reuse/switch"
    result = offload(model, client, key)
    hook = result.hook
    base = {name: tensor.clone() for name, tensor in reference.state_dict().items()}

    seen: Dict[str, Dict[str, Any]] = {}
    for step, adapter in enumerate(("a", "b", "a", "b", "a")):
        _switch(model, reference, base, adapter)
        assert_same_outputs(model, reference, f"switch {step} to {adapter}")
        assert differing(model, reference) == [], (step, differing(model, reference))
        sync = dict(hook.last_sync)
        if adapter in seen:
            assert hook.cache_key == seen[adapter]["cache_key"], (step, hook.cache_key)
            assert sync["uploaded_bytes"] == 0 and sync["warm_hit"], (step, sync)
        else:
            assert hook.cache_key != key and sync["uploaded_bytes"] > 0, (step, sync)
            seen[adapter] = sync
    # Unfused, the module streams its base again, nothing stored.
    for target in (model, reference):
        lora.unmerge_all(target)
    reference.load_state_dict(base)
    assert_same_outputs(model, reference, "unfused")
    assert hook.cache_key == key and hook.last_sync["uploaded_bytes"] == 0, hook.last_sync
    assert differing(model, reference) == []
    versions = sorted(c.cache_key for c in derived_components(client, key))
    assert versions == sorted(v["cache_key"] for v in seen.values()), versions
    reused = edit_seconds()["reused"]
    result.release()
    assert_same_outputs(model, reference, "after release")
    return {"versions": versions, "reused_s": reused}


def check_an_edit_that_only_looks_like_an_undo_is_computed(client) -> Dict[str, Any]:
    model = make_model()
    _adapters(model, ("a",))
    reference = reference_of(model)
    key = "edit-reuse/not-undo"
    result = offload(model, client, key)
    for target in (model, reference):
        lora.merge_all(target, ["a"])
    assert_same_outputs(model, reference, "fused")
    fused_key = result.hook.cache_key
    # Subtract another delta than the one added (scaled), and the right one from a slice.
    for target in (model, reference):
        layer = lora.lora_layers(target)[0]
        delta = layer.get_delta_weight("a")
        layer.base_layer.weight.data -= delta * 0.5
        other = lora.lora_layers(target)[1]
        other.base_layer.weight.data[:1] -= other.get_delta_weight("a")[:1]
    assert_same_outputs(model, reference, "after the partial subtractions")
    assert differing(model, reference) == [], differing(model, reference)
    assert result.hook.cache_key not in (key, fused_key), result.hook.cache_key
    assert result.hook.last_sync["changed_tensors"] == 2, result.hook.last_sync
    result.release()
    return {}


def check_an_evicted_version_is_stored_again(client) -> Dict[str, Any]:
    model, reference, base, result, fused_key = _fused_once_then_unfused(
        client, "edit-reuse/evicted")
    assert client.evict(fused_key) > 0, "the fused version was still held"
    _switch(model, reference, base, "a")
    assert_same_outputs(model, reference, "fused a again")
    sync = result.hook.last_sync
    assert result.hook.cache_key == fused_key and sync["uploaded_bytes"] > 0, sync
    result.release()
    return {}


def check_a_session_keeps_a_bounded_number_of_versions(client) -> Dict[str, Any]:
    names = ("a", "b", "c", "d")
    model = make_model()
    _adapters(model, names)
    reference = reference_of(model)
    key = "edit-reuse/kept"
    result = offload(model, client, key)
    base = {name: tensor.clone() for name, tensor in reference.state_dict().items()}
    for adapter in names + names:
        _switch(model, reference, base, adapter)
        assert_same_outputs(model, reference, f"fused {adapter}")
        kept = [k for k in result.hook._versions.kept if k != key]
        assert len(kept) <= KEPT_VERSIONS, kept
    result.release()
    return {"kept": KEPT_VERSIONS}


class _Unavailable(grpc.RpcError):
    """A gRPC failure as a call raises it (UNAVAILABLE: ddod restarting)."""

    def code(self):
        return grpc.StatusCode.UNAVAILABLE

    def details(self):
        return "connection reset"


def check_a_failed_sync_keeps_every_edit(client) -> Dict[str, Any]:
    """A sync that fails while it looks up a stored version (ddod unreachable for a moment)
    keeps the edits: the next forward stores or finds them, and computes with them."""
    from diffusers_dynamic_offloader.edit_versions import EditVersions
    from diffusers_dynamic_offloader.errors import DaemonError

    model, reference, _, result, fused_key = _fused_once_then_unfused(
        client, "edit-reuse/failed-sync")
    for target in (model, reference):
        lora.merge_all(target, ["a"])  # the version stored above holds these weights
    original = EditVersions.hold

    def unreachable(self, wanted):
        raise DaemonError("Attach", _Unavailable())

    EditVersions.hold = unreachable
    try:
        with pytest.raises(DaemonError):
            result.hook.sync_edits()
    finally:
        EditVersions.hold = original
    assert_same_outputs(model, reference, "fused a after a failed sync")
    assert result.hook.cache_key == fused_key, result.hook.cache_key
    result.release()
    return {}


def check_adapter_methods_place_adapters_while_streaming(client) -> Dict[str, Any]:
    """Diffusers' adapter methods (here a stand-in ``fuse_lora`` on the model's class) place
    the adapters on the execution device before a fuse runs while the module streams,
    so that every delta is computed where the adapters live from then on
    (weight_watch.place_adapters_around); released, the module has its own method again."""
    import diffusers_dynamic_offloader.session_binding as streaming  # where _place_adapters lives
    from diffusers_dynamic_offloader.weight_watch import structure_version

    model = make_model()
    calls, placed = [], []
    type(model).fuse_lora = lambda self, **kwargs: calls.append(kwargs) or "fused"
    original = streaming.move_runner_owned
    streaming.move_runner_owned = lambda module, device, strict=True: placed.append(device)
    try:
        result = offload(model, client, "edit-reuse/adapter-methods")
        placed.clear()
        assert model.fuse_lora(adapter_names=["a"]) == "fused"
        assert calls[0] == {"adapter_names": ["a"]}
        assert placed == [torch.device("cpu")], placed  # before the fuse
        # With torch's registration hooks (torch 2), a fuse with no registration since the
        # last placement skips the walk; older torch cannot tell, and places every time.
        tracked = structure_version() is not None
        model.fuse_lora(adapter_names=["a"])
        assert len(placed) == (1 if tracked else 2), placed
        model.add_module("extra", torch.nn.Identity())  # a registration: placed again
        model.fuse_lora(adapter_names=["a"])
        assert len(placed) == (2 if tracked else 3), placed
        del model.extra
        result.release()
        assert "fuse_lora" not in model.__dict__, "the wrapper outlived the session"
    finally:
        streaming.move_runner_owned = original
        del type(model).fuse_lora
    return {"placed": len(placed)}


@pytest.mark.parametrize("check", [
    "check_switching_back_reuses_stored_versions",
    "check_an_edit_that_only_looks_like_an_undo_is_computed",
    "check_an_evicted_version_is_stored_again",
    "check_a_session_keeps_a_bounded_number_of_versions",
    "check_adapter_methods_place_adapters_while_streaming",
    "check_a_failed_sync_keeps_every_edit",
])
def test_fused_lora_switches(daemon, check):
    run_isolated(daemon, check, module=MODULE)


# ---------------------------------------------------------------------------------------------
# Names and fingerprints (no ddod).


def test_a_fingerprint_names_the_value_wherever_it_is():
    values = torch.randn(64, 48, generator=torch.Generator().manual_seed(3))
    transposed = values.t().contiguous().t()  # same values, another layout
    assert not transposed.is_contiguous()
    assert fingerprint(values) == fingerprint(values.clone()) == fingerprint(transposed)
    flipped = values.clone()
    flipped.view(torch.int32)[5, 7] ^= 1  # one bit
    assert fingerprint(flipped) != fingerprint(values)
    assert fingerprint(values.view(48, 64)) != fingerprint(values)  # shape
    assert fingerprint(values.view(torch.int32)) != fingerprint(values)  # dtype
    odd = torch.arange(7, dtype=torch.uint8)  # not a whole number of words
    assert fingerprint(odd) != fingerprint(torch.cat([odd, torch.zeros(1, dtype=torch.uint8)]))
    assert fingerprint(2) != fingerprint(2.0) and fingerprint(1.5) == fingerprint(1.5)


def test_a_fingerprint_sees_sign_flips():
    """Differences confined to the high bit of words (float signs) change it too: the
    products are exact in int64, not taken modulo 2**32."""
    values = torch.randn(4096, generator=torch.Generator().manual_seed(5))
    base = fingerprint(values)
    for first in range(0, 64, 7):
        for second in range(first + 1, 64, 5):
            flipped = values.clone()
            flipped[first] = -flipped[first]
            flipped[second] = -flipped[second]
            assert fingerprint(flipped) != base, (first, second)


def test_a_fingerprint_sees_chunks_swapped(monkeypatch):
    monkeypatch.setattr(edit_lineage, "_CHUNK_WORDS", 16)
    monkeypatch.setattr(edit_lineage, "_FACTORS", {})
    values = torch.arange(64, dtype=torch.int32)
    swapped = torch.cat([values[16:32], values[:16], values[32:]])
    assert fingerprint(values) != fingerprint(swapped)


def test_only_whole_arithmetic_and_copies_are_named():
    weight = torch.zeros(4, 4)
    delta = torch.ones(4, 4)
    assert recognize("__iadd__", (weight, delta), {}).kind == "add"
    assert recognize("sub_", (weight, delta), {"alpha": 2}).key.endswith(":alpha=2")
    assert recognize("copy_", (weight, delta), {"non_blocking": True}).kind == "copy"
    assert recognize("copy_", (weight, 1.0), {}) is None
    assert recognize("__setitem__", (weight, 0, delta[0]), {}) is None
    assert recognize("clamp_", (weight, 0.0), {}) is None
    assert recognize("add_", (weight, delta), {"out": weight}) is None
    big = torch.zeros(edit_lineage.CPU_FINGERPRINT_BYTES // 4 + 1)
    assert recognize("copy_", (big, big), {}) is None  # a fine-tune's state dict on the host
    assert recognize("add_", (big, big), {}).kind == "add"  # a LoRA delta is named anywhere


def test_only_an_exact_opposite_undoes():
    lineage = Lineage("root/w")
    delta = torch.full((3,), 0.25)
    add = recognize("add_", (None, delta), {})
    state = lineage.named(add)
    lineage.moved(add, state)
    assert lineage.undone_state(recognize("sub_", (None, delta * 2), {})) is None
    assert lineage.undone_state(recognize("sub_", (None, delta), {"alpha": 2})) is None
    assert lineage.undone_state(recognize("add_", (None, delta), {})) is None
    assert lineage.undone_state(recognize("__isub__", (None, delta.clone()), {})) == "root/w"
    scale = recognize("mul_", (None, 2.0), {})
    assert scale.undo_key is None  # (w * s) / s rounds: no undo
    assert lineage.named(scale) != lineage.named(recognize("mul_", (None, 3.0), {}))
    copy = recognize("copy_", (None, delta), {})
    assert Lineage("x").named(copy) == Lineage("y").named(copy)  # a copy forgets the past
