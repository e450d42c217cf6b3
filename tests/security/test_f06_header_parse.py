"""Finding 6: the safetensors header parse was quadratic (100k entries: 187 s) and could not be
cancelled, and an upload committed under a lease that had closed minutes earlier.

Now a hostile header is parsed (or refused) in bounded time, SIGTERM still stops ddod, and
nothing commits for a lease that is gone.
"""

from __future__ import annotations

import secrets

from attacker_kit import components_pb2
from security_support import assert_still_serving, run_as

# The attacker's own file: `entries` one-byte tensors (readable by the attacker: legitimate).
HOSTILE_FILE = """
    import json, os, struct
    entries = {entries}
    header = {{f"t{{i}}": {{"dtype": "U8", "shape": [1], "data_offsets": [i, i + 1]}}
              for i in range(entries)}}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path = os.path.expanduser("~/many.safetensors")
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + b"\\0" * entries)
"""


def test_f6_huge_header_is_handled_in_bounded_time(ddod, attacker):
    result = run_as(attacker, ddod.socket_path, HOSTILE_FILE.format(entries=100_000) + """
        ddo = from_environment()
        call, lease = ddo.open_lease()
        report(load=ddo.load(ddo.load_request(lease, "many", [path]), timeout=20))
    """, timeout=90)
    assert result["load"]["code"] != "DEADLINE_EXCEEDED", (
        f"a 100k-entry header kept ddod busy past 20 s: {result}")
    assert_still_serving(ddod)
    assert ddod.stop() is not None, "ddod did not stop within a few seconds of SIGTERM"


def test_f6_nothing_commits_after_the_lease_closed(ddod, admin, attacker):
    key = f"orphan-{secrets.token_hex(4)}"
    # 20k entries took the old parser several seconds: time to close the lease meanwhile.
    result = run_as(attacker, ddod.socket_path, HOSTILE_FILE.format(entries=20_000) + f"""
        import threading, time
        ddo = from_environment()
        call, lease = ddo.open_lease()
        request = ddo.load_request(lease, {key!r}, [path])
        outcome = {{}}
        def load():
            outcome.update(ddo.load(request, timeout=40))
            outcome["finished_at"] = time.monotonic()
        loader = threading.Thread(target=load)
        loader.start()
        time.sleep(0.2)
        call.cancel()  # the lease ends while ddod is (still) reading the header
        cancelled_at = time.monotonic()
        loader.join(45)
        finished_first = outcome.get("finished_at", float("inf")) < cancelled_at
        report(load=dict(outcome), finished_before_the_lease_closed=finished_first)
    """, timeout=90)
    listed = admin.call("ListComponents", components_pb2.ListComponentsRequest(),
                        keep=lambda response: [c.ref.cache_key for c in response.components])
    assert listed.ok, listed
    # A load that completed while its lease was still open may stay; none may commit later.
    if not result["finished_before_the_lease_closed"]:
        assert key not in listed["response"], f"a load committed under a closed lease: {result}"
        assert result["load"].get("code") != "OK", f"a load committed under a closed lease: {result}"
    assert_still_serving(ddod)
