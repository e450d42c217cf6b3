"""Floods of idle connections, for the tests of issue 31's findings 2 and 3.

``FLOOD`` is a program run as a throwaway user (``start_as``): it opens ``count`` connections to
one of ddod's sockets and sends nothing on them, finds out which ones ddod closed, reports
(``RESULT``), holds the rest until its stdin closes, then closes them all and exits.

Which ones ddod closed: ddod accepts connections in the order they came, so once it has dealt
with one more connection after the flood (a probe it closes, being over the limit), it has
dealt with every earlier one, and a closed one reads as the end of the stream at once. Against
a ddod that keeps the probe (or never accepts it), the program waits at most PROBE_WAIT_S.
Sent "wait", it waits (at most 15 s) until ddod has closed every connection it held, and
reports how many are still open and after how long.
"""

from __future__ import annotations

import json
import select
import subprocess
import time
from typing import Optional

from attacker_kit import Ddo, stats_pb2
from security_support import serving

PROBE_WAIT_S = 5.0

FLOOD = """
    import os, resource, select, socket, struct, sys, time
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    path, count = {path!r}, {count}
    kind = socket.SOCK_SEQPACKET if path.endswith(".id") else socket.SOCK_STREAM

    def connect():
        sock = socket.socket(socket.AF_UNIX, kind)
        # Blocking, so that a full backlog waits for ddod to accept (for 2 s at most:
        # SO_SNDTIMEO bounds a Unix socket's connect).
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 2, 0))
        try:
            sock.connect(path)
        except OSError:  # the backlog stayed full, or the socket is gone
            sock.close()
            return None
        sock.setblocking(False)
        return sock

    def closed_by_ddod(sock):
        try:
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except ConnectionResetError:
            return True

    started = time.monotonic()
    sockets, unreached = [], 0
    for _ in range(count):
        sock = connect()
        if sock is None:
            unreached += 1
        else:
            sockets.append(sock)
    probe = connect()
    probe_closed = False
    if probe is not None:
        waiting = select.poll()
        waiting.register(probe, select.POLLIN)
        waiting.poll({probe_wait} * 1000)
        probe_closed = closed_by_ddod(probe)
        probe.close()
    closed = [sock for sock in sockets if closed_by_ddod(sock)]
    held = [sock for sock in sockets if not closed_by_ddod(sock)]
    for sock in closed:
        sock.close()
    report(open=len(held), closed=len(closed), unreached=unreached, probe_closed=probe_closed,
           seconds=time.monotonic() - started)
    if sys.stdin.readline() != "wait\\n":  # the test is done: close them all
        sys.exit(0)
    # Until ddod closed every held one (at most 15 s).
    waited = time.monotonic()
    open_ones = list(held)
    while open_ones and time.monotonic() - waited < 15:
        waiting = select.poll()
        for sock in open_ones:
            waiting.register(sock, select.POLLIN)
        waiting.poll((15 - (time.monotonic() - waited)) * 1000)
        open_ones = [sock for sock in open_ones if not closed_by_ddod(sock)]
    report(still_open=len(open_ones), seconds=time.monotonic() - waited)
    sys.stdin.read()  # hold the rest until the test closes stdin
    for sock in held:
        sock.close()
"""


def flood_program(path: str, count: int) -> str:
    return FLOOD.format(path=path, count=count, probe_wait=PROBE_WAIT_S)


def read_result(proc: subprocess.Popen, timeout: float) -> dict:
    """The next RESULT line the program prints, within ``timeout``."""
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
    raise AssertionError(f"the flood reported nothing within {timeout} s "
                         f"(exit {proc.poll()}): {proc.stderr.read() if proc.poll() is not None else ''}")


def end_flood(proc: subprocess.Popen) -> None:
    """Lets the program close its connections and exit; waits for it."""
    proc.stdin.close()
    proc.wait(30)


def log_lines(daemon) -> int:
    return len(daemon.log_bytes().splitlines())


def served_within(socket_path: str, seconds: float) -> Optional[float]:
    """Seconds until ddod's health check answered on a new connection (None past ``seconds``)."""
    started = time.monotonic()
    while True:
        left = started + seconds - time.monotonic()
        if left <= 0:
            return None
        if serving(socket_path, timeout=max(left, 0.05)):
            return time.monotonic() - started


def root_served(socket_path: str) -> dict:
    """Root (an admin) connects afresh, opens a lease and asks GetStats."""
    try:
        root = Ddo(socket_path)
    except Exception as error:  # the identity socket refused or did not answer
        return {"code": "FAILED", "details": f"{type(error).__name__}: {error}"[:300]}
    try:
        call, _lease = root.open_lease(client_name="root", timeout=10)
        call.cancel()
        return root.call("GetStats", stats_pb2.GetStatsRequest(), timeout=10)
    except Exception as error:
        return {"code": "FAILED", "details": f"{type(error).__name__}: {error}"[:300]}
    finally:
        root.close()
