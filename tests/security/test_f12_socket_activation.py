"""Finding 12: who the daemon is when systemd made its socket (socket activation,
deploy/systemd/ddod.socket).

With socket activation the process that listened on ddod's sockets is systemd (root), and the
kernel names it, not ddod, as the peer of every connection (SO_PEERCRED). A client that trusted
the listener alone would trust whatever process serves on a root-made socket, and would take
ddod for root: a root client then refused ddod's own segments (owned by the service user).
The client checks the process that answers HELLO as well, from the credentials the kernel
attaches to that answer (SO_PASSCRED), and takes that process for the daemon.

The attack: a ddod run by a user the client does not trust, serving on sockets root made.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from security_support import Account, RootDaemon, assert_still_serving, random_suffix, run_as

PAYLOAD = b"a weight behind socket activation"


@pytest.fixture
def activated_factory(ddod_binary, accounts, socket_group, socket_group_name):
    started = []

    def start(account):
        run_dir = f"/run/ddo-act-{random_suffix()}"
        state_dir = tempfile.mkdtemp(prefix="ddo-act-state-", dir="/tmp")
        log_dir = tempfile.mkdtemp(prefix="ddo-act-log-", dir="/tmp")
        daemon = RootDaemon(ddod_binary, os.path.join(run_dir, "ddod.sock"), socket_group_name,
                            state_dir, os.path.join(log_dir, "ddod.log"),
                            service_account=account, socket_activated=True)
        started.append((daemon, run_dir, state_dir, log_dir))
        return daemon

    yield start
    for daemon, run_dir, state_dir, log_dir in started:
        stopped = daemon.stop()
        daemon.remove_segments()
        for path in (run_dir, state_dir, log_dir):
            shutil.rmtree(path, ignore_errors=True)
        assert stopped is not None, "ddod did not stop within a few seconds of SIGTERM"


CLIENT = """
    import os
    import torch
    from diffusers_dynamic_offloader import DdoClient
    outcome = {{}}
    try:
        with DdoClient.connect("unix:" + {socket!r}, allow_embedded=False) as client:
            outcome["daemon_uid"] = client.daemon_uid
            client.register_state_dict("act/w", {{"w": torch.frombuffer(
                bytearray({payload!r}), dtype=torch.uint8)}})
            attached = client.attach("act/w")
            outcome["seen"] = bytes(attached.tensors["w"].numpy()).hex()
            attached.close()
    except Exception as error:
        outcome["error"] = f"{{type(error).__name__}}: {{error}}"
    report(**outcome)
"""


def test_a_member_and_root_reach_a_socket_activated_service_ddod(activated_factory, accounts,
                                                                 socket_group, victim):
    service = accounts.user("ddoact", extra_groups=[socket_group])
    daemon = activated_factory(service)
    assert "(socket from systemd)" in daemon.log()
    program = CLIENT.format(socket=daemon.socket_path, payload=PAYLOAD)
    member = run_as(victim, daemon.socket_path, program, timeout=120,
                    DDO_SERVICE_USER=service.name)
    assert member.get("daemon_uid") == service.uid, member
    assert member.get("seen") == PAYLOAD.hex(), member
    # Root: the listener (systemd) is root too, so a client that took the listener for the
    # daemon opened the segments by name and refused them as not root's.
    root = run_as(_root_account(), daemon.socket_path, program, timeout=120,
                  DDO_SERVICE_USER=service.name)
    assert root.get("daemon_uid") == service.uid, root
    assert root.get("seen") == PAYLOAD.hex(), root
    assert_still_serving(daemon)


def test_a_client_refuses_an_untrusted_process_serving_on_root_made_sockets(
        activated_factory, accounts, socket_group, victim):
    impostor = accounts.user("ddoimp", extra_groups=[socket_group])
    daemon = activated_factory(impostor)
    # Everything the client can look at is root's, as systemd makes it (the directory 0755,
    # the sockets without SocketUser=): only the process behind them is the impostor's.
    os.chown(os.path.dirname(daemon.socket_path), 0, 0)
    os.chmod(os.path.dirname(daemon.socket_path), 0o755)
    for path in (daemon.socket_path, daemon.socket_path + ".id"):
        os.chown(path, 0, os.stat(path).st_gid)
    # The victim trusts root and the service user "ddo" (not the impostor).
    result = run_as(victim, daemon.socket_path, CLIENT.format(socket=daemon.socket_path,
                                                              payload=PAYLOAD), timeout=60)
    assert "error" in result and "UntrustedDaemonError" in result["error"], result
    assert f"runs as uid {impostor.uid}" in result["error"], result
    assert "seen" not in result
    # ddoctl checks the same way (proto/wire/src/identity_client.cc).
    ddoctl = os.path.join(os.path.dirname(os.environ["DDO_DDOD_BINARY"]), "ddoctl")
    status = run_as(victim, daemon.socket_path, f"""
        import subprocess
        done = subprocess.run([{os.path.abspath(ddoctl)!r}, "--daemon", "unix:" + {daemon.socket_path!r},
                               "components"], capture_output=True, text=True, timeout=30)
        report(code=done.returncode, stderr=done.stderr, stdout=done.stdout)
    """, timeout=60)
    assert status["code"] != 0, status
    assert f"runs as uid {impostor.uid}" in status["stderr"], status


def _root_account() -> Account:
    return Account(name="root", uid=0, gid=0, home="/root", extra_groups=[])
