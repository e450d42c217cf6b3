"""Issue 31, finding 7: squatting /tmp/ddo-<uid> clobbered a victim's file.

Without XDG_RUNTIME_DIR a user's ddod keeps its socket and lock in /tmp/ddo-<uid>, a name
anyone can take first in /tmp. ddod followed a symbolic link there (to a root-owned sticky
directory, which it accepted) and opened ``ddod.sock.lock`` with O_CREAT | O_RDWR, following a
link, then truncated it: with fs.protected_symlinks=0, a link to a file of the victim emptied
that file. Now ddod opens the directory with O_NOFOLLOW and checks what it opened (the user's,
mode 0700), opens every file in it relative to it with O_NOFOLLOW, and never writes a lock file
that is not its own; the clients refuse the squatted directory too, before they look for a
socket in it. Both name the directory and what is wrong with it.

The attack needs fs.protected_symlinks=0 (the kernel otherwise refuses to follow a link that
another user owns in a sticky directory): the test sets it for its duration and restores it,
and skips with the reason when it cannot.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from security_support import (random_suffix, run_as, serving, start_as, stop_process,
                              wait_for)

PROTECTED_SYMLINKS = "/proc/sys/fs/protected_symlinks"
PRECIOUS = b"the victim's work, not to be truncated\n"


@pytest.fixture
def unprotected_symlinks():
    """fs.protected_symlinks=0 while the test runs, as on systems that do not set it."""
    try:
        with open(PROTECTED_SYMLINKS) as current:
            before = current.read().strip()
    except OSError as error:
        pytest.skip(f"cannot read {PROTECTED_SYMLINKS}: {error}")
    if before != "0":
        done = subprocess.run(["sysctl", "-w", "fs.protected_symlinks=0"], capture_output=True,
                              text=True)
        if done.returncode != 0:
            pytest.skip("the attack needs fs.protected_symlinks=0, and it cannot be set here: "
                        + done.stderr.strip())
    try:
        yield
    finally:
        if before != "0":
            subprocess.run(["sysctl", "-w", f"fs.protected_symlinks={before}"],
                           capture_output=True, check=True)


def _remove(path: str) -> None:
    if os.path.islink(path) or os.path.isfile(path):
        os.unlink(path)
    elif os.path.isdir(path):
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=["a link to a root-owned sticky directory", "the attacker's directory"])
def squatted(request, unprotected_symlinks, attacker, victim):
    """/tmp/ddo-<victim uid> made by the attacker first, its ddod.sock.lock a link to a file of
    the victim. Yields (directory, the victim's file)."""
    directory = f"/tmp/ddo-{victim.uid}"
    _remove(directory)
    precious = os.path.join(victim.home, "precious.txt")
    with open(os.open(precious, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
        out.write(PRECIOUS)
    os.chown(precious, victim.uid, victim.gid)
    # A root-owned sticky directory like /var/tmp or /dev/shm (a private one for the test).
    sticky = f"/tmp/ddo-sec-sticky-{random_suffix()}"
    os.mkdir(sticky)
    os.chmod(sticky, 0o1777)
    link_dir = request.param.startswith("a link")
    try:
        run_as(attacker, "", f"""
            if {link_dir!r}:
                os.symlink({sticky!r}, {directory!r})
                lock = os.path.join({sticky!r}, "ddod.sock.lock")
            else:
                os.mkdir({directory!r})
                os.chmod({directory!r}, 0o777)
                lock = os.path.join({directory!r}, "ddod.sock.lock")
            os.symlink({precious!r}, lock)
            report(done=True)
        """)
        yield directory, precious
    finally:
        _remove(directory)
        shutil.rmtree(sticky, ignore_errors=True)


def _contents(path: str) -> bytes:
    with open(path, "rb") as stream:
        return stream.read()


def test_t3_7_the_victims_ddod_refuses_a_squatted_runtime_dir(squatted, ddod_binary, victim):
    directory, precious = squatted
    socket_path = os.path.join(directory, "ddod.sock")
    # The victim's own ddod, started the plain way: no --socket, no XDG_RUNTIME_DIR.
    proc = start_as(victim, socket_path, "", args=[
        ddod_binary, "--state-dir", os.path.join(victim.home, "state"), "--ram-budget-gb", "1",
        "--discard"])
    try:
        started = wait_for(lambda: proc.poll() is not None or
                           (os.path.exists(socket_path) and serving(socket_path)), 15)
        assert started, "ddod neither stopped nor served within 15 s"
        served = proc.poll() is None
    finally:
        stop_process(proc)
    output = proc.stdout.read() + proc.stderr.read()
    assert _contents(precious) == PRECIOUS, (
        f"the victim's ddod truncated the victim's file through {directory}: "
        f"{_contents(precious)!r}\n{output[-2000:]}")
    assert not served, f"the victim's ddod served in the squatted {directory}:\n{output[-2000:]}"
    assert proc.returncode != 0
    assert directory in output, output[-2000:]
    assert "symbolic link" in output or f"owned by uid" in output, output[-2000:]
    assert "another user may have created it" in output, output[-2000:]


def test_t3_7_the_victims_client_refuses_a_squatted_runtime_dir(squatted, victim):
    directory, precious = squatted
    # Even with no socket in it, and free to start a private ddod: the user learns of it.
    result = run_as(victim, "", """
        from diffusers_dynamic_offloader import DdoClient
        from diffusers_dynamic_offloader.errors import DdoError
        try:
            client = DdoClient.connect(timeout=5)
        except DdoError as error:
            report(connected=False, error=type(error).__name__, message=str(error))
        else:
            report(connected=True, address=str(client.address), embedded=client.embedded)
            client.close()
    """)
    assert _contents(precious) == PRECIOUS
    assert not result["connected"], f"the victim's client went on past {directory}: {result}"
    assert result["error"] == "UntrustedDaemonError", result
    assert directory in result["message"], result
    assert "another user may have created it" in result["message"], result


def test_t3_7_ddoctl_refuses_a_squatted_runtime_dir(squatted, victim):
    directory, precious = squatted
    ddoctl = os.environ.get("DDO_DDOCTL_BINARY") or os.path.join(
        os.path.dirname(os.path.abspath(os.environ["DDO_DDOD_BINARY"])), "ddoctl")
    if not os.access(ddoctl, os.X_OK):
        pytest.skip(f"no ddoctl at {ddoctl} (set DDO_DDOCTL_BINARY)")
    result = run_as(victim, "", f"""
        import subprocess
        done = subprocess.run([{os.path.abspath(ddoctl)!r}, "status"], capture_output=True,
                              text=True, timeout=20)
        report(code=done.returncode, output=done.stdout + done.stderr)
    """)
    assert _contents(precious) == PRECIOUS
    assert result["code"] != 0, result
    assert directory in result["output"] and "another user may have created it" in \
        result["output"], result
