"""The systemd units and the example configuration in deploy/ (issue 16, item 2).

``systemd-analyze verify`` checks both units (with ExecStart pointing at the ddod under test, as
it does not exist at /usr/bin here); ``systemd-analyze security --offline`` scores the system
unit's sandbox at 2.0 or lower ("SAFE"/"OK"); every flag ExecStart passes is one ddod knows; the
example /etc/ddo/ddod.conf, uncommented, is a configuration the real ddod starts with.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from support import SOURCE_ROOT, start_ddod

REPO = os.path.dirname(os.path.dirname(SOURCE_ROOT))
UNITS = os.path.join(REPO, "deploy", "systemd")
SYSTEM_UNIT = os.path.join(UNITS, "ddod.service")
USER_UNIT = os.path.join(UNITS, "ddod-user.service")
SYSTEM_SOCKET = os.path.join(UNITS, "ddod.socket")
USER_SOCKET = os.path.join(UNITS, "ddod-user.socket")
EXAMPLE_CONFIG = os.path.join(REPO, "deploy", "ddod.conf")
#: systemd-analyze security's overall exposure, at most (0 = safe, 10 = exposed).
MAX_EXPOSURE = 2.0

needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze is not installed (tools/install-deps.sh installs systemd)")


def _unit_for(binary: str, unit: str, directory: str) -> str:
    """A copy of ``unit`` whose ExecStart runs ``binary``."""
    with open(unit) as file:
        text = file.read().replace("/usr/bin/ddod", os.path.abspath(binary))
    path = os.path.join(directory, os.path.basename(unit))
    with open(path, "w") as file:
        file.write(text)
    return path


@needs_systemd_analyze
@pytest.mark.parametrize("units, scope", [((SYSTEM_UNIT, SYSTEM_SOCKET), "--system"),
                                          ((USER_UNIT, USER_SOCKET), "--user")])
def test_the_units_verify(ddod_binary, short_dir, units, scope):
    runtime = os.path.join(short_dir, "runtime")
    os.makedirs(runtime, mode=0o700, exist_ok=True)
    # The socket with its service beside it: verify checks that the socket has one to start.
    copies = [_unit_for(ddod_binary, unit, short_dir) for unit in units]
    done = subprocess.run(
        ["systemd-analyze", "verify", scope, *copies],
        capture_output=True, text=True, timeout=60, env=dict(os.environ, XDG_RUNTIME_DIR=runtime))
    assert done.returncode == 0, done.stdout + done.stderr


def _setting(unit: str, key: str) -> list:
    with open(unit) as file:
        return [line.split("=", 1)[1].strip() for line in file if line.startswith(key + "=")]


def test_the_sockets_are_the_ones_ddod_serves_on():
    # The system socket names the service's --socket; the user's, ddod's default for a user,
    # $XDG_RUNTIME_DIR/ddo/ddod.sock (daemon/config/paths.cc; %t is systemd's name for
    # $XDG_RUNTIME_DIR). ddod refuses descriptors bound elsewhere.
    exec_start = _setting(SYSTEM_UNIT, "ExecStart")[0].split()
    socket = exec_start[exec_start.index("--socket") + 1]
    assert _setting(SYSTEM_SOCKET, "ListenStream") == [socket]
    assert _setting(SYSTEM_SOCKET, "ListenSequentialPacket") == [socket + ".id"]
    assert "--socket" not in _setting(USER_UNIT, "ExecStart")[0]
    assert _setting(USER_SOCKET, "ListenStream") == ["%t/ddo/ddod.sock"]
    assert _setting(USER_SOCKET, "ListenSequentialPacket") == ["%t/ddo/ddod.sock.id"]


@needs_systemd_analyze
def test_the_system_unit_is_sandboxed():
    done = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", f"--threshold={int(MAX_EXPOSURE * 10)}",
         SYSTEM_UNIT], capture_output=True, text=True, timeout=60)
    found = re.search(r"Overall exposure level for ddod\.service: ([0-9.]+)", done.stdout)
    assert found, done.stdout + done.stderr
    assert float(found.group(1)) <= MAX_EXPOSURE, done.stdout
    assert done.returncode == 0, done.stdout + done.stderr


def _exec_start_flags(unit: str) -> list:
    with open(unit) as file:
        line = next(line for line in file if line.startswith("ExecStart="))
    return [word for word in line.split() if word.startswith("--")]


@pytest.mark.parametrize("unit", [SYSTEM_UNIT, USER_UNIT])
def test_every_exec_start_flag_is_one_ddod_knows(ddod_binary, unit):
    usage = subprocess.run([ddod_binary, "--help"], capture_output=True, text=True,
                           timeout=30).stdout
    flags = _exec_start_flags(unit)
    assert "--config" in flags
    unknown = [flag for flag in flags if not re.search(rf"^\s+{re.escape(flag)}\b", usage, re.M)]
    assert not unknown, unknown


def test_the_example_configuration_starts_ddod(ddod_binary, short_dir):
    with open(EXAMPLE_CONFIG) as file:
        lines = [line[2:] if re.match(r"# DDO_[A-Z_]+=", line) else line for line in file]
    assert sum(line.startswith("DDO_") for line in lines) >= 5, "the example lost its settings"
    config = os.path.join(short_dir, "ddod.conf")
    with open(config, "w") as file:
        file.writelines(lines)
    daemon = start_ddod(ddod_binary, os.path.join(short_dir, "d.sock"),
                        os.path.join(short_dir, "d.log"), "--config", config)
    assert daemon.terminate() == 0
