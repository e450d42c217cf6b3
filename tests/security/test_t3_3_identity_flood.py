"""Issue 31, finding 3: one member filled the identity socket.

Connections over the per-uid limit stayed open until their first packet (ddod kept them to
answer with the reason), which an attacker never sends: 1,100 idle sockets from one uid held
1,023 of the 1,024 slots, and every other user, root included, was refused.

Now a connection over a limit is closed at once (the client's error still says that a limit
may be why), a connection that has not said HELLO within 5 s is dropped, and the total never
refuses root or ddod's own user. ddod runs with RLIMIT_NOFILE 4096 here: the slots, not the
descriptors, are what the flood is after.
"""

from __future__ import annotations

from flood_kit import (end_flood, flood_program, log_lines, read_result, root_served,
                       served_within)
from security_support import BOTH_DAEMONS, assert_still_serving, run_as, start_as, stop_process

# Each test against a root ddod and against one run as the service user.
pytestmark = BOTH_DAEMONS

NOFILE = 4096
PER_USER = 64  # ddod's default --max-connections-per-user
HELLO_DEADLINE_S = 5.0
MAX_LOG_LINES = 200

SERVED = """
    outcome = {}
    try:
        ddo = from_environment()
        call, lease = ddo.open_lease(client_name="victim", timeout=10)
        call.cancel()
        outcome["stats"] = ddo.call("GetStats", stats_pb2.GetStatsRequest(), timeout=10)
    except Exception as error:
        outcome["error"] = f"{type(error).__name__}: {error}"[:300]
    report(**outcome)
"""

# The public client's error when ddod closes a connection over the limit.
OVER_THE_LIMIT = """
    import os
    from diffusers_dynamic_offloader.identity import IdentityChannel
    held, error = [], ""
    try:
        for _ in range(100):
            held.append(IdentityChannel.connect(os.environ["DDO_SEC_SOCKET"] + ".id", timeout=10))
    except Exception as refused:
        error = f"{type(refused).__name__}: {refused}"
    report(held=len(held), error=error)
"""


def test_t3_3_idle_identity_connections_cannot_lock_out_other_users(ddod_factory, attacker,
                                                                     victim):
    ddod = ddod_factory(nofile=NOFILE)
    identity_socket = ddod.socket_path + ".id"
    lines_before = log_lines(ddod)
    flood = start_as(attacker, ddod, flood_program(identity_socket, 1100))
    try:
        flooded = read_result(flood, 60)
        victim_served = run_as(victim, ddod, SERVED, timeout=60)
        admin_served = root_served(ddod.socket_path)
        # The connections the attacker kept say nothing: ddod drops them at HELLO's deadline.
        flood.stdin.write("wait\n")
        flood.stdin.flush()
        dropped = read_result(flood, 30)
    finally:
        if flood.poll() is None:
            end_flood(flood)
        stop_process(flood)
    recovered = served_within(ddod.socket_path, 1.0)
    lines = log_lines(ddod) - lines_before

    assert "error" not in victim_served, f"the victim was refused: {victim_served}"
    assert victim_served["stats"]["code"] == "OK", victim_served
    assert admin_served["code"] == "OK", f"root was refused during the flood: {admin_served}"
    assert flooded["open"] <= PER_USER, (
        f"one member holds {flooded['open']} identity connections: {flooded}")
    assert flooded["probe_closed"], f"a connection over the limit was kept open: {flooded}"
    assert dropped["still_open"] == 0, f"silent connections outlived HELLO's deadline: {dropped}"
    assert dropped["seconds"] <= HELLO_DEADLINE_S + 2, dropped
    assert recovered is not None, "ddod did not serve within a second of the flood's end"
    assert lines < MAX_LOG_LINES, f"the flood wrote {lines} log lines:\n{ddod.log()[-3000:]}"
    assert_still_serving(ddod)


def test_t3_3_the_client_says_which_limit_refused_it(ddod_factory, attacker):
    ddod = ddod_factory(nofile=NOFILE)
    result = run_as(attacker, ddod, OVER_THE_LIMIT, timeout=60)
    assert result["held"] == PER_USER, result
    assert "ddod refused the identity connection" in result["error"], result
    assert "a connection limit?" in result["error"], result
    assert_still_serving(ddod)
