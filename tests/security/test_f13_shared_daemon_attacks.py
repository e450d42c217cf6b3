"""Attacks on a shared ddod that the rest of the suite does not cover (a red-team pass of
2026-12-07).

Part 1 holds what that pass found: each test failed against the ddod of that day (a lease that
held SIGTERM, profile listings that grew without bound, raw tensor names in errors) and asserts
what ddod does since. Part 2 holds attacks that ddod already withstood, kept because nothing
else in the suite tries them.
"""

from __future__ import annotations

import time

from security_support import (assert_still_serving, run_as, start_as, stop_process,
                              wait_for)

# =============================================================================================
# Part 1: findings
# =============================================================================================

# The attacker writes a file big enough (96 MiB) that a load of it takes ddod's pre-faulted
# reserve (warm_process keeps a quarter of the RAM budget, 256 MiB here; loads of at least a
# quarter of it take it), drops it from the page cache, so that ddod reads it "past the page
# cache" (direct_fill.cc: OpenDirect reopens /proc/self/fd/N with O_DIRECT), and holds a write
# lease (F_SETLEASE F_WRLCK) on the very open file description it passes. The lease is
# allowed: the only open of the file is the attacker's own (the descriptor ddod holds is the
# same file description). ddod's reopen is an open() that breaks the lease: without
# O_NONBLOCK it waits up to /proc/sys/fs/lease-break-time (45 s by default) for the holder,
# who never lets go, inside a gRPC handler that neither the lease's end nor SIGTERM stops.
LEASE_HOLDER = """
    import fcntl, os, signal, sys, threading
    F_SETLEASE = 1024
    signal.signal(signal.SIGIO, signal.SIG_IGN)  # the lease-break notice: ignored
    ddo = from_environment()
    call, lease = ddo.open_lease()
    path = own_file("big.safetensors", {f"t{i}": bytes([i]) * (1 << 20) for i in range(96)})
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # cold: ddod reads it with O_DIRECT
    fcntl.fcntl(fd, F_SETLEASE, fcntl.F_WRLCK)
    answer, _ = ddo.identity.ask("FILE big.safetensors", [fd])
    handle = int(answer.split()[1])
    request = components_pb2.LoadSafetensorsRequest(lease_id=lease, cache_key="big",
                                                    file_handles=[handle])
    outcome = {}
    loader = threading.Thread(target=lambda: outcome.update(ddo.load(request, timeout=120)),
                              daemon=True)
    loader.start()
    print("LOADING", flush=True)
    sys.stdin.readline()
"""


def test_a_lease_on_a_passed_file_cannot_hold_sigterm(ddod, attacker):
    holder = start_as(attacker, ddod, LEASE_HOLDER)
    try:
        line = holder.stdout.readline()
        assert line.strip() == "LOADING", (line, holder.stderr.read() if holder.poll() else "")
        # The load reaches the direct reopen within a moment (its upload line is logged).
        assert wait_for(lambda: "of 'big' started by" in ddod.log(), 10), ddod.log()[-2000:]
        time.sleep(1.0)
        assert_still_serving(ddod)
        stopped = ddod.stop(timeout=10)
        assert stopped is not None and stopped < 5, (
            f"ddod did not stop within 5 s of SIGTERM (it took "
            f"{'more than 10' if stopped is None else f'{stopped:.1f}'} s): a member's load "
            f"is blocked in open(/proc/self/fd/N, O_DIRECT) on its own file's write lease; "
            f"log tail:\n{ddod.log()[-1500:]}")
    finally:
        stop_process(holder)


def _status_bytes(pid: int, field: str) -> int:
    """A size line of /proc/PID/status (``VmRSS``, ``VmHWM``), in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field}")


def _peak_rss_bytes(pid: int) -> int:
    return _status_bytes(pid, "VmHWM")


def _reset_peak_rss(pid: int) -> None:
    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("5")  # resets VmHWM to the current RSS


def _rss_bytes(pid: int) -> int:
    return _status_bytes(pid, "VmRSS")


PROFILE_BYTES = 1 << 20  # kMaxProfileBytes: the largest profile ddod stores
PROFILES = 192           # under a fifth of kMaxProfilesPerStore (1024)
LISTERS = 6              # concurrent ListProfiles calls (a member may run 64)


def test_listing_a_members_profiles_costs_bounded_memory(ddod, attacker):
    """A member stores profiles within ddod's limits (1024 per store, 1 MiB each: 1 GiB), then
    calls ListProfiles. ddod reads every profile into memory, copies them all into one
    response and only then finds it larger than gRPC's 64 MiB message limit: each call costs
    about 2.5 times the store, and a member may run 64 calls at once. Here 192 MiB of
    profiles and 6 concurrent calls; the test stands in for 255 of the PutProfile calls by
    writing the same files PutProfile writes (they fsync one by one: too slow for a test)."""
    import os

    first = "0" * 24
    made = run_as(attacker, ddod, f"""
        import json
        key = {first!r}
        body = json.dumps({{"profile_key": key, "pad": "x" * ({PROFILE_BYTES} - 64)}})
        ddo = from_environment()
        put = ddo.call("PutProfile", profiles_pb2.PutProfileRequest(profile=profiles_pb2.Profile(
            ref=profiles_pb2.ProfileRef(key=key), json=body)))
        report(put=put)
    """)
    assert made["put"]["code"] == "OK", made
    store = os.path.join(ddod.state_dir, "profiles", str(attacker.uid))
    with open(os.path.join(store, f"ddo-capacity-v1-{first}.json")) as stored:
        template = stored.read()
    assert len(template) <= PROFILE_BYTES
    owner = os.stat(store).st_uid
    for index in range(1, PROFILES):
        key = f"{index:024x}"
        path = os.path.join(store, f"ddo-capacity-v1-{key}.json")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
            out.write(template.replace(first, key, 1))
        os.chown(path, owner, -1)

    baseline = _rss_bytes(ddod.pid)
    _reset_peak_rss(ddod.pid)
    listed = run_as(attacker, ddod, """
        import threading
        ddo = from_environment()
        outcomes = []
        def list_all():
            outcomes.append(ddo.call("ListProfiles", profiles_pb2.ListProfilesRequest(),
                                     timeout=60, keep=lambda response: len(response.profiles)))
        threads = [threading.Thread(target=list_all) for _ in range(int(os.environ["LISTERS"]))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        report(outcomes=[(o["code"], o["details"][:160], o.get("response")) for o in outcomes])
    """, timeout=90, LISTERS=str(LISTERS))
    grown = _peak_rss_bytes(ddod.pid) - baseline
    assert_still_serving(ddod)
    assert grown < (1 << 30), (
        f"{LISTERS} ListProfiles calls over {PROFILES} MiB of one member's profiles grew ddod's memory "
        f"by {grown / 2**20:.0f} MiB at the peak (a member may run 64 calls, and store 1 GiB "
        f"of profiles): {listed['outcomes']}")
    assert all(code == "OK" for code, _, _ in listed["outcomes"]), (
        f"a store within ddod's own limits cannot be listed: {listed['outcomes']}")


FORGED = "FORGED-s11 info store: evicted every component"
HOSTILE_NAME = "w\n2026-01-01T00:00:00.000 ddod[1] " + FORGED + "\x1b[2J" + "n" * 2000


def test_tensor_names_from_a_header_are_never_echoed_raw(ddod, attacker):
    """docs/security.md §4: names from a header that parsed are shown escaped and cut to 128
    bytes. A safetensors header may name a tensor with any JSON string (control characters
    included: ValidateTensorTable checks names from RegisterComponent's request limits, never
    a file's). A load whose `units` map leaves such a tensor out is refused by
    TableOfSafetensors (component_store.cc) with the name raw and uncut, and ddod's log (debug,
    as the suite and `--log-level debug` run it) writes that message as it is: a member forges
    whole log lines and sends terminal escapes to whoever reads the log."""
    result = run_as(attacker, ddod, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        path = own_file("names.safetensors", {{{HOSTILE_NAME!r}: b"x" * 8, "b.w": b"y" * 8}})
        request = ddo.load_request(lease, "names", [path], units={{"b.w": 0}})
        report(load=ddo.load(request))
    """)
    load = result["load"]
    assert load["code"] == "INVALID_ARGUMENT", load
    details = load["details"]
    assert not any(ord(c) < 0x20 or ord(c) == 0x7f for c in details), (
        f"the refusal echoes the header's tensor name raw: {details[:200]!r}")
    assert len(details) < 600, f"the refusal quotes a {len(details)}-byte name uncut"
    log = ddod.log_bytes()
    assert b"\x1b[2J" not in log and not any(
        line.startswith(b"2026-01-01T00:00:00.000 ddod[1] FORGED-s11") for line in log.splitlines()), (
        "a member wrote a line of its choosing into ddod's log: "
        f"{[line for line in log.splitlines() if b'FORGED-s11' in line][:2]}")
    assert_still_serving(ddod)


# =============================================================================================
# Part 2: attacks ddod withstands (kept: nothing else in the suite tries them)
# =============================================================================================


def test_odd_descriptors_and_handles_are_refused_without_harm(ddod, attacker):
    """FILE with a directory, a socket, an eventfd, an epoll descriptor, /dev/null and three
    descriptors in one packet; /proc and /sys files (regular to fstat, but not what their
    size says) refused at load; a handle named twice in one load refused."""
    result = run_as(attacker, ddod, """
        import select, socket
        ddo = from_environment()
        call, lease = ddo.open_lease()
        def file(fds, name="x.safetensors"):
            answer, _ = ddo.identity.ask("FILE " + name, fds)
            return answer
        sock = socket.socket()
        poll = select.epoll()
        refused = {
            "directory": file([os.open(os.path.expanduser("~"), os.O_RDONLY | os.O_DIRECTORY)]),
            "socket": file([sock.fileno()]),
            "eventfd": file([os.eventfd(0)]),
            "epoll": file([poll.fileno()]),
            "devnull": file([os.open("/dev/null", os.O_RDONLY)]),
        }
        path = own_file("ok.safetensors", {"w": b"x" * 8})
        three = [os.open(path, os.O_RDONLY) for _ in range(3)]
        refused["three"] = file(three)
        loads = {}
        for label, special in (("proc", "/proc/self/status"),
                               ("sys", "/sys/kernel/mm/transparent_hugepage/enabled")):
            answer = file([os.open(special, os.O_RDONLY)])
            handle = int(answer.split()[1])
            loads[label] = ddo.load(components_pb2.LoadSafetensorsRequest(
                lease_id=lease, cache_key=label, file_handles=[handle]), timeout=10)
        handle = ddo.pass_file(path)
        loads["twice"] = ddo.load(components_pb2.LoadSafetensorsRequest(
            lease_id=lease, cache_key="twice", file_handles=[handle, handle]), timeout=10)
        report(refused=refused, loads=loads)
    """)
    for label, answer in result["refused"].items():
        assert answer.startswith("ERR"), (label, answer)
    for label, load in result["loads"].items():
        assert load["code"] == "INVALID_ARGUMENT", (label, load)
    assert_still_serving(ddod)
