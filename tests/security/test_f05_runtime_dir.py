"""Finding 5: without XDG_RUNTIME_DIR the client looks for /tmp/ddo-<uid>/ddod.sock, and another
user who creates that directory first serves the victim's runners with a ddod of its own.

Now the client refuses a daemon, socket or directory owned by an untrusted uid (not the user
itself, root or the service user): UntrustedDaemonError, or a DdoError that says so.
"""

from __future__ import annotations

import os
import shutil

import pytest

from security_support import serving, start_as, stop_process, run_as, wait_for


@pytest.fixture
def squatted_runtime_dir(ddod_binary, attacker, victim):
    """The attacker's own ddod on /tmp/ddo-<victim's uid>/ddod.sock, created before the victim."""
    directory = f"/tmp/ddo-{victim.uid}"
    shutil.rmtree(directory, ignore_errors=True)
    socket_path = os.path.join(directory, "ddod.sock")
    squatter = start_as(attacker, socket_path, "", args=[
        ddod_binary, "--socket", socket_path, "--state-dir", os.path.join(attacker.home, "state"),
        "--ram-budget-gb", "1", "--discard"])
    try:
        assert wait_for(lambda: os.path.exists(socket_path) and serving(socket_path), 15), (
            "the attacker's ddod did not start: " + (squatter.stderr.read() if squatter.poll() is not None else ""))
        assert os.stat(directory).st_uid == attacker.uid
        # The attacker opens its directory and socket to everyone, to catch the victim.
        run_as(attacker, socket_path, f"""
            os.chmod({directory!r}, 0o755)
            os.chmod({socket_path!r}, 0o666)
            report(done=True)
        """)
        yield squatter
    finally:
        stop_process(squatter)
        shutil.rmtree(directory, ignore_errors=True)


def test_f5_client_refuses_runtime_dir_squatted_by_another_user(squatted_runtime_dir, attacker,
                                                                 victim, ddod):
    result = run_as(victim, ddod.socket_path, """
        from diffusers_dynamic_offloader import DdoClient
        from diffusers_dynamic_offloader.errors import DdoError
        try:
            client = DdoClient.connect(allow_embedded=False, timeout=5)
        except DdoError as error:
            report(connected=False, error=type(error).__name__, message=str(error))
        else:
            report(connected=True, daemon_pid=client.info().pid, address=client.address)
    """)
    assert not result["connected"], f"the victim's client used the attacker's ddod: {result}"
    said = (result["error"] + " " + result["message"]).lower()
    assert "untrusted" in said or "trust" in said or attacker.name in said or \
        str(attacker.uid) in said, f"the refusal does not say the daemon is untrusted: {result}"
    assert squatted_runtime_dir.poll() is None
