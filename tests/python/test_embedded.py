"""The embedded default: a private ddod started by the client and bound to its lifetime."""

import json
import os
import select
import signal
import stat
import subprocess
import sys

import pytest

from diffusers_dynamic_offloader import (
    ConfigurationError,
    DaemonUnavailableError,
    DdoClient,
    EmbeddedDaemonError,
)
from diffusers_dynamic_offloader.addresses import default_socket_candidates
from support import live_children, process_gone, python_env, wait_until


@pytest.fixture
def no_default_daemon():
    """Default discovery must find nothing: the test's XDG_RUNTIME_DIR is empty, but the
    system socket (and, for root, the user socket) is outside the test's control."""
    for candidate in default_socket_candidates():
        if os.path.exists(candidate.socket_path):
            pytest.fail(
                f"{candidate.socket_path} exists: the embedded-default tests need no daemon on "
                "the default sockets; stop that daemon to run them",
                pytrace=False,
            )


def private_directory(client: DdoClient) -> str:
    return os.path.dirname(client.address[len("unix:") :])


def test_embedded_default_starts_and_stops_a_private_daemon(ddod_binary, no_default_daemon):
    client = DdoClient.connect()
    try:
        assert client.embedded
        pid = client.embedded_pid
        assert pid in live_children(os.getpid())
        directory = private_directory(client)
        assert os.path.dirname(directory) == os.environ["XDG_RUNTIME_DIR"]
        assert os.path.basename(directory).startswith("ddo-embedded-")
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        info = client.info()
        assert info.embedded
        assert info.parent_pid == os.getpid()
        assert info.pid == pid
        assert client.address in info.listen_addresses
        assert client.lease_id
    finally:
        client.close()
    assert wait_until(lambda: process_gone(pid), 5)
    assert not os.path.exists(directory)


def test_ddo_daemon_embedded(ddod_binary, monkeypatch):
    monkeypatch.setenv("DDO_DAEMON", "embedded")
    with DdoClient.connect() as client:
        assert client.embedded
        assert client.info().parent_pid == os.getpid()
    with pytest.raises(ConfigurationError, match="allow_embedded=False"):
        DdoClient.connect(allow_embedded=False)


def test_no_embedding_when_not_allowed(ddod_binary, no_default_daemon):
    children_before = live_children(os.getpid())
    with pytest.raises(DaemonUnavailableError) as raised:
        DdoClient.connect(allow_embedded=False)
    tried = [address for address, _ in raised.value.attempts]
    assert tried == [candidate.target for candidate in default_socket_candidates()]
    assert all(reason == "no socket file" for _, reason in raised.value.attempts)
    assert live_children(os.getpid()) == children_before


def test_private_daemon_exits_when_its_client_is_killed(ddod_binary, no_default_daemon):
    script = (
        "import json, os, time\n"
        "from diffusers_dynamic_offloader import DdoClient\n"
        "client = DdoClient.connect(timeout=10)\n"
        "directory = os.path.dirname(client.address[len('unix:'):])\n"
        "print(json.dumps({'pid': client.embedded_pid, 'dir': directory}), flush=True)\n"
        "time.sleep(60)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        env=python_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        ready, _, _ = select.select([child.stdout], [], [], 30)
        assert ready, "the client process did not report its daemon within 30 s"
        line = child.stdout.readline()
        assert line, child.stderr.read().decode(errors="replace")
        report = json.loads(line)
        assert not process_gone(report["pid"])
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        child.stderr.close()
    # The daemon was the killed process's child; init (or a subreaper) reaps it.
    assert wait_until(lambda: process_gone(report["pid"]), 3), "ddod outlived its client"
    assert wait_until(lambda: not os.path.exists(report["dir"]), 3), os.listdir(report["dir"])


def write_script(directory: str, body: str) -> str:
    path = os.path.join(directory, "fake-ddod")
    with open(path, "w") as script:
        script.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return path


def embedded_directories() -> list:
    return [name for name in os.listdir(os.environ["XDG_RUNTIME_DIR"]) if name.startswith("ddo-")]


def test_start_failure_quotes_ddods_output(short_dir, monkeypatch, no_default_daemon):
    failing = write_script(short_dir, "echo 'ddod: cannot do that (simulated)' >&2; exit 1")
    monkeypatch.setenv("DDO_DDOD_BINARY", failing)
    with pytest.raises(EmbeddedDaemonError) as raised:
        DdoClient.connect()
    message = str(raised.value)
    assert "exited with code 1" in message
    assert "ddod: cannot do that (simulated)" in message
    assert "no ddod answered at" in message  # the discovery that came first
    assert embedded_directories() == []


def test_start_timeout(short_dir, monkeypatch, no_default_daemon):
    hanging = write_script(short_dir, "echo 'starting slowly'; exec sleep 30")
    monkeypatch.setenv("DDO_DDOD_BINARY", hanging)
    monkeypatch.setenv("DDO_EMBEDDED_START_TIMEOUT", "0.5")
    children_before = live_children(os.getpid())
    with pytest.raises(EmbeddedDaemonError) as raised:
        DdoClient.connect()
    message = str(raised.value)
    assert "did not serve" in message and "DDO_EMBEDDED_START_TIMEOUT" in message
    assert "starting slowly" in message
    assert live_children(os.getpid()) == children_before
    assert embedded_directories() == []


def test_invalid_start_timeout(monkeypatch, ddod_binary, no_default_daemon):
    monkeypatch.setenv("DDO_EMBEDDED_START_TIMEOUT", "soon")
    with pytest.raises(ConfigurationError, match="DDO_EMBEDDED_START_TIMEOUT='soon'"):
        DdoClient.connect()


def test_missing_binary(short_dir, monkeypatch, no_default_daemon):
    monkeypatch.setenv("DDO_DDOD_BINARY", os.path.join(short_dir, "no-such-ddod"))
    with pytest.raises(EmbeddedDaemonError, match="DDO_DDOD_BINARY="):
        DdoClient.connect()
    monkeypatch.delenv("DDO_DDOD_BINARY")
    monkeypatch.setenv("PATH", short_dir)
    with pytest.raises(EmbeddedDaemonError, match="not on PATH") as raised:
        DdoClient.connect()
    assert "ddod --preset warm_process" in str(raised.value)
