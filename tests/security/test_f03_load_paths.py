"""Finding 3: LoadSafetensors read any path for any caller: root-only files and other users'
files were loaded into the pool and their tensor names, shapes and hashes read back; errors
echoed the first bytes of any file (e.g. /etc/shadow).

Now paths are honoured only for ddod's own uid (others pass descriptors): PERMISSION_DENIED,
nothing enters the pool, and no error carries a byte of a file ddod refused to read.
"""

from __future__ import annotations

import secrets
import shutil
import struct

import pytest

from attacker_kit import components_pb2, safetensors_bytes
from security_support import assert_still_serving, root_only_file, run_as

ATTACK_BY_PATH = """
    ddo = from_environment()
    call, lease = ddo.open_lease()
    outcomes = [ddo.load(ddo.load_request(lease, {key!r}, [{path!r}], by_path=True), timeout=20)]
    mine = own_file("mine.safetensors", {{"w": b"attacker"}})
    # The path as the shard index of a load of the attacker's own file (both by path).
    outcomes.append(ddo.load(ddo.load_request(lease, {key!r} + "-index", [mine], by_path=True,
                                              index_file={path!r}), timeout=20))
    report(outcomes=outcomes)
"""


@pytest.fixture
def root_dir():
    path = f"/tmp/ddo-sec-root-{secrets.token_hex(3)}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def listed_keys(admin) -> list:
    outcome = admin.call("ListComponents", components_pb2.ListComponentsRequest(),
                         keep=lambda response: [c.ref.cache_key for c in response.components])
    assert outcome.ok, outcome
    return outcome["response"]


def assert_refused_without_trace(result, admin, key, secrets_in_file):
    for secret in secrets_in_file:
        assert secret not in repr(result), f"ddod's answer carries {secret!r}: {result}"
    for outcome in result["outcomes"]:
        assert outcome["code"] == "PERMISSION_DENIED", result
    assert not [k for k in listed_keys(admin) if k.startswith(key)], "the file entered the pool"


def test_f3_cannot_load_root_only_file(ddod, admin, attacker, root_dir):
    tensor = f"root_only_tensor_{secrets.token_hex(4)}"
    path = root_only_file(root_dir, "weights.safetensors",
                          safetensors_bytes({tensor: b"root-only bytes"}))
    key = f"steal-{secrets.token_hex(4)}"
    result = run_as(attacker, ddod.socket_path, ATTACK_BY_PATH.format(key=key, path=path))
    assert_refused_without_trace(result, admin, key, [tensor])
    assert_still_serving(ddod)


def test_f3_cannot_load_other_users_file(ddod, admin, attacker, victim):
    tensor = f"victims_tensor_{secrets.token_hex(4)}"
    placed = run_as(victim, ddod.socket_path, f"""
        report(path=own_file("private.safetensors", {{{tensor!r}: b"victim bytes"}}))
    """)
    key = f"steal-{secrets.token_hex(4)}"
    result = run_as(attacker, ddod.socket_path, ATTACK_BY_PATH.format(key=key, path=placed["path"]))
    assert_refused_without_trace(result, admin, key, [tensor])
    assert_still_serving(ddod)


def test_f3_errors_never_echo_file_bytes(ddod, admin, attacker, root_dir):
    marker = b"SHADOW" + secrets.token_hex(8).encode()
    # A header that is JSON but not an object: an error quoting the header leaks it.
    header = b'"' + marker + b'"'
    quoted = root_only_file(root_dir, "quoted", struct.pack("<Q", len(header)) + header + b" " * 8)
    # The first 8 bytes as a huge header length: an error naming the length leaks them.
    leading = root_only_file(root_dir, "leading", marker * 4)
    leaked_number = str(struct.unpack("<Q", marker[:8])[0])
    for path in (quoted, leading, "/etc/shadow"):
        key = f"peek-{secrets.token_hex(4)}"
        result = run_as(attacker, ddod.socket_path, ATTACK_BY_PATH.format(key=key, path=path))
        assert_refused_without_trace(result, admin, key, [marker.decode(), leaked_number])
        if path == "/etc/shadow":
            assert "root:" not in repr(result), result
    assert_still_serving(ddod)
