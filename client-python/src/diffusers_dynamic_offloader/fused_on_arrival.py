"""A fused LoRA on a streamed Linear, added to the weight on the device as the weight arrives.

PEFT fuses an adapter into its base layer by writing the weight: ``weight.data += delta`` with
``delta = (B @ A) * scaling``. For a streamed Linear that write means a new version of the
weight in ddod (:mod:`.edit_sync`): a switch between two fused LoRAs on a FLUX.1-dev-size
transformer stores 16 GiB. ComfyUI's low-VRAM mode does not fuse either: it patches each weight
as it is cast onto the device. DDO does the same, exactly:

- The streaming session takes over ``merge`` / ``unmerge`` of every LoRA layer whose base layer
  is a Linear it binds, streamed or resident (:func:`take_over_merges`; ``fuse_lora`` /
  ``unfuse_lora`` / ``disable_lora`` call them). A merge records the adapter's factors and its
  scaling at that moment (a :class:`FusedAdapter`) in the base layer's :class:`ArrivalDeltas`
  and marks the adapter merged as PEFT does; nothing is written, nothing uploaded.
- Each time the weight arrives, the streamed forward (for a resident Linear, a forward
  installed with its first fused adapter) computes ``weight + delta`` for every fused adapter
  in fusing order, with PEFT's operations (its ``get_delta_weight``: the matmul,
  the scaling, PEFT's float32 detour for half types on the CPU; its in-place add, or its
  safe-merge cast), so that the Linear computes with PEFT's fused weight bit for bit. Every
  merge checks its recorded delta against the layer's own ``get_delta_weight`` once; an adapter
  that does not match (a PEFT whose formula differs, DoRA and other variants, a LoRA bias) is
  fused the ordinary way (stored in ddod) instead.
- An unmerge drops the record: the weight is the base's again, exactly (PEFT's subtraction
  leaves rounding behind; here there is nothing to subtract).
- ``state_dict()`` and :meth:`ArrivalDeltas.fused` give the fused values; the weight attribute
  itself reads the base weight while the session streams. When the session is released, the
  fused values are written into the module's own copy and PEFT's methods are given back, so the
  module is what PEFT would have left.

The price is the delta's computation per forward: a rank-r matmul, a scaling and an add per
Linear, on a device that mostly waits for PCIe while it streams (docs/benchmarks.md measures
it). ``DDO_FUSED_LORA=stored`` keeps the other way: no work per step, a derived version in ddod
per fused state.
"""

from __future__ import annotations

import functools
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

import weakref

import torch
import torch.nn.functional as F
from torch import nn

from .shared_weights import is_guarded, plain

__all__ = ["ArrivalDeltas", "FusedAdapter", "FUSED_MODES", "arrival_deltas", "streamed_deltas",
           "take_over_merges", "write_back_fused"]

#: DDO_FUSED_LORA's values: deltas added on arrival, or fused weights stored in ddod.
FUSED_MODES = ("on_arrival", "stored")
#: Where a streamed Linear keeps its fused adapters (an attribute of the Linear: a session
#: reopened after an edit sync finds them again).
_HOLDER = "_ddo_arrival_deltas"
#: The methods of a LoRA layer taken over, and the marker on the wrappers.
_MERGE_METHODS = ("merge", "unmerge")
_TAKEN_OVER = "_ddo_takes_over_merges"


@dataclass(frozen=True)
class FusedAdapter:
    """One adapter fused into a Linear: copies of its factors as they were when it was fused
    (PEFT's fused weight does not change when the adapter does: a hot swap into the adapter,
    ``delete_adapters``), its scaling then, and how PEFT added it."""

    adapter: str
    weight_a: torch.Tensor
    weight_b: torch.Tensor
    scaling: float
    fan_in_fan_out: bool
    safe: bool
    layer_path: str

    def delta(self) -> torch.Tensor:
        """PEFT's ``lora.Linear.get_delta_weight``, on the recorded factors."""
        weight_a, weight_b = self.weight_a, self.weight_b
        cast = weight_b.device.type == "cpu" and weight_b.dtype in (torch.float16, torch.bfloat16)
        if cast:
            weight_a, weight_b = weight_a.float(), weight_b.float()
        product = weight_b @ weight_a
        if self.fan_in_fan_out:
            product = product.T
        output = product * self.scaling
        return output.to(dtype=self.weight_b.dtype) if cast else output


class ArrivalDeltas:
    """The adapters fused into one Linear bound by a session, in fusing order; ``streamed``:
    its forward is the session's streamed one (else it runs its own, resident weight)."""

    def __init__(self, streamed: bool) -> None:
        self.streamed = streamed
        #: The Linear's weight is also another Linear's (tied): PEFT would add both Linears'
        #: deltas into the one weight, so adapters are fused the ordinary way there.
        self.tied = False
        self.adapters: List[FusedAdapter] = []
        self._hooks: List[Any] = []

    def __bool__(self) -> bool:
        return bool(self.adapters)

    def fused(self, weight: torch.Tensor) -> torch.Tensor:
        """``weight`` with every fused adapter added as PEFT's merge adds it, one after the
        other (a new tensor; ``weight``, a ring slot, is not written)."""
        fused: Optional[torch.Tensor] = None
        for entry in self.adapters:
            delta = entry.delta()
            if entry.safe and delta.dtype != weight.dtype:
                delta = delta.to(weight.dtype)  # PEFT's safe merge: orig += delta.to(orig_dtype)
            if fused is None and delta.dtype == weight.dtype and delta.device == weight.device:
                # weight + delta, rounded once: the same bits as PEFT's weight += delta
                # (addition commutes), without a copy of the weight.
                fused = delta.add_(weight)
                continue
            if fused is None:
                fused = weight.clone()
            fused += delta
        return weight if fused is None else fused

    def watch_state_dict(self, linear: nn.Module) -> None:
        """Makes ``linear.state_dict()`` give the fused weight (save_pretrained after a fuse
        saves what the Linear computes with), and ``load_state_dict`` write the fused weight
        into the Linear's own before it loads (so that a state dict saved after the fuse and
        loaded again is not fused twice, and what it loads replaces the fused weight, as in
        PEFT)."""
        if self._hooks:
            return
        holder = self
        owner = weakref.ref(linear)

        def fused_weight(_module: nn.Module, state: Dict[str, Any], prefix: str, *_: Any) -> None:
            name = prefix + "weight"
            if holder and name in state:
                stored = state[name]
                device = holder.adapters[0].weight_b.device
                with torch.no_grad():
                    state[name] = holder.fused(stored.detach().to(device)).to(stored.device)

        def write_before_load(state: Dict[str, Any], prefix: str, *_: Any) -> None:
            module = owner()
            if module is not None and holder and prefix + "weight" in state:
                _write_fused(module, holder)

        self._hooks = [linear._register_state_dict_hook(fused_weight),
                       linear._register_load_state_dict_pre_hook(write_before_load)]

    def forget(self) -> None:
        self.adapters = []
        for hook in self._hooks:
            hook.remove()
        self._hooks = []


def arrival_deltas(linear: nn.Module) -> Optional[ArrivalDeltas]:
    """The fused adapters of a Linear bound by a session, or None."""
    return linear.__dict__.get(_HOLDER)


def streamed_deltas(linear: nn.Module) -> ArrivalDeltas:
    """The fused adapters of a Linear about to get a streamed forward (made when it has none;
    a Linear that was resident gives back the forward :func:`take_over_merges` gave it)."""
    holder = linear.__dict__.get(_HOLDER)
    if holder is None:
        holder = linear.__dict__[_HOLDER] = ArrivalDeltas(streamed=True)
    elif not holder.streamed:
        holder.streamed = True
        if getattr(linear.__dict__.get("forward"), _TAKEN_OVER, False):
            del linear.__dict__["forward"]
    return holder


def take_over_merges(module: nn.Module, device: torch.device,
                     streamed: Sequence[nn.Module]) -> int:
    """After a session opened on ``module`` (``streamed``: the Linears given a streamed forward,
    which have their :class:`ArrivalDeltas`):

    - every other Linear with fused adapters (resident now) adds them in a forward of its own;
    - ``merge`` / ``unmerge`` of every LoRA layer whose methods are PEFT's own and whose base
      layer is a Linear the session binds (streamed, or resident: its weight is guarded) are
      taken over.

    Returns how many LoRA layers it took over now."""
    streamed_ids = {id(linear) for linear in streamed}
    users: Dict[int, int] = {}
    for linear in module.modules():
        if isinstance(linear, nn.Linear):
            users[id(linear.weight)] = users.get(id(linear.weight), 0) + 1
    for linear in module.modules():
        holder = arrival_deltas(linear)
        if holder is not None and id(linear) not in streamed_ids:
            holder.streamed = False
            if holder and not _fused_forward(linear, holder):
                _write_fused(linear, holder)  # another hook owns its forward now
    taken = 0
    for path, layer in module.named_modules():
        base = getattr(layer, "base_layer", None)
        if not isinstance(base, nn.Linear) or "merge" in layer.__dict__ \
                or not _is_lora_layer(layer):
            continue
        if arrival_deltas(base) is None:
            if not is_guarded(base.weight):
                continue  # not bound by the session
            base.__dict__[_HOLDER] = ArrivalDeltas(streamed=False)
        arrival_deltas(base).tied = users.get(id(base.weight), 0) > 1
        _wrap(layer, path, base, device)
        taken += 1
    return taken


def write_back_fused(module: nn.Module) -> None:
    """When a session gives ``module`` back: the adapters fused on arrival are written into each
    Linear's own weight (no longer a guarded view), the records dropped and PEFT's ``merge`` /
    ``unmerge`` given back, so that the module is what PEFT's fuse would have left."""
    for layer in module.modules():
        for name in (*_MERGE_METHODS, "forward"):
            method = layer.__dict__.get(name)
            if getattr(method, _TAKEN_OVER, False):
                del layer.__dict__[name]
    # Every fused weight first, then the assignments: a failure (out of memory) leaves the
    # module as it was, records and all.
    written = []
    with torch.no_grad():
        for linear in module.modules():
            holder = arrival_deltas(linear)
            if holder:
                weight = linear.weight
                device = holder.adapters[0].weight_b.device
                written.append((weight, holder.fused(weight.detach().to(device))
                                .to(weight.device)))
    for weight, fused in written:
        weight.data = fused
    for linear in module.modules():
        holder = linear.__dict__.pop(_HOLDER, None)
        if holder is not None:
            holder.forget()


def _is_lora_layer(layer: nn.Module) -> bool:
    return all(callable(getattr(layer, name, None)) for name in (*_MERGE_METHODS,
                                                                  "get_delta_weight")) \
        and isinstance(getattr(layer, "lora_A", None), nn.ModuleDict) \
        and isinstance(getattr(layer, "lora_B", None), nn.ModuleDict) \
        and isinstance(getattr(layer, "merged_adapters", None), list)


def _wrap(layer: nn.Module, path: str, base: nn.Module, device: torch.device) -> None:
    merge_as_peft: Callable[..., Any] = layer.merge
    unmerge_as_peft: Callable[..., Any] = layer.unmerge
    holder = arrival_deltas(base)

    def merge(safe_merge: bool = False, adapter_names: Optional[List[str]] = None) -> None:
        if isinstance(adapter_names, str):
            raise TypeError(f"adapter_names should be a list of strings, got {adapter_names!r}.")
        names = list(layer.active_adapters if adapter_names is None else adapter_names)
        already = set(layer.merged_adapters)
        if already and not [name for name in names if name not in already]:
            warnings.warn("All adapters are already merged, nothing to do.")
        for name in names:
            if name in already or name not in layer.lora_A:
                continue
            fused = None if holder.tied else _record(layer, path, name, safe_merge, device)
            if fused is not None and safe_merge:
                _check_finite(base, holder, fused, name)
            if fused is not None and not holder.streamed and not _fused_forward(base, holder):
                fused = None  # another hook replaced the Linear's forward: cannot add there
            if fused is None:
                # Fused the ordinary way, after the adapters fused on arrival are written
                # into the weight (PEFT's order of additions is kept).
                _write_fused(base, holder)
                merge_as_peft(safe_merge=safe_merge, adapter_names=[name])
                continue
            holder.adapters.append(fused)
            holder.watch_state_dict(base)
            layer.merged_adapters.append(name)

    def unmerge() -> None:
        if not layer.merged_adapters:
            return unmerge_as_peft()  # PEFT warns "Already unmerged"
        while (layer.merged_adapters and holder.adapters
               and holder.adapters[-1].adapter == layer.merged_adapters[-1]):
            if layer.merged_adapters[-1] not in layer.lora_A:
                # Deleted while fused: PEFT's unmerge leaves its delta in the weight. So do we:
                # written into the weight, and PEFT's unmerge does the rest.
                _write_fused(base, holder)
                break
            layer.merged_adapters.pop()
            holder.adapters.pop()
        if not holder.adapters:
            holder.forget()
        if layer.merged_adapters:
            unmerge_as_peft()  # adapters fused the ordinary way, before any on arrival
        return None

    for name, wrapper, original in (("merge", merge, merge_as_peft),
                                    ("unmerge", unmerge, unmerge_as_peft)):
        functools.update_wrapper(wrapper, original)
        setattr(wrapper, _TAKEN_OVER, True)
        layer.__dict__[name] = wrapper


def _fused_forward(linear: nn.Linear, holder: ArrivalDeltas) -> bool:
    """Gives a resident Linear a forward that adds its fused adapters to its weight (once);
    False when its forward is already replaced by someone else."""
    current = linear.__dict__.get("forward")
    if current is not None:
        return getattr(current, _TAKEN_OVER, False)
    owner = weakref.ref(linear)  # no reference cycle through the Linear's own __dict__

    def forward(input: torch.Tensor) -> torch.Tensor:
        module = owner()
        weight, bias = plain(module.weight), module.bias
        if holder:
            weight = holder.fused(weight)
        return F.linear(input, weight, plain(bias) if bias is not None else None)

    setattr(forward, _TAKEN_OVER, True)
    linear.__dict__["forward"] = forward
    return True


def _record(layer: nn.Module, path: str, adapter: str, safe: bool,
            device: torch.device) -> Optional[FusedAdapter]:
    """The adapter as a :class:`FusedAdapter`, or None when it must be fused the ordinary way
    (not plain LoRA on this device, or its delta is not PEFT's ``get_delta_weight`` bit for
    bit)."""
    variants = getattr(layer, "lora_variant", {}) or {}
    if (adapter in variants or (getattr(layer, "use_dora", {}) or {}).get(adapter)
            or (getattr(layer, "lora_bias", {}) or {}).get(adapter)):
        return None
    weight_a = getattr(layer.lora_A[adapter], "weight", None)
    weight_b = getattr(layer.lora_B[adapter], "weight", None)
    if (not isinstance(weight_a, torch.Tensor) or not isinstance(weight_b, torch.Tensor)
            or weight_a.device != device or weight_b.device != device):
        return None
    scaling = layer.scaling.get(adapter) if isinstance(layer.scaling, dict) else None
    if not isinstance(scaling, (int, float)):
        return None
    fused = FusedAdapter(adapter, weight_a.detach().clone(), weight_b.detach().clone(),
                         float(scaling), bool(getattr(layer, "fan_in_fan_out", False)),
                         bool(safe), path)
    with torch.no_grad():
        expected = layer.get_delta_weight(adapter)
        ours = fused.delta()
    if not isinstance(expected, torch.Tensor) or expected.dtype != ours.dtype \
            or expected.shape != ours.shape or not torch.equal(expected, ours):
        return None
    return fused


def _check_finite(base: nn.Module, holder: ArrivalDeltas, fused: FusedAdapter,
                  adapter: str) -> None:
    """PEFT's safe merge: the merged weight must be finite (else ValueError, nothing fused)."""
    trial = ArrivalDeltas(streamed=holder.streamed)
    trial.adapters = [*holder.adapters, fused]
    device = fused.weight_b.device
    with torch.no_grad():
        merged = trial.fused(plain(base.weight).detach().to(device))
    if not bool(torch.isfinite(merged).all()):
        raise ValueError(f"NaNs detected in the merged weights. The adapter {adapter} seems to "
                         f"be broken")


def _write_fused(base: nn.Module, holder: ArrivalDeltas) -> None:
    """Writes the adapters fused on arrival into ``base``'s weight (a guarded write: stored in
    ddod as any edit) and forgets them."""
    if not holder:
        return
    weight = base.weight
    device = holder.adapters[0].weight_b.device
    with torch.no_grad():
        fused = holder.fused(weight.detach().to(device))
        weight.copy_(fused)
    holder.forget()
