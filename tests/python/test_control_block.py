"""The control block and doorbell mappings, and the futex waits, without a daemon.

Each test lays out a segment in /dev/shm as docs/streaming.md (section 3) specifies it, writes
ddod's side of it from this process or a child, and checks what the runner's side reads and
how its waits end. The black-box tests of the whole protocol against ddod are in
test_streaming.py.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import struct
import subprocess
import sys
import threading
import time
import uuid
from typing import Iterator

import pytest

from diffusers_dynamic_offloader import futex
from diffusers_dynamic_offloader.control_block import (
    CONTROL_MAGIC,
    DOORBELL_MAGIC,
    ControlBlock,
    Doorbell,
)
from diffusers_dynamic_offloader.errors import (
    DaemonGoneError,
    DdoError,
    SessionClosedError,
    StreamingError,
)

K = 3
BLOCK_BYTES = 4096


class Segment:
    """A segment in /dev/shm that the test writes as ddod would."""

    def __init__(self, size: int) -> None:
        self.name = f"/ddo-test-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        self.path = "/dev/shm" + self.name
        with open(self.path, "wb") as file:
            file.truncate(size)
        with open(self.path, "r+b") as file:
            self.mmap = mmap.mmap(file.fileno(), size)

    def put(self, fmt: str, offset: int, value: int) -> None:
        struct.pack_into(fmt, self.mmap, offset, value)

    def get(self, fmt: str, offset: int) -> int:
        return struct.unpack_from(fmt, self.mmap, offset)[0]

    def remove(self) -> None:
        self.mmap.close()
        os.unlink(self.path)


def control_block_segment(daemon_pid: int) -> Segment:
    segment = Segment(BLOCK_BYTES)
    segment.put("<I", 0, CONTROL_MAGIC)
    segment.put("<I", 4, 2)
    segment.put("<I", 8, K)
    segment.put("<I", 12, 7)
    segment.put("<q", 16, daemon_pid)
    segment.put("<Q", 32, 1 << 20)
    return segment


@pytest.fixture
def segment() -> Iterator[Segment]:
    segment = control_block_segment(os.getpid())
    yield segment
    segment.remove()


@pytest.fixture
def doorbell_segment() -> Iterator[Segment]:
    segment = Segment(4096)
    segment.put("<I", 0, DOORBELL_MAGIC)
    yield segment
    segment.remove()


def test_fields_are_read_and_written_at_the_documented_offsets(segment):
    with ControlBlock(segment.name, BLOCK_BYTES) as block:
        assert (block.slots, block.units, block.daemon_pid) == (K, 7, os.getpid())
        assert block.arena_bytes == 1 << 20
        segment.put("<Q", 64, 2**40 + 5)
        segment.put("<I", 24, 12)
        segment.put("<I", 192, 0)
        segment.put("<Q", 320, 9)
        for slot in range(K + 1):
            segment.put("<Q", 1024 + 8 * slot, 100 + slot)
            segment.put("<Q", 1024 + 8 * (K + 1 + slot), 4096 * slot)
        assert block.ready.value == 2**40 + 5
        assert block.schedule_length.value == 12
        assert block.sync_done.value == 9
        assert [word.value for word in block.slot_use] == [100, 101, 102, 103]
        assert [word.value for word in block.slot_offset] == [0, 4096, 8192, 12288]
        block.consumed.value = 2**33 + 1
        block.runner_waiting.value = 1
        block.sync_unit.value = 6
        block.sync_request.value = 4
        block.skipped_uses.value, block.sync_uses.value, block.streamed_uses.value = 11, 12, 13
        assert segment.get("<Q", 128) == 2**33 + 1
        assert segment.get("<I", 196) == 1
        assert segment.get("<I", 264) == 6
        assert segment.get("<Q", 256) == 4
        assert [segment.get("<Q", offset) for offset in (384, 392, 400)] == [11, 12, 13]
    assert block.closed


def test_a_segment_that_is_not_a_control_block_is_refused(segment):
    segment.put("<I", 0, 0x12345678)
    with pytest.raises(DdoError, match="magic 0x12345678"):
        ControlBlock(segment.name, BLOCK_BYTES)
    segment.put("<I", 0, CONTROL_MAGIC)
    segment.put("<I", 4, 1)
    with pytest.raises(DdoError, match="layout version 1"):
        ControlBlock(segment.name, BLOCK_BYTES)
    segment.put("<I", 4, 2)
    segment.put("<I", 8, 400)  # slot_use and slot_offset of 401 slots do not fit 4 KiB
    with pytest.raises(DdoError, match="needs 7440"):
        ControlBlock(segment.name, BLOCK_BYTES)
    with pytest.raises(DdoError, match="cannot open"):
        ControlBlock("/ddo-test-missing-segment", BLOCK_BYTES)


def test_wait_returns_when_the_counter_is_published_from_another_thread(segment):
    with ControlBlock(segment.name, BLOCK_BYTES) as block:
        assert block.wait_until(block.ready, 0, "ready") == 0

        def publish() -> None:
            time.sleep(0.05)
            segment.put("<Q", 64, 3)
            futex.wake(block_address)

        block_address = ctypes.addressof(block.ready)
        publisher = threading.Thread(target=publish)
        publisher.start()
        started = time.monotonic()
        waited_ns = block.wait_until(block.ready, 3, "ready")
        elapsed = time.monotonic() - started
        publisher.join()
        assert 0.04 < elapsed < 0.5
        assert waited_ns >= 40_000_000
        assert block.runner_waiting.value == 0


def test_futex_wait_times_out_and_wakes_across_processes(segment):
    with ControlBlock(segment.name, BLOCK_BYTES) as block:
        address = ctypes.addressof(block.sync_done)
        started = time.monotonic()
        assert futex.wait(address, 0, 20_000_000) is False
        assert 0.015 < time.monotonic() - started < 0.5
        # A value that already differs returns at once.
        assert futex.wait(address, 1, 5_000_000_000) is True
        # A child process maps the segment, publishes sync_done = 1 and wakes the waiter.
        child = subprocess.Popen(
            [sys.executable, "-c", _WAKER, segment.path],
            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)),
        )
        try:
            started = time.monotonic()
            block.wait_until(block.sync_done, 1, "sync_done")
            assert time.monotonic() - started < 5
        finally:
            child.wait(10)
        assert child.returncode == 0


_WAKER = """
import mmap, struct, sys, time, ctypes
from diffusers_dynamic_offloader import futex
with open(sys.argv[1], "r+b") as file:
    memory = mmap.mmap(file.fileno(), 4096)
time.sleep(0.1)
struct.pack_into("<Q", memory, 320, 1)
word = ctypes.c_uint64.from_buffer(memory, 320)
futex.wake(ctypes.addressof(word))
"""


def test_a_closed_or_failed_session_ends_the_wait(segment):
    with ControlBlock(segment.name, BLOCK_BYTES) as block:
        threading.Timer(0.05, lambda: segment.put("<I", 192, 1)).start()
        started = time.monotonic()
        with pytest.raises(SessionClosedError, match="closed this streaming session"):
            block.wait_until(block.ready, 1, "ready")
        assert time.monotonic() - started < 1
        assert block.runner_waiting.value == 0
        segment.put("<I", 192, 2)
        with pytest.raises(SessionClosedError, match="failed"):
            block.wait_until(block.ready, 1, "ready")


def test_the_wait_ends_within_two_seconds_when_ddod_dies():
    # A child stands in for ddod's process: the block names its pid.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    segment = control_block_segment(child.pid)
    try:
        with ControlBlock(segment.name, BLOCK_BYTES) as block:
            threading.Timer(0.2, child.kill).start()
            started = time.monotonic()
            with pytest.raises(DaemonGoneError, match=f"pid {child.pid}"):
                block.wait_until(block.ready, 1, "ready")
            assert time.monotonic() - started < 2.2
    finally:
        child.kill()
        child.wait()
        segment.remove()


def test_a_wait_without_progress_gives_up_after_the_stall_timeout(segment):
    with ControlBlock(segment.name, BLOCK_BYTES, stall_timeout=0.2) as block:
        started = time.monotonic()
        with pytest.raises(StreamingError, match="no progress for 0.2 s: ready is 0"):
            block.wait_until(block.ready, 1, "ready")
        assert 0.15 < time.monotonic() - started < 1.5


def test_a_wrong_slot_use_is_refused(segment):
    with ControlBlock(segment.name, BLOCK_BYTES) as block:
        segment.put("<Q", 1024 + 8, 5)
        block.check_slot(1, 5, "use")
        with pytest.raises(StreamingError, match="slot 1 of the ring holds use 5, but use 9"):
            block.check_slot(1, 9, "use")


def test_the_doorbell_rings(doorbell_segment):
    with Doorbell(doorbell_segment.name) as bell:
        bell.ring_if_sleeping()
        assert doorbell_segment.get("<I", 64) == 0
        doorbell_segment.put("<I", 128, 1)
        bell.ring_if_sleeping()
        assert doorbell_segment.get("<I", 64) == 1
        # A sleeper on seq wakes when it rings.
        address = ctypes.addressof(bell.seq)
        woke = []
        sleeper = threading.Thread(
            target=lambda: woke.append(futex.wait(address, 1, 5_000_000_000))
        )
        sleeper.start()
        time.sleep(0.05)
        started = time.monotonic()
        bell.ring()
        sleeper.join()
        assert woke == [True] and time.monotonic() - started < 1
        assert doorbell_segment.get("<I", 64) == 2
    doorbell_segment.put("<I", 0, 0)
    with pytest.raises(DdoError, match="not 0x424f4444"):
        Doorbell(doorbell_segment.name)
