"""ddod's log lines: text, JSON (--log-format json), and under systemd's journal (issue 16,
item 3).

JSON: every line ddod writes is one JSON object with time (UTC), level, logger, pid and message;
a caller's cache key full of quotes, backslashes and escape sequences arrives in the message
intact and escaped, never raw. Journal: with JOURNAL_STREAM naming ddod's stderr (as systemd
sets it), each line starts with its syslog priority (<6> info, <4> warning, <3> error) and the
text form has no timestamp of its own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess

from diffusers_dynamic_offloader import DaemonError, DdoClient
from support import Daemon, start_ddod

ODD_KEY = 'odd "key" \\ with \u00e9'


def test_json_lines(ddod_binary, short_dir):
    daemon = start_ddod(ddod_binary, os.path.join(short_dir, "d.sock"),
                        os.path.join(short_dir, "d.log"), "--log-format", "json")
    with DdoClient.connect(daemon.address) as client:
        try:
            client.evict(ODD_KEY)
        except DaemonError:
            pass  # NOT_FOUND: what matters is the log line of the call
    assert daemon.terminate() == 0
    lines = daemon.log().splitlines()
    assert len(lines) > 5
    records = [json.loads(line) for line in lines]  # every line, or this raises
    for record in records:
        assert set(record) == {"time", "level", "logger", "pid", "message"}, record
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["time"])
        assert record["pid"] == daemon.proc.pid
    assert any(r["logger"] == "server" and r["message"].startswith("serving on")
               for r in records)
    assert any(r["level"] == "debug" for r in records)


def test_journal_priorities(ddod_binary, short_dir, monkeypatch):
    log_path = os.path.join(short_dir, "journal.log")
    sock = os.path.join(short_dir, "j.sock")
    with open(log_path, "wb") as log:
        info = os.fstat(log.fileno())
        env = dict(os.environ, JOURNAL_STREAM=f"{info.st_dev}:{info.st_ino}")
        proc = subprocess.Popen([ddod_binary, "--socket", sock, "--log-level", "debug"],
                                stdout=log, stderr=log, env=env)
    daemon = Daemon(socket=sock, proc=proc, log_path=log_path)
    try:
        deadline_lines = []
        for _ in range(200):
            deadline_lines = daemon.log().splitlines()
            if any("serving on" in line for line in deadline_lines):
                break
            subprocess.run(["sleep", "0.05"])
        with DdoClient.connect(daemon.address) as client:
            try:
                client.evict("missing")  # a refused call: a debug line
            except DaemonError:
                pass
    finally:
        assert daemon.terminate() == 0
    lines = daemon.log().splitlines()
    assert lines and all(re.match(r"<[2-7]>", line) for line in lines), lines[:5]
    serving = next(line for line in lines if "serving on" in line)
    assert serving.startswith("<6>info server: serving on"), serving
    assert any(line.startswith("<7>debug ") for line in lines)
    # JOURNAL_STREAM naming another stream (a child of a service writing to a file): no
    # prefixes, timestamps back.
    monkeypatch.setenv("JOURNAL_STREAM", f"{info.st_dev}:{info.st_ino}")  # journal.log's
    other = start_ddod(ddod_binary, os.path.join(short_dir, "o.sock"),
                       os.path.join(short_dir, "o.log"))
    assert other.terminate() == 0
    assert re.match(r"\d{4}-\d\d-\d\dT", other.log().splitlines()[0]), other.log()[:200]
