"""AttachedComponent: a component of ddod's pool mapped into this process.

The tensors are zero-copy, copy-on-write views of ddod's shared memory (a write stays in this
process). See
:mod:`diffusers_dynamic_offloader.store` for what that means.
"""

from __future__ import annotations

from collections import OrderedDict
from types import MappingProxyType
from typing import Dict, List, Mapping, NamedTuple, Optional, Sequence

import torch
from torch import nn

from .component_info import Component
from .detach import detach_session
from .errors import BindError, DdoError, describe_names
from .module_tensors import assign, match_module
from .rpc_channel import RpcChannel
from .shm import SegmentMapping
from ._closeable import Closeable


class BindResult(NamedTuple):
    """What :meth:`AttachedComponent.bind` left unbound (always empty when strict)."""

    #: Names the module has and the component lacks (they keep their own tensors).
    missing_keys: List[str]
    #: Names the component has and the module lacks.
    unexpected_keys: List[str]


class AttachedComponent(Closeable):
    """A host session on a component, with a zero-copy (copy-on-write) tensor for every entry.

    Create it with ``client.attach(key)``. The session keeps ddod from evicting the component
    until :meth:`close` (or until the client's lease ends). It is a context manager.

    Attributes:
        session_id: ddod's id of the session.
        component: The component as ddod reported it at attach time.
    """

    def __init__(
        self,
        rpc: RpcChannel,
        session_id: str,
        component: Component,
        tensors: Dict[str, torch.Tensor],
        mappings: Sequence[SegmentMapping],
    ) -> None:
        """Takes ownership of an attached session's tensors and mappings; use ``attach()``."""
        self.session_id = session_id
        self.component = component
        self._rpc: Optional[RpcChannel] = rpc
        self._tensors: Optional[Dict[str, torch.Tensor]] = tensors
        self._mappings = list(mappings)

    @property
    def cache_key(self) -> str:
        """The component's cache key."""
        return self.component.cache_key

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._tensors is None

    @property
    def tensors(self) -> Mapping[str, torch.Tensor]:
        """Name -> copy-on-write tensor, in the order of the component's table."""
        return MappingProxyType(self._open_tensors())

    def state_dict(self) -> "OrderedDict[str, torch.Tensor]":
        """A new ordered dict of the (shared, copy-on-write) tensors: for ``load_state_dict``
        into a module it copies, or for direct use."""
        return OrderedDict(self._open_tensors())

    def bind(self, module: nn.Module, strict: bool = True) -> BindResult:
        """Makes ``module`` use the shared tensors, without copying.

        Every parameter becomes ``nn.Parameter(view, requires_grad=False)`` and every
        persistent buffer the view itself; tied weights (one tensor under several names) stay
        tied. The module's own tensors are dropped (their memory is freed when nothing else
        holds them). Nothing changes when the bind fails. The module then reads ddod's copy
        through copy-on-write host memory: an edit copies the pages it touches and stays in
        this process (see the module documentation).

        Args:
            module: A module of the component's architecture (its ``state_dict()`` names).
            strict: True (default): every name of the module must be in the component and the
                other way round. False: bind what matches, report the rest.

        Returns:
            The names left unbound (empty when strict).

        Raises:
            BindError: names differ (when strict), or a shape or dtype differs (always: a view
                cannot convert). The message lists the names.
        """
        tensors = self._open_tensors()
        match = match_module(module, tensors)
        missing, unexpected, mismatched = match.missing, match.unexpected, match.mismatched
        if mismatched or (strict and (missing or unexpected)):
            raise BindError(
                self._bind_message(module, missing, unexpected, mismatched, strict),
                missing=missing,
                unexpected=unexpected,
                mismatched=mismatched,
            )
        for source, group in match.groups:
            assign(group, tensors[source])
        return BindResult(missing, unexpected)

    def close(self) -> None:
        """Ends the session and releases this object's mappings. Idempotent.

        Tensors that are still referenced (by a bound module, say) stay valid: their memory
        is unmapped when the last of them is released. ddod may evict the component once no
        session holds it.
        """
        if self._tensors is None:
            return
        self._tensors = None
        for mapping in self._mappings:
            mapping.close()
        self._mappings = []
        rpc, self._rpc = self._rpc, None
        if rpc is not None:
            detach_session(rpc, self.session_id)

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"{self.component.tensor_count} tensors"
        return (
            f"AttachedComponent({self.cache_key!r}, session {self.session_id!r}, {state})"
        )

    def _open_tensors(self) -> Dict[str, torch.Tensor]:
        if self._tensors is None:
            raise DdoError(f"the attached component {self.cache_key!r} is closed")
        return self._tensors

    def _bind_message(
        self,
        module: nn.Module,
        missing: List[str],
        unexpected: List[str],
        mismatched: List[str],
        strict: bool,
    ) -> str:
        parts = []
        if strict and missing:
            parts.append(
                f"{len(missing)} missing from the component (the module has them): "
                f"{describe_names(missing)}"
            )
        if strict and unexpected:
            parts.append(
                f"{len(unexpected)} unexpected (the component has them, the module does not): "
                f"{describe_names(unexpected)}"
            )
        if mismatched:
            shown = "; ".join(mismatched[:20])
            parts.append(f"{len(mismatched)} with another shape or dtype: {shown}")
        return (
            f"cannot bind {self.cache_key!r} to {type(module).__name__}: " + "; ".join(parts)
        )

