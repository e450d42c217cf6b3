"""ddod as systemd's Type=notify service, against a fake NOTIFY_SOCKET (issue 16, item 2).

systemd gives a notify service the path of a datagram socket (NOTIFY_SOCKET) and, with
WatchdogSec=, the interval (WATCHDOG_USEC). The test binds such a socket itself and reads what
the real ddod sends: READY=1 with a STATUS line once it serves, WATCHDOG=1 pings, RELOADING=1
and READY=1 around a SIGHUP (which reads --config again: the log level and the DDO_* settings
layer change at once, other options wait for a restart and the STATUS line says so; a file that
does not parse changes nothing and the STATUS line says why), STOPPING=1 at SIGTERM.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from typing import List

import pytest

from diffusers_dynamic_offloader import DdoClient
from support import DDOD_START_TIMEOUT_S, Daemon

WATCHDOG_USEC = 400_000


class NotifySocket:
    """systemd's end of sd_notify: a datagram socket that collects the messages."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(path)
        self.messages: List[str] = []

    def wait_for(self, field: str, timeout: float = DDOD_START_TIMEOUT_S) -> str:
        """The next message with ``field`` (e.g. ``READY=1``); earlier ones are kept."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.socket.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                message = self.socket.recv(4096).decode()
            except socket.timeout:
                break
            self.messages.append(message)
            if field in message.split("\n"):
                return message
        raise AssertionError(f"no {field} within {timeout} s; got {self.messages}")

    def close(self) -> None:
        self.socket.close()


def _start(binary: str, short_dir: str, config: str, notify: NotifySocket) -> Daemon:
    sock = os.path.join(short_dir, "ddod.sock")
    log_path = os.path.join(short_dir, "ddod.log")
    env = dict(os.environ, NOTIFY_SOCKET=notify.path, WATCHDOG_USEC=str(WATCHDOG_USEC))
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([binary, "--socket", sock, "--config", config],
                                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env)
    return Daemon(socket=sock, proc=proc, log_path=log_path)


def _stream_unit(address: str) -> tuple:
    with DdoClient.connect(address, timeout=30) as client:
        value = client.resolve_settings(environ={}).values["DDO_STREAM_UNIT"]
    return value.value, value.source


def test_ready_watchdog_reload_and_stopping(ddod_binary, short_dir):
    config = os.path.join(short_dir, "ddod.conf")
    with open(config, "w") as file:
        file.write("# ddod's configuration\nDDO_LOG_LEVEL=info\n")
    notify = NotifySocket(os.path.join(short_dir, "notify"))
    daemon = _start(ddod_binary, short_dir, config, notify)
    try:
        ready = notify.wait_for("READY=1")
        assert f"STATUS=serving on unix:{daemon.socket}; pool 0 B of " in ready, ready
        # Pinged at half the interval, after a health check through ddod's own socket.
        notify.wait_for("WATCHDOG=1", timeout=3 * WATCHDOG_USEC / 1e6)
        assert _stream_unit(daemon.address) == ("linear", "default")

        # SIGHUP: the file again. The level and the settings layer change now; the RAM budget
        # waits for a restart.
        with open(config, "w") as file:
            file.write("DDO_LOG_LEVEL=debug\nDDO_STREAM_UNIT=block\nDDO_RAM_BUDGET_GB=1\n")
        daemon.proc.send_signal(signal.SIGHUP)
        reloading = notify.wait_for("RELOADING=1", timeout=10)
        assert "MONOTONIC_USEC=" in reloading
        ready = notify.wait_for("READY=1", timeout=10)
        assert "STATUS=reloaded; needs a restart for ram-budget-gb; serving on" in ready, ready
        assert _stream_unit(daemon.address) == ("block", "daemon")
        assert "log level info -> debug, format text -> text" in daemon.log()
        assert "ram-budget-gb changed in the configuration; it takes effect at the next start" \
            in daemon.log()

        # A file that does not parse: nothing changes, ddod says why and keeps serving.
        with open(config, "w") as file:
            file.write("DDO_STREAM_UNIT=linear\nDDO_TYPO=1\n")
        daemon.proc.send_signal(signal.SIGHUP)
        ready = notify.wait_for("READY=1", timeout=10)
        assert f"reload refused ({config}:2: DDO_TYPO is not a variable ddod reads" in ready, ready
        assert _stream_unit(daemon.address) == ("block", "daemon")
        assert daemon.proc.poll() is None

        daemon.proc.send_signal(signal.SIGTERM)
        stopping = notify.wait_for("STOPPING=1", timeout=10)
        assert "STATUS=stopping: SIGTERM" in stopping
        assert daemon.proc.wait(timeout=20) == 0
    finally:
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
        notify.close()


@pytest.mark.parametrize("contents, expected", [
    (None, "cannot open the configuration file"),
    ("DDO_LOG_LEVEL=info\nDDO_RAM_BUDGET=3\n", ":2: DDO_RAM_BUDGET is not a variable ddod reads"),
    ("DDO_LOG_LEVEL=loud\n", "DDO_LOG_LEVEL ("),
])
def test_a_bad_configuration_file_stops_the_start(ddod_binary, short_dir, contents, expected):
    config = os.path.join(short_dir, "ddod.conf")
    if contents is not None:
        with open(config, "w") as file:
            file.write(contents)
    done = subprocess.run([ddod_binary, "--socket", os.path.join(short_dir, "s.sock"),
                           "--config", config], capture_output=True, text=True, timeout=30)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert expected in done.stderr, done.stderr
    assert config in done.stderr
