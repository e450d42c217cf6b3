"""The versions of a streamed component that one session has been on, and what each holds.

A session starts on a component (its *root*) and, as the runner edits weights, moves to derived
versions of it (:mod:`.edit_sync`). For every version it has streamed, :class:`EditVersions`
remembers the lineage state (:mod:`.edit_lineage`) of each tensor that version changed, so that

- a guard can get ddod's bytes of a state (:meth:`EditVersions.view`): from the version the
  session streams, or from one it left, which is then attached on the host (copy-on-write
  mappings of ddod's memory, nothing copied) and kept, so ddod does not evict it while the
  runner may come back to it. At most :data:`KEPT_VERSIONS` are kept besides the root; the
  least recently used is let go (ddod may then evict it under pressure; its states are still
  remembered, and used again if ddod still has it);
- a sync whose weights are those of a version stored before moves the session there without
  uploading anything (:meth:`EditVersions.find`).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Dict, Mapping, Optional

import grpc
import torch

from .attached import AttachedComponent
from .edit_lineage import root_state
from .errors import DaemonError
from .rpc_channel import RpcChannel
from .store import attach

__all__ = ["EditVersions", "KEPT_VERSIONS"]

#: Versions a session keeps attached besides its root: a runner switching between two fused
#: LoRAs finds both (each holds the changed bytes in ddod's pool: a fused LoRA on every
#: Linear of a FLUX transformer is 16 GiB).
KEPT_VERSIONS = 2


class EditVersions:
    """The known versions of one session's component (not thread-safe: the session's)."""

    def __init__(self, rpc: Callable[[], RpcChannel], root_key: str) -> None:
        """``rpc`` gives the channel of the session's client (DdoError once the session is
        closed); ``root_key`` is the component the session started on."""
        self.root_key = root_key
        self._rpc = rpc
        # Version key -> the state of every tensor it changed (absent: the root's bytes).
        self._states: Dict[str, Dict[str, str]] = {root_key: {}}
        self._held: "OrderedDict[str, AttachedComponent]" = OrderedDict()

    def state(self, key: str, name: str) -> str:
        """The state of tensor ``name`` in version ``key``."""
        return self._states.get(key, {}).get(name) or root_state(self.root_key, name)

    def states(self, key: str) -> Dict[str, str]:
        """The states of the tensors version ``key`` changed (a copy)."""
        return dict(self._states.get(key, {}))

    def add(self, key: str, states: Mapping[str, str]) -> None:
        """Version ``key`` holds ``states`` (only the tensors it changed)."""
        self._states[key] = dict(states)

    @property
    def kept(self) -> "list[str]":
        """The keys of the versions kept attached, the least recently used first."""
        return list(self._held)

    def find(self, states: Mapping[str, str]) -> Optional[str]:
        """A known version that holds exactly ``states``, or None."""
        wanted = dict(states)
        return next((key for key, known in self._states.items() if known == wanted), None)

    def view(self, name: str, state: str, current_key: str,
             current_views: Mapping[str, torch.Tensor]) -> Optional[torch.Tensor]:
        """A host view of ddod's bytes of ``name`` in ``state``: from the version the session
        streams (``current_key``, whose host views are ``current_views``), else from another
        known version (attached and kept), else None."""
        if self.state(current_key, name) == state:
            return current_views.get(name)
        for key in list(self._states):
            if key != current_key and self.state(key, name) == state:
                held = self._attached(key)
                if held is not None:
                    return held.tensors.get(name)
        return None

    def close(self) -> None:
        """Lets every kept version go (tensors viewing them stay valid)."""
        held, self._held = self._held, OrderedDict()
        for attached in held.values():
            _close_quietly(attached)

    def hold(self, key: str) -> bool:
        """Keeps version ``key`` attached; False when ddod no longer has it (it is then
        forgotten)."""
        return self._attached(key) is not None

    def _attached(self, key: str) -> Optional["AttachedComponent"]:
        attached = self._held.get(key)
        if attached is not None:
            self._held.move_to_end(key)
            return attached
        try:
            attached = attach(self._rpc(), key)
        except DaemonError as error:
            if error.code != grpc.StatusCode.NOT_FOUND:
                raise
            if key != self.root_key:
                del self._states[key]  # evicted: its states name nothing ddod has
            return None
        self._held[key] = attached
        kept = [other for other in self._held if other != self.root_key]
        for other in kept[:-KEPT_VERSIONS] if len(kept) > KEPT_VERSIONS else []:
            _close_quietly(self._held.pop(other))
        return attached


def _close_quietly(attached: "AttachedComponent") -> None:
    try:
        attached.close()
    except DaemonError:
        pass  # the lease ended meanwhile: ddod detached it already
