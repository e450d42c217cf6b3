"""Issue 31, finding 1: a member chose the bytes an admin's runner got. A key a member
registered first was a warm hit, with no proof, for root (or ddod's own user) registering or
loading the same key with the same structure; and the uploader kept its read-write grant after
CommitUpload, so it could rewrite the bytes after ddod had checked their content hash.

Now keys are names inside their uid (an admin's too): nothing crosses to another uid without
the content proof, and an upload (bytes a client wrote) never does; at commit ddod copies the
upload into the segment it serves and removes the upload segment, so the uploader's old
writable mapping faults instead of writing served bytes.
"""

from __future__ import annotations

import os
import secrets
import tempfile

import pytest

from attacker_kit import Ddo, read_component, upload, write_safetensors
from security_support import BOTH_DAEMONS, assert_still_serving, run_as

# Each test against a root ddod and against one run as the service user.
pytestmark = BOTH_DAEMONS

GENUINE = b"the administrator's own weights!"
POISON = b"the member's chosen weights....."  # same size: the same structure


def new_key() -> str:
    return f"flux/transformer-{secrets.token_hex(4)}"


def member_uploads(ddod, member, key: str) -> dict:
    result = run_as(member, ddod, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        outcome, mapping = upload(ddo, lease, {key!r}, {{"weight": {POISON!r}}})
        report(upload=outcome)
    """)
    assert result["upload"]["code"] == "OK", result
    return result


def test_t3_1_admin_register_is_not_a_warm_hit_on_a_members_upload(ddod, admin, attacker):
    key = new_key()
    member_uploads(ddod, attacker, key)
    call, lease = admin.open_lease(client_name="root runner")
    try:
        outcome, _ = upload(admin, lease, key, {"weight": GENUINE})
        assert outcome["code"] == "OK", outcome
        assert not outcome["warm_hit"], "root's registration was a warm hit on the member's bytes"
        seen = read_component(admin, lease, key)["weight"]
        assert seen == GENUINE, seen
    finally:
        call.cancel()
    assert_still_serving(ddod)


def test_t3_1_admin_load_does_not_get_a_members_bytes(ddod, admin, attacker):
    key = new_key()
    member_uploads(ddod, attacker, key)
    directory = tempfile.mkdtemp(prefix="ddo-t3-1-", dir="/tmp")
    path = write_safetensors(os.path.join(directory, "model.safetensors"), {"weight": GENUINE})
    call, lease = admin.open_lease(client_name="root runner")
    try:
        outcome = admin.load(admin.load_request(lease, key, [path]))
        assert outcome.ok, outcome
        assert not outcome["warm_hit"], "root's load was a warm hit on the member's upload"
        assert read_component(admin, lease, key)["weight"] == GENUINE
    finally:
        call.cancel()
    assert_still_serving(ddod)


def test_t3_1_ddods_own_user_gets_no_members_bytes(ddod, attacker):
    # The other admin: ddod's own user (root for a root ddod, tested above) registers and
    # loads keys a member registered first, as a service's own preloading would.
    if ddod.service_account is None:
        pytest.skip("a root ddod's own user is root: the admin tests above")
    registered_key, loaded_key = new_key(), new_key()
    member_uploads(ddod, attacker, registered_key)
    member_uploads(ddod, attacker, loaded_key)
    result = run_as(ddod.service_account, ddod, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease(client_name="service runner")
        registered, _ = upload(ddo, lease, {registered_key!r}, {{"weight": {GENUINE!r}}})
        registered_seen = read_component(ddo, lease, {registered_key!r})["weight"].hex()
        path = own_file("model.safetensors", {{"weight": {GENUINE!r}}})
        loaded = ddo.load(ddo.load_request(lease, {loaded_key!r}, [path]))
        loaded_seen = read_component(ddo, lease, {loaded_key!r})["weight"].hex() \\
            if loaded.ok else ""
        report(registered=registered, registered_seen=registered_seen, loaded=loaded,
               loaded_seen=loaded_seen)
    """)
    assert result["registered"]["code"] == "OK", result
    assert not result["registered"]["warm_hit"], (
        f"ddod's own user's registration was a warm hit on the member's bytes: {result}")
    assert result["registered_seen"] == GENUINE.hex(), result
    assert result["loaded"]["code"] == "OK", result
    assert not result["loaded"]["warm_hit"], (
        f"ddod's own user's load was a warm hit on the member's upload: {result}")
    assert result["loaded_seen"] == GENUINE.hex(), result
    assert_still_serving(ddod)


def test_t3_1_uploader_cannot_rewrite_bytes_after_commit(ddod, attacker):
    key = new_key()
    result = run_as(attacker, ddod, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        outcome, mapping = upload(ddo, lease, {key!r}, {{"weight": {GENUINE!r}}})
        before = read_component(ddo, lease, {key!r})["weight"]
        # The bytes ddod checked are committed: now rewrite them through the old mapping.
        wrote = write_after_commit(mapping, outcome["placements"]["weight"], {POISON!r})
        after = read_component(ddo, lease, {key!r})["weight"]
        report(upload=outcome, wrote=wrote, before=before.hex(), after=after.hex())
    """)
    assert result["upload"]["code"] == "OK", result
    assert result["before"] == GENUINE.hex(), result
    assert result["after"] == GENUINE.hex(), (
        f"the uploader rewrote served bytes after commit (its write: {result['wrote']})")
    assert_still_serving(ddod)


def test_t3_1_served_segment_is_not_the_upload_segment_and_is_read_only(ddod, attacker):
    key = new_key()
    result = run_as(attacker, ddod, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        register = list(ddo.stub.RegisterComponent(components_pb2.RegisterComponentRequest(
            lease_id=lease, cache_key={key!r}, tensors=u8_specs({{"weight": {GENUINE!r}}})),
            metadata=ddo.metadata))[-1].result
        uploaded = register.segments[0].shm_name
        commit = ddo.call("CommitUpload", components_pb2.CommitUploadRequest(
            lease_id=lease, upload_id=register.upload_id))
        attached = ddo.stub.Attach(sessions_pb2.AttachRequest(lease_id=lease, cache_key={key!r}),
                                   metadata=ddo.metadata)
        served = [segment.shm_name for segment in attached.component.segments]
        answer, fds = ddo.identity.ask("OPEN " + served[0] + " rw")
        for fd in fds:
            os.close(fd)
        report(commit=commit, uploaded=uploaded, served=served, open_rw=answer,
               upload_gone=not os.path.exists("/dev/shm/" + uploaded.lstrip("/")))
    """)
    assert result["commit"]["code"] == "OK", result
    assert result["uploaded"] not in result["served"], result
    assert not result["open_rw"].startswith("OK"), result
    assert result["upload_gone"], result
    assert_still_serving(ddod)
