"""Issue 33's file tier, attacked: components ddod keeps in their owners' files.

A file-tier component lives in the safetensors files its owner passed; ddod keeps the
read-only descriptors and serves them to the owner's connections as FILE grants (OPEN ... ro).

1. Another member cannot get the file through ddod, even knowing the made-up name (which is
   derivable: the component id is a hash of the key and the structure), and the owner cannot
   get it read-write. Refusals never echo the name.
2. Such a component costs no pool bytes, so a member could keep loading keys until ddod ran
   out of descriptors, and then nobody could connect. ddod bounds the descriptors a member
   keeps (256) and still serves everyone afterwards.
"""

from __future__ import annotations

import secrets

from security_support import BOTH_DAEMONS, assert_still_serving, run_as

pytestmark = BOTH_DAEMONS

WEIGHT = b"the member's private weights, in a file only it reads"


def test_t3_8_a_file_grant_is_the_owners_and_read_only(ddod, attacker, victim):
    key = f"video/encoder-{secrets.token_hex(4)}"
    owned = run_as(victim, ddod, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        path = own_file("encoder.safetensors", {{"weight": {WEIGHT!r}}})
        loaded = ddo.load(ddo.load_request(lease, {key!r}, [path],
                                           file_tier=components_pb2.FILE_TIER_PREFER))
        attached = ddo.stub.Attach(sessions_pb2.AttachRequest(lease_id=lease, cache_key={key!r}),
                                   timeout=10, metadata=ddo.metadata)
        segment = attached.component.segments[0]
        placement = attached.component.placements[0]
        read = ddo.map_segment(segment.shm_name, segment.size_bytes)
        weight = read[placement.offset:placement.offset + placement.byte_size]
        answer, fds = ddo.identity.ask("OPEN " + segment.shm_name + " rw")
        for fd in fds:
            os.close(fd)
        report(loaded=loaded, tier=attached.component.tier, kind=segment.kind,
               name=segment.shm_name, weight=weight.hex(), open_rw=answer, rw_fds=len(fds))
    """)
    assert owned["loaded"]["code"] == "OK", owned
    assert owned["tier"] == 1 and owned["kind"] == 1, owned  # COMPONENT_TIER_FILE, FILE segment
    assert owned["weight"] == WEIGHT.hex(), owned
    assert not owned["open_rw"].startswith("OK") and owned["rw_fds"] == 0, owned
    assert owned["name"] not in owned["open_rw"], owned

    name = owned["name"]
    stolen = run_as(attacker, ddod, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        answers = []
        for mode in ("ro", "rw"):
            answer, fds = ddo.identity.ask("OPEN {name} " + mode)
            answers.append((answer, len(fds)))
            for fd in fds:
                os.close(fd)
        report(answers=answers)
    """)
    for answer, fds in stolen["answers"]:
        assert not answer.startswith("OK") and fds == 0, stolen
        assert name not in answer, stolen
    assert_still_serving(ddod)


def test_t3_8_the_descriptors_a_member_keeps_are_bounded(ddod, attacker, victim):
    flooded = run_as(attacker, ddod, """
        ddo = from_environment()
        call, lease = ddo.open_lease()
        path = own_file("tiny.safetensors", {"weight": b"x" * 64})
        codes = {}
        refusal = ""
        for index in range(300):
            outcome = ddo.load(ddo.load_request(lease, "flood/" + str(index), [path],
                                                file_tier=components_pb2.FILE_TIER_PREFER))
            codes[outcome["code"]] = codes.get(outcome["code"], 0) + 1
            if outcome["code"] != "OK" and not refusal:
                refusal = outcome["details"]
        stats = ddo.stub.GetStats(stats_pb2.GetStatsRequest(), timeout=10, metadata=ddo.metadata)
        report(codes=codes, refusal=refusal, backing_files=stats.pool.backing_files)
    """, timeout=180)
    assert flooded["codes"].get("OK") == 256, flooded
    assert flooded["codes"].get("RESOURCE_EXHAUSTED") == 44, flooded
    assert "limit per user (256)" in flooded["refusal"], flooded
    assert flooded["backing_files"] <= 256, flooded
    # Everyone else is still served: the victim connects and loads.
    served = run_as(victim, ddod, """
        ddo = from_environment()
        call, lease = ddo.open_lease()
        path = own_file("mine.safetensors", {"weight": b"y" * 64})
        report(loaded=ddo.load(ddo.load_request(lease, "mine", [path],
                                                file_tier=components_pb2.FILE_TIER_PREFER)))
    """)
    assert served["loaded"]["code"] == "OK", served
    assert_still_serving(ddod)
