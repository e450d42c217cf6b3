"""Finding 1: the profile RPCs took any profile_dir, and ddod created, chmodded and wrote into it
with its own privileges, following symlinks (a group member wrote a root-owned file into
/etc/profile.d; GetProfile through a symlink returned a root-only file).

Now profiles live in ddod's per-user directory, and profile_dir is honoured only for ddod's own
uid: anyone else gets PERMISSION_DENIED and nothing is touched.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat

import pytest

from security_support import assert_still_serving, root_only_file, run_as


def profile_key() -> str:
    return secrets.token_hex(12)  # 24 lowercase hex digits


@pytest.fixture
def root_owned_dir():
    """A root-owned 0755 directory standing in for /etc/profile.d."""
    path = f"/tmp/ddo-sec-target-{secrets.token_hex(3)}"
    os.mkdir(path, 0o755)
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_f1_profile_dir_cannot_write_outside(ddod, attacker, root_owned_dir):
    key = profile_key()
    result = run_as(attacker, ddod.socket_path, f"""
        ddo = from_environment()
        outcomes = []
        for target in ({root_owned_dir!r}, {root_owned_dir!r} + "/created/by/ddod"):
            profile = profiles_pb2.Profile(
                ref=profiles_pb2.ProfileRef(key={key!r}),
                json='{{"profile_key": "{key}", "attack": "export EVIL=1"}}')
            outcomes.append(ddo.call("PutProfile", profiles_pb2.PutProfileRequest(
                profile=profile, profile_dir=target)))
            outcomes.append(ddo.call("DeleteProfile", profiles_pb2.DeleteProfileRequest(
                ref=profiles_pb2.ProfileRef(key={key!r}), profile_dir=target)))
        report(outcomes=outcomes)
    """)
    puts = result["outcomes"][0::2]
    assert [put["code"] for put in puts] == ["PERMISSION_DENIED"] * 2, result
    info = os.stat(root_owned_dir)
    assert os.listdir(root_owned_dir) == [], "ddod wrote into a directory the attacker named"
    assert stat.S_IMODE(info.st_mode) == 0o755 and info.st_uid == 0 and info.st_gid == 0
    assert_still_serving(ddod)


def test_f1_profile_symlink_does_not_leak_root_file(ddod, attacker):
    key = profile_key()
    marker = f"ROOT-ONLY-{secrets.token_hex(8)}"
    secret_dir = f"/tmp/ddo-sec-secret-{secrets.token_hex(3)}"
    secret = root_only_file(secret_dir, "secret.json",
                            f'{{"profile_key": "{key}", "secret": "{marker}"}}\n'.encode())
    try:
        result = run_as(attacker, ddod.socket_path, f"""
            import os
            ddo = from_environment()
            trap = os.path.expanduser("~/profiles")
            os.makedirs(trap, exist_ok=True)
            os.symlink({secret!r}, os.path.join(trap, "ddo-capacity-v1-{key}.json"))
            ref = profiles_pb2.ProfileRef(key={key!r})
            keep = lambda response: str(response)
            report(
                get=ddo.call("GetProfile", profiles_pb2.GetProfileRequest(ref=ref, profile_dir=trap), keep=keep),
                listed=ddo.call("ListProfiles", profiles_pb2.ListProfilesRequest(profile_dir=trap), keep=keep),
            )
        """)
    finally:
        shutil.rmtree(secret_dir, ignore_errors=True)
    assert marker not in repr(result), f"the root-only file leaked: {result}"
    assert result["get"]["code"] == "PERMISSION_DENIED", result
    assert result["listed"]["code"] == "PERMISSION_DENIED", result
    assert_still_serving(ddod)


def test_f1_profiles_of_one_user_are_not_anothers(ddod, attacker, victim):
    """Without profile_dir each caller gets its own profiles: the attacker can neither read
    nor overwrite nor delete the victim's."""
    key = profile_key()
    marker = f"VICTIM-{secrets.token_hex(8)}"
    put = run_as(victim, ddod.socket_path, f"""
        ddo = from_environment()
        profile = profiles_pb2.Profile(ref=profiles_pb2.ProfileRef(key={key!r}),
                                       json='{{"profile_key": "{key}", "mine": "{marker}"}}')
        report(put=ddo.call("PutProfile", profiles_pb2.PutProfileRequest(profile=profile)))
    """)
    assert put["put"]["code"] == "OK", put
    attack = run_as(attacker, ddod.socket_path, f"""
        ddo = from_environment()
        ref = profiles_pb2.ProfileRef(key={key!r})
        keep = lambda response: str(response)
        report(
            get=ddo.call("GetProfile", profiles_pb2.GetProfileRequest(ref=ref), keep=keep),
            listed=ddo.call("ListProfiles", profiles_pb2.ListProfilesRequest(), keep=keep),
            deleted=ddo.call("DeleteProfile", profiles_pb2.DeleteProfileRequest(ref=ref), keep=keep),
        )
    """)
    assert marker not in repr(attack), f"the attacker read the victim's profile: {attack}"
    assert "deleted: true" not in str(attack["deleted"].get("response")), attack
    still = run_as(victim, ddod.socket_path, f"""
        ddo = from_environment()
        ref = profiles_pb2.ProfileRef(key={key!r})
        report(get=ddo.call("GetProfile", profiles_pb2.GetProfileRequest(ref=ref),
                            keep=lambda response: response.json))
    """)
    assert still["get"]["code"] == "OK" and marker in still["get"]["response"], still
    assert_still_serving(ddod)
