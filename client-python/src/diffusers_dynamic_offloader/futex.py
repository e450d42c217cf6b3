"""Linux futexes on shared memory, through ``syscall(2)`` and ctypes (no compiled extension).

A streaming session and ddod signal each other through 32-bit words in shared segments (the
control block and the device's doorbell, see docs/streaming.md). The futexes are *shared*: the
operations are plain ``FUTEX_WAIT`` / ``FUTEX_WAKE`` without ``FUTEX_PRIVATE_FLAG``, so the
kernel keys them by the physical page and a wake in one process reaches a waiter in another.

:func:`wait` always has a timeout: callers wait in short slices and check between them whether
the other side still lives.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform

#: The futex syscall's number per machine (asm/unistd.h).
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98, "arm64": 98}

_FUTEX_WAIT = 0
_FUTEX_WAKE = 1

#: Wakes every waiter.
WAKE_ALL = 0x7FFFFFFF


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = [
    ctypes.c_long,  # number
    ctypes.c_void_p,  # uaddr
    ctypes.c_int,  # futex_op
    ctypes.c_uint32,  # val
    ctypes.c_void_p,  # timeout (struct timespec *) or val2
    ctypes.c_void_p,  # uaddr2
    ctypes.c_uint32,  # val3
]


def _futex_number() -> int:
    machine = platform.machine()
    try:
        return _SYS_FUTEX[machine]
    except KeyError:
        raise OSError(f"no futex syscall number known for machine {machine!r}") from None


_NR_FUTEX = _futex_number()


def wait(address: int, expected: int, timeout_ns: int) -> bool:
    """Sleeps while the 32-bit word at ``address`` equals ``expected``, for at most
    ``timeout_ns`` nanoseconds (a relative timeout).

    Returns:
        True when woken (or the word already differed, or a signal interrupted the sleep);
        False when the timeout passed. Either way the caller re-reads the word.

    Raises:
        OSError: the kernel refused the call (a bad address, say).
    """
    timeout = _Timespec(timeout_ns // 1_000_000_000, timeout_ns % 1_000_000_000)
    result = _syscall(
        _NR_FUTEX, address, _FUTEX_WAIT, expected & 0xFFFFFFFF, ctypes.addressof(timeout), None, 0
    )
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code == errno.ETIMEDOUT:
        return False
    if code in (errno.EAGAIN, errno.EINTR):
        return True
    raise OSError(code, f"futex wait failed: {os.strerror(code)}")


def wake(address: int, count: int = WAKE_ALL) -> int:
    """Wakes up to ``count`` waiters on the word at ``address``; returns how many woke.

    Raises:
        OSError: the kernel refused the call.
    """
    result = _syscall(_NR_FUTEX, address, _FUTEX_WAKE, count, None, None, 0)
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"futex wake failed: {os.strerror(code)}")
    return int(result)
