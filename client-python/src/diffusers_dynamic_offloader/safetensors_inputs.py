"""The files one ``load_safetensors`` call passes to ddod, opened by this process.

ddod reads safetensors files through descriptors the client opened and passed it over the
identity socket, so that it reads only what the caller can (store.load_safetensors). This
module opens them: each input resolved the way ddod resolved paths (a file, or a model folder
standing for its shards and index), refused when it is not a regular file (a FIFO, a device),
each file once, under a base name that can be passed; and it names the paths in ddod's errors,
which know the files only by those base names.

Thread-safety: a SafetensorsInputs belongs to the one call that opened it.
"""

from __future__ import annotations

import os
import stat
from typing import List, Optional, Sequence, Union

from .errors import ConfigurationError, DaemonError, IdentityError, InputFileError
from .identity import check_file_name, quote
from .rpc_channel import RpcChannel

PathArgument = Union[str, "os.PathLike[str]"]

_SAFETENSORS_SUFFIX = ".safetensors"
_INDEX_SUFFIX = ".safetensors.index.json"
# O_NONBLOCK: opening a FIFO must not wait for a writer (it is refused right after).
# O_NOCTTY: a terminal device must not become this process's controlling terminal.
_OPEN_FLAGS = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY


class _OpenedFile:
    """A file this process opened for ddod: the base name it is passed under, its path (for
    messages) and the descriptor."""

    __slots__ = ("name", "path", "fd")

    def __init__(self, name: str, path: str, fd: int) -> None:
        self.name = name
        self.path = path
        self.fd = fd


class SafetensorsInputs:
    """The files one load_safetensors call passes to ddod, opened here, resolved the way ddod
    resolved paths (daemon/store/safetensors.h, OpenSafetensorsSet): each input is a file or
    a model folder, which stands for every ``*.safetensors`` in it (sorted by name, dotfiles
    skipped, entries that are not files skipped) plus its ``*.safetensors.index.json`` when
    it holds exactly one; an explicit index overrides those; a file reached twice is passed
    once. Owns the descriptors: :meth:`close` them. Not thread-safe."""

    def __init__(self) -> None:
        self.files: List[_OpenedFile] = []
        self.index: Optional[_OpenedFile] = None
        self._seen: set = set()

    @classmethod
    def open(
        cls, paths: Sequence[PathArgument], index_file: Optional[PathArgument]
    ) -> "SafetensorsInputs":
        """Opens every input.

        Raises:
            InputFileError: an input is missing, unreadable, not a regular file or folder
                (a FIFO, a device), a folder without ``*.safetensors``, or has a name that
                cannot be passed; the message names it.
            ConfigurationError: no input, or several folders' index files apply.
        """
        inputs = [os.path.abspath(os.fspath(path)) for path in paths]
        if not inputs:
            raise ConfigurationError("load_safetensors needs at least one file or folder")
        opened = cls()
        try:
            folder_indexes: List[str] = []
            for path in inputs:
                fd = _open_input(path)
                if stat.S_ISDIR(os.fstat(fd).st_mode):
                    try:
                        found_index = opened._add_folder(path, fd)
                    finally:
                        os.close(fd)
                    if found_index is not None and found_index not in folder_indexes:
                        folder_indexes.append(found_index)
                else:
                    opened._add(path, fd)
            if index_file is not None:
                index_path = os.path.abspath(os.fspath(index_file))
                opened.index = _regular_file(index_path, _open_input(index_path))
            elif len(folder_indexes) > 1:
                raise ConfigurationError(
                    f"several index files apply ({', '.join(sorted(folder_indexes))}): load one "
                    "folder at a time or name index_file"
                )
            elif folder_indexes:
                opened.index = _regular_file(folder_indexes[0], _open_input(folder_indexes[0]))
        except BaseException:
            opened.close()
            raise
        return opened

    def pass_to(self, rpc: RpcChannel) -> "tuple[List[int], int]":
        """Passes every file over the client's identity socket; returns the handles of the
        files and of the index (0: none)."""
        everything = self.files + ([self.index] if self.index is not None else [])
        for opened in everything:  # every name is checked before anything is sent
            _check_name(opened)
        handles = [rpc.pass_file(opened.name, opened.fd) for opened in self.files]
        index_handle = rpc.pass_file(self.index.name, self.index.fd) if self.index else 0
        return handles, index_handle

    def names_and_paths(self) -> List["tuple[str, str]"]:
        """``(base name, path)`` of every file, the index last."""
        everything = self.files + ([self.index] if self.index is not None else [])
        return [(opened.name, opened.path) for opened in everything]

    def close(self) -> None:
        for opened in self.files + ([self.index] if self.index is not None else []):
            os.close(opened.fd)
        self.files, self.index = [], None

    def _add(self, path: str, fd: int) -> None:
        """Keeps ``fd`` (closing it when the file is already kept); refuses non-regular files."""
        opened = _regular_file(path, fd)
        status = os.fstat(fd)
        identity = (status.st_dev, status.st_ino)
        if identity in self._seen:
            os.close(fd)
            return
        self._seen.add(identity)
        self.files.append(opened)

    def _add_folder(self, folder: str, folder_fd: int) -> Optional[str]:
        """Opens the folder's shards (relative to ``folder_fd``, so the folder cannot be
        swapped underneath); returns its index's path when it holds exactly one."""
        shards: List[str] = []
        indexes: List[str] = []
        try:
            with os.scandir(folder_fd) as entries:
                for entry in entries:
                    name = entry.name
                    if name.startswith(".") or not name.endswith(
                        (_SAFETENSORS_SUFFIX, _INDEX_SUFFIX)
                    ):
                        continue
                    if not entry.is_file() and _is_special(entry):
                        raise InputFileError(
                            f"{_quote(os.path.join(folder, name))} is not a regular file "
                            "(a FIFO, socket or device): only regular files can be loaded"
                        )
                    if not entry.is_file():
                        continue  # as ddod did: folders and dangling links are skipped
                    if name.endswith(_SAFETENSORS_SUFFIX):
                        shards.append(name)
                    elif name.endswith(_INDEX_SUFFIX):
                        indexes.append(name)
        except OSError as error:
            raise InputFileError(f"cannot list {folder}: {error.strerror}") from error
        if not shards:
            raise InputFileError(f"{folder}: the folder holds no *.safetensors file")
        for name in sorted(shards):
            path = os.path.join(folder, name)
            self._add(path, _open_input(path, dir_fd=folder_fd, name=name))
        return os.path.join(folder, indexes[0]) if len(indexes) == 1 else None


def naming_paths(error: DaemonError, passed: List["tuple[str, str]"]) -> DaemonError:
    """``error`` with the paths of the files its message names: ddod knows the files only by
    the base names they were passed under."""
    named = [f"{name} is {_quote(path)}" for name, path in passed if name in error.details]
    if named:
        error.details = f"{error.details} ({'; '.join(named[:4])})"
        error.args = (f"ddod {error.rpc} failed: {error.code.name}: {error.details}",)
    return error


def _is_special(entry: "os.DirEntry[str]") -> bool:
    """True for a FIFO, socket or device (followed through a link); False for a folder or a
    dangling link."""
    try:
        mode = entry.stat().st_mode
    except OSError:
        return False
    return not (stat.S_ISDIR(mode) or stat.S_ISREG(mode))


def _open_input(path: str, *, dir_fd: Optional[int] = None, name: Optional[str] = None) -> int:
    try:
        return os.open(name if name is not None else path, _OPEN_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError as error:
        raise InputFileError(f"{_quote(path)}: no such file or folder") from error
    except OSError as error:
        raise InputFileError(f"cannot open {_quote(path)}: {error.strerror}") from error


def _regular_file(path: str, fd: int) -> _OpenedFile:
    """``fd`` as an _OpenedFile when it is a regular file; otherwise closes it and raises."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = (
            "a FIFO" if stat.S_ISFIFO(mode)
            else "a folder" if stat.S_ISDIR(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file"
        )
        raise InputFileError(f"{_quote(path)} is {kind}: only regular files can be loaded")
    return _OpenedFile(os.path.basename(path), path, fd)


def _check_name(opened: _OpenedFile) -> None:
    try:
        check_file_name(opened.name)
    except IdentityError as error:
        raise InputFileError(f"{_quote(opened.path)}: {error}") from None


def _quote(path: str) -> str:
    """A path for a message: as is when printable, else escaped (and cut when very long)."""
    return path if path.isprintable() and len(path) <= 1024 else quote(path, 1024)
