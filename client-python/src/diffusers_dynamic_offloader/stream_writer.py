"""Writes a streamed upload's tensors into the pipes ddod made for it (docs/protocol.md,
"Streamed uploads").

ddod reads each pipe straight into the component's segment, so the bytes are copied once, by
ddod. On Linux a tensor that stays alive for the whole upload (the caller's own CPU tensor) is
not even copied into the pipe: ``vmsplice`` hands the pipe references to its pages, and ddod's
read copies from them. A temporary (the CPU copy of a GPU or strided tensor) is written with
``write``, which copies it into the pipe, since its memory may be reused as soon as the next
tensor is made. Both calls release the GIL, so one thread per stream keeps every stream busy.

Every stream is closed when its writer ends, whatever happened: ddod then sees the end of the
stream (a short one is an error it reports), and a writer blocked on a full pipe fails with
``BrokenPipeError`` once ddod closes its end.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List, Optional, Sequence

import torch

from .errors import ConfigurationError, DdoError
from .hashing import tensor_bytes

#: Bytes of one call: bounds the time between progress updates.
PIECE_BYTES = 8 << 20

#: The environment variable that sets how many streams an upload asks for; 0 writes uploads
#: through a shared-memory segment instead (copied by ddod at commit).
UPLOAD_STREAMS_ENV_VAR = "DDO_UPLOAD_STREAMS"
#: Streams an upload asks for by default, at most (one writer thread each): about what
#: saturates a host's memory bandwidth; ddod may answer fewer.
DEFAULT_MAX_STREAMS = 8
#: What ddod gives one upload at most.
MAX_STREAMS = 16


def upload_streams() -> int:
    """How many streams an upload asks for: DDO_UPLOAD_STREAMS when set (0..16), else the
    CPUs up to DEFAULT_MAX_STREAMS; 0 where this system has no pipes to write.

    Raises:
        ConfigurationError: DDO_UPLOAD_STREAMS is not an integer from 0 to 16.
    """
    text = os.environ.get(UPLOAD_STREAMS_ENV_VAR, "").strip()
    if text:
        try:
            value = int(text)
        except ValueError:
            value = -1
        if not 0 <= value <= MAX_STREAMS:
            raise ConfigurationError(
                f"{UPLOAD_STREAMS_ENV_VAR}={text!r} must be an integer from 0 (uploads through "
                f"a shared-memory segment) to {MAX_STREAMS}"
            )
        return value
    if os.name != "posix":
        return 0
    return max(1, min(os.cpu_count() or 1, DEFAULT_MAX_STREAMS))


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


def _load_vmsplice() -> Optional[Callable[..., int]]:
    """libc's vmsplice, or None where there is none (not Linux, or no libc to load)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        # The process's own symbols, libc's among them (find_library would run ldconfig).
        function = ctypes.CDLL(None, use_errno=True).vmsplice
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.POINTER(_IoVec), ctypes.c_size_t, ctypes.c_uint]
    function.restype = ctypes.c_ssize_t
    return function


_VMSPLICE = _load_vmsplice()


def _splice_pages(fd: int, address: int, size: int, on_bytes: Callable[[int], None]) -> None:
    """Hands ``size`` bytes at ``address`` to the pipe ``fd`` by reference (vmsplice)."""
    done = 0
    while done < size:
        piece = min(size - done, PIECE_BYTES)
        vector = _IoVec(address + done, piece)
        sent = _VMSPLICE(fd, ctypes.byref(vector), 1, 0)
        if sent < 0:
            error = ctypes.get_errno()
            if error == 4:  # EINTR
                continue
            raise OSError(error, os.strerror(error))
        done += sent
        on_bytes(sent)


def _write_copy(fd: int, data: torch.Tensor, on_bytes: Callable[[int], None]) -> None:
    """Copies the flat uint8 CPU tensor ``data`` into the pipe ``fd`` (write)."""
    view = memoryview(data.numpy())
    done = 0
    while done < len(view):
        sent = os.write(fd, view[done:done + PIECE_BYTES])
        done += sent
        on_bytes(sent)


def _send(fd: int, tensor: torch.Tensor, on_bytes: Callable[[int], None]) -> None:
    data = tensor_bytes(tensor)
    if data.numel() == 0:
        return
    # Only the caller's own memory may travel by reference: it outlives the upload, where a
    # temporary copy's could be reused before ddod reads it.
    shares_memory = tensor.device.type == "cpu" and data.data_ptr() == tensor.data_ptr()
    if _VMSPLICE is not None and shares_memory:
        _splice_pages(fd, data.data_ptr(), data.numel(), on_bytes)
    else:
        _write_copy(fd, data, on_bytes)


def write_streams(
    fds: Sequence[int],
    streams: Sequence[Sequence[torch.Tensor]],
    on_bytes: Optional[Callable[[int], None]] = None,
) -> None:
    """Writes ``streams[i]`` (tensors, in order) into the pipe ``fds[i]``, one thread per
    stream, and closes every descriptor (taking ownership of all of them, also on failure).
    ``on_bytes`` is called under a lock, never twice at once. Raises the first failure, as a
    :class:`DdoError` naming the stream, once every writer has ended.

    The caller keeps every tensor alive and unchanged until ddod has read the streams (its
    CommitUpload answered): the pipes may hold references to their pages until then.
    """
    lock = threading.Lock()

    def report(count: int) -> None:
        if on_bytes is not None:
            with lock:
                on_bytes(count)

    def write_one(index: int) -> None:
        try:
            for tensor in streams[index]:
                _send(fds[index], tensor, report)
        except OSError as error:
            raise DdoError(f"writing upload stream {index}: {error.strerror or error}") from error
        finally:
            os.close(fds[index])

    if len(fds) != len(streams):
        for fd in fds:
            os.close(fd)
        raise DdoError(f"{len(streams)} streams of tensors for {len(fds)} pipes")
    errors: List[BaseException] = []
    with ThreadPoolExecutor(max(1, len(fds)), thread_name_prefix="ddo-stream") as pool:
        futures = [pool.submit(write_one, index) for index in range(len(fds))]
        for future in futures:
            error = future.exception()
            if error is not None:
                errors.append(error)
    if errors:
        # A stream ddod closed (broken pipe) follows from another failure: that one is raised.
        errors.sort(key=lambda error: isinstance(error.__cause__, BrokenPipeError))
        raise errors[0]
