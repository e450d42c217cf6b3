"""Finding 9: --socket-group chgrp'd and chmod'ed the socket's parent directory even when it was
root-owned and not ddod's (it would do it to /run) and never restored it; and group members
could not map root's 0600 segments, so the shared copy did not work for them.

Now --socket-group touches only what ddod created, and segments reach group members as
descriptors (OPEN) when granted.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat

import pytest

from security_support import assert_still_serving, run_as, serving

PAYLOAD = b"shared weights, readable by the group member who loaded them"


@pytest.fixture
def existing_root_dir():
    """A root-owned 0755 directory that ddod did not create (like /run)."""
    path = f"/run/ddo-sec-pre-{secrets.token_hex(3)}"
    os.mkdir(path, 0o755)
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def ownership(path: str):
    info = os.stat(path)
    return info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)


def test_f9_socket_group_leaves_an_existing_parent_dir_alone(ddod_factory, existing_root_dir,
                                                             victim):
    before = ownership(existing_root_dir)
    daemon = ddod_factory(os.path.join(existing_root_dir, "ddod.sock"))
    assert ownership(existing_root_dir) == before, "ddod changed a directory it did not create"
    # The socket itself is the group's: a member gets in.
    result = run_as(victim, daemon.socket_path, "report(alive=from_environment().alive())")
    assert result["alive"], result
    assert daemon.stop() is not None
    assert ownership(existing_root_dir) == before


def test_f9_group_member_can_read_the_shared_copy(ddod, victim):
    result = run_as(victim, ddod.socket_path, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease(client_name="victim")
        path = own_file("model.safetensors", {{"weight": {PAYLOAD!r}}})
        load = ddo.load(ddo.load_request(lease, "shared-model", [path]))
        try:
            seen = read_component(ddo, lease, "shared-model")["weight"].hex()
        except Exception as error:
            seen = f"unreadable: {{error}}"
        report(load=load, seen=seen)
    """)
    assert result["load"]["code"] == "OK", result
    assert result["seen"] == PAYLOAD.hex(), f"the member cannot read the shared copy: {result}"
    assert_still_serving(ddod)


def test_f9_group_member_attaches_with_the_public_client(ddod, victim):
    """The same through DdoClient: load_safetensors, then attach (zero-copy tensors)."""
    result = run_as(victim, ddod.socket_path, f"""
        from diffusers_dynamic_offloader import DdoClient
        path = own_file("model.safetensors", {{"weight": {PAYLOAD!r}}})
        try:
            with DdoClient.connect("unix:" + {ddod.socket_path!r}, allow_embedded=False) as client:
                client.load_safetensors("public-model", path, progress=False)
                attached = client.attach("public-model")
                seen = bytes(attached.tensors["weight"].numpy()).hex()
                attached.close()
        except Exception as error:
            seen = f"unreadable: {{type(error).__name__}}: {{error}}"
        report(seen=seen)
    """, timeout=120)
    assert result["seen"] == PAYLOAD.hex(), result
    assert_still_serving(ddod)


def test_f9_outsider_cannot_reach_the_daemon(ddod, outsider):
    result = run_as(outsider, ddod.socket_path, """
        import os
        try:
            reached = from_environment().alive(timeout=3)
        except OSError as error:  # the identity socket refused the connection
            reached = False
        report(reached=reached)
    """)
    assert result["reached"] is False, "a user outside the group reached ddod"
    assert serving(ddod.socket_path)


def test_f9_group_member_streams_a_module_from_the_shared_copy(ddod, victim):
    """The whole runner path as a group member: register a module, stream it on the host
    backend (control block, doorbell, slab and ring all reach the member by descriptor), and
    get the same output as the module run in place."""
    result = run_as(victim, ddod.socket_path, f"""
        import torch
        from diffusers_dynamic_offloader import DdoClient
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(),
                                    torch.nn.Linear(256, 256))
        x = torch.randn(4, 256)
        with torch.no_grad():
            expected = model(x)
        try:
            with DdoClient.connect("unix:" + {ddod.socket_path!r}, allow_embedded=False) as client:
                client.register_module("member/mlp", model)
                with client.stream(model, "member/mlp", device="cpu",
                                   settings={{"DDO_SMALL_TENSOR_THRESHOLD_KB": "1"}}) as session:
                    with torch.no_grad():
                        first = model(x)
                        second = model(x)
                    streamed = session.stats()["uses"]
            outcome = {{"equal": bool(torch.equal(first, expected) and torch.equal(second, expected)),
                        "streamed": streamed}}
        except Exception as error:
            outcome = {{"error": f"{{type(error).__name__}}: {{error}}"}}
        report(**outcome)
    """, timeout=120)
    assert result.get("equal") is True, result
    assert result["streamed"] > 0, f"nothing was streamed: {result}"
    assert_still_serving(ddod)


def test_f9_a_gpu_session_for_another_user_is_refused_with_the_way_out(ddod, victim):
    """CUDA's interprocess events cannot be opened by another user (bench/probes/
    ipc_cross_user.py): ddod says so before allocating anything, instead of the runner failing
    inside CUDA. Checked before the device is looked up, so it holds on a machine without GPUs;
    the same member's host attach of the same component works."""
    result = run_as(victim, ddod.socket_path, f"""
        from diffusers_dynamic_offloader._proto import sessions_pb2
        ddo = from_environment()
        call, lease = ddo.open_lease(client_name="victim")
        path = own_file("model.safetensors", {{"weight": {PAYLOAD!r}}})
        load = ddo.load(ddo.load_request(lease, "member-model", [path]))
        gpu = ddo.call("Attach", sessions_pb2.AttachRequest(
            lease_id=lease, cache_key="member-model", device_uuid="cuda:0"))
        host = ddo.call("Attach", sessions_pb2.AttachRequest(lease_id=lease,
                                                             cache_key="member-model"))
        report(load=load, gpu=gpu, host=host)
    """, timeout=120)
    assert result["load"]["code"] == "OK", result
    assert result["gpu"]["code"] == "FAILED_PRECONDITION", result
    assert "streams on a GPU only for its own user" in result["gpu"]["details"], result
    assert "per-user ddod" in result["gpu"]["details"], result
    assert result["host"]["code"] == "OK", result
    assert_still_serving(ddod)


def test_f9_members_with_their_own_copies_share_one_pinned_copy(ddod, victim, attacker):
    """Two members, each with their own copy of the same model file: the second is served the
    first one's copy warm (its own file's content hash proves it holds the same bytes), reads
    the same bytes. (A member whose file differs is refused: test_f04_ownership.py.)"""
    load = """
        ddo = from_environment()
        call, lease = ddo.open_lease()
        path = own_file("model.safetensors", {{"weight": {payload!r}}})
        load = ddo.load(ddo.load_request(lease, "shared-by-content", [path]))
        try:
            seen = read_component(ddo, lease, "shared-by-content")["weight"].hex()
        except Exception as error:
            seen = f"unreadable: {{error}}"
        report(load=load, seen=seen)
    """
    first = run_as(victim, ddod.socket_path, load.format(payload=PAYLOAD))
    assert first["load"]["code"] == "OK" and not first["load"]["warm_hit"], first
    second = run_as(attacker, ddod.socket_path, load.format(payload=PAYLOAD))
    assert second["load"]["code"] == "OK", second
    assert second["load"]["warm_hit"], f"a second copy was made: {second}"
    assert second["seen"] == PAYLOAD.hex(), second
    assert_still_serving(ddod)
