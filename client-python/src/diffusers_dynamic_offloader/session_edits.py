"""How a streaming session stores its module's weight edits in ddod.

The methods of :class:`SessionEdits`, a part of :class:`.streaming.StreamingSession`: a write to
a guarded weight is recorded (the session is the guards' EditListener), and before the next
forward (or at ``sync_edits()``) the edited weights are stored as a derived version of the
component (:mod:`.edit_sync`), or a version stored before is found again (:mod:`.edit_versions`),
and the session moves to it (``StreamingSession._reattach``, its life cycle).

Thread-safety: as the session (one forward at a time).
"""

from __future__ import annotations

import time

from typing import Dict, Mapping, Optional

import torch

from .errors import DaemonError
from .edit_lineage import root_state
from .edit_sync import EditSync, same_bytes, store_edits
from .shared_weights import EditListener, WeightGuard, is_guarded


class SessionEdits(EditListener):
    """Weight edits of the session's module (the module docstring). A mixin of
    StreamingSession over its state: reads ``_watch``, ``_closed``, ``_rpc``, ``_response``,
    ``_pool_views``, ``_groups``, ``_bound_tensors``, ``_bound_views``, ``_base_cache_key`` and
    calls ``_open_rpc``, ``_reattach``, ``_bind_group``; owns ``_dirty``, ``_versions``,
    ``_edit_syncs``, ``_uploaded_edit_bytes`` and ``last_sync`` (declared in
    ``StreamingSession.__init__``)."""

    def weight_written(self, written: WeightGuard) -> None:
        """A guarded weight was written (EditListener): store it before the next forward."""
        tensor = written.tensor
        if tensor is not None and self._bound_tensors.get(written.name) is tensor:
            self._dirty[written.name] = tensor

    def known_bytes(self, name: str, state: str) -> Optional[torch.Tensor]:
        """ddod's bytes of ``name`` in lineage ``state``, if a version at hand has them
        (EditListener)."""
        if self._closed or self._rpc is None:
            return None
        try:
            return self._versions.view(name, state, self.cache_key, self._pool_views)
        except (DaemonError, OSError):
            return None  # not at hand after all: the edit is computed (called mid-fuse)

    def sync_edits(self) -> Optional[Dict[str, object]]:
        """Stores the weights edited since the last sync in ddod, as a derived version of the
        component (:mod:`.edit_sync`), and moves the session to it; runs by itself before the
        next forward. Returns what it stored (also in :attr:`last_sync`), or None when no
        weight was edited.

        Raises:
            DaemonError: ddod refused to store them (RESOURCE_EXHAUSTED: no room in the pool);
                the edits stay in the module and are tried again at the next forward.
        """
        if self._watch is not None and not self._closed:
            self._dirty.update(self._watch.check())
        if not self._dirty or self._closed:
            return None
        started = time.perf_counter()
        rpc = self._open_rpc()
        dirty, self._dirty = self._dirty, {}
        try:
            current = self._versions.states(self.cache_key)
            states = {name: self._state_of(name, tensor) for name, tensor in dirty.items()}
            wanted = self._stored_version(self._with(current, states))
            changed: Dict[str, torch.Tensor] = {}
            if wanted is None:
                for name, tensor in dirty.items():
                    if (states[name] != self._versions.state(self.cache_key, name)
                            and not same_bytes(tensor, self._pool_views[name])):
                        changed[name] = tensor
                    else:
                        states[name] = self._versions.state(self.cache_key, name)
                wanted = self._stored_version(self._with(current, states))
            for name in dirty:
                if states[name] == self._versions.state(self.cache_key, name):
                    self._bind_unedited(name)
            compared = time.perf_counter()
            if wanted == self.cache_key:
                result = EditSync(0, 0, False, compared - started, self.cache_key,
                                  {"compare": compared - started})
            elif wanted is not None:
                # A version this session stored before holds these weights: nothing to upload.
                previous = self.cache_key
                steps = self._reattach(wanted)
                done = time.perf_counter()
                moved = sum(1 for name in states
                            if states[name] != self._versions.state(previous, name))
                result = EditSync(moved, 0, True, done - started, wanted,
                                  {"compare": compared - started, "reattach": done - compared,
                                   **{f"reattach_{step}": value for step, value in steps.items()}})
                self._edit_syncs += 1
            else:
                stored = store_edits(rpc, self.cache_key, self._response.component.tensors,
                                     changed)
                self._versions.add(stored.cache_key, self._with(current, states))
                attaching = time.perf_counter()
                steps = self._reattach(stored.cache_key)
                done = time.perf_counter()
                result = EditSync(stored.changed_tensors, stored.uploaded_bytes, stored.warm_hit,
                                  done - started, stored.cache_key,
                                  {"compare": compared - started, **stored.parts,
                                   "reattach": done - attaching,
                                   **{f"reattach_{step}": value for step, value in steps.items()}})
                self._edit_syncs += 1
                self._uploaded_edit_bytes += stored.uploaded_bytes
        except BaseException:
            # Nothing lost: every edit is looked at again at the next sync (ddod unreachable,
            # no room in its pool, a version it no longer has...).
            self._dirty = {**dirty, **self._dirty}
            raise
        self.last_sync = result.as_dict()
        return self.last_sync

    def _stored_version(self, states: Mapping[str, str]) -> Optional[str]:
        """The key of a version ddod holds with exactly ``states`` (kept attached from now on,
        so that it stays), or None."""
        wanted = self._versions.find(states)
        if wanted is None or wanted == self.cache_key or self._versions.hold(wanted):
            return wanted
        return None  # evicted meanwhile: stored anew

    def _bind_unedited(self, name: str) -> None:
        """Binds ``name``, whose bytes are this version's after all, to its view of them."""
        group = next(group for source, group in self._groups if source == name)
        self._bind_group(name, group, self._bound_views[name])  # ddod's copy again

    def _state_of(self, name: str, tensor: torch.Tensor) -> str:
        """The lineage state of an edited tensor (a replaced one has a state of its own)."""
        if is_guarded(tensor) and self._bound_tensors.get(name) is tensor:
            return tensor._ddo_guard.lineage.state
        return f"replaced:{id(tensor):x}:{time.monotonic_ns():x}"

    def _with(self, current: Mapping[str, str], states: Mapping[str, str]) -> Dict[str, str]:
        """The states of a version: ``current``'s with ``states`` applied (root states are
        not listed)."""
        merged = dict(current)
        for name, state in states.items():
            if state == root_state(self._base_cache_key, name):
                merged.pop(name, None)
            else:
                merged[name] = state
        return merged
