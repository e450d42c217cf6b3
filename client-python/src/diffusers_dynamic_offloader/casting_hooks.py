"""Diffusers' layerwise casting on a module DDO binds: the hook casts, DDO's views stay intact.

``model.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16)``
stores every Linear, Conv and Embedding weight in ``storage_dtype`` and installs a
``LayerwiseCastingHook`` on each of those modules through Diffusers' ``HookRegistry``, which
replaces the module's ``forward`` on the instance: before the module's own forward the hook
calls ``module.to(compute_dtype)``, after it ``module.to(storage_dtype)``. On the DDO route
the component holds the stored dtype (fp8: one byte a parameter, in the pool, the slab and
every streamed unit), and the hook still does the casting:

- a module whose weights DDO binds (views of the slab, guarded against writes, which refuse
  another dtype) runs its hook chain with its bound tensors replaced, for the call only, by
  plain aliases of the same memory: the hook's ``.to`` gives those aliases new data in the
  compute dtype and back, and the bound views are untouched (:func:`casting_forward`);
- a streamed Linear runs its hook chain the same way with the ring's view of its weight
  (``streamed_linear.own_streamed_forward``).

What the module computes is then exactly what it computes all on the device with the same
casting.

The common case gets a shortcut. For a plain ``nn.Linear`` whose only hook is the layerwise
casting hook (:func:`linear_compute_dtype`), the hook computes ``F.linear(x, weight.to(c),
bias.to(c))`` for the compute dtype ``c``: exactly what DDO's own Linear forwards compute for an
input of dtype ``c`` (they cast weight and bias to the input's dtype). Such a Linear therefore
runs DDO's forward (in C++ where the C++ consumer serves the session) rather than the hook's
casts of the whole module there and back, which cost more than the copy they save on a
FLUX-size model at 8 GiB; an input of another dtype still goes through the hook
(:func:`by_input_dtype`). Only hooks that change dtypes around the module's own forward are accepted
(:data:`CASTING_HOOKS`); a forward replaced by anything else (accelerate's hooks, Diffusers'
group offloading) is refused on a streamed Linear, as before.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List, Optional, Tuple

import torch
from torch import nn

from .byte_cast import cast
from .shared_weights import is_guarded, plain

__all__ = ["CASTING_HOOKS", "by_input_dtype", "casting_forward", "forward_kind", "hook_names",
           "linear_compute_dtype", "plain_tensors_for_call", "resident_linear_forward"]

#: The Diffusers hooks (by their HookRegistry names) that only cast weights or inputs around
#: the module's own forward.
CASTING_HOOKS = frozenset({"layerwise_casting", "peft_autocast_disable"})

#: How a module's forward runs (:func:`forward_kind`).
CLASS_FORWARD = "class"
CASTING_HOOK_FORWARD = "casting_hooks"
FOREIGN_FORWARD = "foreign"


def hook_names(module: nn.Module) -> Tuple[str, ...]:
    """The names of the Diffusers hooks installed on ``module``, outermost last."""
    registry = module.__dict__.get("_diffusers_hook")
    if registry is None:
        return ()
    order = getattr(registry, "_hook_order", None)
    if order is None:
        order = list(getattr(registry, "hooks", {}) or {})
    return tuple(order)


def forward_kind(module: nn.Module) -> str:
    """:data:`CLASS_FORWARD` when ``module`` runs its class's forward,
    :data:`CASTING_HOOK_FORWARD` when its forward on the instance is Diffusers' hook chain of
    casting hooks only (:data:`CASTING_HOOKS`), :data:`FOREIGN_FORWARD` otherwise."""
    forward = module.__dict__.get("forward")
    if forward is None:
        return CLASS_FORWARD
    names = hook_names(module)
    if (names and all(name in CASTING_HOOKS for name in names)
            and "_hf_hook" not in module.__dict__  # accelerate wrapped it after Diffusers
            and isinstance(forward, functools.partial) and forward.args[:1] == (module,)):
        return CASTING_HOOK_FORWARD
    return FOREIGN_FORWARD


def linear_compute_dtype(module: nn.Module) -> Optional[torch.dtype]:
    """The compute dtype of a plain ``nn.Linear`` whose forward is Diffusers' layerwise
    casting hook alone (nothing else replaced or wrapped); None for any other module."""
    if type(module) is not nn.Linear or hook_names(module) != ("layerwise_casting",):
        return None
    if forward_kind(module) != CASTING_HOOK_FORWARD:
        return None
    registry = module.__dict__["_diffusers_hook"]
    hook = registry.get_hook("layerwise_casting") if hasattr(registry, "get_hook") else None
    dtype = getattr(hook, "compute_dtype", None)
    return dtype if isinstance(dtype, torch.dtype) else None


def by_input_dtype(
    dtype: torch.dtype, direct: Callable[[torch.Tensor], Any], hooked: Callable[..., Any]
) -> Callable[..., Any]:
    """A Linear forward that calls ``direct`` for one tensor input of ``dtype`` (the hook's
    compute dtype: ``direct`` computes what the hook would) and ``hooked`` for anything else."""

    def forward(*args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and getattr(args[0], "dtype", None) == dtype:
            return direct(args[0])
        return hooked(*args, **kwargs)

    return forward


def resident_linear_forward(module: nn.Module, dtype: torch.dtype) -> Callable[..., Any]:
    """What Diffusers' layerwise casting hook computes for a resident ``nn.Linear`` and an
    input of its compute dtype, on plain aliases of the bound weight and bias."""
    linear = torch.nn.functional.linear

    def forward(input: torch.Tensor) -> torch.Tensor:
        weight = plain(module.weight)
        bias = module.bias
        if bias is not None:
            bias = plain(bias).to(dtype)
        return linear(input, cast(weight, dtype), bias)  # fp8: DDO's kernel (byte_cast.py)

    return forward


def describe_forward(module: nn.Module) -> str:
    """What replaced ``module``'s forward, for messages."""
    names = hook_names(module)
    if names:
        return f"Diffusers hooks {', '.join(repr(name) for name in names)}"
    if "_hf_hook" in module.__dict__:
        return f"accelerate's {type(module.__dict__['_hf_hook']).__name__}"
    return "an unknown hook"


def plain_tensors_for_call(
    module: nn.Module, weight: Optional[torch.Tensor] = None,
) -> List[Tuple[dict, str, Any]]:
    """Replaces, in ``module``'s own parameter and buffer tables, every guarded tensor by a
    plain alias of its memory (parameters stay ``nn.Parameter``), and the ``weight``
    parameter by ``weight`` when given. Returns what to put back (:func:`put_back`)."""
    replaced: List[Tuple[dict, str, Any]] = []
    parameters = module._parameters
    for name, tensor in parameters.items():
        if name == "weight" and weight is not None:
            continue
        if tensor is not None and is_guarded(tensor):
            replaced.append((parameters, name, tensor))
    if weight is not None:
        replaced.append((parameters, "weight", parameters.get("weight")))
    buffers = module._buffers
    for name, tensor in buffers.items():
        if tensor is not None and is_guarded(tensor):
            replaced.append((buffers, name, tensor))
    for table, name, tensor in replaced:
        if table is parameters:
            data = weight if name == "weight" and weight is not None else plain(tensor)
            table[name] = nn.Parameter(data, requires_grad=False)
        else:
            table[name] = plain(tensor)
    return replaced


def put_back(replaced: List[Tuple[dict, str, Any]]) -> None:
    """Undoes :func:`plain_tensors_for_call`."""
    for table, name, tensor in replaced:
        table[name] = tensor


def casting_forward(module: nn.Module, hooked: Callable[..., Any]) -> Callable[..., Any]:
    """The forward of a module whose bound tensors stay resident and whose forward is
    Diffusers' casting-hook chain ``hooked``: the chain runs on plain aliases of them."""

    def forward(*args: Any, **kwargs: Any) -> Any:
        replaced = plain_tensors_for_call(module)
        try:
            return hooked(*args, **kwargs)
        finally:
            put_back(replaced)

    dtype = linear_compute_dtype(module)
    if dtype is not None:
        return by_input_dtype(dtype, resident_linear_forward(module, dtype), forward)
    return forward
