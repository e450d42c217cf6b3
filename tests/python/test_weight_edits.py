"""Weight edits, LoRA adapters and derived components on DDO-routed modules (issue 14), on
ddod's CPU host backend.

Every check that touches the weights runs in a child interpreter (isolated_runner.py calls the
``check_*`` function of this module there), so that a crash of the runner (a write into ddod's
read-only shared mapping is a SIGSEGV) fails one test with the signal named, instead of killing
pytest. The count of item 1's edits and their outcomes is printed at the end of the module.

The model (:class:`EditModel`) has two blocks of a LayerNorm and four Linears with and without
bias: ``to_q`` and ``to_out`` (768x768 float32, 2.25 MiB) stream, ``ff_up`` and ``ff_down``
(under ddod's 1 MiB small-tensor threshold) stay resident in the slab, and the two blocks'
``ff_down`` share one weight (tied). Outputs are compared bitwise with a plain
``copy.deepcopy`` of the model (frozen, as a session binds weights) to which the same edit or
adapters were applied.
"""

from __future__ import annotations

import copy
import json
import os
import re
import signal
import subprocess
import sys
from typing import Any, Callable, Dict, List, Optional

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import diffusers_dynamic_offloader as ddo
import lora_support as lora
from support import SOURCE_ROOT

HERE = os.path.dirname(os.path.abspath(__file__))
RUNNER = os.path.join(HERE, "isolated_runner.py")
CHILD_TIMEOUT_S = 180

WIDTH, HIDDEN, FEATURES, DEPTH = 768, 128, 32, 2
BASE_KEY = "weight-edits/model"
TWO_MIB = 2 << 20
#: The weights that must stream (above the default 1 MiB small-tensor threshold).
STREAMED = tuple(f"blocks.{b}.{name}.weight" for b in range(DEPTH) for name in ("to_q", "to_out"))
#: LoRA targets: two streamed Linears and a resident one per block.
LORA_TARGETS = r"blocks\.\d+\.(to_q|to_out|ff_up)"


# ---------------------------------------------------------------------------------------------
# The model.


class EditBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.to_q = nn.Linear(WIDTH, WIDTH)
        self.to_out = nn.Linear(WIDTH, WIDTH, bias=False)
        self.ff_up = nn.Linear(WIDTH, HIDDEN)
        self.ff_down = nn.Linear(HIDDEN, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        x = x + self.to_out(torch.tanh(self.to_q(h)))
        return x + self.ff_down(F.gelu(self.ff_up(h)))


class EditModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj_in = nn.Linear(FEATURES, WIDTH)
        self.blocks = nn.ModuleList(EditBlock() for _ in range(DEPTH))
        self.proj_out = nn.Linear(WIDTH, FEATURES)
        self.blocks[1].ff_down.weight = self.blocks[0].ff_down.weight  # tied
        self.register_buffer("scale", torch.tensor(0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.proj_in(x)
        for block in self.blocks:
            x = block(x)
        return self.proj_out(x) * self.scale


def make_model() -> EditModel:
    """The same weights in every process. Some parameters are frozen before offloading, so
    that "requires_grad as it was" is a check of two values."""
    torch.manual_seed(0)
    model = EditModel()
    with torch.no_grad():
        for block in model.blocks:
            block.norm.weight.add_(torch.randn(WIDTH) * 0.1)
            block.norm.bias.add_(torch.randn(WIDTH) * 0.1)
    model.blocks[1].norm.requires_grad_(False)
    model.proj_out.bias.requires_grad_(False)
    return model.eval()


def reference_of(model: nn.Module) -> nn.Module:
    """A plain private copy, frozen (some torch builds pick another CPU kernel for weights
    that require grad)."""
    return copy.deepcopy(model).requires_grad_(False)


def make_input(step: int = 0) -> torch.Tensor:
    return torch.randn(2, 5, FEATURES, generator=torch.Generator().manual_seed(100 + step))


def forward(model: nn.Module, step: int = 0) -> torch.Tensor:
    with torch.no_grad():
        return model(make_input(step))


def fresh(like: torch.Tensor, seed: int) -> torch.Tensor:
    """Deterministic values of ``like``'s shape and dtype."""
    values = torch.randn(like.shape, generator=torch.Generator().manual_seed(seed)) * 0.05
    return values.to(like.dtype)


def offload(model: nn.Module, client, key: str = BASE_KEY, fused_lora: str = "stored"):
    """The model on the DDO route on the host backend; the big Linears must stream. A LoRA
    fused into a streamed Linear is stored in ddod (``fused_lora``: DDO_FUSED_LORA; these tests
    are about stored edits, test_fused_on_arrival.py about the default). Whole blocks fill the
    resident budget (``spread``): a later session of the same key would otherwise keep single
    weights that its first one learned compute little (test_learned_rows.py)."""
    result = ddo.enable_offload(model, route="dynamic_offload", execution_device="cpu",
                                cache_key=key, client=client,
                                environ={"DDO_FUSED_LORA": fused_lora,
                                         "DDO_RESIDENT_MODULE_SELECTION": "spread"},
                                resident_module_budget_gb=0)
    assert result.route == "dynamic_offload" and result.hook is not None, result
    streamed = streamed_names(result)
    # A LoRA-wrapped Linear streams its base layer's weight, which the component may name
    # by the module's name for it or by the unwrapped model's.
    missing = [name for name in STREAMED
               if name not in streamed
               and name.replace(".weight", ".base_layer.weight") not in streamed]
    assert not missing, f"expected {missing} to stream; ddod streams {sorted(streamed)}"
    return result


def streamed_names(result) -> set:
    return {p.name for unit in result.hook.resources.units for p in unit.tensors}


def state(model: nn.Module) -> Dict[str, torch.Tensor]:
    return {name: value.detach().clone() for name, value in model.state_dict().items()}


def differing(model: nn.Module, reference: nn.Module) -> List[str]:
    """state_dict names whose bytes differ between the two."""
    ours, theirs = model.state_dict(), reference.state_dict()
    assert ours.keys() == theirs.keys(), (sorted(ours.keys() ^ theirs.keys()))
    return [name for name in ours if not torch.equal(ours[name], theirs[name])]


def assert_same_outputs(model: nn.Module, reference: nn.Module, what: str) -> torch.Tensor:
    for step in (0, 1):
        ours, theirs = forward(model, step), forward(reference, step)
        assert torch.equal(ours, theirs), (
            f"{what}: the DDO-routed module's output differs from the plain copy's at step "
            f"{step} (max abs difference {(ours - theirs).abs().max().item():.3g})")
    return forward(model)


def weight_edit_error() -> type:
    error = getattr(ddo, "WeightEditError", None)
    assert error is not None, "diffusers_dynamic_offloader.WeightEditError does not exist"
    return error


def alias_groups(model: nn.Module) -> List[List[str]]:
    """state_dict names grouped by the tensor they name (tied weights: one group)."""
    groups: Dict[int, List[str]] = {}
    for name, value in model.state_dict(keep_vars=True).items():
        groups.setdefault(id(value), []).append(name)
    return list(groups.values())


def changed_groups(groups: List[List[str]], before: Dict[str, torch.Tensor],
                   model: nn.Module) -> List[List[str]]:
    after = model.state_dict()
    return [group for group in groups
            if any(not torch.equal(before[name], after[name]) for name in group)]


def derived_components(client, base_key: str) -> list:
    return [c for c in client.components() if getattr(c, "base_cache_key", "") == base_key]


def reserved_bytes(client) -> int:
    return client.stats().pool.reserved_bytes


def round_up(size: int, granule: int = TWO_MIB) -> int:
    return -(-size // granule) * granule


# ---------------------------------------------------------------------------------------------
# Item 1's edits. Each runs on the DDO-routed module as a user writes it, and on the reference
# under no_grad (its parameters are plain, frozen tensors).


def _no_grad_mul(p: torch.Tensor) -> None:
    with torch.no_grad():
        p.mul_(2)


def _data_iadd(p: torch.Tensor) -> None:
    p.data += fresh(p, 10)  # PEFT's merge: an in-place add, then the .data setter


def _setitem(p: torch.Tensor) -> None:
    p[0] = 1


IN_PLACE_EDITS: Dict[str, Callable[[torch.Tensor], Any]] = {
    "p.data.mul_(2)": lambda p: p.data.mul_(2),
    "no_grad p.mul_(2)": _no_grad_mul,
    "p.data += d": _data_iadd,
    "p.copy_(t)": lambda p: p.copy_(fresh(p, 11)),
    "p[0] = 1": _setitem,
    "nn.init.zeros_(p)": lambda p: nn.init.zeros_(p),
    "torch.add(a, b, out=p)": lambda p: torch.add(fresh(p, 12), fresh(p, 13), out=p),
}

#: Where in-place edits land: a streamed weight, the bias of a streamed Linear, a resident
#: (slab) Linear weight, a LayerNorm weight, a tied weight (by its second name).
TARGETS = {
    "streamed": "blocks.0.to_q.weight",
    "streamed-bias": "blocks.0.to_q.bias",
    "resident": "blocks.0.ff_up.weight",
    "layernorm": "blocks.1.norm.weight",
    "tied": "blocks.1.ff_down.weight",
}
#: The tied weight gets every edit too, but fewer of them are needed to show ties hold.
TIED_EDITS = ("p.data.mul_(2)", "p.data += d", "p.copy_(t)")


def _load_full_state(model: nn.Module) -> None:
    changed = state(model)
    changed["blocks.0.to_q.weight"] += fresh(changed["blocks.0.to_q.weight"], 20)
    changed["blocks.1.to_out.weight"].mul_(0.5)
    changed["blocks.0.ff_up.weight"] += fresh(changed["blocks.0.ff_up.weight"], 21)
    changed["blocks.0.norm.bias"] += fresh(changed["blocks.0.norm.bias"], 22)
    model.load_state_dict(changed)


def _load_partial_state(model: nn.Module) -> None:
    weight = model.state_dict()["blocks.1.to_q.weight"]
    bias = model.state_dict()["proj_out.bias"]
    result = model.load_state_dict({"blocks.1.to_q.weight": weight + fresh(weight, 23),
                                    "proj_out.bias": bias + fresh(bias, 24)}, strict=False)
    assert len(result.missing_keys) == len(model.state_dict()) - 2, result


def _assign_parameter(model: nn.Module) -> None:
    weight = model.blocks[0].to_out.weight
    model.blocks[0].to_out.weight = nn.Parameter(weight.detach() * 0.5 + fresh(weight, 25),
                                                 requires_grad=False)


MODULE_EDITS: Dict[str, Callable[[nn.Module], Any]] = {
    "load_state_dict(strict)": _load_full_state,
    "load_state_dict(strict=False, partial)": _load_partial_state,
    "assign nn.Parameter (same shape and dtype)": _assign_parameter,
}


def _set_requires_grad(path: str) -> Callable[[nn.Module], None]:
    def edit(model: nn.Module) -> None:
        model.get_parameter(path).requires_grad = True
    return edit


#: Refused at once: name -> (edit, the module path the message must name, or None for any
#: tensor of the model).
REFUSED_EDITS: Dict[str, Any] = {
    "module.to(torch.float16)": (lambda m: m.to(torch.float16), None),
    "streamed Linear .half()": (lambda m: m.blocks[0].to_q.half(), "blocks.0.to_q"),
    "module.to('meta')": (lambda m: m.to("meta"), None),
    "streamed p.requires_grad_(True)":
        (lambda m: m.blocks[0].to_q.weight.requires_grad_(True), "blocks.0.to_q"),
    "streamed p.requires_grad = True":
        (_set_requires_grad("blocks.0.to_q.weight"), "blocks.0.to_q"),
    "resident p.requires_grad_(True)":
        (lambda m: m.blocks[0].ff_up.weight.requires_grad_(True), "blocks.0.ff_up"),
    "resident p.requires_grad = True":
        (_set_requires_grad("blocks.0.ff_up.weight"), "blocks.0.ff_up"),
    "module.requires_grad_(True)": (lambda m: m.requires_grad_(True), None),
}

#: Refused at the next forward: a new parameter ddod cannot stream in the weight's place.
REFUSED_AT_FORWARD: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "assign nn.Parameter of another shape": lambda w: torch.zeros(w.shape[0], w.shape[1] // 2),
    "assign nn.Parameter of another dtype": lambda w: w.detach().to(torch.float64),
}


def names_a_tensor(message: str, model: nn.Module, path: Optional[str]) -> bool:
    """True when ``message`` names the module ``path`` and one of its tensors, or for
    ``path=None`` any tensor of the model (a parameter or a buffer), by full name or by module
    path and attribute."""
    if path:
        attributes = [n for n, _ in model.get_submodule(path).named_parameters(recurse=False)]
        return path in message and any(attribute in message for attribute in attributes)
    for name in model.state_dict():  # parameters and persistent buffers
        module_path, _, attribute = name.rpartition(".")
        if name in message or (module_path in message and attribute in message):
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Checks run in the child (isolated_runner.py): they assert, and return what the parent
# reports.


def check_edit_works(client, edit: str, target: Optional[str] = None) -> Dict[str, Any]:
    """An edit that must work: applied to the DDO-routed module and to the plain copy, the
    module reads and computes what the copy does, and a derived version streams."""
    model = make_model()
    reference = reference_of(model)
    result = offload(model, client)
    before = assert_same_outputs(model, reference, "before the edit")
    groups = alias_groups(reference)
    reference_before = state(reference)
    if target is None:
        MODULE_EDITS[edit](model)
        MODULE_EDITS[edit](reference)
    else:
        IN_PLACE_EDITS[edit](model.get_parameter(target))
        with torch.no_grad():
            IN_PLACE_EDITS[edit](reference.get_parameter(target))
    changed = changed_groups(groups, reference_before, reference)
    assert changed, f"{edit} changed nothing in the plain copy: the check would prove nothing"
    assert differing(model, reference) == [], (
        f"after {edit}, the DDO-routed module reads other values than the plain copy for "
        f"{differing(model, reference)}")
    after = assert_same_outputs(model, reference, f"after {edit}")
    assert not torch.equal(after, before), f"{edit} did not change the output"
    hook = result.hook
    assert hook.base_cache_key == BASE_KEY, hook.base_cache_key
    assert hook.cache_key != BASE_KEY, f"no derived version after {edit}: {hook.cache_key!r}"
    sync = hook.last_sync
    assert sync["changed_tensors"] == len(changed), (
        f"{edit}: last_sync says {sync['changed_tensors']} changed tensors, the edit changed "
        f"{[group[0] for group in changed]}")
    result.release()
    return {"outcome": "worked", "changed": [group[0] for group in changed]}


def check_edit_refused(client, edit: str) -> Dict[str, Any]:
    """An edit ddod cannot stream: WeightEditError (a DdoError and a RuntimeError) naming the
    tensor; the module goes on computing what it did."""
    error_type = weight_edit_error()
    model = make_model()
    reference = reference_of(model)
    result = offload(model, client)
    before = assert_same_outputs(model, reference, "before the edit")
    apply, path = REFUSED_EDITS[edit]
    try:
        apply(model)
    except Exception as error:  # noqa: BLE001 - its type is what is checked
        caught = error
    else:
        raise AssertionError(f"{edit} was not refused")
    assert isinstance(caught, error_type), (
        f"{edit} raised {type(caught).__name__}: {caught}, not WeightEditError")
    assert isinstance(caught, ddo.DdoError) and isinstance(caught, RuntimeError)
    message = str(caught)
    assert names_a_tensor(message, reference, path), (
        f"the refusal of {edit} does not name the {path or 'tensor'}: {message!r}")
    assert differing(model, reference) == [], differing(model, reference)
    assert torch.equal(forward(model), before), f"the module computes otherwise after {edit}"
    assert_same_outputs(model, reference, f"after the refused {edit}")
    assert all(not p.requires_grad for p in model.parameters()), (
        f"after the refused {edit}, a DDO-held weight requires grad")
    assert result.hook.cache_key == BASE_KEY
    result.release()
    return {"outcome": "refused", "message": message}


def check_assignment_refused_at_forward(client, edit: str) -> Dict[str, Any]:
    """A new parameter of another shape or dtype in a streamed weight's place: the next forward
    raises WeightEditError naming it; putting the old parameter back makes the module work."""
    error_type = weight_edit_error()
    model = make_model()
    reference = reference_of(model)
    result = offload(model, client)
    before = assert_same_outputs(model, reference, "before the edit")
    linear = model.blocks[0].to_q
    old = linear.weight
    linear.weight = nn.Parameter(REFUSED_AT_FORWARD[edit](old), requires_grad=False)
    try:
        forward(model)
    except Exception as error:  # noqa: BLE001
        caught = error
    else:
        raise AssertionError(f"the forward after {edit} was not refused")
    assert isinstance(caught, error_type), (
        f"the forward after {edit} raised {type(caught).__name__}: {caught}")
    message = str(caught)
    assert names_a_tensor(message, reference, "blocks.0.to_q"), message
    linear.weight = old
    assert torch.equal(forward(model), before), "the module computes otherwise"
    result.release()
    return {"outcome": "refused", "message": message}


def check_backward_refused(client) -> Dict[str, Any]:
    """A forward with grad mode on works; a backward through a streamed Linear raises a
    RuntimeError that says streamed weights cannot be trained through."""
    model = make_model()
    reference = reference_of(model)
    offload(model, client)
    x = make_input().requires_grad_(True)
    with torch.enable_grad():
        output = model(x)
        assert torch.equal(output.detach(), forward(reference)), "the grad-mode forward differs"
        try:
            output.sum().backward()
        except RuntimeError as error:
            message = str(error)
        else:
            raise AssertionError("a backward through streamed weights did not raise")
    assert re.search(r"train", message, re.IGNORECASE), (
        f"the backward's error does not say training is not supported: {message!r}")
    return {"outcome": "refused", "message": message}


def check_equal_bytes_edit_derives_nothing(client) -> Dict[str, Any]:
    """mul_(1.0) leaves the bytes as they were: no derived component, no pool growth."""
    model = make_model()
    reference = reference_of(model)
    result = offload(model, client)
    assert_same_outputs(model, reference, "before the edit")
    reserved = reserved_bytes(client)
    model.blocks[0].to_q.weight.data.mul_(1.0)
    model.blocks[0].ff_up.weight.data.mul_(1.0)
    assert_same_outputs(model, reference, "after mul_(1.0)")
    result.hook.sync_edits()
    assert result.hook.cache_key == BASE_KEY, result.hook.cache_key
    assert result.hook.last_sync["changed_tensors"] == 0, result.hook.last_sync
    assert result.hook.last_sync["uploaded_bytes"] == 0, result.hook.last_sync
    assert derived_components(client, BASE_KEY) == []
    assert reserved_bytes(client) == reserved
    result.release()
    return {"outcome": "worked"}


def check_derived_component_shares_the_base(client) -> Dict[str, Any]:
    """One streamed and one resident tensor edited, synced at once: a derived component listed
    with its base, the pool grows by the changed bytes only, the derived version streams, and
    another runner of the base still computes the original function."""
    model = make_model()
    reference = reference_of(model)
    original = forward(reference)
    result = offload(model, client)
    component_bytes = client.component(BASE_KEY).total_bytes
    reserved = reserved_bytes(client)
    edits = {"blocks.0.to_q.weight": 30, "blocks.0.norm.bias": 31}
    for name, seed in edits.items():
        for target in (model, reference):
            with torch.no_grad():
                target.get_parameter(name).add_(fresh(target.get_parameter(name), seed))
    hook = result.hook
    hook.sync_edits()  # at once, before any forward
    changed_bytes = [reference.get_parameter(name).numel() * 4 for name in edits]
    sync = hook.last_sync
    assert set(sync) >= {"changed_tensors", "uploaded_bytes", "warm_hit", "seconds"}, sync
    assert sync["changed_tensors"] == 2 and sync["warm_hit"] is False, sync
    assert sync["uploaded_bytes"] == sum(changed_bytes), (sync, changed_bytes)
    assert hook.cache_key != BASE_KEY and hook.base_cache_key == BASE_KEY
    derived = derived_components(client, BASE_KEY)
    assert [c.cache_key for c in derived] == [hook.cache_key], (
        [c.cache_key for c in client.components()], hook.cache_key)
    assert derived[0].changed_tensors == 2, derived[0]
    assert sum(changed_bytes) <= derived[0].own_bytes <= sum(map(round_up, changed_bytes)), (
        derived[0].own_bytes, changed_bytes)
    growth = reserved_bytes(client) - reserved
    assert sum(changed_bytes) <= growth <= sum(map(round_up, changed_bytes)), (
        f"the pool grew by {growth} bytes for {sum(changed_bytes)} changed bytes (the whole "
        f"component is {component_bytes})")
    assert_same_outputs(model, reference, "after the synced edits")
    # Another runner of the base, on its own connection: the original function.
    other_model = make_model()
    with ddo.DdoClient.connect(client.address, timeout=30) as other_client:
        other = offload(other_model, other_client)
        assert torch.equal(forward(other_model), original), "the base component changed"
        other.release()
    result.release()
    return {"growth": growth, "changed_bytes": sum(changed_bytes),
            "component_bytes": component_bytes}


def _edit_and_sync(client) -> Dict[str, Any]:
    """The shared edit of the warm-derived checks, on a fresh model; synced."""
    model = make_model()
    reference = reference_of(model)
    result = offload(model, client)
    for target in (model, reference):
        with torch.no_grad():
            target.blocks[1].to_out.weight.mul_(0.75)
    result.hook.sync_edits()
    assert_same_outputs(model, reference, "after the shared edit")
    facts = dict(result.hook.last_sync, cache_key=result.hook.cache_key,
                 base_cache_key=result.hook.base_cache_key)
    facts["derived"] = [c.cache_key for c in derived_components(client, BASE_KEY)]
    facts["reserved_bytes"] = reserved_bytes(client)
    result.release()
    return facts


def check_same_edit_twice(client) -> Dict[str, Any]:
    """The same edit on the same base by two connections of one process: the second gets the
    derived version warm (nothing uploaded), one derived component."""
    first = _edit_and_sync(client)
    assert first["warm_hit"] is False and first["uploaded_bytes"] > 0, first
    with ddo.DdoClient.connect(client.address, timeout=30) as second_client:
        second = _edit_and_sync(second_client)
    assert second["warm_hit"] is True and second["uploaded_bytes"] == 0, second
    assert second["cache_key"] == first["cache_key"], (first, second)
    assert second["derived"] == [first["cache_key"]], second
    assert second["reserved_bytes"] == first["reserved_bytes"], (first, second)
    return first


def check_same_edit_warm(client) -> Dict[str, Any]:
    """Another process applies the same edit: warm, nothing uploaded."""
    return _edit_and_sync(client)


def check_release(client, how: str, edit_first: bool) -> Dict[str, Any]:
    """release() / remove_dynamic_offload give ordinary private tensors back: exact
    nn.Parameter, writable, on the CPU, requires_grad as before, ties kept, edits kept; buffers
    plain; and writing them does not touch ddod's copy."""
    model = make_model()
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    reference = reference_of(model)
    original = forward(reference)
    result = offload(model, client)
    if edit_first:
        for target in (model, reference):
            with torch.no_grad():
                target.blocks[0].to_q.weight.mul_(2)
                target.blocks[0].ff_up.bias.add_(1)
    assert_same_outputs(model, reference, "before release")
    if how == "release":
        result.release()
    else:
        ddo.remove_dynamic_offload(result)
    assert ddo.get_dynamic_offload_state(model) is None
    assert model.blocks[1].ff_down.weight is model.blocks[0].ff_down.weight, "the tie was broken"
    for name, parameter in model.named_parameters():
        assert type(parameter) is nn.Parameter, f"{name} is a {type(parameter).__name__}"
        assert parameter.device.type == "cpu", f"{name} is on {parameter.device}"
        assert parameter.requires_grad == flags[name], (
            f"{name}: requires_grad {parameter.requires_grad}, {flags[name]} before offloading")
    for name, buffer in model.named_buffers():
        assert type(buffer) is torch.Tensor, f"buffer {name} is a {type(buffer).__name__}"
    assert differing(model, reference) == [], differing(model, reference)
    assert_same_outputs(model, reference, "after release")
    # Writable: every tensor, in place (a read-only mapping would end this process).
    for name, tensor in list(model.state_dict(keep_vars=True).items()):
        tensor.data.copy_(tensor.detach().clone())
    for target in (model, reference):
        with torch.no_grad():
            target.blocks[1].to_q.weight.mul_(3)
            target.blocks[1].norm.weight.add_(1)
            target.scale.fill_(0.25)
    assert_same_outputs(model, reference, "edited after release")
    # Trainable again where it was: a backward fills the grads of the parameters that
    # required grad.
    model(make_input()).sum().backward()
    for name, parameter in model.named_parameters():
        assert (parameter.grad is not None) == flags[name], name
    # ddod's copy is untouched: a fresh runner of the base computes the original.
    with ddo.DdoClient.connect(client.address, timeout=30) as other_client:
        fresh_model = make_model()
        other = offload(fresh_model, other_client)
        assert torch.equal(forward(fresh_model), original), "ddod's base copy changed"
        other.release()
    return {}


# LoRA. Adapters "a" and "b" on to_q, to_out (streamed) and ff_up (resident) of both blocks.


def _with_adapters(model: nn.Module) -> None:
    lora.inject_lora(model, LORA_TARGETS, "a", rank=4, seed=1, lora_alpha=8)
    lora.inject_lora(model, LORA_TARGETS, "b", rank=8, seed=2)


UNFUSED_STEPS: Dict[str, Callable[[nn.Module], None]] = {
    "both adapters active": lambda m: None,
    "set_adapters('b')": lambda m: lora.set_adapters(m, "b"),
    "set_adapters(['a', 'b'], [0.5, 1.5])": lambda m: lora.set_adapters(m, ["a", "b"], [0.5, 1.5]),
    "disable_lora": lambda m: lora.enable_lora(m, False),
    "enable_lora": lambda m: lora.enable_lora(m, True),
    "an adapter weight edited in place": lambda m: m.blocks[0].to_q.lora_B["b"].weight.data.mul_(2),
    "delete_adapter('a')": lambda m: lora.delete_adapter(m, "a"),
}


def check_lora_unfused(client, when: str) -> Dict[str, Any]:
    """Unfused adapters injected before or after enable_offload: every step computes what the
    plain copy with the same adapters computes, and no derived component appears."""
    model = make_model()
    key = f"weight-edits/lora-{when}"
    if when == "before":
        _with_adapters(model)
    reference = reference_of(model)
    result = offload(model, client, key)
    if when == "after":
        _with_adapters(model)
        _with_adapters(reference)
    base_output = None
    for step, apply in UNFUSED_STEPS.items():
        apply(model)
        apply(reference)
        output = assert_same_outputs(model, reference, f"unfused LoRA, {step}")
        if step == "disable_lora":
            base_output = output
        else:
            assert base_output is None or not torch.equal(output, base_output), step
        assert result.hook.cache_key == key, f"{step} made a derived version {result.hook.cache_key!r}"
        sync = getattr(result.hook, "last_sync", None) or {}
        assert sync.get("changed_tensors", 0) == 0, (step, sync)
    assert derived_components(client, key) == []
    result.release()
    assert_same_outputs(model, reference, "unfused LoRA, after release")
    return {}


def check_lora_fused(client, when: str) -> Dict[str, Any]:
    """PEFT's merge / unmerge (``base_layer.weight.data += / -= delta``) of adapter a, then of
    b: derived versions that compute what the plain copy with the same merges computes."""
    model = make_model()
    key = f"weight-edits/fused-{when}"
    if when == "before":
        _with_adapters(model)
    reference = reference_of(model)
    result = offload(model, client, key)
    if when == "after":
        _with_adapters(model)
        _with_adapters(reference)
    merged_weights = 3 * DEPTH
    keys = []
    base = {name: tensor.clone() for name, tensor in reference.state_dict().items()}
    for step, apply in (("merge a", lambda m: lora.merge_all(m, ["a"])),
                        ("unmerge a", lora.unmerge_all),
                        ("merge b", lambda m: lora.merge_all(m, ["b"]))):
        apply(model)
        apply(reference)
        if step == "unmerge a":
            # Unmerging restores the weights as they were, bit for bit (where the plain copy
            # keeps the rounding of (w + d) - d): edit_lineage.py's undo.
            reference.load_state_dict(base)
        assert differing(model, reference) == [], (step, differing(model, reference))
        assert_same_outputs(model, reference, f"fused LoRA, {step}")
        keys.append(result.hook.cache_key)
        if step.startswith("merge"):
            assert result.hook.cache_key != key, f"{step}: no derived version"
            assert result.hook.base_cache_key == key
            assert result.hook.last_sync["changed_tensors"] == merged_weights, (
                step, result.hook.last_sync)
        else:
            assert result.hook.cache_key == key, f"{step}: not back on the base"
            assert result.hook.last_sync["uploaded_bytes"] == 0, (step, result.hook.last_sync)
    assert keys[0] != keys[2], "merging a and merging b gave the same derived version"
    result.release()
    assert_same_outputs(model, reference, "fused LoRA, after release")
    return {"derived": keys}


# ---------------------------------------------------------------------------------------------
# The parent side.


def run_isolated(daemon, function: str, *, module: Optional[str] = None, **kwargs: Any) -> Any:
    """Runs ``function(client, **kwargs)`` of this module (or of test module ``module``) in a
    child interpreter; a crash fails the test with the signal's name, an assertion with the
    child's traceback."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([SOURCE_ROOT, HERE]))
    module = module or os.path.splitext(os.path.basename(__file__))[0]
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", RUNNER, daemon.address, module, function,
         json.dumps(kwargs)],
        env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    call = f"{function}({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})"
    if done.returncode < 0:
        pytest.fail(f"{call} CRASHED the runner with {signal.Signals(-done.returncode).name}:\n"
                    f"{done.stderr[-6000:]}", pytrace=False)
    if done.returncode != 0:
        pytest.fail(f"{call} failed (exit {done.returncode}):\n{done.stderr[-6000:]}",
                    pytrace=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"{call} printed no result:\n{done.stdout[-2000:]}"
    return json.loads(lines[-1][len("RESULT "):])


class EditTally:
    """Item 1's edits run in this module and how each ended, printed at the module's end."""

    def __init__(self) -> None:
        self.outcomes: Dict[str, str] = {}

    def record(self, name: str, outcome: str) -> None:
        self.outcomes[name] = outcome

    def summary(self) -> str:
        counts: Dict[str, int] = {}
        for outcome in self.outcomes.values():
            counts[outcome] = counts.get(outcome, 0) + 1
        crashed = counts.get("crashed", 0)
        return (f"weight edits on DDO-routed modules: {len(self.outcomes)} run, each in its own "
                f"process; {crashed} crashed; "
                + ", ".join(f"{n} {o}" for o, n in sorted(counts.items())))


@pytest.fixture(scope="module")
def edit_tally(request) -> Any:
    tally = EditTally()
    yield tally
    if tally.outcomes:
        capture = request.config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():
            print(f"\n{tally.summary()}")
            for name, outcome in tally.outcomes.items():
                if outcome not in ("worked", "refused"):
                    print(f"  {outcome}: {name}")


def run_edit(daemon, tally: EditTally, name: str, function: str, **kwargs: Any) -> Any:
    try:
        result = run_isolated(daemon, function, **kwargs)
    except pytest.fail.Exception as failure:
        tally.record(name, "crashed" if "CRASHED" in str(failure) else "failed")
        raise
    tally.record(name, result["outcome"])
    if result.get("message"):
        print(f"{name}: refused: {result['message']}")
    return result


IN_PLACE_CASES = [(edit, target) for target in TARGETS for edit in IN_PLACE_EDITS
                  if target != "tied" or edit in TIED_EDITS]


@pytest.mark.parametrize("edit,target", IN_PLACE_CASES,
                         ids=[f"{edit} on {target}" for edit, target in IN_PLACE_CASES])
def test_in_place_edits_reach_what_streams(daemon, edit_tally, edit, target):
    run_edit(daemon, edit_tally, f"{edit} on {TARGETS[target]}", "check_edit_works", edit=edit,
             target=TARGETS[target])


@pytest.mark.parametrize("edit", list(MODULE_EDITS))
def test_state_dict_loads_and_assignments_reach_what_streams(daemon, edit_tally, edit):
    run_edit(daemon, edit_tally, edit, "check_edit_works", edit=edit)


@pytest.mark.parametrize("edit", list(REFUSED_EDITS))
def test_edits_ddod_cannot_stream_are_refused_clearly(daemon, edit_tally, edit):
    run_edit(daemon, edit_tally, edit, "check_edit_refused", edit=edit)


@pytest.mark.parametrize("edit", list(REFUSED_AT_FORWARD))
def test_a_new_parameter_of_another_shape_or_dtype_is_refused_at_the_forward(
        daemon, edit_tally, edit):
    run_edit(daemon, edit_tally, edit, "check_assignment_refused_at_forward", edit=edit)


def test_a_backward_through_streamed_weights_is_refused_clearly(daemon, edit_tally):
    run_edit(daemon, edit_tally, "requires grad + backward through a streamed Linear",
             "check_backward_refused")


def test_an_edit_that_keeps_the_bytes_derives_nothing(daemon, edit_tally):
    run_edit(daemon, edit_tally, "p.data.mul_(1.0)", "check_equal_bytes_edit_derives_nothing")


def test_weight_edit_error_is_a_ddo_error_and_a_runtime_error():
    assert issubclass(ddo.WeightEditError, ddo.DdoError)
    assert issubclass(ddo.WeightEditError, RuntimeError)
    assert "WeightEditError" in ddo.__all__


def test_a_derived_component_stores_only_the_changed_tensors(daemon):
    figures = run_isolated(daemon, "check_derived_component_shares_the_base")
    print(f"derived component: pool grew {figures['growth']} bytes for "
          f"{figures['changed_bytes']} changed bytes of a {figures['component_bytes']}-byte "
          f"component")


def test_a_second_runner_with_the_same_edit_gets_the_derived_version_warm(daemon):
    first = run_isolated(daemon, "check_same_edit_twice")
    other_process = run_isolated(daemon, "check_same_edit_warm")
    assert other_process["warm_hit"] is True and other_process["uploaded_bytes"] == 0, (
        other_process)
    assert other_process["cache_key"] == first["cache_key"], (first, other_process)
    assert other_process["derived"] == [first["cache_key"]], other_process


@pytest.mark.parametrize("edit_first", [False, True], ids=["unedited", "edited"])
@pytest.mark.parametrize("how", ["release", "remove_dynamic_offload"])
def test_release_gives_ordinary_writable_tensors_back(daemon, how, edit_first):
    run_isolated(daemon, "check_release", how=how, edit_first=edit_first)


@pytest.mark.parametrize("when", ["before", "after"], ids=["injected-before", "injected-after"])
def test_unfused_lora_adapters_compute_exactly_and_derive_nothing(daemon, when):
    run_isolated(daemon, "check_lora_unfused", when=when)


@pytest.mark.parametrize("when", ["before", "after"], ids=["injected-before", "injected-after"])
def test_fused_lora_reaches_what_streams(daemon, when):
    run_isolated(daemon, "check_lora_fused", when=when)


def test_the_lora_wrapper_matches_the_unwrapped_arithmetic():
    """lora_support itself (no ddod): unfused output = base + B(A(x)) * scaling, and merging
    gives the same function up to rounding."""
    torch.manual_seed(3)
    base = nn.Linear(16, 8)
    wrapped = lora.LoraLinear(copy.deepcopy(base))
    wrapped.update_layer("a", 4, 8.0, torch.Generator().manual_seed(0))
    x = torch.randn(3, 16)
    with torch.no_grad():
        expected = base(x) + wrapped.lora_B["a"](wrapped.lora_A["a"](x)) * 2.0
        assert torch.equal(wrapped(x), expected)
        assert wrapped.lora_B["a"].weight.abs().sum() > 0  # not PEFT's zero init
        wrapped.merge()
        torch.testing.assert_close(wrapped(x), expected)
        wrapped.unmerge()
        torch.testing.assert_close(wrapped.base_layer.weight, base.weight)
