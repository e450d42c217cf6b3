"""GPU only: `ddoctl metrics` and `ddoctl top` of a ddod streaming on cuda:0 (issue 16, item 3).

Two sessions of the synthetic transformer of streaming_models.py stream on the GPU; the
Prometheus text then counts the bytes ddod copied to the GPU (at least what the runner used),
both sessions, and the Attach calls with their latency histogram (warm-slab hits and misses
are printed); `ddoctl top`
prints the session with its device and rate while a thread runs forwards.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "client-python" / "src"))
sys.path.insert(0, str(REPO / "tests" / "python"))

import streaming_models as sm  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICE = "cuda:0"


def _ddoctl(daemon) -> str:
    binary = os.environ.get("DDO_DDOD_BINARY", str(REPO / ".bundle" / "bin" / "ddod"))
    return str(Path(binary).with_name("ddoctl"))


def _metrics(daemon) -> dict:
    done = subprocess.run([_ddoctl(daemon), "--daemon", daemon.address, "metrics"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    values = {}
    for line in done.stdout.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


def test_metrics_and_top_on_the_gpu(client, daemon):
    key = "test/metrics-gpu"
    model = sm.make_model(torch.bfloat16, seed=0)
    client.register_module(key, model, progress=False)
    before = _metrics(daemon)
    used = 0
    settings = sm.stream_settings("linear")
    for _ in range(2):
        with client.stream(model, key, device=DEVICE, settings=settings) as session:
            with torch.no_grad():
                for forward in range(3):
                    model(**sm.make_inputs(forward, torch.bfloat16, DEVICE))
            torch.cuda.synchronize()
            used += session.stats()["bytes_used"]
    after = _metrics(daemon)
    copied = after["ddo_stream_bytes_total"] - before.get("ddo_stream_bytes_total", 0)
    assert used > 0 and copied >= used, (copied, used)
    assert after["ddo_stream_sessions_opened_total"] - before.get(
        "ddo_stream_sessions_opened_total", 0) == 2
    attach = 'ddo_rpc_duration_seconds_count{method="Attach"}'
    assert after[attach] - before.get(attach, 0) == 2
    fast = after['ddo_rpc_duration_seconds_bucket{method="Attach",le="0.1"}']
    print(f"[metrics-gpu] copied {copied:.0f} B for {used} B used; warm slab hits "
          f"{after['ddo_stream_warm_slab_hits_total']:.0f}, misses "
          f"{after['ddo_stream_warm_slab_misses_total']:.0f}; Attach calls within 0.1 s "
          f"{fast:.0f}")

    with client.stream(model, key, device=DEVICE, settings=settings) as session:
        stop = threading.Event()

        def forwards() -> None:
            step = 0
            with torch.no_grad():
                while not stop.is_set():
                    model(**sm.make_inputs(step % 4, torch.bfloat16, DEVICE))
                    step += 1

        worker = threading.Thread(target=forwards)
        worker.start()
        try:
            top = subprocess.run([_ddoctl(daemon), "--daemon", daemon.address, "top", "0.5", "2"],
                                 capture_output=True, text=True, timeout=60)
        finally:
            stop.set()
            worker.join()
        session_id = session.session_id[:8]
    assert top.returncode == 0, top.stderr
    print(top.stdout)
    last = top.stdout.split("\nddod ")[-1]
    row = next(line for line in last.splitlines() if line.startswith(session_id))
    assert "GPU-" in row or "cuda" in row, row
    assert re.search(r"\d+\.\d [MG]B/s", row), row
