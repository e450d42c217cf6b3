"""Writes an upload's tensors into ddod's segments through their descriptors.

ddod reserves an upload's pages in ``/dev/shm`` without zeroing them; ``pwrite`` fills a page
whole without the kernel zeroing it first, where a first touch through a mapping would zero it
(on the 2-core development machine, 4 GiB written through a mapping took 8 s, with ``pwrite``
0.6 s: ``bench/bench_segment_write.py``, bench/results/2026-12-06/cpu-segment-write-4g.log).
``os.pwrite`` releases the GIL, so several threads keep the copies going while one of them makes
the next CPU copy of a GPU tensor.
"""

from __future__ import annotations

import os
import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from .errors import DdoError
from .hashing import tensor_bytes
from .shm import SegmentOpener

#: Bytes of one pwrite: bounds the time between progress updates.
PIECE_BYTES = 32 << 20
#: Writer threads at most (tmpfs takes the file's lock for each write, so more only queue).
MAX_THREADS = 4


class SegmentWriter:
    """The descriptors of an upload's segments, opened read-write once each.

    Use it as a context manager. Thread-safety: :meth:`write` may be called from several
    threads at once (pwrite has no shared file position).
    """

    def __init__(self, segments: Sequence[Tuple[str, int]], opener: SegmentOpener) -> None:
        """``segments``: ``(shm_name, size)`` of each segment, in the upload's order.

        Raises:
            DdoError: a segment cannot be opened, is not a regular file or is smaller than ddod
                said; the message names it.
        """
        self._fds: List[int] = []
        self._sizes: List[int] = []
        self._names: List[str] = []
        try:
            for name, size in segments:
                fd = opener.open(name, True, "upload segment")
                self._fds.append(fd)
                info = os.fstat(fd)
                if not stat.S_ISREG(info.st_mode) or info.st_size < size:
                    raise DdoError(
                        f"the upload segment {name} holds {info.st_size} bytes, but ddod said "
                        f"{size}"
                    )
                self._sizes.append(int(size))
                self._names.append(name)
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "SegmentWriter":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the descriptors. Idempotent."""
        for fd in self._fds:
            os.close(fd)
        self._fds = []

    def write(
        self, segment: int, offset: int, data: torch.Tensor, on_bytes: Callable[[int], None]
    ) -> None:
        """Writes the flat uint8 CPU tensor ``data`` at ``offset`` of ``segment``, a piece at a
        time, calling ``on_bytes(n)`` after each piece.

        Raises:
            DdoError: the range is outside the segment, or a write failed (a full /dev/shm).
        """
        size = data.numel()
        if offset < 0 or offset + size > self._sizes[segment]:
            raise DdoError(
                f"{size} bytes at offset {offset} do not fit the upload segment "
                f"{self._names[segment]} of {self._sizes[segment]} bytes"
            )
        view = memoryview(data.numpy()) if size else memoryview(b"")
        done = 0
        while done < size:
            end = min(size, done + PIECE_BYTES)
            try:
                written = os.pwrite(self._fds[segment], view[done:end], offset + done)
            except OSError as error:
                raise DdoError(
                    f"writing the upload segment {self._names[segment]}: {error.strerror}"
                ) from error
            if written <= 0:
                raise DdoError(f"writing the upload segment {self._names[segment]}: no progress")
            done += written
            on_bytes(written)


#: One tensor to write: (segment index, offset, the tensor as given).
Placement = Tuple[int, int, torch.Tensor]


def write_placements(
    writer: SegmentWriter,
    placements: Sequence[Placement],
    on_bytes: Optional[Callable[[int], None]] = None,
    threads: Optional[int] = None,
) -> None:
    """Writes every placement with up to ``threads`` threads (default: the CPUs, at most
    :data:`MAX_THREADS`), largest first; ``on_bytes`` is called under a lock, never twice at
    once. The first error is raised once every started write has ended."""
    count = max(1, min(threads or os.cpu_count() or 1, MAX_THREADS, len(placements) or 1))
    lock = threading.Lock()

    def report(n: int) -> None:
        if on_bytes is not None:
            with lock:
                on_bytes(n)

    def write_one(placement: Placement) -> None:
        segment, offset, tensor = placement
        writer.write(segment, offset, tensor_bytes(tensor), report)

    ordered = sorted(placements, key=lambda p: -p[2].numel() * p[2].element_size())
    if count == 1:
        for placement in ordered:
            write_one(placement)
        return
    first: Optional[BaseException] = None
    with ThreadPoolExecutor(count, thread_name_prefix="ddo-upload") as pool:
        futures = [pool.submit(write_one, p) for p in ordered]
        for future in futures:
            if future.cancelled():
                continue
            error = future.exception()
            if error is not None and first is None:
                first = error
                for pending in futures:
                    pending.cancel()  # the ones not started yet
    if first is not None:
        raise first
