"""The shared service as deploy/systemd/ddod.service runs it: ddod as an unprivileged service
user (not root), sockets open to a group. A member's files are readable by the member only, so
ddod can reach them only through the descriptors the member's client passes; the client trusts
the daemon because it runs as the service user (DDO_SERVICE_USER)."""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest

from security_support import RootDaemon, assert_still_serving, random_suffix, run_as

PAYLOAD = b"weights only their owner can read"


@pytest.fixture
def service_ddod(ddod_binary, accounts, socket_group, socket_group_name):
    service = accounts.user("ddosvc", extra_groups=[socket_group])
    run_dir = f"/run/ddo-svc-{random_suffix()}"
    state_dir = tempfile.mkdtemp(prefix="ddo-svc-state-", dir="/tmp")
    log_dir = tempfile.mkdtemp(prefix="ddo-svc-log-", dir="/tmp")
    daemon = RootDaemon(ddod_binary, os.path.join(run_dir, "ddod.sock"), socket_group_name,
                        state_dir, os.path.join(log_dir, "ddod.log"), service_account=service)
    daemon.service = service
    yield daemon
    stopped = daemon.stop()
    daemon.remove_segments()
    shutil.rmtree(run_dir, ignore_errors=True)
    shutil.rmtree(state_dir, ignore_errors=True)
    shutil.rmtree(log_dir, ignore_errors=True)
    assert stopped is not None, "ddod did not stop within a few seconds of SIGTERM"


def test_service_user_ddod_serves_a_members_private_files_by_descriptor(service_ddod, victim):
    with open(f"/proc/{service_ddod.pid}/status") as status:
        uids = [line.split()[1:] for line in status if line.startswith("Uid:")][0]
    assert int(uids[0]) == service_ddod.service.uid, "ddod is not running as the service user"
    result = run_as(victim, service_ddod.socket_path, f"""
        import os, torch
        from diffusers_dynamic_offloader import DdoClient
        from diffusers_dynamic_offloader._proto import components_pb2
        path = own_file("private.safetensors", {{"weight": {PAYLOAD!r}}})
        os.chmod(os.path.dirname(path), 0o700)
        os.chmod(path, 0o600)
        outcome = {{}}
        with DdoClient.connect("unix:" + {service_ddod.socket_path!r}, allow_embedded=False) as client:
            outcome["daemon_uid"] = client.daemon_info.uid
            client.load_safetensors("member/private", path, progress=False)
            attached = client.attach("member/private")
            outcome["seen"] = bytes(attached.tensors["weight"].numpy()).hex()
            attached.close()
        # By path, ddod would read with its own rights: refused (and it could not anyway).
        ddo = from_environment()
        call, lease = ddo.open_lease()
        outcome["by_path"] = ddo.load(components_pb2.LoadSafetensorsRequest(
            lease_id=lease, cache_key="member/by-path", files=[path]))
        report(**outcome)
    """, timeout=120, DDO_SERVICE_USER=service_ddod.service.name)
    assert result["daemon_uid"] == service_ddod.service.uid, result
    assert result["seen"] == PAYLOAD.hex(), result
    assert result["by_path"]["code"] == "PERMISSION_DENIED", result
    assert_still_serving(service_ddod)


def test_a_client_refuses_a_service_user_it_was_not_told_to_trust(service_ddod, victim):
    result = run_as(victim, service_ddod.socket_path, f"""
        from diffusers_dynamic_offloader import DdoClient
        try:
            with DdoClient.connect("unix:" + {service_ddod.socket_path!r}, allow_embedded=False):
                outcome = "trusted"
        except Exception as error:
            outcome = f"{{type(error).__name__}}: {{error}}"
        report(outcome=outcome)
    """, timeout=60)
    assert "Untrusted" in result["outcome"] or "trust" in result["outcome"], result
