"""The Debian packages installed for real on this (throwaway, root) machine, then purged (issue 16,
item 1; issue 30, item 6).

``dpkg -i`` of the packages tools/package.sh built (DDO_DEB_DIR: ddod, the client libraries and
their -dev files, the Python client): ddod's maintainer script creates the
``ddo`` system user and group and enables ddod.service (deb-systemd-helper writes the
multi-user.target.wants link; without a running systemd nothing starts). The test then starts
the installed ddod the way the unit does (as ``ddo``, with the unit's ExecStart and the
directories RuntimeDirectory= and StateDirectory= make), and a member of the group ``ddo`` runs
the installed ``ddoctl status`` and the installed Python client; a user outside the group is
refused at the socket. ``dpkg --purge`` removes the programs and the state directory.

Skipped when DDO_DEB_DIR is unset (tools/run-tests.sh sets it) or when one of these packages
(or the former single ``ddo`` package) is installed already (a developer's real installation is
never touched).
"""

from __future__ import annotations

import glob
import grp
import os
import pwd
import shlex
import shutil
import subprocess
import time

import pytest

from security_support import Account, random_suffix

DEB_DIR = os.environ.get("DDO_DEB_DIR", "")
DEBS = sorted(glob.glob(os.path.join(DEB_DIR, "*.deb"))) if DEB_DIR else []
UNIT = "/lib/systemd/system/ddod.service"


def _name(deb: str) -> str:
    return subprocess.run(["dpkg-deb", "--field", deb, "Package"], capture_output=True,
                          text=True, check=True).stdout.strip()


def _installed(package: str) -> bool:
    done = subprocess.run(["dpkg-query", "-W", "-f=${Status}", package], capture_output=True,
                          text=True)
    return "install ok installed" in done.stdout


PACKAGES = [_name(deb) for deb in DEBS]

pytestmark = [
    pytest.mark.skipif(not DEB_DIR, reason="DDO_DEB_DIR is not set (tools/run-tests.sh builds "
                                           "the packages and sets it)"),
    pytest.mark.skipif(any(_installed(name) for name in ["ddo", *PACKAGES]),
                       reason="a DDO package is installed on this machine: not touched"),
]


def _exec_start() -> list:
    with open(UNIT) as unit:
        line = next(line for line in unit if line.startswith("ExecStart="))
    return shlex.split(line[len("ExecStart="):])


def _as(uid: int, gid: int, groups: list) -> dict:
    return dict(user=uid, group=gid, extra_groups=groups, cwd="/")


@pytest.fixture
def installed():
    assert "ddod" in PACKAGES and len(PACKAGES) == 5, DEBS
    done = subprocess.run(["dpkg", "-i", *DEBS], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    try:
        yield
    finally:
        subprocess.run(["dpkg", "--purge", *PACKAGES], capture_output=True, text=True,
                       timeout=300)


def test_install_creates_the_user_enables_the_service_and_members_reach_it(installed, accounts):
    service = pwd.getpwnam("ddo")
    group = grp.getgrnam("ddo")
    assert service.pw_uid < 1000 and service.pw_gid == group.gr_gid, service
    assert service.pw_dir == "/var/lib/ddo" and service.pw_shell.endswith("nologin")
    wanted = "/etc/systemd/system/multi-user.target.wants/ddod.service"
    assert os.path.islink(wanted) and os.readlink(wanted).endswith("/ddod.service"), wanted
    # Socket activation and the user units are there to turn on, not turned on.
    assert not os.path.lexists("/etc/systemd/system/sockets.target.wants/ddod.socket")
    assert not glob.glob("/etc/systemd/user/*/ddod.*")
    assert subprocess.run(["/usr/bin/ddod", "--version"], capture_output=True).returncode == 0

    # Start it as the unit would: RuntimeDirectory=ddo (0750 ddo:ddo), StateDirectory=ddo.
    command = _exec_start()
    assert command[0] == "/usr/bin/ddod" and "--config" in command, command
    for path, mode in (("/run/ddo", 0o750), ("/var/lib/ddo", 0o700)):
        os.makedirs(path, exist_ok=True)
        os.chown(path, service.pw_uid, service.pw_gid)
        os.chmod(path, mode)
    log_path = f"/tmp/ddod-deb-{random_suffix()}.log"
    with open(log_path, "wb") as log:
        daemon = subprocess.Popen(command, stdout=log, stderr=log, env={"PATH": "/usr/bin:/bin"},
                                  **_as(service.pw_uid, service.pw_gid, []))
    member = accounts.user("ddomember", extra_groups=[group.gr_gid])
    outsider = accounts.user("ddooutsider")
    try:
        deadline = time.monotonic() + 20
        while not os.path.exists("/run/ddo/ddod.sock") and time.monotonic() < deadline:
            assert daemon.poll() is None, open(log_path).read()
            time.sleep(0.05)
        env = {"PATH": "/usr/bin:/bin", "HOME": member.home, "PYTHONDONTWRITEBYTECODE": "1"}
        status = subprocess.run(["/usr/bin/ddoctl", "status"], capture_output=True, text=True,
                                timeout=60, env=env, **_as(member.uid, member.gid,
                                                           [group.gr_gid]))
        assert status.returncode == 0, status.stdout + status.stderr + open(log_path).read()
        assert "/run/ddo/ddod.sock" in status.stdout, status.stdout
        # The installed Python client, from /usr/lib/python3/dist-packages.
        client = subprocess.run(
            ["/usr/bin/python3", "-c",
             "import diffusers_dynamic_offloader as d\n"
             "with d.DdoClient.connect(allow_embedded=False) as c:\n"
             "    print(d.__file__, c.daemon_uid)"],
            capture_output=True, text=True, timeout=120, env=env,
            **_as(member.uid, member.gid, [group.gr_gid]))
        assert client.returncode == 0, client.stderr
        assert client.stdout.split() == [
            "/usr/lib/python3/dist-packages/diffusers_dynamic_offloader/__init__.py",
            str(service.pw_uid)], client.stdout
        refused = subprocess.run(["/usr/bin/ddoctl", "status"], capture_output=True, text=True,
                                 timeout=60, env=dict(env, HOME=outsider.home),
                                 **_as(outsider.uid, outsider.gid, []))
        assert refused.returncode != 0, refused.stdout
        # The member preloads a file of its own: the pool holds a segment of ddo's.
        weights = os.path.join(member.home, "w.safetensors")
        header = b'{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'
        with open(weights, "wb") as file:
            file.write(len(header).to_bytes(8, "little") + header + bytes(16))
        os.chown(weights, member.uid, member.gid)
        loaded = subprocess.run(["/usr/bin/ddoctl", "load", "member/w", weights],
                                capture_output=True, text=True, timeout=60, env=env,
                                **_as(member.uid, member.gid, [group.gr_gid]))
        assert loaded.returncode == 0, loaded.stderr
        assert _pool_segments(service.pw_uid), "the load made no segment"
    finally:
        daemon.terminate()
        assert daemon.wait(timeout=20) == 0, open(log_path).read()
        os.unlink(log_path)
    # Stopped without --discard, the pool stays warm for the next start...
    assert _pool_segments(service.pw_uid)
    # ...but removing the package takes it along: no ddod is left to adopt it.
    done = subprocess.run(["dpkg", "--remove", "ddod"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not _pool_segments(service.pw_uid), _pool_segments(service.pw_uid)


def _pool_segments(uid: int) -> list:
    return [name for name in os.listdir("/dev/shm") if name.startswith(f"ddo-{uid}-")]


def test_purge_removes_the_programs_and_the_state(installed):
    # (The fixture purges after the test; here the purge is the test.)
    done = subprocess.run(["dpkg", "--purge", *PACKAGES], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert not os.path.exists("/usr/bin/ddod") and not os.path.exists("/var/lib/ddo")
    assert not glob.glob("/usr/lib/*/libddo_client*")
    assert not os.path.exists("/usr/lib/python3/dist-packages/diffusers_dynamic_offloader")
    assert not os.path.exists("/run/ddo")
    assert not os.path.exists("/etc/ddo/ddod.conf")
    assert not os.path.exists("/etc/systemd/system/multi-user.target.wants/ddod.service")
