"""Helpers shared by the black-box tests: starting ddod, polling, and looking at processes."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Sequence, Set, Tuple

import grpc
import pytest

import diffusers_dynamic_offloader
from diffusers_dynamic_offloader._proto import ddo_pb2_grpc
from diffusers_dynamic_offloader._transport import health_pb2, health_pb2_grpc
from diffusers_dynamic_offloader.identity import IdentityChannel, identity_socket_path

#: The directory that holds the package under test, for PYTHONPATH of child interpreters.
SOURCE_ROOT = os.path.dirname(os.path.dirname(diffusers_dynamic_offloader.__file__))

DDOD_START_TIMEOUT_S = 10.0
DDOD_STOP_TIMEOUT_S = 10.0


@dataclass
class Daemon:
    """A ddod started by a test."""

    socket: str
    proc: subprocess.Popen
    log_path: str

    @property
    def address(self) -> str:
        return f"unix:{self.socket}"

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as log:
            return log.read()

    def terminate(self, timeout: float = DDOD_STOP_TIMEOUT_S) -> int:
        """Sends SIGTERM and returns the exit code; fails the test if ddod does not exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"ddod did not exit within {timeout} s of SIGTERM; log:\n{self.log()}")


ACTIVATE_DDOD = 'LISTEN_PID=$$ LISTEN_FDS={count} exec "$0" "$@"'


def listen_unix(path: str, kind: int) -> socket.socket:
    """A listening Unix socket at ``path`` (owner-only), as systemd's ListenStream= makes one."""
    sock = socket.socket(socket.AF_UNIX, kind)
    old = os.umask(0o177)
    try:
        sock.bind(path)
    finally:
        os.umask(old)
    sock.listen(16)
    return sock


def systemd_sockets(short_dir: str) -> List[socket.socket]:
    """ddod.socket's two sockets for ``<short_dir>/ddod.sock``: gRPC, then identity."""
    path = os.path.join(short_dir, "ddod.sock")
    return [listen_unix(path, socket.SOCK_STREAM), listen_unix(path + ".id", socket.SOCK_SEQPACKET)]


def activate_ddod(binary: str, short_dir: str, sockets: Sequence[socket.socket], *args: str,
              log_name: str = "ddod.log") -> Daemon:
    """Starts ddod with ``sockets`` at descriptors 3, 4, ... as systemd passes them."""
    path = os.path.join(short_dir, "ddod.sock")
    log_path = os.path.join(short_dir, log_name)
    fds = [s.fileno() for s in sockets]

    def place_descriptors() -> None:
        # Out of the way first, so that placing one cannot overwrite another.
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in fds]
        for target, fd in enumerate(high, start=3):
            os.dup2(fd, target)  # inheritable, as systemd passes them

    command = ["/bin/sh", "-c", ACTIVATE_DDOD.format(count=len(fds)), binary, "--socket", path,
               "--log-level", "debug", *args]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                pass_fds=tuple(range(3, 3 + len(fds))),
                                preexec_fn=place_descriptors)
    return Daemon(socket=path, proc=proc, log_path=log_path)


def ddoctl_path() -> str:
    """The ddoctl under test: DDO_DDOCTL_BINARY, else the one beside DDO_DDOD_BINARY."""
    explicit = os.environ.get("DDO_DDOCTL_BINARY")
    if explicit:
        return explicit
    return os.path.join(os.path.dirname(os.environ["DDO_DDOD_BINARY"]), "ddoctl")


def start_ddod(binary: str, socket: str, log_path: str, *extra_args: str) -> Daemon:
    """Starts ddod on ``socket`` and waits until its health check reports SERVING."""
    args = [binary, "--socket", socket, "--log-level", "debug", *extra_args]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    daemon = Daemon(socket=socket, proc=proc, log_path=log_path)
    deadline = time.monotonic() + DDOD_START_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            pytest.fail(f"ddod exited with code {proc.returncode} at start:\n{daemon.log()}")
        # Serving, with its identity socket (which every client connects to first).
        if (
            os.path.exists(socket)
            and os.path.exists(identity_socket_path(socket))
            and _serving(daemon.address)
        ):
            return daemon
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"ddod did not serve within {DDOD_START_TIMEOUT_S} s:\n{daemon.log()}")
        time.sleep(0.02)


def _serving(address: str) -> bool:
    # A fresh channel per attempt: the socket may be a stale one that ddod is about to
    # replace, and a channel that failed once retries only after gRPC's reconnect backoff.
    with grpc.insecure_channel(address) as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=1
            )
        except grpc.RpcError:
            return False
    return response.status == health_pb2.HealthCheckResponse.SERVING


@contextlib.contextmanager
def ddo_stub(address: str, *, token: bool = True) -> Iterator[Any]:
    """A bare ddo.v1.Ddo stub on its own channel, bypassing DdoClient.

    With ``token`` (the default), an identity connection is opened beside it for as long as
    the stub is used, and every call carries its token (``stub.identity`` is that connection);
    without, calls carry no token.
    """
    with grpc.insecure_channel(address) as channel:
        stub = ddo_pb2_grpc.DdoStub(channel)
        if not token:
            yield stub
            return
        if not address.startswith("unix:"):
            raise ValueError(f"ddo_stub with a token needs a unix: address, not {address!r}")
        identity = IdentityChannel.connect(
            identity_socket_path(address[len("unix:"):]), timeout=10
        )
        try:
            yield TokenStub(stub, identity)
        finally:
            identity.close()


class TokenStub:
    """A DdoStub whose calls carry an identity token unless a call gives its own metadata."""

    def __init__(self, stub: ddo_pb2_grpc.DdoStub, identity: IdentityChannel) -> None:
        self._stub = stub
        self.identity = identity

    def __getattr__(self, rpc: str) -> Callable[..., Any]:
        method = getattr(self._stub, rpc)
        metadata: Tuple[Tuple[str, str], ...] = self.identity.metadata

        def call(request: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("metadata", metadata)
            return method(request, **kwargs)

        return call


def python_env(**variables: str) -> Dict[str, str]:
    """The current environment plus ``variables``, for a child interpreter that imports the
    package under test."""
    return dict(os.environ, PYTHONPATH=SOURCE_ROOT, **variables)


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.02) -> bool:
    """Polls ``predicate`` until it is true (returns True) or ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True


def process_gone(pid: int) -> bool:
    """True when ``pid`` no longer runs; a zombie (exited, not yet reaped) counts as gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as stat:
            state = stat.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def live_children(parent: int) -> Set[int]:
    """The pids of the running (not zombie) children of ``parent``."""
    children = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        if int(fields[1]) == parent and fields[0] not in ("Z", "X"):
            children.add(int(entry))
    return children


def install_fake_group_offloading(monkeypatch, record) -> None:
    """Installs a stand-in ``diffusers.hooks`` whose ``apply_group_offloading(module,
    **kwargs)`` calls ``record(module, kwargs)``: the tests see the seed route's arguments
    (diffusers is carried to the GPU machine only, where tests/gpu makes the real call)."""
    import sys
    import types

    hooks = types.ModuleType("diffusers.hooks")
    hooks.apply_group_offloading = lambda module, **kwargs: record(module, kwargs)
    package = types.ModuleType("diffusers")
    package.hooks = hooks
    monkeypatch.setitem(sys.modules, "diffusers", package)
    monkeypatch.setitem(sys.modules, "diffusers.hooks", hooks)
