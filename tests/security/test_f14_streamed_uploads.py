"""Attacks on streamed uploads (docs/protocol.md, "Streamed uploads"; docs/security.md §3).

A streamed upload hands its uploader the write ends of pipes that ddod reads into the
component's segment at commit. These are the ways a hostile client could try to misuse them:
take another user's stream, reach the served bytes after the commit, lie about the length,
hold ddod's readers with a stream it never writes, or ask for more pipes than ddod gives.
"""

from __future__ import annotations

import time

from security_support import assert_still_serving, run_as, start_as, stop_process, wait_for

TENSORS = """
    tensors = {f"t{i}": bytes([i + 1]) * ((3 << 20) + 17 * i) for i in range(6)}
"""


def test_a_stream_is_served_once_and_only_to_the_connection_that_uploads(ddod, attacker, victim):
    opened = run_as(victim, ddod, TENSORS + """
    ddo = from_environment()
    call, lease = ddo.open_lease()
    begun = begin_streamed_upload(ddo, lease, "model", tensors, 2)
    result = begun["response"]
    # Another connection of the same user holds another token: nothing was granted to it.
    other = from_environment()
    answer, fds = other.identity.ask(f"OPEN {result.stream_names[0]} rw")
    fds_first = open_streams(ddo, result)
    again, fds_again = ddo.identity.ask(f"OPEN {result.stream_names[0]} rw")
    read_only, _ = ddo.identity.ask(f"OPEN {result.stream_names[1]} ro")
    report(streams=len(result.stream_names), segments=len(result.segments),
           other=answer, other_fds=len(fds), first=len(fds_first), again=again,
           again_fds=len(fds_again), read_only=read_only)
    """)
    assert opened["streams"] == 2 and opened["segments"] == 0, opened
    assert opened["other"].startswith("ERR") and opened["other_fds"] == 0, opened
    assert opened["first"] == 2, opened
    assert opened["again"].startswith("ERR") and opened["again_fds"] == 0, opened
    # Served already (taken by the OPEN rw above): a read-only OPEN gets nothing either.
    assert opened["read_only"].startswith("ERR"), opened
    # Another user cannot name the victim's stream either (its names are the victim's only).
    guessed = run_as(attacker, ddod, """
    ddo = from_environment()
    answer, fds = ddo.identity.ask("OPEN /ddo-stream-0123456789abcdef0123456789abcdef-0 rw")
    report(answer=answer, fds=len(fds))
    """)
    assert guessed["answer"].startswith("ERR") and guessed["fds"] == 0, guessed


def test_bytes_written_after_the_commit_reach_nothing(ddod, attacker):
    outcome = run_as(attacker, ddod, TENSORS + """
    import os
    ddo = from_environment()
    call, lease = ddo.open_lease()
    result = begin_streamed_upload(ddo, lease, "model", tensors, 2)["response"]
    fds = open_streams(ddo, result)
    kept = [os.dup(fd) for fd in fds]  # what a hostile writer keeps past the commit
    for fd, payload in zip(fds, stream_payloads(result, tensors)):
        write_stream(fd, payload)
    committed = commit(ddo, lease, result.upload_id)
    late = []
    for fd in kept:
        try:
            os.write(fd, b"\\xff" * 4096)
            late.append("written")
        except BrokenPipeError:
            late.append("broken pipe")
    served = read_component(ddo, lease, "model")
    # The served segment, by its name: read-only to its owner, as every component's.
    attached = ddo.stub.Attach(sessions_pb2.AttachRequest(lease_id=lease, cache_key="model"),
                               timeout=10, metadata=ddo.metadata)
    rw, rw_fds = ddo.identity.ask(f"OPEN {attached.component.segments[0].shm_name} rw")
    report(committed=committed["code"], late=late, same=served == tensors, rw=rw,
           rw_fds=len(rw_fds))
    """)
    assert outcome["committed"] == "OK", outcome
    assert outcome["late"] == ["broken pipe", "broken pipe"], outcome
    assert outcome["same"], outcome
    assert outcome["rw"].startswith("ERR") and outcome["rw_fds"] == 0, outcome


def test_a_stream_that_lies_about_its_length_fails_or_gives_exactly_the_table(ddod, attacker):
    outcome = run_as(attacker, ddod, TENSORS + """
    ddo = from_environment()
    call, lease = ddo.open_lease()
    # Short: stream 0 ends 1 byte early.
    result = begin_streamed_upload(ddo, lease, "short", tensors, 2)["response"]
    payloads = stream_payloads(result, tensors)
    for index, (fd, payload) in enumerate(zip(open_streams(ddo, result), payloads)):
        write_stream(fd, payload[:-1] if index == 0 else payload)
    short = commit(ddo, lease, result.upload_id)
    # Long: every stream carries 1 MiB more than the table says.
    result = begin_streamed_upload(ddo, lease, "long", tensors, 2)["response"]
    payloads = stream_payloads(result, tensors)
    for fd, payload in zip(open_streams(ddo, result), payloads):
        write_stream(fd, payload + b"\\xee" * (1 << 20))
    long = commit(ddo, lease, result.upload_id)
    report(short=short["code"], short_details=short["details"], long=long["code"],
           same=read_component(ddo, lease, "long") == tensors,
           listed=[c.ref.cache_key for c in ddo.stub.ListComponents(
               components_pb2.ListComponentsRequest(), timeout=10,
               metadata=ddo.metadata).components])
    """)
    assert outcome["short"] == "DATA_LOSS", outcome
    assert "stream 0 ended after" in outcome["short_details"], outcome
    assert outcome["long"] == "OK" and outcome["same"], outcome
    assert outcome["listed"] == ["long"], outcome


def test_a_stream_held_open_and_never_written_holds_nothing_past_the_callers_deadline(
        ddod, attacker, admin):
    holder = start_as(attacker, ddod, TENSORS + """
    import sys
    ddo = from_environment()
    call, lease = ddo.open_lease()
    result = begin_streamed_upload(ddo, lease, "held", tensors, 4)["response"]
    fds = open_streams(ddo, result)  # held open, never written, while the lease lives on
    held = commit(ddo, lease, result.upload_id, timeout=2)
    print(held["code"], flush=True)
    sys.stdin.readline()
    """)
    try:
        line = holder.stdout.readline().strip()
        assert line == "DEADLINE_EXCEEDED", (line, holder.stderr.read() if holder.poll() else "")
        # The caller gave up: ddod's readers stop and the upload's memory goes, though the
        # attacker still holds its streams and its lease.
        assert wait_for(lambda: pool_reserved(admin) == 0, 10), ddod.log()[-2000:]
        assert holder.poll() is None
        assert_still_serving(ddod)
    finally:
        stop_process(holder)


def test_the_streams_of_one_upload_are_capped(ddod, attacker):
    outcome = run_as(attacker, ddod, TENSORS + """
    ddo = from_environment()
    call, lease = ddo.open_lease()
    begun = begin_streamed_upload(ddo, lease, "many", tensors, 4_000_000_000)
    report(code=begun["code"], streams=len(begun["response"].stream_names) if begun.ok else -1)
    """)
    assert outcome["code"] == "OK", outcome
    assert 1 <= outcome["streams"] <= 16, outcome


def stats_request():
    from diffusers_dynamic_offloader._proto import stats_pb2
    return stats_pb2.GetStatsRequest()


def pool_reserved(admin) -> int:
    outcome = admin.call("GetStats", stats_request(), keep=lambda response: response.pool)
    return outcome["response"].reserved_bytes if outcome.ok else -1


def test_many_streamed_uploads_at_once_leave_ddod_serving(ddod, attacker):
    # Every upload the limit allows (8 per user), each with the most streams, all held open.
    outcome = run_as(attacker, ddod, TENSORS + """
    ddo = from_environment()
    call, lease = ddo.open_lease()
    codes, held = [], []
    for index in range(12):
        begun = begin_streamed_upload(ddo, lease, f"k{index}", tensors, 16)
        codes.append(begun["code"])
        if begun.ok:
            held.append(open_streams(ddo, begun["response"]))
    report(codes=codes, held=sum(len(fds) for fds in held))
    """, timeout=120)
    assert outcome["codes"][:8] == ["OK"] * 8, outcome
    assert set(outcome["codes"][8:]) == {"RESOURCE_EXHAUSTED"}, outcome
    time.sleep(0.2)
    assert_still_serving(ddod)
