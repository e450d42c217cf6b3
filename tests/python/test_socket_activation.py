"""ddod under socket activation (issue 16, item 2): systemd's ddod.socket binds the gRPC socket
and the identity socket and passes both (LISTEN_PID, LISTEN_FDS, descriptors 3 and 4).

The test plays systemd: it binds and listens on the two sockets itself, then starts the real
ddod through ``sh -c 'LISTEN_PID=$$ LISTEN_FDS=2 exec ddod ...'`` with the sockets at 3 and 4.
ddod must serve on them without binding its own, leave the files to systemd when it stops (a
client that connects while ddod is stopped waits in the backlog and is served at the next
start), and refuse descriptors that are not the two sockets its --socket names, saying which.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
from typing import List

import pytest

from diffusers_dynamic_offloader import DdoClient
from support import (DDOD_START_TIMEOUT_S, activate_ddod, listen_unix, start_ddod,
                     systemd_sockets, wait_until)

def _status(address: str, timeout: float = 30) -> str:
    with DdoClient.connect(address, timeout=timeout) as client:
        return client.info().version


def test_serves_on_the_sockets_systemd_passed_and_leaves_them_to_systemd(
        ddod_binary, ddoctl_binary, short_dir):
    sockets = systemd_sockets(short_dir)
    daemon = activate_ddod(ddod_binary, short_dir, sockets)
    try:
        assert _status(daemon.address)
        listed = subprocess.run([ddoctl_binary, "--daemon", daemon.address, "status"],
                                capture_output=True, text=True, timeout=30)
        assert listed.returncode == 0, listed.stderr
        assert "serving on unix:" in daemon.log() and "(socket from systemd)" in daemon.log()
        assert "identity socket" in daemon.log() and "(from systemd)" in daemon.log()
    finally:
        assert daemon.terminate() == 0, daemon.log()
    # systemd's files stay, and still take connections while ddod is stopped.
    assert os.path.exists(daemon.socket) and os.path.exists(daemon.socket + ".id")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    probe.connect(daemon.socket + ".id")
    probe.close()
    for sock in sockets:
        sock.close()


def test_a_client_that_connects_while_ddod_is_stopped_is_served_at_the_next_start(
        ddod_binary, short_dir):
    sockets = systemd_sockets(short_dir)
    address = "unix:" + os.path.join(short_dir, "ddod.sock")
    first = activate_ddod(ddod_binary, short_dir, sockets, log_name="first.log")
    try:
        assert _status(address)
    finally:
        assert first.terminate() == 0, first.log()

    # Nothing runs now; the client's connections wait in the sockets' backlogs.
    answers: List[object] = []
    waiting = threading.Thread(target=lambda: answers.append(_get(address)), daemon=True)
    waiting.start()
    waiting.join(1.0)
    assert waiting.is_alive() and not answers, "answered with no ddod running?"
    second = activate_ddod(ddod_binary, short_dir, sockets, log_name="second.log")
    try:
        waiting.join(DDOD_START_TIMEOUT_S * 3)
        assert answers and isinstance(answers[0], str), (answers, second.log())
    finally:
        assert second.terminate() == 0, second.log()
    for sock in sockets:
        sock.close()


def _get(address: str) -> object:
    try:
        return _status(address, timeout=DDOD_START_TIMEOUT_S * 3)
    except Exception as error:  # reported by the assertion in the test
        return error


@pytest.mark.parametrize("case", ["other_path", "one_socket", "identity_as_stream"])
def test_descriptors_that_do_not_match_the_socket_are_refused(ddod_binary, short_dir, case):
    path = os.path.join(short_dir, "ddod.sock")
    if case == "other_path":
        other = os.path.join(short_dir, "other.sock")
        sockets = [listen_unix(other, socket.SOCK_STREAM), listen_unix(path + ".id", socket.SOCK_SEQPACKET)]
        expected = f"bound to {other}"
    elif case == "one_socket":
        sockets = [listen_unix(path, socket.SOCK_STREAM)]
        expected = f"not the identity socket {path}.id"
    else:
        sockets = [listen_unix(path, socket.SOCK_STREAM), listen_unix(path + ".id", socket.SOCK_STREAM)]
        expected = f"SOCK_STREAM socket bound to {path}.id"
    daemon = activate_ddod(ddod_binary, short_dir, sockets)
    try:
        code = daemon.proc.wait(DDOD_START_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        daemon.proc.kill()
        pytest.fail(f"ddod served on sockets it should refuse:\n{daemon.log()}")
    assert code != 0
    assert expected in daemon.log() and f"ListenStream={path}" in daemon.log(), daemon.log()
    for sock in sockets:
        sock.close()


def test_without_listen_fds_ddod_binds_its_own_socket(ddod_binary, short_dir):
    # The same binary as a plain process: LISTEN_PID names another process, so nothing is
    # inherited (sd_listen_fds), and ddod binds, serves and removes its socket as always.
    path = os.path.join(short_dir, "ddod.sock")
    os.environ["LISTEN_PID"] = "1"
    os.environ["LISTEN_FDS"] = "2"
    try:
        daemon = start_ddod(ddod_binary, path, os.path.join(short_dir, "ddod.log"))
    finally:
        del os.environ["LISTEN_PID"], os.environ["LISTEN_FDS"]
    try:
        assert _status(daemon.address)
        assert "(socket from systemd)" not in daemon.log()
    finally:
        assert daemon.terminate() == 0
    assert wait_until(lambda: not os.path.exists(path), 5)
