"""Fixtures for the black-box tests of ddod and the Python client.

Every test runs against the real ddod named by DDO_DDOD_BINARY (e.g. build/bin/ddod), on
sockets in private directories under /tmp (short paths: sun_path holds 107 bytes). Each test
gets an environment of its own (XDG_RUNTIME_DIR, DDO_STATE_DIR, no DDO_DAEMON), so a daemon the
developer runs is never touched.
"""

from __future__ import annotations

import glob
import itertools
import os
import shutil
import tempfile
from typing import Callable, Iterator, List

import pytest

from diffusers_dynamic_offloader import DdoClient
from store_support import SHM_DIR, pool_namespaces
from support import Daemon, ddoctl_path, start_ddod

# Settings that would change where a client, or a ddod it starts, looks or listens.
_ISOLATED_VARIABLES = (
    "DDO_DAEMON",
    "DDO_SOCKET",
    "DDO_LISTEN",
    "DDO_SOCKET_GROUP",
    "DDO_EMBEDDED_START_TIMEOUT",
)


@pytest.fixture
def short_dir() -> Iterator[str]:
    """A private directory with a short path under /tmp, removed after the test."""
    path = tempfile.mkdtemp(prefix="ddo-t-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def isolated_environment(monkeypatch: pytest.MonkeyPatch, short_dir: str) -> None:
    """Points every per-user location of client and daemon into this test's own directory."""
    runtime_dir = os.path.join(short_dir, "xdg")
    os.mkdir(runtime_dir, 0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", runtime_dir)
    monkeypatch.setenv("DDO_STATE_DIR", os.path.join(short_dir, "state"))
    for name in _ISOLATED_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    binary = os.environ.get("DDO_DDOD_BINARY")
    if binary:
        monkeypatch.setenv("DDO_DDOD_BINARY", os.path.abspath(binary))


@pytest.fixture(autouse=True)
def remove_test_segments(short_dir: str) -> Iterator[None]:
    """After the test (and after its daemons stopped), removes the shared-memory segments of
    the pools whose state lives in this test's state directory: a ddod without --discard
    leaves its segments for the next one to adopt."""
    yield
    state_dir = os.path.join(short_dir, "state")
    for namespace in pool_namespaces(state_dir):
        pattern = os.path.join(SHM_DIR, f"ddo-{os.getuid()}-{namespace}-*")
        for path in glob.glob(pattern):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


@pytest.fixture(scope="session")
def ddod_binary() -> str:
    """The ddod under test (DDO_DDOD_BINARY); the test fails when there is none."""
    path = os.environ.get("DDO_DDOD_BINARY")
    if not path:
        pytest.fail(
            "DDO_DDOD_BINARY is not set: build ddod (tools/build.sh) and run "
            "DDO_DDOD_BINARY=build/bin/ddod PYTHONPATH=client-python/src "
            "/usr/bin/python3 -m pytest tests/python (or tools/run-tests.sh)",
            pytrace=False,
        )
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"DDO_DDOD_BINARY={path!r} is not an executable file", pytrace=False)
    return os.path.abspath(path)


@pytest.fixture
def ddoctl_binary(ddod_binary: str) -> str:
    """The ddoctl under test (DDO_DDOCTL_BINARY, else the one beside ddod)."""
    return ddoctl_path()


@pytest.fixture
def daemon_factory(ddod_binary: str, short_dir: str) -> Iterator[Callable[..., Daemon]]:
    """``start(socket, *flags)`` starts a ddod and waits until it serves. Afterwards every one
    still running gets SIGTERM and must exit with code 0."""
    started: List[Daemon] = []
    numbers = itertools.count()

    def start(socket: str, *flags: str) -> Daemon:
        log_path = os.path.join(short_dir, f"ddod-{next(numbers)}.log")
        daemon = start_ddod(ddod_binary, socket, log_path, *flags)
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        if daemon.proc.poll() is None:
            code = daemon.terminate()
            assert code == 0, f"ddod exited with {code} on SIGTERM; log:\n{daemon.log()}"


@pytest.fixture
def daemon(daemon_factory: Callable[..., Daemon], short_dir: str) -> Daemon:
    """A ddod on ``<short_dir>/run/ddod.sock``; ddod has to create ``run/`` itself."""
    return daemon_factory(os.path.join(short_dir, "run", "ddod.sock"))


@pytest.fixture
def client(daemon: Daemon) -> Iterator[DdoClient]:
    """A client of ``daemon``, closed after the test."""
    with DdoClient.connect(daemon.address, timeout=10) as connected:
        yield connected
