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
casting. Only hooks that change dtypes around the module's own forward are accepted
(:data:`CASTING_HOOKS`); a forward replaced by anything else (accelerate's hooks, Diffusers'
group offloading) is refused on a streamed Linear, as before.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, List, Optional, Tuple

import torch
from torch import nn

from .shared_weights import is_guarded, plain

__all__ = ["CASTING_HOOKS", "casting_forward", "forward_kind", "hook_names",
           "plain_tensors_for_call"]

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

    return forward
