"""Copy-on-write relocation of a guarded weight: the memory a write moves it to.

A weight bound into a runner's module views ddod's memory (:mod:`.shared_weights` guards it);
before the first write lands, the weight is given private memory here: a host copy (large ones
in huge-page anonymous mappings), views of the weight re-pointed at the same place of it, and
common in-place arithmetic on the whole weight computed out of place straight into the new
memory (one pass instead of a copy and a second pass), its operands brought to the host
(through pinned memory when large). The guards decide when; this module only moves memory,
and never imports them (a guard is reached as ``tensor._ddo_guard``).

Thread-safety: as the guards (the runner's thread that writes the weight).
"""

from __future__ import annotations

import mmap
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch

#: Inside the guards' handler, operations run on the plain tensors (no recursion into it).
DISABLED = getattr(torch._C, "DisableTorchFunctionSubclass", None) or torch._C.DisableTorchFunction
#: In-place arithmetic computed out of place into the weight's new memory.
OUT_OF_PLACE: Dict[str, Callable[..., torch.Tensor]] = {
    "add_": torch.add, "__iadd__": torch.add,
    "sub_": torch.sub, "__isub__": torch.sub,
    "mul_": torch.mul, "__imul__": torch.mul,
    "div_": torch.div, "__itruediv__": torch.div,
}
# The result of a handled write that the operation itself would have returned.
NOT_HANDLED = object()
#: Where private copies of edited weights live (see the module documentation).
HOST = torch.device("cpu")
#: From this size on, private copies use huge pages and device operands come through pinned
#: memory.
_HUGE = 2 << 20


def write_out_of_place(target: torch.Tensor, name: str, args: Sequence[Any],
                        kwargs: Dict[str, Any]) -> Any:
    """``weight.add_(delta)`` and the like on a weight that still views ddod's memory,
    computed as ``add(weight, delta)`` into new memory (one pass, no copy first)."""
    guard_ = target._ddo_guard
    parameter = guard_.tensor
    if not guard_.shared or not covers(target, parameter):
        return NOT_HANDLED
    with DISABLED(), torch.no_grad():
        if name == "copy_" and len(args) >= 2 and isinstance(args[1], torch.Tensor):
            result = _host_empty(target.shape, target.dtype)
            result.copy_(args[1], **kwargs)
        elif name in OUT_OF_PLACE and len(args) >= 2:
            operation = OUT_OF_PLACE[name]
            if target.device == HOST and not kwargs:
                # Straight into huge-page host memory (the result's dtype is checked first).
                probe = operation(target.reshape(-1)[:1], *_first_elements(args[1:]))
                if probe.dtype != target.dtype:
                    return NOT_HANDLED
                result = _host_empty(target.shape, target.dtype)
                operation(target, *args[1:], out=result)
            else:
                result = operation(target, *args[1:], **kwargs)
            if result.dtype != target.dtype:
                return NOT_HANDLED  # the in-place op would cast (or refuse): let it
        else:
            return NOT_HANDLED
        if result.shape != target.shape:
            return NOT_HANDLED
        if result.device != HOST:
            result = result.to(HOST)
        torch.Tensor.data.__set__(parameter, result)
        if target is not parameter:
            torch.Tensor.data.__set__(target, result)
    return target


def make_private(target: torch.Tensor) -> None:
    """Re-points the guarded weight (and ``target``, a view of it) to a private host copy of
    its memory, unless that was done already."""
    guard_ = target._ddo_guard
    parameter = guard_.tensor
    with DISABLED(), torch.no_grad():
        if guard_.shared and parameter is not None and guard_.views_shared(parameter):
            torch.Tensor.data.__set__(parameter, _host_copy(parameter.detach()))
        if guard_.views_shared(target):
            if parameter is None or guard_.views_shared(parameter):
                # An orphaned view: it gets its own copy.
                torch.Tensor.data.__set__(target, _host_copy(target.detach()))
            else:
                _relocate(target, guard_, parameter)


def _relocate(target: torch.Tensor, guard_: Any, parameter: torch.Tensor) -> None:
    """Points ``target``, a view into the weight's old ddod memory, at the same place of the
    weight's private memory."""
    offset = target.data_ptr() - guard_._start
    size = target.element_size()
    if offset % size or target.dtype != parameter.dtype:
        raise guard_.refusal(
            "writing through a view of another dtype or alignment",
            "write through the parameter itself (or a same-dtype view of it).",
        )
    view = parameter.as_strided(target.size(), target.stride(),
                                parameter.storage_offset() + offset // size)
    torch.Tensor.data.__set__(target, view)


def _first_elements(operands: Sequence[Any]) -> List[Any]:
    """The operands of a binary op cut to what a one-element probe of the result needs."""
    return [operand.reshape(-1)[:1] if isinstance(operand, torch.Tensor) and operand.dim() > 0
            else operand for operand in operands]


def covers(target: torch.Tensor, parameter: Optional[torch.Tensor]) -> bool:
    """Whether ``target`` is the whole (contiguous) weight."""
    if parameter is None:
        return False
    with DISABLED():
        return (target.data_ptr() == parameter.data_ptr() and target.shape == parameter.shape
                and target.dtype == parameter.dtype and target.is_contiguous()
                and parameter.is_contiguous())


def on_device(value: Any, device: torch.device, scalars: bool = False) -> Any:
    if (isinstance(value, torch.Tensor) and value.device != device
            and (scalars or value.dim() > 0)):
        if device == HOST and value.is_cuda and value.numel() * value.element_size() >= _HUGE:
            # Through page-locked memory: a DMA at full speed, where a copy to pageable
            # memory is staged by the driver (a LoRA fuse brings gigabytes of deltas over).
            staging = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
            staging.copy_(value)
            return staging
        return value.to(device)
    return value


def _host_empty(shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """New host memory for a private copy: large ones from an anonymous mapping advised to use
    huge pages (a fused LoRA writes gigabytes of fresh memory: 2 MiB faults, not 4 KiB ones)."""
    count = 1
    for dim in shape:
        count *= int(dim)
    size = count * torch.empty((), dtype=dtype).element_size()
    if size < _HUGE:
        return torch.empty(tuple(shape), dtype=dtype)
    mapping = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    advise = getattr(mapping, "madvise", None)
    if advise is not None and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            advise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass  # no transparent huge pages here: 4 KiB pages then
    return torch.frombuffer(mapping, dtype=torch.uint8).view(dtype).reshape(tuple(shape))


def _host_copy(tensor: torch.Tensor) -> torch.Tensor:
    copy = _host_empty(tensor.shape, tensor.dtype)
    copy.copy_(tensor)
    return copy
