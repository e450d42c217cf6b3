"""Issue 33's pre-faulted reserve and spill files, attacked.

1. The reserve is a segment of ddod's in /dev/shm, whose name anyone can list. A member asks
   ddod's identity socket to open it (and every other ddo segment it sees), read-only and
   read-write, before and after another member's load takes it: every answer is a refusal that
   passes no descriptor and does not echo the name; the victim's bytes are as it loaded them.
2. Spill files hold members' uploads on the state directory's disk. A member that uploads
   until its spill budget (--max-user-spill-gb) is spent gets no more spilled, and another
   member's upload still is; the spill directory lists no file, and the attacker cannot list
   it at all.
"""

from __future__ import annotations

import os
import secrets
import time

from attacker_kit import Ddo
from diffusers_dynamic_offloader._proto import stats_pb2
from security_support import BOTH_DAEMONS, assert_still_serving, run_as

pytestmark = BOTH_DAEMONS

MIB = 1 << 20


def pool_stats(socket_path: str):
    admin = Ddo(socket_path)
    try:
        outcome = admin.call("GetStats", stats_pb2.GetStatsRequest(), keep=lambda r: r.pool)
        assert outcome.ok, outcome
        return outcome["response"]
    finally:
        admin.close()


def wait_for(predicate, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


OPEN_EVERY_SEGMENT = """
    ddo = from_environment()
    call, lease = ddo.open_lease()
    names = sorted("/" + name for name in os.listdir("/dev/shm") if name.startswith("ddo-"))
    answers = []
    for name in names:
        for mode in ("ro", "rw"):
            answer, fds = ddo.identity.ask("OPEN " + name + " " + mode)
            for fd in fds:
                os.close(fd)
            answers.append((name, answer, len(fds)))
    report(names=names, answers=answers)
"""


def assert_all_refused(tried: dict) -> None:
    for name, answer, fds in tried["answers"]:
        assert not answer.startswith("OK") and fds == 0, (name, answer)
        assert name.lstrip("/") not in answer, (name, answer)


def test_t3_9_the_reserve_is_nobodys_to_open(ddod_factory, attacker, victim):
    ddod = ddod_factory("", "--prefaulted-reserve-gb", "0.0625")
    assert wait_for(lambda: pool_stats(ddod.socket_path).prefaulted_ready_bytes == 64 * MIB)
    before = run_as(attacker, ddod, OPEN_EVERY_SEGMENT)
    assert before["names"], "the reserve's segment is listed in /dev/shm"
    assert_all_refused(before)

    key = f"model/{secrets.token_hex(4)}"
    loaded = run_as(victim, ddod, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        weight = os.urandom(4 << 20)
        path = own_file("model.safetensors", {{"weight": weight}})
        loaded = ddo.load(ddo.load_request(lease, {key!r}, [path]))
        report(loaded=loaded, same=read_component(ddo, lease, {key!r})["weight"] == weight)
    """, timeout=120)
    assert loaded["loaded"]["code"] == "OK", loaded
    assert loaded["same"] is True, "the victim reads what it loaded"
    after = run_as(attacker, ddod, OPEN_EVERY_SEGMENT)
    assert_all_refused(after)
    assert_still_serving(ddod)


def test_t3_9_one_members_uploads_cannot_take_the_spill_budget(ddod_factory, attacker, victim):
    ddod = ddod_factory("", "--ram-budget-gb", "0.25", "--prefaulted-reserve-gb", "0",
                        "--max-user-spill-gb", "0.0625")
    flooded = run_as(attacker, ddod, """
        ddo = from_environment()
        call, lease = ddo.open_lease()
        codes = []
        for index in range(5):  # 5 x 40 MiB: the pool is 3/4 full after the fifth
            outcome, mapping = upload(ddo, lease, "flood/" + str(index),
                                      {"w": bytes([index]) * (40 << 20)})
            codes.append(outcome["code"])
            if mapping is not None:
                mapping.close()
        report(codes=codes)
    """, timeout=180)
    assert flooded["codes"].count("OK") >= 4, flooded
    # Once the pool is 3/4 full, ddod spills in the background: the attacker's at most 64 MiB.
    time.sleep(3)
    attacker_spilled = pool_stats(ddod.socket_path).spilled_bytes
    assert attacker_spilled <= 64 * MIB, attacker_spilled
    victim_upload = run_as(victim, ddod, """
        ddo = from_environment()
        call, lease = ddo.open_lease()
        outcome, mapping = upload(ddo, lease, "mine", {"w": b"v" * (8 << 20)})
        if mapping is not None:
            mapping.close()
        report(code=outcome["code"])
    """, timeout=120)
    assert victim_upload["code"] == "OK", victim_upload
    assert wait_for(lambda: pool_stats(ddod.socket_path).spilled_bytes > attacker_spilled), \
        "the victim's upload is spilled still"
    spill_dir = os.path.join(ddod.state_dir, "spill")
    assert os.listdir(spill_dir) == [], "spill files have no names"
    listed = run_as(attacker, ddod, f"""
        try:
            report(listed=os.listdir({spill_dir!r}))
        except OSError as error:
            report(error=type(error).__name__)
    """)
    assert listed.get("error") == "PermissionError", listed
    assert_still_serving(ddod)
