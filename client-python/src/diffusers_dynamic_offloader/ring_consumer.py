"""The runner's side of the streaming hot path: which ring slot holds the weights a Linear needs.

docs/streaming.md (section 4) specifies the protocol; :class:`RingConsumer` implements the
runner's part. A patched ``nn.Linear`` asks :meth:`RingConsumer.tensors` for its unit and gets
the tuple of views of that unit's tensors in the slot that holds it. The consumer holds at most
one unit at a time: asking for another unit first releases the held one (publishes ``consumed``)
and then acquires the new one, in one of three ways:

- **in schedule**: the unit is ``schedule[u mod L]``; wait until ``ready > u``, check
  ``slot_use[u mod K] == u``, use the unit where ``slot_offset[u mod K]`` says it lies (units
  pack into the ring's arena back to back, so the place of a unit changes from use to use);
- **skip**: the unit is one of the next K-1 of the schedule; publish ``consumed`` past the
  uses in between (counted as skipped), then acquire it in schedule;
- **out of schedule** (also every use of the learning forward): ask ddod for the unit through
  ``sync_request`` and the doorbell, wait for ``sync_done``, use slot K (right after the arena).

A root forward begins with :meth:`begin_forward` (which realigns the use counter to the start
of the schedule's cycle) and ends with :meth:`end_forward` (which releases the held unit and,
after the learning forward, sends the order of units it saw as the schedule).

On CUDA, ddod publishes ``ready`` only once its copy has finished, so acquiring needs no GPU
wait; releasing records the slot's interprocess "consumed" event on the current stream, which
ddod polls before it overwrites the slot. (A stream waiting on another process's event was
measured far slower: every unit became a cross-context dependency.) On the host backend both
sides are synchronous and there are no events.

Not thread-safe: one forward at a time per session.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from .compile_support import refuse_capture
from .control_block import ControlBlock, Doorbell
from .errors import StreamingError

#: A unit's tensors where they lie in the ring, in the order of its UnitLayout.
UnitViews = Tuple[torch.Tensor, ...]

_NOTHING_HELD = -1


class RingViews:
    """Zero-copy views of units placed anywhere in the ring, cached by (unit, offset).

    A view is one ``as_strided`` on the ring reinterpreted as the tensor's dtype (a few
    microseconds in Python); placements that recur hit the cache, which is cleared when it
    grows past ``max_cached`` entries.
    """

    #: ddod places units, and tensors inside units, at multiples of this (docs/streaming.md).
    ALIGNMENT = 256

    def __init__(
        self,
        ring: torch.Tensor,
        layouts: Sequence[Sequence[Tuple[str, int, int, torch.dtype, Sequence[int]]]],
        max_cached: int = 8192,
    ) -> None:
        """
        Args:
            ring: The whole ring as one uint8 tensor.
            layouts: ``layouts[unit]``: (name, offset in the unit, byte size, dtype, shape) of
                each of its tensors.
        """
        self._size = ring.numel()
        typed: Dict[torch.dtype, torch.Tensor] = {}
        # Per unit: its span and, per tensor, (ring as its dtype, shape, strides, element
        # size, offset in the unit in elements).
        self._units: List[Tuple[int, Tuple[Tuple[torch.Tensor, Tuple[int, ...], Tuple[int, ...], int, int], ...]]] = []
        for tensors in layouts:
            parts = []
            span = 0
            for name, offset, size, dtype, shape in tensors:
                itemsize = torch.empty((), dtype=dtype).element_size()
                if offset % itemsize or self.ALIGNMENT % itemsize:
                    raise StreamingError(f"{name!r} lies at offset {offset} of its unit, not "
                                         f"aligned to its {itemsize}-byte elements")
                if dtype not in typed:
                    typed[dtype] = ring[: self._size - self._size % itemsize].view(dtype)
                shape = tuple(int(d) for d in shape)
                strides = []
                stride = 1
                for dim in reversed(shape):
                    strides.append(stride)
                    stride *= max(dim, 1)
                parts.append((typed[dtype], shape, tuple(reversed(strides)), itemsize,
                              offset // itemsize))
                span = max(span, offset + size)
            self._units.append((span, tuple(parts)))
        self._cache: Dict[Tuple[int, int], UnitViews] = {}
        self._max_cached = max_cached

    @property
    def unit_count(self) -> int:
        return len(self._units)

    def span(self, unit: int) -> int:
        """The bytes ``unit`` occupies in the ring."""
        return self._units[unit][0]

    def views(self, unit: int, offset: int) -> UnitViews:
        """The views of ``unit``'s tensors with the unit at ``offset`` in the ring."""
        key = (unit, offset)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        span, parts = self._units[unit]
        if offset % self.ALIGNMENT or offset < 0 or offset + span > self._size:
            raise StreamingError(f"ddod placed unit {unit} at bytes [{offset}, {offset + span}) "
                                 f"of a {self._size}-byte ring (units lie at multiples of "
                                 f"{self.ALIGNMENT} bytes)")
        if len(parts) == 1:  # a Linear unit: the hot case
            typed, shape, strides, itemsize, first = parts[0]
            views: UnitViews = (typed.as_strided(shape, strides, offset // itemsize + first),)
        else:
            views = tuple([typed.as_strided(shape, strides, offset // itemsize + first)
                           for typed, shape, strides, itemsize, first in parts])
        if len(self._cache) >= self._max_cached:
            self._cache.clear()
        self._cache[key] = views
        return views

    def close(self) -> None:
        """Forgets the ring and every view of it (before its memory is closed)."""
        self._cache.clear()
        self._units = []


class RingEvents:
    """The CUDA interprocess "consumed" events of a session's ring, and the device whose
    current stream records them."""

    def __init__(
        self,
        device: torch.device,
        ready: Sequence["torch.cuda.Event"],
        consumed: Sequence["torch.cuda.Event"],
    ) -> None:
        self.device = device
        self.ready = list(ready)
        self.consumed = list(consumed)

    def record_consumed(self, slot: int) -> None:
        """Marks the end of the current stream's reads of ``slot``."""
        self.consumed[slot].record(torch.cuda.current_stream(self.device))


class RingConsumer:
    """Serves patched Linear modules their weights from the ring (see the module documentation).

    Statistics (plain attributes, read by :meth:`StreamingSession.stats`):
    ``uses``, ``streamed_uses``, ``sync_uses``, ``skipped_uses``, ``bytes_used`` (of the units
    acquired), ``wait_ns`` (blocked in
    waits) and ``overhead_ns`` (time in acquire and release bookkeeping, waits excluded).
    """

    def __init__(
        self,
        block: ControlBlock,
        doorbell: Doorbell,
        ring_views: RingViews,
        schedule: Sequence[int],
        send_schedule: Callable[[List[int]], int],
        events: Optional[RingEvents] = None,
    ) -> None:
        """
        Args:
            block: The session's control block.
            doorbell: The device's doorbell.
            ring_views: Views of a unit at an offset of the ring.
            schedule: The schedule ddod already knows; empty: learn it on the first forward.
            send_schedule: Sends the learned order to ddod (SetSchedule); returns the number
                of uses per cycle ddod accepted.
            events: The ring's CUDA events; None on the host backend.
        """
        self._block = block
        self._doorbell = doorbell
        self._slots = block.slots
        self._slot_offset = block.slot_offset
        self._ring_views = ring_views
        self._unit_count = ring_views.unit_count
        self._send_schedule = send_schedule
        self._events = events
        self._schedule: Tuple[int, ...] = ()
        self._length = 0
        self._learning = True
        self._order: List[int] = []
        if schedule:
            self._set_schedule(schedule)
        # The next use number u, and what is held.
        self._use = block.consumed.value
        self._held_unit = _NOTHING_HELD
        self._held_views: UnitViews = ()
        self._held_slot = 0
        self._held_streamed = False
        self._requests = block.sync_request.value
        self.uses = 0
        self.streamed_uses = 0
        self.sync_uses = 0
        self.skipped_uses = 0
        self.bytes_used = 0
        self.wait_ns = 0
        self.overhead_ns = 0

    # What the session reads.

    @property
    def schedule(self) -> Tuple[int, ...]:
        """The schedule in use (empty while it is being learned)."""
        return self._schedule

    @property
    def learning(self) -> bool:
        """True until the schedule is known."""
        return self._learning

    @property
    def held_unit(self) -> Optional[int]:
        """The unit held now, or None."""
        return None if self._held_unit == _NOTHING_HELD else self._held_unit

    # The hot path.

    def tensors(self, unit: int) -> UnitViews:
        """The views of ``unit``'s tensors in the slot that holds it, acquiring it (and
        releasing the unit held before) when it is not the held one.

        Raises:
            StreamingError: a slot holds another use than published (SessionClosedError,
                DaemonGoneError: the session or ddod ended while waiting).
        """
        if unit == self._held_unit:
            return self._held_views
        return self._switch(unit)

    def _switch(self, unit: int) -> UnitViews:
        started = time.perf_counter_ns()
        if self._events is not None:
            refuse_capture("a streamed Linear")  # before anything of the ring is captured
        if self._held_unit != _NOTHING_HELD:
            self._release()
        if self._learning:
            waited = self._acquire_out_of_schedule(unit)
            self._order.append(unit)
        else:
            schedule, length, use = self._schedule, self._length, self._use
            if schedule[use % length] != unit:
                for ahead in range(1, self._slots):
                    if schedule[(use + ahead) % length] == unit:
                        self._skip_to(use + ahead)
                        break
            if schedule[self._use % length] == unit:
                waited = self._acquire_in_schedule(unit)
            else:
                waited = self._acquire_out_of_schedule(unit)
        self.uses += 1
        self.bytes_used += self._ring_views.span(unit)
        self.wait_ns += waited
        self.overhead_ns += time.perf_counter_ns() - started - waited
        return self._held_views

    def _acquire_in_schedule(self, unit: int) -> int:
        """Holds use ``u`` (which is ``unit``) in slot ``u mod K``; returns the ns waited."""
        block, use = self._block, self._use
        slot = use % self._slots
        waited = block.wait_until(block.ready, use + 1, "ready")
        block.check_slot(slot, use, "use")
        self._held_unit = unit
        self._held_views = self._ring_views.views(unit, self._slot_offset[slot].value)
        self._held_slot = slot
        self._held_streamed = True
        return waited

    def _acquire_out_of_schedule(self, unit: int) -> int:
        """Has ddod copy ``unit`` into slot K and holds it there; returns the ns waited."""
        block, slot = self._block, self._slots
        if not 0 <= unit < self._unit_count:
            raise StreamingError(f"unit {unit} does not exist (the session has "
                                 f"{self._unit_count} units)")
        self._requests += 1
        request = self._requests
        block.sync_unit.value = unit
        block.sync_request.value = request
        self._doorbell.ring()
        waited = block.wait_until(block.sync_done, request, "sync_done")
        block.check_slot(slot, request, "request")
        self.sync_uses += 1
        block.sync_uses.value = self.sync_uses
        self._held_unit = unit
        self._held_views = self._ring_views.views(unit, self._slot_offset[slot].value)
        self._held_slot = slot
        self._held_streamed = False
        return waited

    def _release(self) -> None:
        """Gives the held slot back: records its consumed event and, for a use of the
        schedule, publishes ``consumed``."""
        if self._events is not None:
            self._events.record_consumed(self._held_slot)
        self._held_unit = _NOTHING_HELD
        self._held_views = ()
        if self._held_streamed:
            self._use += 1
            self.streamed_uses += 1
            block = self._block
            block.consumed.value = self._use
            block.streamed_uses.value = self.streamed_uses
            self._doorbell.ring_if_sleeping()

    def _skip_to(self, use: int) -> None:
        """Declares the uses before ``use`` done without using them."""
        self.skipped_uses += use - self._use
        self._use = use
        block = self._block
        block.consumed.value = use
        block.skipped_uses.value = self.skipped_uses
        self._doorbell.ring_if_sleeping()

    # Forward boundaries.

    def begin_forward(self) -> None:
        """Called when the root module's forward starts: releases a unit left held (by a
        forward that raised) and skips to the start of the next cycle when the last forward
        ended mid-cycle."""
        if self._held_unit != _NOTHING_HELD:
            self._release()
        if self._learning:
            self._order = []
        elif self._use % self._length:
            self._skip_to((self._use // self._length + 1) * self._length)

    def end_forward(self) -> None:
        """Called when the root module's forward returns: releases the held unit; after the
        learning forward, sends the schedule."""
        self.release()
        if self._learning and self._order:
            order = self._order
            self._order = []
            accepted = self._send_schedule(order)
            if accepted != len(order):
                raise StreamingError(
                    f"ddod accepted a schedule of {accepted} uses per cycle, but the runner "
                    f"sent {len(order)}"
                )
            self._set_schedule(order)
            self._use = 0

    def release(self) -> None:
        """Releases the held unit, if any."""
        if self._held_unit != _NOTHING_HELD:
            self._release()

    def _set_schedule(self, schedule: Sequence[int]) -> None:
        bad = [unit for unit in schedule if not 0 <= unit < self._unit_count]
        if bad:
            raise StreamingError(
                f"the schedule names units {bad[:10]} that do not exist (the session has "
                f"{self._unit_count} units)"
            )
        self._schedule = tuple(int(unit) for unit in schedule)
        self._length = len(self._schedule)
        self._learning = False

    def drop_views(self) -> None:
        """Forgets every view of the ring (before its memory is closed)."""
        self._ring_views.close()
        self._held_unit = _NOTHING_HELD
        self._held_views = ()

    def statistics(self) -> Dict[str, Union[int, float]]:
        """The counters, with the mean overhead per acquired unit in microseconds."""
        return {
            "uses": self.uses,
            "streamed_uses": self.streamed_uses,
            "sync_uses": self.sync_uses,
            "skipped_uses": self.skipped_uses,
            "bytes_used": self.bytes_used,
            "wait_seconds": self.wait_ns / 1e9,
            "overhead_us_per_unit": (self.overhead_ns / self.uses / 1e3) if self.uses else 0.0,
        }
