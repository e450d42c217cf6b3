"""Finding 7: no per-client limits: one group member took 511 leases and everyone else got
"Server Threadpool Exhausted"; huge strings (20 MiB keys) broke ListComponents and bloated the
manifest and the log.

Now each uid has limits (RESOURCE_EXHAUSTED naming the limit) and request strings are bounded
(INVALID_ARGUMENT or RESOURCE_EXHAUSTED naming the limit): other users keep being served.
"""

from __future__ import annotations

import glob
import json
import os
import select
import time

from attacker_kit import components_pb2, sessions_pb2
from security_support import assert_still_serving, run_as, start_as, stop_process

MAX_LEASES_TRIED = 600

HOG = f"""
    import grpc, sys
    from diffusers_dynamic_offloader._proto import ddo_pb2_grpc
    ddo = from_environment()
    held, failure, stub = [], None, None
    for i in range({MAX_LEASES_TRIED}):
        if i % 50 == 0:  # a fresh channel now and then: HTTP/2 caps the streams of one
            stub = ddo_pb2_grpc.DdoStub(grpc.insecure_channel("unix:" + ddo.socket_path))
        try:
            held.append(ddo.open_lease(client_name=f"hog-{{i}}", timeout=5, stub=stub))
        except grpc.RpcError as error:
            failure = {{"code": error.code().name, "details": error.details()}}
            break
    report(held=len(held), failure=failure)
    sys.stdin.read()  # hold every lease until the test closes stdin
"""


def read_result(proc, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], deadline - time.monotonic())
        if not ready:
            break
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise AssertionError(f"the lease hog reported nothing within {timeout} s")


def test_f7_one_user_cannot_take_every_lease(ddod, attacker, victim):
    hog = start_as(attacker, ddod.socket_path, HOG)
    try:
        hogged = read_result(hog, 90)
        served = run_as(victim, ddod.socket_path, """
            from attacker_kit import stats_pb2
            ddo = from_environment()
            try:
                call, lease = ddo.open_lease(client_name="victim", timeout=10)
                opened = {"code": "OK"}
            except Exception as error:
                opened = {"code": "FAILED", "details": str(error)}
            report(lease=opened, stats=ddo.call("GetStats", stats_pb2.GetStatsRequest()))
        """)
    finally:
        stop_process(hog)
    assert served["lease"]["code"] == "OK", f"the victim got no lease: {served} (hog: {hogged})"
    assert served["stats"]["code"] == "OK", f"the victim was not served: {served}"
    assert hogged["held"] < MAX_LEASES_TRIED and hogged["failure"], hogged
    assert hogged["failure"]["code"] == "RESOURCE_EXHAUSTED", hogged
    assert "threadpool" not in hogged["failure"]["details"].lower(), (
        f"the attacker hit the server's thread pool, not a per-user limit: {hogged}")
    assert_still_serving(ddod)


def test_f7_huge_strings_are_refused(ddod, admin, attacker):
    result = run_as(attacker, ddod.socket_path, """
        huge = "k" * (1 << 20)
        ddo = from_environment()
        call, lease = ddo.open_lease()
        spec = components_pb2.TensorSpec(name="weight", dtype=components_pb2.DTYPE_U8,
                                         shape=[8], byte_size=8)
        register = ddo.call("RegisterComponent", components_pb2.RegisterComponentRequest(
            lease_id=lease, cache_key=huge, tensors=[spec]), timeout=20)
        named = ddo.call("RegisterComponent", components_pb2.RegisterComponentRequest(
            lease_id=lease, cache_key="fine", tensors=[components_pb2.TensorSpec(
                name=huge, dtype=components_pb2.DTYPE_U8, shape=[8], byte_size=8)]), timeout=20)
        mine = own_file("mine.safetensors", {"w": b"12345678"})
        load = ddo.load(ddo.load_request(lease, huge, [mine]), timeout=20)
        try:
            ddo.open_lease(client_name=huge, timeout=10)
            lease_named = {"code": "OK"}
        except Exception as error:
            lease_named = {"code": getattr(error, "code", lambda: None)() and error.code().name,
                           "details": str(error)[:300]}
        for outcome in (register, named, load):
            outcome["echoes"] = "k" * 1000 in outcome["details"]
            outcome["details"] = outcome["details"][:300]
        report(register=register, named=named, load=load, lease_named=lease_named)
    """, timeout=120)
    for name in ("register", "named", "load"):
        assert result[name]["code"] in ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED"), result
        assert not result[name]["echoes"], f"an error echoes the huge string: {result}"
        # gRPC's own refusal of an answer that echoed the string is not the limit we want.
        assert "metadata size exceeds" not in result[name]["details"], result
    listed = admin.call("ListComponents", components_pb2.ListComponentsRequest(),
                        keep=lambda response: [len(c.ref.cache_key) for c in response.components])
    assert listed.ok, f"ListComponents broke: {listed['details'][:300]}"
    assert all(length <= 4096 for length in listed["response"]), listed["response"]
    sessions = admin.call("ListSessions", sessions_pb2.ListSessionsRequest(),
                          keep=lambda response: [len(lease.client_name) for lease in response.leases])
    assert sessions.ok and all(length <= 4096 for length in sessions["response"]), sessions
    manifests = sum(os.path.getsize(path) for path in glob.glob(f"{ddod.state_dir}/pool-*/*"))
    assert manifests < 1 << 20, f"the pool's state files grew to {manifests} bytes"
    assert os.path.getsize(ddod.log_path) < 1 << 20, "the log grew by the huge strings"
    assert_still_serving(ddod)
