"""A streaming session's control block and its device's doorbell, mapped read-write.

ddod and the runner coordinate a session through counters in a shared-memory segment, the
*control block*, and wake ddod's copy worker through the device's *doorbell*; docs/streaming.md
(section 3) gives both layouts. Each counter has one writer. This module maps both segments and
exposes every field as a ctypes word over the mapping (``ctypes.c_uint64.from_buffer``): reading
``block.ready.value`` is one load from shared memory, cheap enough for the hot path, which reads
the counters once per Linear call.

Waiting (:meth:`ControlBlock.wait_until`) spins for a few microseconds, then sleeps on the
counter's futex in slices of about 2 ms. Between slices it checks the session's ``state`` and
whether ddod's process still lives, so a runner never waits on a dead daemon or a closed
session for more than about two seconds (:class:`DaemonGoneError`, :class:`SessionClosedError`),
and it gives up when ddod makes no progress for ``stall_timeout`` seconds.

The counters are read and written with plain loads and stores; the order that x86-64 keeps
between them is what the protocol needs. On weaker machines a stale ``slot_use`` is re-read
before it is reported (see :meth:`ControlBlock.check_slot`).

The layout has one source, the C++ header proto/wire/include/ddo/wire/control_layout.h that
ddod, the C++ client and the C++ consumer compile. The offsets here come from
``_control_layout``, a module generated from that header by tools/gen_control_layout.py and
committed, as the protobuf stubs are; tests/python/test_control_block_layout.py regenerates it
and fails when the committed file differs. Generated rather than loaded from the C++ consumer
at run time: the consumer is optional (built only where a C++ compiler is, and the pure-Python
ring is the fallback), while every runner maps the control block, and an installed client has
no header to read.
"""

from __future__ import annotations

import ctypes
import os
import time
from typing import List, Optional

from . import futex
from ._closeable import Closeable
from .errors import DaemonGoneError, DdoError, SessionClosedError, StreamingError
from .shm import SegmentMapping, SegmentOpener

from ._control_layout import (  # generated from the C++ header: see the module docstring
    CONTROL_ARENA_BYTES_OFFSET as _ARENA_BYTES,
    CONTROL_CONSUMED_OFFSET as _CONSUMED,
    CONTROL_CONSUMED_USES_OFFSET as _STAT_STREAMED,
    CONTROL_DAEMON_PID_OFFSET as _DAEMON_PID,
    CONTROL_MAGIC,
    CONTROL_MAGIC_OFFSET as _MAGIC,
    CONTROL_READY_OFFSET as _READY,
    CONTROL_RUNNER_WAITING_OFFSET as _RUNNER_WAITING,
    CONTROL_SCHEDULE_LENGTH_OFFSET as _SCHEDULE_LENGTH,
    CONTROL_SKIPPED_USES_OFFSET as _STAT_SKIPPED,
    CONTROL_SLOT_USE_OFFSET as _SLOT_USE,  # u64[K + 1], then slot_offset u64[K + 1]
    CONTROL_SLOTS_OFFSET as _SLOTS,
    CONTROL_STATE_OFFSET as _STATE,
    CONTROL_SYNC_DONE_OFFSET as _SYNC_DONE,
    CONTROL_SYNC_REQUEST_OFFSET as _SYNC_REQUEST,
    CONTROL_SYNC_UNIT_OFFSET as _SYNC_UNIT,
    CONTROL_SYNC_USES_OFFSET as _STAT_SYNC,
    CONTROL_UNITS_OFFSET as _UNITS,
    CONTROL_VERSION,
    CONTROL_VERSION_OFFSET as _VERSION,
    DOORBELL_BYTES,
    DOORBELL_DAEMON_SLEEPING_OFFSET as _BELL_SLEEPING,
    DOORBELL_MAGIC,
    DOORBELL_SEQ_OFFSET as _BELL_SEQ,
    SESSION_STATE_CLOSED as STATE_CLOSED,
    SESSION_STATE_FAILED as STATE_FAILED,
    SESSION_STATE_OPEN as STATE_OPEN,
)

#: The doorbell's magic is its first word (DoorbellView::magic reads the mapping's base).
_BELL_MAGIC = 0

#: How long a wait polls before it sleeps on the futex.
SPIN_NS = 20_000
#: How long one futex sleep lasts at most; the liveness checks run between sleeps.
SLICE_NS = 2_000_000
#: How often, at most, a wait checks ddod's process.
_PID_CHECK_NS = 100_000_000
#: The default for ``stall_timeout``: seconds without progress before a wait gives up.
DEFAULT_STALL_TIMEOUT_S = 120.0


def _map_read_write(
    shm_name: str, size: int, what: str, opener: Optional[SegmentOpener]
) -> SegmentMapping:
    """The segment mapped shared and read-write, its pages faulted in as they are touched."""
    return SegmentMapping(
        shm_name, size, writable=True, opener=opener, what=what, populate=False
    )


class Doorbell(Closeable):
    """The device's doorbell: ddod's copy worker sleeps on ``seq`` when no session has work.

    Attributes:
        seq: The futex word a runner increments to wake the worker.
        daemon_sleeping: Nonzero while the worker sleeps (or is about to).
    """

    def __init__(self, shm_name: str, *, opener: Optional[SegmentOpener] = None) -> None:
        """Maps the doorbell read-write (opened through ``opener``, default by name) and checks
        its magic.

        Raises:
            DdoError: the segment is missing, too small, or not a doorbell.
        """
        self._segment = _map_read_write(shm_name, DOORBELL_BYTES, "doorbell", opener)
        try:
            magic = self._segment.u32(_BELL_MAGIC).value
            if magic != DOORBELL_MAGIC:
                raise DdoError(
                    f"the doorbell {self._segment.path} has magic {magic:#010x}, "
                    f"not {DOORBELL_MAGIC:#010x}"
                )
        except BaseException:
            self._segment.close()
            raise
        self.seq = self._segment.u32(_BELL_SEQ)
        self.daemon_sleeping = self._segment.u32(_BELL_SLEEPING)
        self._seq_address = ctypes.addressof(self.seq)
        #: Where the doorbell is mapped, its size and name (for the C++ consumer).
        self.address = self._seq_address - _BELL_SEQ
        self.size = DOORBELL_BYTES
        self.name = self._segment.path

    def ring(self) -> None:
        """Increments ``seq`` and wakes the worker (a lost increment, when two runners ring at
        once, is harmless: the wake is what counts)."""
        self.seq.value = (self.seq.value + 1) & 0xFFFFFFFF
        futex.wake(self._seq_address)

    def ring_if_sleeping(self) -> None:
        """Rings only when the worker sleeps: what a runner does after publishing ``consumed``."""
        if self.daemon_sleeping.value:
            self.ring()

    @property
    def closed(self) -> bool:
        return self._segment.closed

    def close(self) -> None:
        """Unmaps the doorbell. Idempotent."""
        if self._segment.closed:
            return
        del self.seq, self.daemon_sleeping
        self._segment.close()


class ControlBlock(Closeable):
    """One session's control block, mapped read-write.

    The counters are ctypes words: read and write their ``.value``. ddod writes ``ready``,
    ``state``, ``sync_done``, ``slot_use`` and ``slot_offset``; the runner writes ``consumed``,
    ``runner_waiting``, ``sync_request``, ``sync_unit`` and the statistics words.

    Attributes:
        slots: K, the number of streaming slots: units of the schedule in flight at most
            (slot K serves out-of-schedule uses).
        units: The number of units.
        daemon_pid: ddod's process id.
        arena_bytes: The ring's arena; the out-of-schedule slot lies right after it.
        slot_use: ``slot_use[s]`` for s in 0..K: the use (slot K: the request) it holds.
        slot_offset: ``slot_offset[s]``: where in the ring that use's unit lies (written before
            ``slot_use``).
    """

    def __init__(
        self,
        shm_name: str,
        size: int,
        *,
        stall_timeout: float = DEFAULT_STALL_TIMEOUT_S,
        opener: Optional[SegmentOpener] = None,
    ) -> None:
        """Maps the control block and checks its magic and version.

        Args:
            shm_name: DeviceResources.control_block_shm.
            size: DeviceResources.control_block_bytes.
            stall_timeout: Seconds a wait tolerates without any progress from ddod.
            opener: How to open the segment (the client's ``rpc.segment_opener``; default: by
                name).

        Raises:
            DdoError: the segment is missing, too small for its K, or not a version 2 block.
        """
        self._segment = _map_read_write(shm_name, size, "control block", opener)
        try:
            self._check_header()
        except BaseException:
            self._segment.close()
            raise
        segment = self._segment
        self.slots: int = segment.u32(_SLOTS).value
        self.units: int = segment.u32(_UNITS).value
        self.daemon_pid: int = segment.i64(_DAEMON_PID).value
        self.arena_bytes: int = segment.u64(_ARENA_BYTES).value
        self.schedule_length = segment.u32(_SCHEDULE_LENGTH)
        self.ready = segment.u64(_READY)
        self.consumed = segment.u64(_CONSUMED)
        self.state = segment.u32(_STATE)
        self.runner_waiting = segment.u32(_RUNNER_WAITING)
        self.sync_request = segment.u64(_SYNC_REQUEST)
        self.sync_unit = segment.u32(_SYNC_UNIT)
        self.sync_done = segment.u64(_SYNC_DONE)
        self.skipped_uses = segment.u64(_STAT_SKIPPED)
        self.sync_uses = segment.u64(_STAT_SYNC)
        self.streamed_uses = segment.u64(_STAT_STREAMED)
        self.slot_use: List[ctypes.c_uint64] = [
            segment.u64(_SLOT_USE + 8 * slot) for slot in range(self.slots + 1)
        ]
        self.slot_offset: List[ctypes.c_uint64] = [
            segment.u64(_SLOT_USE + 8 * (self.slots + 1 + slot)) for slot in range(self.slots + 1)
        ]
        self.stall_timeout_ns = int(stall_timeout * 1e9)
        #: Where the block is mapped, its size and name (for the C++ consumer).
        self.address = ctypes.addressof(self.ready) - _READY
        self.size = segment.size
        self.name = segment.path
        # A ddod in another pid namespace has a pid this process cannot see: then only
        # `state` and the stall timeout end a wait.
        self._check_pid = self.daemon_pid > 0 and _process_alive(self.daemon_pid)

    def _check_header(self) -> None:
        segment = self._segment
        magic = segment.u32(_MAGIC).value
        if magic != CONTROL_MAGIC:
            raise DdoError(
                f"the control block {segment.path} has magic {magic:#010x}, "
                f"not {CONTROL_MAGIC:#010x}"
            )
        version = segment.u32(_VERSION).value
        if version != CONTROL_VERSION:
            raise DdoError(
                f"the control block {segment.path} has layout version {version}; this client "
                f"reads version {CONTROL_VERSION} (update the client or ddod)"
            )
        slots = segment.u32(_SLOTS).value
        needed = _SLOT_USE + 16 * (slots + 1)
        if slots < 1 or segment.size < needed:
            raise DdoError(
                f"the control block {segment.path} has {segment.size} bytes for K={slots} "
                f"slots; it needs {needed}"
            )

    # Waiting.

    def wait_until(self, word: ctypes.c_uint64, target: int, what: str) -> int:
        """Waits until the counter ``word`` (``ready`` or ``sync_done``) reaches ``target``.

        Returns:
            The nanoseconds spent waiting (0 when it already had).

        Raises:
            SessionClosedError: ddod closed or failed the session.
            DaemonGoneError: ddod's process ended.
            StreamingError: the counter did not move for ``stall_timeout`` seconds.
        """
        if word.value >= target:
            return 0
        clock = time.perf_counter_ns
        started = clock()
        spin_until = started + SPIN_NS
        while clock() < spin_until:
            if word.value >= target:
                return clock() - started
        address = ctypes.addressof(word)
        last_value = word.value
        last_progress = last_pid_check = clock()
        self.runner_waiting.value = 1
        try:
            while True:
                value = word.value
                if value >= target:
                    return clock() - started
                now = clock()
                self.check_state()
                if self._check_pid and now - last_pid_check >= _PID_CHECK_NS:
                    self.check_daemon()
                    last_pid_check = now
                if value != last_value:
                    last_value, last_progress = value, now
                elif now - last_progress > self.stall_timeout_ns:
                    raise StreamingError(
                        f"ddod made no progress for {self.stall_timeout_ns / 1e9:g} s: "
                        f"{what} is {value}, the runner waits for {target}"
                    )
                futex.wait(address, value, SLICE_NS)
        finally:
            self.runner_waiting.value = 0

    def check_state(self) -> None:
        """Raises SessionClosedError unless the session is open."""
        state = self.state.value
        if state == STATE_OPEN:
            return
        if state == STATE_CLOSED:
            raise SessionClosedError(
                "ddod closed this streaming session (it was detached, or ddod is stopping)"
            )
        if state == STATE_FAILED:
            raise SessionClosedError(
                "ddod marked this streaming session failed (see ddod's log for the reason)"
            )
        raise SessionClosedError(f"the session's control block has an unknown state {state}")

    def check_daemon(self) -> None:
        """Raises DaemonGoneError when ddod's process has ended."""
        if self._check_pid and not _process_alive(self.daemon_pid):
            raise DaemonGoneError(
                f"ddod (pid {self.daemon_pid}) is gone: its streaming session ended with it"
            )

    def check_slot(self, slot: int, expected: int, what: str) -> None:
        """Raises StreamingError unless ``slot_use[slot] == expected``; a mismatch is re-read
        for up to a millisecond first, in case the store has not become visible yet."""
        word = self.slot_use[slot]
        if word.value == expected:
            return
        deadline = time.perf_counter_ns() + 1_000_000
        while time.perf_counter_ns() < deadline:
            if word.value == expected:
                return
        raise StreamingError(
            f"slot {slot} of the ring holds {what} {word.value}, but {what} {expected} was "
            f"published: refusing to compute with the wrong weights"
        )

    # Lifetime.

    @property
    def closed(self) -> bool:
        return self._segment.closed

    def close(self) -> None:
        """Unmaps the control block. Idempotent; the words must not be used afterwards."""
        if self._segment.closed:
            return
        for name in (
            "schedule_length", "ready", "consumed", "state", "runner_waiting", "sync_request",
            "sync_unit", "sync_done", "skipped_uses", "sync_uses", "streamed_uses",
        ):
            delattr(self, name)
        self.slot_use = []
        self.slot_offset = []
        self._segment.close()

    def __repr__(self) -> str:
        if self.closed:
            return f"ControlBlock({self._segment.path!r}, closed)"
        return (
            f"ControlBlock({self._segment.path!r}, K={self.slots}, units={self.units}, "
            f"ready={self.ready.value}, consumed={self.consumed.value}, "
            f"state={self.state.value})"
        )


def _process_alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie (exited, not yet reaped by its parent) is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as status:
            state = status.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except FileNotFoundError:
        return False
    except (OSError, IndexError):
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
