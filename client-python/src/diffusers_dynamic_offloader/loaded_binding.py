"""Modules whose weights are ddod's copy (built by ``load_from_ddod``): which component they
are, and giving that copy back while they are not in use.

A module bound to ddod's copy maps the component's pool segments into this process. While
that mapping lives, the kernel keeps those pages however ddod moves the component: a phase
under a RAM budget that sends the component to its files (docs/architecture.md §6) would free
nothing, and ddod cannot move a component somebody has attached. So when a staged run releases
a module loaded from ddod, its weights go to the meta device and the attachment closes: the
process holds nothing of the component. The module is bound again when it is used: routed
(``enable_offload`` streams ddod's copy and needs no host copy) or called directly (a forward
pre-hook attaches and binds it before the call).
"""

from __future__ import annotations

from typing import Any, Optional

import torch
from torch import nn

from .module_tensors import alias_groups, bind_group, module_tensors

_KEY = "_ddo_loaded_key"
_CLIENT = "_ddo_loaded_client"
_ATTACHED = "_ddo_attached_component"
_REBIND_HOOK = "_ddo_rebind_hook"
# The attribute a streaming session of the seed's API sits under (seed_compat/route.py).
_SESSION = "_ddo_streaming_session"


def mark_loaded(module: nn.Module, cache_key: str, attached: Any, client: Any) -> None:
    """Records that ``module``'s weights are ``attached`` (component ``cache_key``), and the
    client that can attach it again. The attachment lives as long as the module."""
    object.__setattr__(module, _KEY, cache_key)
    object.__setattr__(module, _CLIENT, client)
    object.__setattr__(module, _ATTACHED, attached)


def loaded_key(module: Any) -> Optional[str]:
    """The component ``module`` was loaded from by ``load_from_ddod``; None for others."""
    return getattr(module, _KEY, None) if isinstance(module, nn.Module) else None


def attachment(module: nn.Module) -> Any:
    """The open attachment ``module``'s weights are views of; None while unbound."""
    attached = getattr(module, _ATTACHED, None)
    return attached if attached is not None and not attached.closed else None


def is_bound(module: nn.Module) -> bool:
    """Whether a module loaded from ddod has its weights (False: on the meta device)."""
    return attachment(module) is not None or not any(
        entry.tensor.is_meta for entry in module_tensors(module))


def unbind(module: Any) -> bool:
    """Gives ddod's copy back: every weight of a module loaded from ddod goes to the meta
    device and its attachment closes (the mappings go once no tensor uses them). Not while a
    streaming session runs the module. Returns whether the module was unbound now."""
    if loaded_key(module) is None or getattr(module, _SESSION, None) is not None:
        return False
    for group in alias_groups(module_tensors(module)):
        current = group[0].tensor
        if current.is_meta:
            continue
        meta = torch.empty(current.shape, dtype=current.dtype, device="meta")
        bind_group(group, lambda parameter, meta=meta: (
            nn.Parameter(meta, requires_grad=False) if parameter else meta))
    attached = getattr(module, _ATTACHED, None)
    object.__setattr__(module, _ATTACHED, None)
    if attached is not None:
        attached.close()
    if getattr(module, _REBIND_HOOK, None) is None:
        object.__setattr__(module, _REBIND_HOOK,
                           module.register_forward_pre_hook(_bind_before_call))
    return True


def forget_rebind(module: nn.Module) -> None:
    """Drops the pre-hook :func:`unbind` left (a streaming session binds the module itself)."""
    handle = getattr(module, _REBIND_HOOK, None)
    if handle is not None:
        handle.remove()
        object.__setattr__(module, _REBIND_HOOK, None)


def bind_again(module: nn.Module) -> None:
    """Attaches the module's component again and binds its weights to it (zero-copy)."""
    from .default_client import client_or_default

    forget_rebind(module)
    if is_bound(module):
        return
    client = client_or_default(getattr(module, _CLIENT, None))
    attached = client.attach(loaded_key(module))
    try:
        attached.bind(module)
    except BaseException:
        attached.close()
        raise
    object.__setattr__(module, _ATTACHED, attached)


def _bind_before_call(module: nn.Module, _args: Any) -> None:
    if getattr(module, _SESSION, None) is None:
        bind_again(module)
