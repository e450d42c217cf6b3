"""The scenario table shared with the C++ consumer (client-cpp/tests/consumer_scenarios.json,
run there by consumer_scenarios_test.cc), run here against the Python RingConsumer: the same
runner steps against the same fake ddod give the same counters, learned orders and errors in
both consumers (docs/plans/issue-18-client-cpp.md, risk R6).

The fake ddod is a thread over a control block and a doorbell in /dev/shm, playing ddod's copy
worker as client-cpp/tests/fake_ddod.cc does: it serves every out-of-schedule request into slot
K, produces the schedule's uses while they are fewer than K ahead of ``consumed`` (jumping to
``consumed`` when the runner skips), and sleeps on the doorbell when there is nothing to do.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import threading
import uuid
from pathlib import Path
from typing import List, Optional

import pytest
import torch

from diffusers_dynamic_offloader import futex
from diffusers_dynamic_offloader.control_block import (
    CONTROL_MAGIC,
    CONTROL_VERSION,
    DOORBELL_MAGIC,
    ControlBlock,
    Doorbell,
)
from diffusers_dynamic_offloader.errors import (
    DaemonGoneError,
    SessionClosedError,
    StreamingError,
)
from diffusers_dynamic_offloader.ring_consumer import RingConsumer, RingViews

TABLE = Path(__file__).resolve().parents[2] / "client-cpp" / "tests" / "consumer_scenarios.json"
ARENA = 1 << 20
BLOCK_BYTES = 4096
NO_USE = (1 << 64) - 1
STATES = {"open": 0, "closed": 1, "failed": 2}


def _scenarios() -> List[dict]:
    return json.loads(TABLE.read_text())["scenarios"]


class _Segment:
    """A /dev/shm segment mapped here, as ddod maps it."""

    def __init__(self, size: int) -> None:
        self.name = f"/ddo-test-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.path = "/dev/shm" + self.name
        with open(self.path, "wb") as file:
            file.truncate(size)
        with open(self.path, "r+b") as file:
            self.mmap = mmap.mmap(file.fileno(), size)

    def u32(self, offset: int) -> ctypes.c_uint32:
        return ctypes.c_uint32.from_buffer(self.mmap, offset)

    def u64(self, offset: int) -> ctypes.c_uint64:
        return ctypes.c_uint64.from_buffer(self.mmap, offset)

    def remove(self) -> None:
        os.unlink(self.path)


class FakeDdod:
    """ddod's side of one session (see the module documentation)."""

    def __init__(self, slots: int, units: int) -> None:
        self.slots = slots
        self.block = _Segment(BLOCK_BYTES)
        self.bell = _Segment(4096)
        b = self.block
        b.u32(4).value = CONTROL_VERSION
        b.u32(8).value = slots
        b.u32(12).value = units
        ctypes.c_int64.from_buffer(b.mmap, 16).value = os.getpid()
        b.u64(32).value = ARENA
        self.slot_use = [b.u64(1024 + 8 * s) for s in range(slots + 1)]
        self.slot_offset = [b.u64(1024 + 8 * (slots + 1 + s)) for s in range(slots + 1)]
        for word in self.slot_use:
            word.value = NO_USE
        self.slot_offset[slots].value = ARENA
        self.ready, self.consumed, self.state = b.u64(64), b.u64(128), b.u32(192)
        self.runner_waiting = b.u32(196)
        self.sync_request, self.sync_unit, self.sync_done = b.u64(256), b.u32(264), b.u64(320)
        b.u32(0).value = CONTROL_MAGIC
        self.seq, self.sleeping = self.bell.u32(64), self.bell.u32(128)
        self.bell.u32(0).value = DOORBELL_MAGIC
        self.paused = False
        self.wrong_slot_use = False
        self.sync_units: List[int] = []
        self._schedule: List[int] = []
        self._next_use = 0
        self._served = 0
        self._lock = threading.Lock()
        self._stop = False
        self._thread: Optional[threading.Thread] = None

    def place_of(self, use: int) -> int:
        return (use % self.slots) * (ARENA // self.slots)

    def set_schedule(self, schedule: List[int]) -> int:
        with self._lock:
            self._schedule = list(schedule)
            self._next_use = 0
        return len(schedule)

    def set_state(self, state: int) -> None:
        self.state.value = state
        self._wake_runner()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop = True
            futex.wake(ctypes.addressof(self.seq))
            self._thread.join()
            self._thread = None

    def remove(self) -> None:
        self.stop()
        self.block.remove()
        self.bell.remove()

    def _run(self) -> None:
        while not self._stop:
            worked = False
            if not self.paused:
                worked = self._serve_request()
                worked = self._produce() or worked
            if worked:
                continue
            observed = self.seq.value
            self.sleeping.value = 1
            pending = False
            if not self.paused:
                with self._lock:
                    consumed = self.consumed.value
                    pending = self.sync_request.value > self._served or (
                        bool(self._schedule)
                        and max(self._next_use, consumed) < consumed + self.slots)
            if not pending and not self._stop:
                futex.wait(ctypes.addressof(self.seq), observed, 1_000_000)
            self.sleeping.value = 0

    def _serve_request(self) -> bool:
        request = self.sync_request.value
        if request <= self._served:
            return False
        with self._lock:
            self.sync_units.append(self.sync_unit.value)
        self.slot_use[self.slots].value = request + 1000 if self.wrong_slot_use else request
        self.sync_done.value = request
        self._served = request
        self._wake_runner()
        return True

    def _produce(self) -> bool:
        with self._lock:
            if not self._schedule:
                return False
            consumed = self.consumed.value
            use = max(self._next_use, consumed)
            if use >= consumed + self.slots:
                return False
            slot = use % self.slots
            self.slot_offset[slot].value = self.place_of(use)
            self.slot_use[slot].value = use + 1000 if self.wrong_slot_use else use
            self.ready.value = use + 1
            self._next_use = use + 1
        self._wake_runner()
        return True

    def _wake_runner(self) -> None:
        if self.runner_waiting.value:
            futex.wake(ctypes.addressof(self.ready))
            futex.wake(ctypes.addressof(self.sync_done))


def _error_type(error: Exception) -> str:
    for kind in (DaemonGoneError, SessionClosedError, StreamingError):
        if isinstance(error, kind):
            return kind.__name__
    raise error


@pytest.mark.parametrize("scenario", _scenarios(), ids=lambda scenario: scenario["name"])
def test_the_python_consumer_matches_the_table(scenario):
    spans = scenario["spans"]
    slots = scenario["slots"]
    daemon = scenario.get("daemon", {})
    ddod = FakeDdod(slots, len(spans))
    block = doorbell = None
    try:
        if scenario["schedule"]:
            ddod.set_schedule(scenario["schedule"])
        ddod.paused = daemon.get("paused", False)
        ddod.wrong_slot_use = daemon.get("wrong_slot_use", False)
        ddod.set_state(STATES[daemon.get("state", "open")])
        ddod.start()
        block = ControlBlock(ddod.block.name, BLOCK_BYTES,
                             stall_timeout=scenario.get("stall_timeout_s", 120.0))
        doorbell = Doorbell(ddod.bell.name)
        ring = torch.zeros(ARENA + max(spans), dtype=torch.uint8)
        views = RingViews(ring, [[("t", 0, span, torch.uint8, [span])] for span in spans])
        learned: List[List[int]] = []

        def send_schedule(order: List[int]) -> int:
            learned.append(list(order))
            return ddod.set_schedule(order)

        error: Optional[Exception] = None
        at = "open"
        consumer = None
        try:
            consumer = RingConsumer(block, doorbell, views, scenario["schedule"], send_schedule)
            at = "step"
            for step in scenario["steps"]:
                if isinstance(step, int):
                    consumer.tensors(step)
                elif step == "begin":
                    consumer.begin_forward()
                elif step == "end":
                    consumer.end_forward()
                elif step == "release":
                    consumer.release()
                else:
                    raise AssertionError(f"unknown step {step!r}")
        except StreamingError as raised:
            error = raised
        ddod.stop()

        expect = scenario["expect"]
        if consumer is not None:
            observed = {
                "uses": consumer.uses, "streamed_uses": consumer.streamed_uses,
                "sync_uses": consumer.sync_uses, "skipped_uses": consumer.skipped_uses,
                "bytes_used": consumer.bytes_used, "consumed": ddod.consumed.value,
                "sync_units": ddod.sync_units, "learned": learned,
            }
            for key, value in expect.items():
                if key != "error":
                    assert observed[key] == value, key
        if "error" in expect:
            assert error is not None, "no error"
            assert _error_type(error) == expect["error"]["type"]
            assert str(error) == expect["error"]["message"]
            assert at == expect["error"].get("at", "step")
        else:
            assert error is None, str(error)
    finally:
        if block is not None:
            block.close()
        if doorbell is not None:
            doorbell.close()
        ddod.remove()
