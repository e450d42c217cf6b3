"""ddod's shared-memory segments, mapped into this process.

ddod names a segment with a POSIX shared-memory name (``"/ddo-1000-ab12cd34ef56-0123..."``); on
Linux that is the file ``/dev/shm/ddo-1000-...``. A client maps a segment read-write while it
holds an upload into it, and copy-on-write (``MAP_PRIVATE``) to attach: every process that
attaches reads the same physical pages, and a write (a runner editing a weight it was given)
copies the page it touches into that process's private memory, so it never reaches ddod or
another runner and never kills the writer. Memory ddod keeps changing (a session's ring) is
mapped shared and read-only instead (``copy_on_write=False``), so that every update shows.

A component may also have backing files (ddod's file tier): segments of kind
``SEGMENT_KIND_FILE``, which have no ``/dev/shm`` file. Their name is only something to ask
ddod for: ``OPEN <name> ro`` answers a read-only descriptor of the file, and this process maps
it copy-on-write (``MAP_PRIVATE``; ``backing_file=True``), its tensors at their file offsets.

A :class:`SegmentOpener` says how this process opens a segment: by its name when ddod runs as
this user (as before), otherwise, or when the file's permissions refuse it (a group member of
a root ddod, whose segments are 0600), through ddod itself, which opens the segments it granted
this process and passes the descriptor over the identity socket (``OPEN``,
:meth:`~diffusers_dynamic_offloader.identity.IdentityChannel.open_segment`).

Tensors made by :meth:`SegmentMapping.tensor` are views of the mapping, not copies. Each one
keeps the mapping alive: :meth:`SegmentMapping.close` unmaps at once when no such tensor exists
any more, and otherwise leaves the unmapping to the moment the last of them is released, so a
view never points at unmapped memory.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import stat
import sys
import warnings
from typing import Callable, Optional, Sequence

import torch

from .errors import DdoError
from ._closeable import Closeable

#: Where POSIX shared memory lives on Linux.
SHM_DIR = "/dev/shm"

#: Linux's MAP_POPULATE: an upload's pages are mapped at once, not one fault per 4 KiB written.
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0x8000)

#: Linux's MAP_NORESERVE: a copy-on-write mapping charges no commit for pages it never writes.
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000)

#: Bytes copied per step of an upload (bounds the time between progress updates).
WRITE_CHUNK_BYTES = 32 << 20


#: Asks ddod for a descriptor of a segment: ``(shm_name, writable) -> fd``.
AskDaemon = Callable[[str, bool], int]


class SegmentOpener:
    """Opens ddod's segments by name, or asks ddod for them (see the module documentation).

    Thread-safety: immutable; ``ask_daemon`` must be thread-safe (IdentityChannel's is).
    """

    def __init__(
        self, ask_daemon: Optional[AskDaemon] = None, daemon_uid: Optional[int] = None
    ) -> None:
        """``ask_daemon``: None opens by name only. ``daemon_uid``: the uid ddod runs as;
        segments are opened by name first only when it is this process's."""
        self._ask_daemon = ask_daemon
        self._daemon_uid = daemon_uid

    def open(self, shm_name: str, writable: bool, what: str = "shared-memory segment") -> int:
        """A descriptor of the segment, opened read-write or read-only; the caller closes it.

        Raises:
            DdoError: the name is invalid, or the segment cannot be opened either way; the
                message names it.
        """
        path = segment_path(shm_name)
        access = "read-write" if writable else "read-only"
        by_name = self._ask_daemon is None or self._daemon_uid == os.getuid()
        if by_name:
            flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC | os.O_NOFOLLOW
            try:
                fd = os.open(path, flags)
            except PermissionError as error:
                if self._ask_daemon is None:
                    raise DdoError(
                        f"cannot open the {what} {path} {access}: {error.strerror}"
                    ) from error
            except OSError as error:
                raise DdoError(
                    f"cannot open the {what} {path} {access}: {error.strerror}"
                ) from error
            else:
                self._check_owner(fd, path, what)
                return fd
        assert self._ask_daemon is not None
        try:
            return self._ask_daemon(shm_name, writable)
        except DdoError as error:
            raise DdoError(f"cannot open the {what} {path} {access}: {error}") from error

    def open_file(self, name: str, what: str = "backing file") -> int:
        """A read-only descriptor of a component's backing file (a segment of kind
        ``SEGMENT_KIND_FILE``), always from ddod (``OPEN <name> ro``): such a segment has no
        file to open by name, and ddod never grants it read-write. The caller closes it.

        Raises:
            DdoError: the name is invalid, this opener cannot ask ddod, or ddod refused.
        """
        segment_path(name)  # the same form as a shared-memory name
        if self._ask_daemon is None:
            raise DdoError(
                f"cannot open the {what} {name}: only ddod serves it (OPEN on the identity "
                f"socket), and this opener has no connection to ddod"
            )
        try:
            return self._ask_daemon(name, False)
        except DdoError as error:
            raise DdoError(f"cannot open the {what} {name} read-only: {error}") from error

    def _check_owner(self, fd: int, path: str, what: str) -> None:
        """A segment opened by name must be ddod's: refuses one another user created."""
        if self._daemon_uid is None:
            return
        owner = os.fstat(fd).st_uid
        if owner != self._daemon_uid:
            os.close(fd)
            raise DdoError(
                f"the {what} {path} belongs to uid {owner}, not to ddod's uid "
                f"{self._daemon_uid}: refusing to use it"
            )


#: Opens segments by name only: for code that has no client (tests, tools).
BY_NAME = SegmentOpener()


def segment_path(shm_name: str) -> str:
    """The file behind a shared-memory name: ``"/ddo-x"`` -> ``"/dev/shm/ddo-x"``.

    Raises:
        DdoError: the name is empty or has a ``/`` after its leading one.
    """
    bare = shm_name.lstrip("/")
    if not bare or "/" in bare or bare in (".", ".."):
        raise DdoError(f"ddod sent an invalid shared-memory name {shm_name!r}")
    return os.path.join(SHM_DIR, bare)


class SegmentMapping(Closeable):
    """One segment mapped into this process, read-only or read-write: every segment of ddod
    this package maps (a component's pool, an upload, a host-backend slab or ring, a session's
    control block and its device's doorbell) is opened, checked and mapped here.

    Use it as a context manager, or call :meth:`close`. Not thread-safe: one owner at a time.
    """

    def __init__(
        self,
        shm_name: str,
        size: int,
        *,
        writable: bool,
        opener: Optional[SegmentOpener] = None,
        copy_on_write: bool = True,
        what: str = "shared-memory segment",
        populate: bool = True,
        backing_file: bool = False,
    ) -> None:
        """Opens ``/dev/shm/<name>`` (through ``opener``: the client's
        ``rpc.segment_opener``; default: by name) and maps its first ``size`` bytes: read-write
        and shared when ``writable``; otherwise copy-on-write (``MAP_PRIVATE``; the segment is
        opened read-only), or shared and read-only with ``copy_on_write=False``.

        ``what`` names the segment in messages (``"control block"``...). ``populate``: a
        writable mapping maps every page at once (an upload writes them all); False for the
        small control segments, whose pages fault in as they are touched.

        ``backing_file``: the segment is a component's backing file (``SEGMENT_KIND_FILE``):
        opened through ``opener.open_file`` (always from ddod, read-only) and mapped
        copy-on-write like a segment, or ``PROT_READ`` with ``copy_on_write=False`` (a write to a
        view faults); ``writable`` must be False.

        Raises:
            DdoError: the segment does not exist, is not a regular file, is smaller than
                ``size``, or cannot be mapped; the message names it.
        """
        if backing_file and writable:
            raise DdoError(f"the {what} {shm_name} is a backing file: it is mapped read-only")
        self.name = shm_name
        self.path = shm_name if backing_file else segment_path(shm_name)
        self.size = int(size)
        self.writable = writable
        self.backing_file = backing_file
        self.copy_on_write = copy_on_write and not writable
        self._what = what
        self._populate = populate and writable
        if self.size <= 0:
            raise DdoError(f"ddod sent the {what} {shm_name!r} with size {size}")
        opener = opener or BY_NAME
        fd = opener.open_file(shm_name, what) if backing_file else opener.open(
            shm_name, writable, what
        )
        try:
            status = os.fstat(fd)
            if not stat.S_ISREG(status.st_mode):
                raise DdoError(f"the {what} {self.path} is not a regular file")
            if status.st_size < self.size:
                raise DdoError(
                    f"the {what} {self.path} holds {status.st_size} bytes, "
                    f"but ddod said {self.size}"
                )
            self._mmap: Optional[mmap.mmap] = self._map(fd)
        finally:
            os.close(fd)
        self._whole: Optional[torch.Tensor] = None
        self._unshared_refcount = sys.getrefcount(self._mmap)

    def _map(self, fd: int) -> mmap.mmap:
        if self.copy_on_write:
            try:
                return mmap.mmap(fd, self.size, flags=mmap.MAP_PRIVATE | _MAP_NORESERVE,
                                 prot=mmap.PROT_READ | mmap.PROT_WRITE)
            except OSError:
                # Strict overcommit (vm.overcommit_memory=2) charges a private mapping in full:
                # map it read-only instead (the client guards its writes).
                self.copy_on_write = False
        if self.backing_file:
            # Never shared: the file is the client's, and ddod's descriptor is read-only.
            try:
                return mmap.mmap(fd, self.size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ)
            except (OSError, ValueError) as error:
                raise DdoError(f"cannot map the {self._what} {self.path}: {error}") from error
        protection = mmap.PROT_READ | (mmap.PROT_WRITE if self.writable else 0)
        flags = mmap.MAP_SHARED | (_MAP_POPULATE if self._populate else 0)
        try:
            return mmap.mmap(fd, self.size, flags=flags, prot=protection)
        except (OSError, ValueError) as error:
            raise DdoError(f"cannot map the {self._what} {self.path}: {error}") from error

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._mmap is None

    def write(
        self,
        offset: int,
        data: torch.Tensor,
        *,
        on_bytes: Optional[Callable[[int], None]] = None,
        chunk_bytes: int = WRITE_CHUNK_BYTES,
    ) -> None:
        """Copies the flat uint8 CPU tensor ``data`` to ``offset``, ``chunk_bytes`` at a time,
        calling ``on_bytes(n)`` after each chunk.

        Raises:
            DdoError: the mapping is read-only or closed, or the bytes do not fit.
        """
        mapping = self._open_mapping()
        if not self.writable:
            raise DdoError(f"segment {self.name} is mapped read-only")
        if data.dtype != torch.uint8 or data.dim() != 1 or data.device.type != "cpu":
            raise TypeError("write() takes a flat uint8 CPU tensor")
        size = data.numel()
        self._check_range(offset, size)
        for start in range(0, size, chunk_bytes):
            length = min(chunk_bytes, size - start)
            target = torch.frombuffer(
                mapping, dtype=torch.uint8, count=length, offset=offset + start
            )
            target.copy_(data[start : start + length])
            del target  # no view of a writable mapping outlives this call
            if on_bytes is not None:
                on_bytes(length)

    def tensor(
        self, offset: int, byte_size: int, dtype: torch.dtype, shape: Sequence[int]
    ) -> torch.Tensor:
        """A zero-copy tensor of ``dtype`` and ``shape`` over ``byte_size`` bytes at ``offset``.

        On a copy-on-write mapping a write to the tensor copies the pages it touches into this
        process; on a shared read-only mapping the kernel refuses it (SIGSEGV).

        Raises:
            DdoError: the range is outside the mapping, or ``byte_size`` does not match.
        """
        mapping = self._open_mapping()
        self._check_range(offset, byte_size)
        shape = tuple(int(d) for d in shape)
        itemsize = torch.empty((), dtype=dtype).element_size()
        count = 1
        for dim in shape:
            count *= dim
        if count * itemsize != byte_size:
            raise DdoError(
                f"{byte_size} bytes at offset {offset} of {self.name} cannot hold "
                f"{dtype} {list(shape)} ({count * itemsize} bytes)"
            )
        if byte_size == 0:
            return torch.empty(shape, dtype=dtype)
        # A slice of one tensor over the whole mapping: a session makes thousands of views,
        # and torch.frombuffer per view costs tens of microseconds.
        if self._whole is None:
            with warnings.catch_warnings():
                # torch warns that it cannot protect a non-writable buffer; the kernel does.
                warnings.filterwarnings(
                    "ignore", message="The given buffer is not writable", category=UserWarning
                )
                self._whole = torch.frombuffer(mapping, dtype=torch.uint8, count=self.size)
        return self._whole[offset : offset + byte_size].view(dtype).reshape(shape)

    def u32(self, offset: int) -> ctypes.c_uint32:
        """The 32-bit word at ``offset`` as a ctypes object over the mapping: reading or
        setting its ``.value`` is one load or store of shared memory. Like a view, each word
        keeps the mapping alive."""
        return ctypes.c_uint32.from_buffer(self._open_mapping(), offset)

    def u64(self, offset: int) -> ctypes.c_uint64:
        """The unsigned 64-bit word at ``offset`` (see :meth:`u32`)."""
        return ctypes.c_uint64.from_buffer(self._open_mapping(), offset)

    def i64(self, offset: int) -> ctypes.c_int64:
        """The signed 64-bit word at ``offset`` (see :meth:`u32`)."""
        return ctypes.c_int64.from_buffer(self._open_mapping(), offset)

    def close(self) -> bool:
        """Gives up this object's hold on the mapping. Idempotent.

        Returns:
            True when the memory was unmapped now; False when tensors made by :meth:`tensor`
            (or words made by :meth:`u32`...) are still alive, in which case it is unmapped
            when the last of them is released.
        """
        if self._mmap is None:
            return True
        # Every tensor view holds a reference to the mmap object; compare with the count
        # taken the same way when nothing else held it.
        self._whole = None  # views made from it keep its storage, and so the mapping, alive
        in_use = sys.getrefcount(self._mmap) > self._unshared_refcount
        mapping, self._mmap = self._mmap, None
        if in_use:
            return False
        mapping.close()
        return True

    def __repr__(self) -> str:
        mode = (
            "file" if self.backing_file
            else "rw" if self.writable else "cow" if self.copy_on_write else "ro"
        )
        state = ", closed" if self.closed else ""
        return f"SegmentMapping({self.path!r}, {self.size} bytes, {mode}{state})"

    def _open_mapping(self) -> mmap.mmap:
        if self._mmap is None:
            raise DdoError(f"the mapping of {self.name} is closed")
        return self._mmap

    def _check_range(self, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise DdoError(
                f"bytes [{offset}, {offset + size}) are outside segment {self.name} "
                f"({self.size} bytes)"
            )
