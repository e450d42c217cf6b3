"""`ddoctl metrics`: ddod's counters in the Prometheus text format (issue 16, item 3), read back
with the Prometheus project's own parser (Debian's python3-prometheus-client).

After a runner registered a small model and streamed it on the host backend in two sessions
(the second finds the slab warm), the exposition parses, every family has its HELP and TYPE,
counters end in _total, the streamed bytes cover what the sessions used, the warm-slab hit
and miss are counted, RPC counts and per-method latency histograms (cumulative buckets ending
in +Inf = count) are there, and a second scrape never shows a counter going back.
"""

from __future__ import annotations

import re
import subprocess

import pytest
import torch

from diffusers_dynamic_offloader import DdoClient
from support import ddoctl_path
from streaming_support import STREAM_ALL, frozen_copy, make_input, make_model, mismatches

parser = pytest.importorskip("prometheus_client.parser")

CACHE_KEY = "metrics/tiny"


def _ddoctl(_ddod_binary: str) -> str:
    return ddoctl_path()


def _scrape(ddod_binary: str, address: str) -> dict:
    done = subprocess.run([_ddoctl(ddod_binary), "--daemon", address, "metrics"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    families = {family.name: family
                for family in parser.text_string_to_metric_families(done.stdout)}
    for line in done.stdout.splitlines():
        if line.startswith("# TYPE ") and line.split()[3] == "counter":
            assert line.split()[2].endswith("_total"), line
    return families


def _value(families: dict, name: str, **labels) -> float:
    for family in families.values():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    raise AssertionError(f"no sample {name} {labels}")


def test_metrics_parse_and_count_what_happened(daemon, ddod_binary):
    model = make_model(torch.float32)
    reference = frozen_copy(model)
    streamed = 0
    with DdoClient.connect(daemon.address) as client:
        client.register_module(CACHE_KEY, model)
        for _ in range(2):  # the second session finds the slab warm (warm_process keeps it)
            with client.stream(model, CACHE_KEY, device="cpu", settings=STREAM_ALL) as session:
                assert mismatches(model, reference, range(3), torch.float32) == []
                streamed += session.stats()["bytes_used"]
    families = _scrape(ddod_binary, daemon.address)

    assert families["ddo_info"].type == "gauge"
    assert _value(families, "ddo_stream_sessions_opened_total") == 2
    # ddod copies ahead of the runner: at least what the runner used, a ring's worth more at most.
    assert streamed > 0 and _value(families, "ddo_stream_bytes_total") >= streamed
    assert _value(families, "ddo_stream_units_total") > 0
    assert _value(families, "ddo_pool_components") == 1
    assert _value(families, "ddo_pool_used_bytes") > 0
    hits = _value(families, "ddo_stream_warm_slab_hits_total")
    misses = _value(families, "ddo_stream_warm_slab_misses_total")
    assert hits + misses == 2 and misses >= 1, (hits, misses)
    assert _value(families, "ddo_rpc_requests_total", method="Attach", result="ok") == 2

    histogram = families["ddo_rpc_duration_seconds"]
    assert histogram.type == "histogram"
    buckets = [s for s in histogram.samples
               if s.name.endswith("_bucket") and s.labels["method"] == "Attach"]
    counts = [s.value for s in buckets]
    assert counts == sorted(counts) and buckets[-1].labels["le"] == "+Inf"
    assert counts[-1] == _value(families, "ddo_rpc_duration_seconds_count", method="Attach") == 2
    assert _value(families, "ddo_rpc_duration_seconds_sum", method="Attach") > 0
    assert not [s for s in histogram.samples if s.labels.get("method") == "Connect"]

    again = _scrape(ddod_binary, daemon.address)
    for name in ("ddo_stream_bytes_total", "ddo_stream_units_total",
                 "ddo_stream_sessions_opened_total", "ddo_pool_evictions_total"):
        assert _value(again, name) >= _value(families, name), name


def test_top_shows_a_live_session_and_its_rate(daemon, ddod_binary):
    """`ddoctl top 0.2 2`: two screens; the second has a rate for the session streaming meanwhile
    (a thread runs forwards while ddoctl samples)."""
    import threading

    model = make_model(torch.float32)
    with DdoClient.connect(daemon.address) as client:
        client.register_module(CACHE_KEY, model)
        with client.stream(model, CACHE_KEY, device="cpu", settings=STREAM_ALL) as session:
            stop = threading.Event()

            def forwards() -> None:
                step = 0
                with torch.no_grad():
                    while not stop.is_set():
                        model(make_input(step))
                        step += 1

            worker = threading.Thread(target=forwards)
            worker.start()
            try:
                done = subprocess.run([_ddoctl(ddod_binary), "--daemon", daemon.address, "top",
                                       "0.5", "2"], capture_output=True, text=True, timeout=60)
            finally:
                stop.set()
                worker.join()
            session_id = session.session_id[:8]
    assert done.returncode == 0, done.stderr
    screens = ["ddod " + screen for screen in done.stdout.split("\nddod ")]
    assert len(screens) >= 2 and "streaming - now" in screens[0], done.stdout
    row = next(line for line in screens[1].splitlines() if line.startswith(session_id))
    assert CACHE_KEY in row and re.search(r"\d+\.\d [MG]B/s", row), row
    assert re.search(r"streaming \d+\.\d [MG]B/s now", screens[1]), screens[1]


def test_top_piped_prints_one_screen_and_exits(daemon, ddod_binary):
    """`ddoctl top | ...`: no terminal, so one screen and exit 0, as `top -b -n 1` does; `-n 2`
    asks for two."""
    done = subprocess.run([_ddoctl(ddod_binary), "--daemon", daemon.address, "top"],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ddod ") and done.stdout.count("\nddod ") == 0, done.stdout
    assert "\033[" not in done.stdout, "a screen clear went into the pipe"
    assert "SESSION" in done.stdout and done.stdout.endswith("\n")

    done = subprocess.run([_ddoctl(ddod_binary), "--daemon", daemon.address, "top", "-n", "2",
                           "0.1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("\n\nddod ") == 1, done.stdout
    for bad in (["-n", "0"], ["-n"], ["-n", "2", "1", "3"], ["0.01"]):
        refused = subprocess.run([_ddoctl(ddod_binary), "--daemon", daemon.address, "top", *bad],
                                 capture_output=True, text=True, timeout=30)
        assert refused.returncode == 2 and "top takes" in refused.stderr, (bad, refused)
