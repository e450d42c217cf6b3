"""Issue 31, finding 6: --max-user-pool-gb was bypassed. Units are aligned to 4 KiB in their
segment, but the limit (and GetStats.used_bytes) summed the tensors' unaligned bytes: with a
0.25 GiB limit one user held 786 MiB while the stats showed 259 KiB. Tensor-table heap (about
4 KiB per tensor) was outside every budget.

Now the limit and the stats count what is mapped (segment sizes, each segment once), and the
tables' estimated heap counts against the user's limit (and a limit on tables of its own): a
table of very many tensors is refused with the limit named.
"""

from __future__ import annotations

import glob
import os
import secrets

from security_support import BOTH_DAEMONS, assert_still_serving, run_as

# Each test against a root ddod and against one run as the service user.
pytestmark = BOTH_DAEMONS

LIMIT_BYTES = int(0.25 * (1 << 30))
SLACK = 4 << 20  # one upload in flight may round up to its 2 MiB granule

# Tables of one-byte tensors, each its own unit (4 KiB apart in the segment), committed
# without writing: the cheapest way to take pool memory.
FILLS_THE_POOL = """
    ddo = from_environment()
    call, lease = ddo.open_lease()
    outcomes = []
    for round in range({rounds}):
        specs = [components_pb2.TensorSpec(name=f"t{{i}}", dtype=components_pb2.DTYPE_U8,
                                           shape=[1], byte_size=1, unit=i)
                 for i in range({tensors})]
        register = ddo.call("RegisterComponent", components_pb2.RegisterComponentRequest(
            lease_id=lease, cache_key=f"tiny-{{round}}", tensors=specs), timeout=60,
            keep=lambda response: response.result.upload_id)
        if not register.ok:
            outcomes.append(register)
            break
        outcomes.append(ddo.call("CommitUpload", components_pb2.CommitUploadRequest(
            lease_id=lease, upload_id=register["response"]), timeout=60))
    stats = ddo.call("GetStats", stats_pb2.GetStatsRequest(),
                     keep=lambda response: response.pool.used_bytes)
    report(outcomes=outcomes, stats=stats)
"""


def pool_bytes(ddod) -> int:
    total = 0
    for pool in glob.glob(os.path.join(ddod.state_dir, "pool-*")):
        namespace = os.path.basename(pool)[len("pool-"):]
        for path in glob.glob(f"/dev/shm/ddo-*-{glob.escape(namespace)}-*"):
            total += os.stat(path).st_size
    return total


def test_t3_6_tiny_tensors_cannot_pass_the_user_limit(ddod_factory, attacker):
    # No pre-faulted reserve: pool_bytes counts every segment in /dev/shm, and the reserve's is
    # ddod's, not the user's.
    ddod = ddod_factory("", "--max-user-pool-gb", "0.25", "--prefaulted-reserve-gb", "0")
    result = run_as(attacker, ddod,
                    FILLS_THE_POOL.format(rounds=14, tensors=8000), timeout=120)
    codes = [outcome["code"] for outcome in result["outcomes"]]
    held = pool_bytes(ddod)
    assert held <= LIMIT_BYTES + SLACK, (
        f"one user holds {held >> 20} MiB of pool with a 256 MiB limit ({codes})")
    refused = result["outcomes"][-1]
    assert refused["code"] == "RESOURCE_EXHAUSTED", result
    assert "max-user-pool-gb" in refused["details"], refused
    # The stats count what is mapped: every segment left is a READY component's.
    assert result["stats"]["code"] == "OK", result
    assert result["stats"]["response"] == held, (result["stats"], held)
    assert_still_serving(ddod)


def test_t3_6_a_table_of_very_many_tensors_is_refused_with_the_limit_named(ddod_factory,
                                                                          attacker):
    ddod = ddod_factory("", "--max-user-pool-gb", "0.25")
    key = f"many-{secrets.token_hex(3)}"
    # 100,000 one-byte tensors in one unit: about 25 MiB of segment, but about 400 MiB of
    # ddod's heap for the table.
    result = run_as(attacker, ddod, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        specs = [components_pb2.TensorSpec(name=f"t{{i}}", dtype=components_pb2.DTYPE_U8,
                                           shape=[1], byte_size=1, unit=0)
                 for i in range(100000)]
        report(register=ddo.call("RegisterComponent", components_pb2.RegisterComponentRequest(
            lease_id=lease, cache_key={key!r}, tensors=specs), timeout=60))
    """, timeout=120)
    assert result["register"]["code"] == "RESOURCE_EXHAUSTED", result
    assert "max-user-pool-gb" in result["register"]["details"], result
    assert "table" in result["register"]["details"], result
    assert_still_serving(ddod)
