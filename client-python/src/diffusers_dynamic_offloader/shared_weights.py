"""Weights that live in ddod's memory, bound into a runner's module, guarded against writes.

A module on the DDO route computes with ddod's one shared copy of its weights: resident
tensors are views of the session's slab (shared memory, or CUDA memory that other runners' warm
sessions use too), streamed weights are views of the component in ddod's pool. Writing through
such a view would change what other runners compute with, or kill this one. So every tensor a
session binds is a :class:`SharedParameter` (or, for buffers and views, a :class:`SharedTensor`):
a tensor subclass whose ``__torch_function__`` sees every PyTorch operation on it, and

- lets reads through (the result of a read that aliases the weight, such as ``.data``,
  ``.detach()``, ``.t()`` or slicing, is guarded in turn; any other result is a plain tensor);
- on a write (an in-place op, ``copy_``, ``__setitem__``, ``out=``, assigning ``.data``) first
  gives the weight private memory: the parameter object itself is re-pointed (``.data``) to a
  private copy, so the module and every holder of the parameter see the edit, and the write
  lands there. Private copies live on the host, whatever device the weight was bound on: a
  resident weight edited on a small GPU must not take device memory the runner does not have
  (fusing a LoRA edits gigabytes), and the next forward streams the edit from ddod anyway. Common in-place arithmetic on the whole tensor
  (``+=``, ``-=``, ``*=``, ``/=``, ``copy_``) is computed out of place straight into the new
  memory, one pass instead of a copy and a second pass; an operand on another device (a LoRA
  delta computed on the GPU, for a weight whose copy is on the host) is brought over. The
  guard then tells its listener (the streaming session), which stores the edited weights in
  ddod as a derived version before the next forward (:mod:`.edit_sync`), so that what streams
  is what the module holds;
- refuses, with :class:`WeightEditError`, what ddod cannot serve: another dtype, shape or
  device for a weight (``module.half()``, ``.to("meta")``), and ``requires_grad=True``
  (training through streamed weights is not supported).

Code outside PyTorch that writes through a raw pointer (ctypes, a C extension on
``data_ptr()``) is not seen: host views are private copy-on-write mappings, so such a write
cannot crash the runner or reach ddod, but it does not reach what streams either. ``numpy()``
of a guarded weight is a read-only array.

This module holds the guards (what is a write, what is refused, whom to tell); the memory a
write moves a weight to (private host copies, re-pointed views, in-place arithmetic computed
out of place) is :mod:`.weight_relocation`'s.
"""

from __future__ import annotations

import time
import weakref
from typing import Any, Dict, List, Optional, Protocol, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .edit_lineage import Edit, Lineage, recognize
from .errors import WeightEditError
from .weight_relocation import (
    DISABLED,
    HOST,
    NOT_HANDLED,
    OUT_OF_PLACE,
    covers,
    make_private,
    on_device,
    write_out_of_place,
)

__all__ = [
    "EditListener",
    "edit_seconds",
    "SharedParameter",
    "SharedTensor",
    "WeightGuard",
    "guard",
    "is_guarded",
    "plain",
]


#: In-place operators whose names do not end with a single underscore.
_INPLACE_DUNDERS = frozenset({
    "__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__",
    "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
    "__imatmul__",
})
#: In-place methods that change no data.
_NOT_WRITES = frozenset({"detach_", "retain_grad_", "requires_grad_"})
#: Functions whose result is always a new tensor (the hot path of a forward): no alias check.
_FRESH_RESULT = frozenset(
    function for function in (
        F.linear, F.layer_norm, F.group_norm, getattr(F, "rms_norm", None), F.embedding,
        F.conv1d, F.conv2d, F.conv3d, F.conv_transpose1d, F.conv_transpose2d,
        F.conv_transpose3d, torch.matmul, torch.addmm, torch.bmm, torch.baddbmm,
        torch.Tensor.__matmul__, torch.Tensor.__add__, torch.Tensor.__radd__,
        torch.Tensor.__mul__, torch.Tensor.__rmul__, torch.Tensor.__sub__,
        torch.Tensor.__rsub__, torch.Tensor.__truediv__, torch.add, torch.mul, torch.sub,
        torch.div, getattr(F, "scaled_dot_product_attention", None),
    )
    if function is not None
)
# Seconds spent handling writes in this process, by step (for benchmarks: edit_seconds()).
_SECONDS: Dict[str, float] = {"operands": 0.0, "out_of_place": 0.0, "private_copy": 0.0,
                              "in_place": 0.0, "reused": 0.0}


def edit_seconds(reset: bool = False) -> Dict[str, float]:
    """Seconds this process spent handling writes to guarded weights, by step: ``operands``
    (bringing operands to the weight's device), ``out_of_place`` (in-place arithmetic computed
    into new memory), ``private_copy`` (copying a weight before an in-place op), ``in_place``
    (the op itself) and ``reused`` (naming edits and binding weights to bytes ddod holds,
    :mod:`.edit_lineage`). ``reset`` starts the count again."""
    seconds = dict(_SECONDS)
    if reset:
        for name in _SECONDS:
            _SECONDS[name] = 0.0
    return seconds


class EditListener(Protocol):
    """Told when a guarded weight was written; knows which edited states ddod holds."""

    def weight_written(self, guard: "WeightGuard") -> None:
        """The weight was written (it now lives in private memory, or on other ddod bytes)."""

    def known_bytes(self, name: str, state: str) -> Optional[torch.Tensor]:
        """A read-only view of ddod's bytes of tensor ``name`` in lineage ``state``
        (:mod:`.edit_lineage`), or None when ddod holds none at hand."""


class WeightGuard:
    """The guard of one bound tensor: its component name, where it is bound, the range of
    ddod's memory it was bound to, and whether it still views that memory.

    Attributes:
        name: The tensor's name in the component.
        where: ``"<module path>.<attribute>"`` in the runner's module, for messages.
        shared: True while the tensor views ddod's memory; False once a write gave it
            private memory.
        lineage: What the tensor holds, by name (:mod:`.edit_lineage`).
    """

    __slots__ = ("name", "where", "shared", "lineage", "_tensor", "_listener", "_start",
                 "_end", "__weakref__")

    def __init__(self, name: str, where: str, tensor: torch.Tensor,
                 listener: Optional[EditListener], state: str) -> None:
        self.name = name
        self.where = where
        self.shared = True
        self.lineage = Lineage(state)
        self._tensor = weakref.ref(tensor)
        self._listener = weakref.ref(listener) if listener is not None else None
        self._start = tensor.data_ptr()
        self._end = self._start + tensor.numel() * tensor.element_size()

    @property
    def tensor(self) -> Optional[torch.Tensor]:
        """The bound parameter or buffer (None once collected)."""
        return self._tensor()

    def refusal(self, what: str, instead: str) -> WeightEditError:
        """The error for an edit this guard refuses."""
        return WeightEditError(
            f"{self.where}: {what}. DDO streams this weight from ddod's shared copy; {instead}",
            module_tensor=self.where,
        )

    def views_shared(self, tensor: torch.Tensor) -> bool:
        """Whether ``tensor`` points into the ddod memory this guard was bound to."""
        return self._start <= tensor.data_ptr() < max(self._end, self._start + 1)

    def written(self) -> None:
        self.shared = False
        listener = self._live_listener()
        if listener is not None:
            listener.weight_written(self)

    def known_bytes(self, state: str) -> Optional[torch.Tensor]:
        """ddod's bytes of this tensor in ``state``, when the listener has them at hand."""
        listener = self._live_listener()
        return None if listener is None else listener.known_bytes(self.name, state)

    def rebind(self, target: torch.Tensor, view: torch.Tensor) -> None:
        """Points the weight (and ``target``, the alias written through) at ``view``, ddod's
        bytes of the state it moves to: it views ddod's memory again, so the next write
        copies first."""
        parameter = self.tensor
        with DISABLED():
            for tensor in (parameter, target):
                if tensor is not None:
                    torch.Tensor.data.__set__(tensor, view)
        self._start = view.data_ptr()
        self._end = self._start + view.numel() * view.element_size()
        self.shared = True
        listener = self._live_listener()
        if listener is not None:
            listener.weight_written(self)

    def _live_listener(self) -> Optional[EditListener]:
        return self._listener() if self._listener is not None else None


def is_guarded(tensor: Any) -> bool:
    """Whether ``tensor`` is a guarded view of ddod's memory (or was bound as one)."""
    return isinstance(tensor, (SharedParameter, SharedTensor))


def guard(view: torch.Tensor, *, name: str, where: str, parameter: bool,
          listener: Optional[EditListener], state: str) -> torch.Tensor:
    """``view`` (a plain tensor over ddod's memory) as a guarded parameter or buffer whose
    bytes are named ``state`` (:mod:`.edit_lineage`)."""
    if parameter:
        bound: torch.Tensor = SharedParameter(view, requires_grad=False)
    else:
        bound = view.as_subclass(SharedTensor)
    bound._ddo_guard = WeightGuard(name, where, bound, listener, state)
    return bound


def plain(tensor: torch.Tensor) -> torch.Tensor:
    """A plain ``torch.Tensor`` over the same memory (for the hot path: no handler)."""
    return tensor.as_subclass(torch.Tensor) if is_guarded(tensor) else tensor


def _guarded_torch_function(cls, func, types, args=(), kwargs=None):
    if kwargs is None:
        kwargs = {}
    if func in _FRESH_RESULT and "out" not in kwargs:
        with DISABLED():
            return func(*args, **kwargs)
    name = getattr(func, "__name__", "")
    written = _written(func, name, args, kwargs)
    edit: Optional[Edit] = None
    if written:
        edit, state = _name_edit(written, name, args, kwargs)
        if edit is not None and _reuse(written[0], edit):
            return written[0]
        started = time.perf_counter()
        if name in OUT_OF_PLACE and len(args) >= 2 and written[0] is args[0]:
            # A LoRA delta computed on the GPU for a weight whose copy is on the host.
            args = (args[0], *(on_device(arg, args[0].device) for arg in args[1:]))
        _SECONDS["operands"] += time.perf_counter() - started
        handled = _before_write(written, name, args, kwargs)
        if handled is not NOT_HANDLED:
            if edit is not None:
                written[0]._ddo_guard.lineage.moved(edit, state)
            return handled
        # The written weight may have moved to the host: its operands go there too.
        started = time.perf_counter()
        target = written[0]
        args = tuple(arg if arg is target else on_device(arg, target.device, scalars=True)
                     for arg in args)
        _SECONDS["operands"] += time.perf_counter() - started
        started = time.perf_counter()
    with DISABLED():
        result = func(*args, **kwargs)
    if written:
        _SECONDS["in_place"] += time.perf_counter() - started
        if edit is not None:
            written[0]._ddo_guard.lineage.moved(edit, state)
        for target in written:
            target._ddo_guard.written()
    if name == "numpy":
        result.flags.writeable = False  # a write would not reach what streams
        return result
    return _guard_aliases(result, args)


def _written(func, name: str, args: Sequence[Any], kwargs: Dict[str, Any]) -> List[torch.Tensor]:
    """The guarded tensors this call writes; raises for a refused ``requires_grad``."""
    first = args[0] if args else None
    if name == "__set__":  # a property setter: which property is the descriptor's name
        attribute = getattr(getattr(func, "__self__", None), "__name__", "")
        if attribute == "requires_grad" and is_guarded(first) and len(args) > 1 and args[1]:
            raise _training_refusal(first)
        return [first] if attribute == "data" and is_guarded(first) else []
    if name == "requires_grad_":
        wanted = args[1] if len(args) > 1 else kwargs.get("requires_grad", True)
        if is_guarded(first) and wanted:
            raise _training_refusal(first)
        return []
    targets: List[torch.Tensor] = []
    if (name.endswith("_") and not name.endswith("__") and name not in _NOT_WRITES) or (
            name in _INPLACE_DUNDERS):
        candidates = first if isinstance(first, (list, tuple)) else (first,)
        targets.extend(tensor for tensor in candidates if is_guarded(tensor))
    out = kwargs.get("out")
    if out is not None:
        candidates = out if isinstance(out, (list, tuple)) else (out,)
        targets.extend(tensor for tensor in candidates if is_guarded(tensor))
    return targets


def _name_edit(written: List[torch.Tensor], name: str, args: Sequence[Any],
               kwargs: Dict[str, Any]) -> "tuple[Optional[Edit], str]":
    """The recognized edit of a write to one whole weight and the state it computes; for any
    other write, every written weight gets a state of its own (None, "")."""
    if name == "__set__" and _same_memory(written[0], args[1] if len(args) > 1 else None):
        return None, ""  # nothing changes
    if len(written) == 1 and name != "__set__" and args and written[0] is args[0]:
        target = written[0]
        guard_ = target._ddo_guard
        with DISABLED():
            edit = recognize(name, args, kwargs)
        if edit is not None and covers(target, guard_.tensor):
            return edit, guard_.lineage.named(edit)
    for target in written:
        target._ddo_guard.lineage.unknown()
    return None, ""


def _reuse(target: torch.Tensor, edit: Edit) -> bool:
    """Binds the weight to ddod's bytes of the state ``edit`` leads to, when they are at hand
    (an undo, or an edit this session stored before): nothing is computed."""
    started = time.perf_counter()
    guard_ = target._ddo_guard
    lineage = guard_.lineage
    for state in (lineage.undone_state(edit), lineage.named(edit)):
        if state is None:
            continue
        view = guard_.known_bytes(state)
        if view is not None:
            guard_.rebind(target, view)
            lineage.moved(edit, state)
            _SECONDS["reused"] += time.perf_counter() - started
            return True
    _SECONDS["reused"] += time.perf_counter() - started
    return False


def _training_refusal(tensor: torch.Tensor) -> WeightEditError:
    return tensor._ddo_guard.refusal(
        "requires_grad=True asks to train it",
        "training through streamed weights is not supported (the device copy lives in a ring "
        "slot that is reused before a backward pass). Train adapters (LoRA) instead, whose "
        "weights are the runner's own, or call remove_dynamic_offload() / result.release() "
        "first: the module then gets ordinary tensors.",
    )


def _before_write(written: List[torch.Tensor], name: str, args: Sequence[Any],
                  kwargs: Dict[str, Any]) -> Any:
    """Gives every written weight private memory; performs the write itself when it can do it
    in one pass (returning what the operation returns), else returns NOT_HANDLED."""
    if name == "__set__":
        return _assign_data(written[0], args[1])
    if len(written) == 1 and written[0] is args[0]:
        started = time.perf_counter()
        done = write_out_of_place(written[0], name, args, kwargs)
        if done is not NOT_HANDLED:
            _SECONDS["out_of_place"] += time.perf_counter() - started
            written[0]._ddo_guard.written()
            return done
    started = time.perf_counter()
    for target in written:
        make_private(target)
    _SECONDS["private_copy"] += time.perf_counter() - started
    return NOT_HANDLED


def _assign_data(target: torch.Tensor, value: Any) -> None:
    """``target.data = value``: accepted when ``value`` has the weight's dtype, shape and
    device (``module.to(...)`` that changes nothing lands here too)."""
    guard_ = target._ddo_guard
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{guard_.where}: .data must be a tensor, not {type(value).__name__}")
    with DISABLED():
        if _same_memory(target, value):
            return None
        if value.dtype != target.dtype or value.device not in (target.device, HOST):
            raise guard_.refusal(
                f"converting it from {_describe(target)} to {_describe(value)} is not "
                f"supported while the module is on the DDO route",
                "load the model in the dtype you want before enable_offload (DDO casts streamed "
                "weights to the input's dtype at each use), or call remove_dynamic_offload() / "
                "result.release() first: the module then gets ordinary tensors.",
            )
        if value.shape != target.shape:
            raise guard_.refusal(
                f"a new value of shape {list(value.shape)} for a weight of shape "
                f"{list(target.shape)}",
                "ddod serves the component's shapes; call remove_dynamic_offload() first to "
                "change the architecture, then enable_offload again.",
            )
        if value.device != HOST or (is_guarded(value) and value._ddo_guard.views_shared(value)):
            value = value.detach().to(HOST, copy=True)  # private, on the host, never ddod's
        torch.Tensor.data.__set__(target, value)
    guard_.written()
    return None


def _same_memory(target: torch.Tensor, value: Any) -> bool:
    """Whether ``value`` is ``target``'s memory as it is (``w.data += d`` assigns the result
    back to ``.data``)."""
    with DISABLED():
        return (isinstance(value, torch.Tensor) and value.data_ptr() == target.data_ptr()
                and value.shape == target.shape and value.dtype == target.dtype
                and value.device == target.device and value.stride() == target.stride())


def _guard_aliases(result: Any, args: Sequence[Any]) -> Any:
    """Guards every tensor of ``result`` that aliases the guarded argument."""
    source = next((arg for arg in args if is_guarded(arg)), None)
    if source is None:
        return result
    if isinstance(result, torch.Tensor):
        return _guard_alias(result, source)
    if type(result) in (tuple, list):
        return type(result)(
            _guard_alias(item, source) if isinstance(item, torch.Tensor) else item
            for item in result
        )
    return result


def _guard_alias(tensor: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
    if is_guarded(tensor) or tensor.device != source.device or tensor.numel() == 0:
        return tensor
    if _storage_pointer(tensor) != _storage_pointer(source):
        return tensor
    view = tensor.as_subclass(SharedTensor)
    view._ddo_guard = source._ddo_guard
    return view


def _storage_pointer(tensor: torch.Tensor) -> int:
    with DISABLED():
        if hasattr(tensor, "untyped_storage"):
            return tensor.untyped_storage().data_ptr()
        return tensor.storage().data_ptr()


def _describe(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).replace('torch.', '')} on {tensor.device}"


def _plain_copy(tensor: torch.Tensor) -> torch.Tensor:
    with DISABLED():
        return tensor.detach().clone()


class SharedParameter(nn.Parameter):
    """A parameter over ddod's memory (see the module documentation). Copies and pickles of it
    are ordinary parameters with their own memory."""

    __torch_function__ = classmethod(_guarded_torch_function)

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = nn.Parameter(_plain_copy(self), requires_grad=self.requires_grad)
        return memo[id(self)]

    def __reduce_ex__(self, protocol):
        return nn.Parameter(_plain_copy(self), requires_grad=False).__reduce_ex__(protocol)


class SharedTensor(torch.Tensor):
    """A buffer or a view over ddod's memory (see the module documentation)."""

    __torch_function__ = classmethod(_guarded_torch_function)

    def __deepcopy__(self, memo):
        if id(self) not in memo:
            memo[id(self)] = _plain_copy(self)
        return memo[id(self)]

    def __reduce_ex__(self, protocol):
        return _plain_copy(self).__reduce_ex__(protocol)
