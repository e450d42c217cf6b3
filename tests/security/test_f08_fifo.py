"""Finding 8: LoadSafetensors validated a file by path and then reopened it by path: a FIFO
swapped in between blocked the handler forever, kept its pool reservation and hung SIGTERM.

Now ddod reads a caller's files only through the descriptors the caller passed (and refuses
anything that is not a regular file): no swap can reach it, and SIGTERM still stops ddod.
"""

from __future__ import annotations

from security_support import assert_still_serving, run_as

# The attacker loads its own file (a header of a few thousand entries gives ddod something to
# chew on between its check and its reopen), then renames a FIFO over the path; several
# timings, stopping at the first load that hangs.
SWAP_RACE = """
    import os, threading, time
    from attacker_kit import safetensors_bytes
    ddo = from_environment()
    call, lease = ddo.open_lease()
    home = os.path.expanduser("~")
    path = os.path.join(home, "model.safetensors")
    tensors = {f"t{i}": b"x" for i in range(4000)}
    outcomes = []
    for attempt, delay in enumerate((0.0, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.45)):
        if os.path.lexists(path):
            os.unlink(path)  # the last attempt's FIFO
        write_safetensors(path, tensors)
        fifo = os.path.join(home, f"fifo{attempt}")
        os.mkfifo(fifo, 0o600)
        request = ddo.load_request(lease, f"race-{attempt}", [path])
        outcome = {}
        loader = threading.Thread(target=lambda: outcome.update(ddo.load(request, timeout=6)))
        loader.start()
        time.sleep(delay)
        os.rename(fifo, path)
        loader.join(10)
        outcomes.append(dict(outcome, delay=delay))
        if outcome.get("code") == "DEADLINE_EXCEEDED":
            break
    report(outcomes=outcomes)
"""


def test_f8_fifo_swapped_in_cannot_block_ddod(ddod, attacker):
    result = run_as(attacker, ddod.socket_path, SWAP_RACE, timeout=120)
    hung = [outcome for outcome in result["outcomes"] if outcome["code"] == "DEADLINE_EXCEEDED"]
    assert not hung, f"a FIFO swapped in behind ddod's check blocked the load: {hung}"
    assert_still_serving(ddod)
    assert ddod.stop() is not None, "ddod did not stop within a few seconds of SIGTERM"


def test_f8_fifo_is_refused(ddod, attacker):
    result = run_as(attacker, ddod.socket_path, """
        import os
        ddo = from_environment()
        call, lease = ddo.open_lease()
        fifo = os.path.expanduser("~/weights.safetensors")
        os.mkfifo(fifo, 0o600)
        try:
            outcome = ddo.load(ddo.load_request(lease, "fifo", [fifo]), timeout=6)
        except PermissionError as refused:  # FILE refused the descriptor: fine
            outcome = {"code": "REFUSED_AT_FILE", "details": str(refused)}
        report(load=outcome)
    """)
    assert result["load"]["code"] not in ("OK", "DEADLINE_EXCEEDED"), result
    assert_still_serving(ddod)
    assert ddod.stop() is not None, "ddod did not stop within a few seconds of SIGTERM"
