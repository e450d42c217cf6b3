"""Issue 31, finding 2: descriptor exhaustion stopped ddod.

Connections to the gRPC socket were unbounded: 20,400 idle connections from one member took
ddod to RLIMIT_NOFILE; gRPC then abandoned its listener (grpc/grpc#16058) and every later RPC
timed out until ddod was restarted, and the identity socket's accept loop spun on EMFILE writing
about a million log lines a second.

Now ddod accepts on its sockets itself: connections are bounded per uid and in all, a reserve of
descriptors is kept for ddod's own work, accept failing with EMFILE is waited out quietly, and
repeated log lines are throttled. The floods here are bounded: ddod runs with RLIMIT_NOFILE 512,
so a few hundred sockets reach it.
"""

from __future__ import annotations

from attacker_kit import Ddo, stats_pb2
from flood_kit import (end_flood, flood_program, log_lines, read_result, root_served,
                       served_within)
from security_support import BOTH_DAEMONS, assert_still_serving, run_as, start_as, stop_process

# Each test against a root ddod and against one run as the service user.
pytestmark = BOTH_DAEMONS

NOFILE = 512
PER_USER = 64  # ddod's default --max-connections-per-user
#: At most this many log lines for a whole flood and its end.
MAX_LOG_LINES = 200

SERVED = """
    ddo = from_environment()
    try:
        call, lease = ddo.open_lease(client_name="victim", timeout=10)
        opened = {"code": "OK"}
        call.cancel()
    except Exception as error:
        opened = {"code": "FAILED", "details": str(error)[:300]}
    report(lease=opened, stats=ddo.call("GetStats", stats_pb2.GetStatsRequest(), timeout=10))
"""


def test_t3_2_one_member_cannot_take_ddods_descriptors(ddod_factory, attacker, victim):
    ddod = ddod_factory(nofile=NOFILE)
    lines_before = log_lines(ddod)
    flood = start_as(attacker, ddod, flood_program(ddod.socket_path, 800))
    try:
        flooded = read_result(flood, 60)
        victim_served = run_as(victim, ddod, SERVED, timeout=60)
        admin_served = root_served(ddod.socket_path)
    finally:
        if flood.poll() is None:
            end_flood(flood)
        stop_process(flood)
    recovered = served_within(ddod.socket_path, 1.0)
    lines = log_lines(ddod) - lines_before

    assert victim_served["lease"]["code"] == "OK", f"the victim got no lease: {victim_served}"
    assert victim_served["stats"]["code"] == "OK", f"the victim was not served: {victim_served}"
    assert admin_served["code"] == "OK", f"root was not served during the flood: {admin_served}"
    assert flooded["open"] <= PER_USER, (
        f"one member holds {flooded['open']} connections to the gRPC socket: {flooded}")
    assert flooded["closed"] >= 800 - PER_USER - flooded["unreached"], flooded
    assert recovered is not None, "ddod did not serve within a second of the flood's end"
    assert lines < MAX_LOG_LINES, f"the flood wrote {lines} log lines:\n{ddod.log()[-3000:]}"
    assert_still_serving(ddod)


VICTIM_AT_WORK = """
    import sys
    ddo = from_environment()
    call, lease = ddo.open_lease(client_name="victim", timeout=10)
    mine = own_file("weights.safetensors", {"w": b"victim's bytes!!"})
    print("ready", flush=True)
    sys.stdin.readline()  # the flood is on
    outcome = {}
    try:
        outcome["load"] = ddo.load(ddo.load_request(lease, "victim/w", [mine]), timeout=20)
        outcome["read"] = {k: v.decode() for k, v in read_component(ddo, lease, "victim/w").items()}
    except Exception as error:
        outcome["error"] = f"{type(error).__name__}: {error}"[:400]
    outcome["stats"] = ddo.call("GetStats", stats_pb2.GetStatsRequest(), timeout=10)
    report(**outcome)
    sys.stdin.read()
"""


def test_t3_2_the_reserve_keeps_descriptors_for_the_work_of_callers_already_served(
        ddod_factory, accounts, socket_group, attacker, victim):
    # Four members together (64 connections each, under every per-user limit) would take
    # every descriptor ddod has; the reserve stops them, and the work of those already
    # connected (a load from a passed file, a read through OPEN) still gets descriptors.
    # RLIMIT_NOFILE 400: 200 descriptors kept, so the reserve refuses before the per-uid limits.
    ddod = ddod_factory(nofile=400)
    members = [attacker] + [accounts.user(f"ddofl{i}", extra_groups=[socket_group])
                            for i in range(3)]
    worker = start_as(victim, ddod, VICTIM_AT_WORK)
    floods = []
    try:
        assert worker.stdout.readline().strip() == "ready", worker.stderr.read()
        admin = Ddo(ddod.socket_path)
        # gRPC connects at the first call: root is connected before the flood, like the victim.
        assert admin.call("GetStats", stats_pb2.GetStatsRequest(), timeout=10).ok
        lines_before = log_lines(ddod)
        floods = [start_as(member, ddod, flood_program(ddod.socket_path, 150))
                  for member in members]
        flooded = [read_result(flood, 60) for flood in floods]
        worker.stdin.write("go\n")
        worker.stdin.flush()
        at_work = read_result(worker, 60)
        admin_stats = admin.call("GetStats", stats_pb2.GetStatsRequest(), timeout=10)
        admin.close()
    finally:
        for flood in floods:
            if flood.poll() is None:
                end_flood(flood)
            stop_process(flood)
        stop_process(worker)
    recovered = served_within(ddod.socket_path, 1.0)
    lines = log_lines(ddod) - lines_before

    assert "error" not in at_work, f"the victim's work failed during the flood: {at_work}"
    assert at_work["load"]["code"] == "OK", at_work
    assert at_work["read"] == {"w": "victim's bytes!!"}, at_work
    assert at_work["stats"]["code"] == "OK", at_work
    assert admin_stats.ok, f"root's connection was not served during the flood: {admin_stats}"
    held = sum(result["open"] for result in flooded)
    assert held <= 200, f"the members hold {held} connections: {flooded}"
    assert "descriptors for its own work" in ddod.log(), "the reserve refused nobody"
    assert recovered is not None, "ddod did not serve within a second of the flood's end"
    assert lines < MAX_LOG_LINES, f"the flood wrote {lines} log lines:\n{ddod.log()[-3000:]}"
    assert_still_serving(ddod)
