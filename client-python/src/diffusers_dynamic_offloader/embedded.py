"""The embedded default: a private ddod started as a child of this process.

When no daemon answers, the client runs ``ddod --socket DIR/ddod.sock --parent-pid <pid>`` in a
fresh private directory. The daemon is bound to this process's lifetime in two ways: the client
stops it on :meth:`EmbeddedDaemon.stop`, on garbage collection and at interpreter exit; and
ddod itself exits when this process ends in any other way (even SIGKILL), removing its socket
and directory, because of ``--parent-pid``.

ddod's stdout and stderr go to ``DIR/ddod.log``, a file, so that ddod never blocks on a pipe
nobody reads. Once ddod serves, the file is unlinked: ddod keeps writing to it and the client
keeps it open (:meth:`EmbeddedDaemon.log_tail`), but nothing is left in the directory, so
ddod's own cleanup (it removes its socket and then rmdir()s the empty directory) leaves no
trace even when this process is SIGKILLed. While ddod runs, its log is also readable as
``/proc/<ddod pid>/fd/2``.

The private ddod does not get the runner's per-call settings (``DDO_PRESET`` and every other
``DDO_*`` variable that is not one of ddod's own process options): the runner's environment
travels with each request instead, read at every call as in the seed, so that changing or
deleting a variable later, ``environ={}`` and ``use_environment=False`` all take effect, and an
invalid value is the call's ``ValueError`` rather than a daemon that does not start.
``DDO_EMBEDDED_INHERIT_SETTINGS=1`` asks for the old behaviour: the private ddod inherits them
all and applies them as its own layer (source ``daemon``).

Environment:
    DDO_DDOD_BINARY: the ddod executable (default: ``ddod`` on PATH).
    DDO_EMBEDDED_START_TIMEOUT: seconds to wait for the daemon to serve (default 15).
    DDO_LOG_LEVEL: passed to ddod as ``--log-level``.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import tempfile
import time
import weakref
from collections import deque
from typing import BinaryIO, Dict, List, Mapping, Optional

import grpc

from ._transport import check_health, open_channel
from .addresses import SOCKET_FILE_NAME, DaemonAddress
from .errors import ConfigurationError, EmbeddedDaemonError
from .identity import identity_socket_path

BINARY_ENV_VAR = "DDO_DDOD_BINARY"
START_TIMEOUT_ENV_VAR = "DDO_EMBEDDED_START_TIMEOUT"
LOG_LEVEL_ENV_VAR = "DDO_LOG_LEVEL"
INHERIT_SETTINGS_ENV_VAR = "DDO_EMBEDDED_INHERIT_SETTINGS"
#: ddod's own process options (docs/configuration.md §1) that are no per-call setting: the
#: private ddod keeps them. Every other DDO_* variable is a per-call setting (or the client's).
DAEMON_ONLY_VARIABLES = frozenset({
    "DDO_RAM_BUDGET_GB", "DDO_STATE_DIR", "DDO_PLATFORM", "DDO_HOST_DEVICES", "DDO_LISTEN",
    "DDO_SOCKET_GROUP", "DDO_LOG_LEVEL", "DDO_MAX_LEASES_PER_USER", "DDO_MAX_UPLOADS_PER_USER",
    "DDO_MAX_SESSIONS_PER_USER", "DDO_MAX_USER_POOL_GB",
})
DEFAULT_START_TIMEOUT_S = 15.0

LOG_FILE_NAME = "ddod.log"
_POLL_INTERVAL_S = 0.02
_HEALTH_CHECK_TIMEOUT_S = 0.5
_STOP_TIMEOUT_S = 5.0
_LOG_TAIL_LINES = 20
_LOG_TAIL_MAX_BYTES = 64 * 1024


def find_ddod_binary() -> str:
    """The ddod executable: ``$DDO_DDOD_BINARY``, else ``ddod`` on PATH.

    Raises:
        EmbeddedDaemonError: neither names an executable; the message says how to get one.
    """
    configured = os.environ.get(BINARY_ENV_VAR)
    if configured:
        if os.path.isfile(configured) and os.access(configured, os.X_OK):
            return os.path.abspath(configured)
        raise EmbeddedDaemonError(
            f"{BINARY_ENV_VAR}={configured!r} is not an executable file; "
            "point it at a built ddod (e.g. build/bin/ddod) or unset it to use ddod from PATH"
        )
    found = shutil.which("ddod")
    if found:
        return found
    raise EmbeddedDaemonError(
        "no ddod executable to start a private daemon: ddod is not on PATH and "
        f"{BINARY_ENV_VAR} is not set. Install ddod (or build it: cmake -S . -B build && "
        f"cmake --build build) and put it on PATH or set {BINARY_ENV_VAR} to it; or start a "
        "shared daemon with `ddod --preset warm_process` and set DDO_DAEMON to its address"
    )


class EmbeddedDaemon:
    """A running private ddod. Create it with :meth:`start`; end it with :meth:`stop`.

    Attributes:
        directory: The private directory that holds the socket.
        socket_path: The daemon's Unix socket.
        address: The daemon's address.
    """

    def __init__(self, process: subprocess.Popen, directory: str, log: BinaryIO) -> None:
        """Takes ownership of a started ``process``, its ``directory`` and a reader of its log.

        Use :meth:`start`.
        """
        self._process = process
        self._log = log
        self.directory = directory
        self.socket_path = os.path.join(directory, SOCKET_FILE_NAME)
        self.address = DaemonAddress.unix(self.socket_path)
        # Stops the daemon at the latest when this object is collected or, through the
        # finalizer's atexit hook, when the interpreter exits.
        self._finalizer = weakref.finalize(self, _stop_process, process, directory, log)

    @classmethod
    def start(cls) -> "EmbeddedDaemon":
        """Starts a private ddod and waits until its health check reports SERVING.

        Raises:
            EmbeddedDaemonError: no binary, the daemon exited, or it did not serve in time;
                the message quotes the end of ddod's log.
            ConfigurationError: DDO_EMBEDDED_START_TIMEOUT is invalid.
        """
        binary = find_ddod_binary()
        timeout = _start_timeout()
        directory = _make_private_directory()
        log_path = os.path.join(directory, LOG_FILE_NAME)
        command = _command(binary, os.path.join(directory, SOCKET_FILE_NAME))
        try:
            with open(log_path, "wb") as log_writer:
                process = subprocess.Popen(
                    command,
                    env=child_environment(),
                    stdin=subprocess.DEVNULL,
                    stdout=log_writer,
                    stderr=subprocess.STDOUT,
                    close_fds=True,
                    start_new_session=False,
                )
        except OSError as error:
            shutil.rmtree(directory, ignore_errors=True)
            raise EmbeddedDaemonError(f"could not run {binary}: {error}") from error
        daemon = cls(process, directory, open(log_path, "rb"))
        try:
            daemon._wait_until_serving(timeout, command)
            os.unlink(log_path)
        except BaseException:
            daemon.stop()
            raise
        return daemon

    @property
    def pid(self) -> int:
        """The daemon's process id."""
        return self._process.pid

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines ddod wrote to its stdout and stderr."""
        if self._log.closed:
            return ""
        self._log.seek(0, os.SEEK_END)
        self._log.seek(max(0, self._log.tell() - _LOG_TAIL_MAX_BYTES))
        tail = deque(self._log, maxlen=lines)
        return b"".join(tail).decode("utf-8", errors="replace").rstrip("\n")

    def stop(self) -> None:
        """Stops the daemon (SIGTERM, SIGKILL after 5 s) and removes its directory. Idempotent."""
        self._finalizer()

    def _wait_until_serving(self, timeout: float, command: List[str]) -> None:
        deadline = time.monotonic() + timeout
        while True:
            exit_code = self._process.poll()
            if exit_code is not None:
                raise EmbeddedDaemonError(
                    f"the private ddod exited with code {exit_code} before serving "
                    f"({' '.join(command)}){self._log_excerpt()}"
                )
            # The identity socket too: the client's first step is to connect to it.
            if (
                os.path.exists(self.socket_path)
                and os.path.exists(identity_socket_path(self.socket_path))
                and self._serving()
            ):
                return
            if time.monotonic() >= deadline:
                raise EmbeddedDaemonError(
                    f"the private ddod (pid {self.pid}) did not serve on {self.socket_path} "
                    f"within {timeout:g} s ({START_TIMEOUT_ENV_VAR}){self._log_excerpt()}"
                )
            time.sleep(_POLL_INTERVAL_S)

    def _serving(self) -> bool:
        # A fresh channel per attempt: a failed one would wait out gRPC's reconnect backoff.
        with open_channel(self.address) as channel:
            try:
                return check_health(channel, timeout=_HEALTH_CHECK_TIMEOUT_S) == "SERVING"
            except grpc.RpcError:
                return False

    def _log_excerpt(self) -> str:
        tail = self.log_tail()
        return f"; ddod's last output:\n{tail}" if tail else "; ddod wrote nothing"


def _command(binary: str, socket_path: str) -> List[str]:
    command = [binary, "--socket", socket_path, "--parent-pid", str(os.getpid())]
    log_level = os.environ.get(LOG_LEVEL_ENV_VAR)
    if log_level:
        command += ["--log-level", log_level]
    return command


def child_environment(environ: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
    """The private ddod's environment: ``environ`` (default this process's) without the
    per-call ``DDO_*`` settings, unless DDO_EMBEDDED_INHERIT_SETTINGS asks to keep them."""
    source = dict(os.environ if environ is None else environ)
    if source.get(INHERIT_SETTINGS_ENV_VAR, "").strip().lower() in ("1", "true", "yes", "on"):
        return source
    return {name: value for name, value in source.items()
            if not name.startswith("DDO_") or name in DAEMON_ONLY_VARIABLES}


def _start_timeout() -> float:
    text = os.environ.get(START_TIMEOUT_ENV_VAR)
    if not text:
        return DEFAULT_START_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0:
        raise ConfigurationError(
            f"{START_TIMEOUT_ENV_VAR}={text!r} is not a positive number of seconds"
        )
    return value


def _make_private_directory() -> str:
    """A new 0700 directory under $XDG_RUNTIME_DIR, or under the temp dir without one (or when
    XDG_RUNTIME_DIR is not this user's own); checked after it was made.

    Raises:
        EmbeddedDaemonError: the directory made is not a directory owned by this user with
            mode 0700 (someone replaced it).
    """
    runtime_dir: Optional[str] = os.environ.get("XDG_RUNTIME_DIR") or None
    directory: Optional[str] = None
    if runtime_dir is not None and _owned_privately(runtime_dir, exact_mode=False):
        try:
            directory = tempfile.mkdtemp(prefix="ddo-embedded-", dir=runtime_dir)
        except OSError:
            pass  # XDG_RUNTIME_DIR is stale (e.g. after su); the temp dir still works.
    if directory is None:
        # mkdtemp creates the directory itself (mkdir with mode 0700, never an existing one).
        directory = tempfile.mkdtemp(prefix="ddo-embedded-")
    if not _owned_privately(directory, exact_mode=True):
        shutil.rmtree(directory, ignore_errors=True)
        raise EmbeddedDaemonError(
            f"the private directory {directory} made for ddod is not a directory of yours "
            "with mode 0700 (another user may have replaced it): not starting ddod there"
        )
    return directory


def _owned_privately(path: str, *, exact_mode: bool) -> bool:
    """True when ``path`` (not followed when a link) is a directory of this user that no one
    else may write to (``exact_mode``: with mode 0700 exactly)."""
    try:
        found = os.lstat(path)
    except OSError:
        return False
    mode = stat.S_IMODE(found.st_mode)
    return (
        stat.S_ISDIR(found.st_mode)
        and found.st_uid == os.getuid()
        and (mode == 0o700 if exact_mode else not mode & (stat.S_IWGRP | stat.S_IWOTH))
    )


def _stop_process(process: subprocess.Popen, directory: str, log: BinaryIO) -> None:
    """Ends ``process`` gracefully (SIGKILL after 5 s), reaps it and removes ``directory``."""
    if process.poll() is None:
        try:
            process.send_signal(signal.SIGTERM)
            process.wait(_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    log.close()
    shutil.rmtree(directory, ignore_errors=True)
