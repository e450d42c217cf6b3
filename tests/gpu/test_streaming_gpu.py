"""GPU only (tests/gpu/run_foundation.sh runs every tests/gpu/*.py): streaming sessions against a
real ddod (docs/streaming.md).

Every output of a streamed module must be bitwise equal (torch.equal) to the same module run
with all its weights on the GPU: for fp32 and bf16, for DDO_STREAM_UNIT linear and block, when
the forward takes a branch that breaks the learned schedule, for any number of forwards, with
two runner processes on one component at once, and when one of them is killed mid-step.

ddod: DDO_DDOD_BINARY, else .bundle/bin/ddod, else build/bin/ddod (the bundle's lib/ beside
bin/ goes on ddod's LD_LIBRARY_PATH). The runner processes are tests/gpu/streaming_models.py.

    DDO_DDOD_BINARY=.bundle/bin/ddod PYTHONPATH=client-python/src python3 -m pytest -v tests/gpu
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, Iterator, List, Optional

import pytest
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "client-python" / "src"))
sys.path.insert(0, str(REPO / "tests" / "python"))

import streaming_models as sm  # noqa: E402
from streaming_support import CONSUMERS, use_consumer  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

RUNNER = HERE / "streaming_models.py"
DEVICE = "cuda:0"
# How long ddod may take to drop the session of a runner that died (docs/streaming.md §5: the
# lease end is noticed within a second; the brief for this test says about two seconds).
DEAD_SESSION_GONE_S = 2.5
CHILD_TIMEOUT_S = 120.0


@pytest.fixture(autouse=True, params=CONSUMERS)
def consumer(request, monkeypatch) -> str:
    """Every test here runs on the Python consumer and on the C++ one (DDO_CLIENT_CONSUMER;
    the runner processes inherit it)."""
    use_consumer(monkeypatch, request.param)
    return request.param


def _sessions(client) -> List["object"]:
    from diffusers_dynamic_offloader._proto import sessions_pb2

    return list(client._unary("ListSessions", sessions_pb2.ListSessionsRequest()).sessions)


def _sessions_of(client, pid: int) -> List["object"]:
    return [s for s in _sessions(client) if s.client_pid == pid]


def _register(client, key: str, dtype: torch.dtype):
    """The model of seed 0 in ``dtype``, registered under ``key``, and its reference copy."""
    model = sm.make_model(dtype, seed=0)
    reference = sm.reference_model(model, DEVICE)
    client.register_module(key, model, progress=False)
    return model, reference


def _run(model, reference, inputs_index: int, dtype, **branch):
    inputs = sm.make_inputs(inputs_index, dtype, DEVICE)
    with torch.no_grad():
        out = model(**inputs, **branch)
        expected = reference(**inputs, **branch)
    assert out.device == expected.device and out.dtype == expected.dtype
    assert torch.isfinite(expected.float()).all(), "the reference output is not finite"
    return out, expected


def _out_of_schedule(stats: Dict) -> int:
    return int(stats.get("sync_uses", 0)) + int(stats.get("skipped_uses", 0))


# --------------------------------------------------------------------------------------------
# One runner, in this process.


@pytest.mark.parametrize("dtype_name", ["bf16", "fp32"])
@pytest.mark.parametrize("unit", ["linear", "block"])
def test_streamed_outputs_are_bitwise_equal(client, dtype_name, unit, consumer):
    dtype = sm.DTYPES[dtype_name]
    key = f"test/stream-equal/{dtype_name}/{unit}"
    model, reference = _register(client, key, dtype)
    session = client.stream(model, key, device=DEVICE, settings=sm.stream_settings(unit))
    try:
        assert session.plan.streamed_bytes > 0, f"nothing streamed: {session.plan}"
        after_learning = None
        for forward in range(5):
            out, expected = _run(model, reference, forward, dtype)
            assert torch.equal(out, expected), (
                f"forward {forward} ({'learning' if forward == 0 else 'streamed'}) differs: "
                f"max |diff| {(out.float() - expected.float()).abs().max().item()}")
            stats = session.stats()
            if forward == 0:
                after_learning = dict(stats)
        stats = session.stats()
        assert stats["schedule_length"] > 0, stats
        assert stats["streamed_uses"] > 0, f"no use was streamed: {stats}"
        # After the learning forward, forwards that follow the schedule need no sync use.
        assert stats["sync_uses"] == after_learning["sync_uses"], (after_learning, stats)
        assert stats["units"] >= (1 if unit == "block" else 2), stats
        assert stats["consumer"] == consumer, stats
    finally:
        session.close()
    # The module is usable on the host again after close (host views of ddod's pool).
    assert all(p.device.type == "cpu" for p in model.parameters())


def test_mixed_resident_and_streamed_blocks(client):
    """A resident-module budget that keeps some blocks resident and streams the others."""
    dtype = torch.bfloat16
    key = "test/stream-mixed/bf16"
    model, reference = _register(client, key, dtype)
    settings = sm.stream_settings("block", {"DDO_RESIDENT_MODULE_BUDGET_GB": "0.004"})
    session = client.stream(model, key, device=DEVICE, settings=settings)
    try:
        assert session.plan.streamed_bytes > 0 and session.plan.resident_bytes > 0, session.plan
        for forward in range(4):
            out, expected = _run(model, reference, forward, dtype)
            assert torch.equal(out, expected), f"forward {forward} differs"
    finally:
        session.close()


@pytest.mark.parametrize("unit", ["linear", "block"])
def test_branches_that_break_the_schedule_stay_bitwise_equal(client, unit):
    dtype = torch.bfloat16
    key = f"test/stream-branch/{unit}"
    model, reference = _register(client, key, dtype)
    last = len(model.transformer_blocks) - 1
    forwards = [
        ("learning", {}),
        ("in schedule", {}),
        ("block 1 skipped", {"order": [i for i in range(last + 1) if i != 1]}),
        ("in schedule", {}),
        ("block 1 repeated after block 2", {"order": [0, 1, 2, 1] + list(range(3, last + 1))}),
        ("in schedule", {}),
        ("early end: one single block", {"single_blocks": 1}),
        ("in schedule", {}),
        ("blocks in reverse", {"order": list(range(last, -1, -1))}),
        ("in schedule", {}),
        ("in schedule", {}),
    ]
    session = client.stream(model, key, device=DEVICE, settings=sm.stream_settings(unit))
    try:
        before_branches = None
        for number, (what, branch) in enumerate(forwards):
            out, expected = _run(model, reference, number, dtype, **branch)
            assert torch.equal(out, expected), f"forward {number} ({what}) differs"
            if number == 1:
                before_branches = dict(session.stats())
        stats = session.stats()
        assert _out_of_schedule(stats) > _out_of_schedule(before_branches), (
            f"the branches were not counted as sync or skipped uses: {before_branches} -> {stats}")
        assert stats["streamed_uses"] > before_branches["streamed_uses"], stats
    finally:
        session.close()


def test_denoising_loops_of_different_step_counts(client):
    """Loops of 3, 5, 1 and 2 steps, two forwards a step (conditional and unconditional
    inputs): the cycle wraps across forwards and loops, and every output is exact."""
    dtype = torch.bfloat16
    key = "test/stream-steps"
    model, reference = _register(client, key, dtype)
    session = client.stream(model, key, device=DEVICE, settings=sm.stream_settings("linear"))
    try:
        _run(model, reference, 0, dtype)  # the learning forward
        learned = dict(session.stats())
        index = 1
        for steps in (3, 5, 1, 2):
            for step in range(steps):
                for _ in range(2):
                    out, expected = _run(model, reference, index, dtype)
                    assert torch.equal(out, expected), (
                        f"loop of {steps} steps, step {step}, inputs {index} differ")
                    index += 1
        stats = session.stats()
        assert stats["sync_uses"] == learned["sync_uses"], (learned, stats)
        assert stats["streamed_uses"] >= (index - 1) * stats["schedule_length"] * 0.9, stats
    finally:
        session.close()


# --------------------------------------------------------------------------------------------
# Runner processes.


class Runner:
    """A runner process (streaming_models.py) whose stdout lines are read by a thread."""

    def __init__(self, daemon, key: str, *, phases: str, dtype: str = "bf16",
                 unit: str = "linear", wait_go: bool = True, input_offset: int = 0) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(REPO / "client-python" / "src"), env.get("PYTHONPATH")]))
        self.stderr = tempfile.TemporaryFile()
        args = [sys.executable, str(RUNNER), "--address", daemon.address, "--key", key,
                "--dtype", dtype, "--unit", unit, "--phases", phases,
                "--input-offset", str(input_offset), "--device", DEVICE]
        if wait_go:
            args.append("--wait-go")
        self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.stderr, text=True, env=env)
        self.lines: "queue.Queue[Optional[str]]" = queue.Queue()
        self.seen: List[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def expect(self, prefix: str, timeout: float = CHILD_TIMEOUT_S) -> str:
        """The next line starting with ``prefix``; fails on the runner's end, a MISMATCH or
        the timeout, with its output."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(left, 0.01))
            except queue.Empty:
                pytest.fail(f"runner {self.proc.pid}: no {prefix!r} line within {timeout} s"
                            f"{self.describe()}", pytrace=False)
            if line is None:
                self.proc.wait(10)
                pytest.fail(f"runner {self.proc.pid} ended (code {self.proc.returncode}) before "
                            f"a {prefix!r} line{self.describe()}", pytrace=False)
            self.seen.append(line)
            if line.startswith("STEP ") and " MISMATCH " in line:
                pytest.fail(f"runner {self.proc.pid}: {line}{self.describe()}", pytrace=False)
            if line.startswith(prefix):
                return line

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def result(self) -> Dict:
        line = self.expect("RESULT ")
        self.proc.wait(30)
        result = json.loads(line[len("RESULT "):])
        assert self.proc.returncode == 0, f"runner exited {self.proc.returncode}{self.describe()}"
        return result

    def describe(self) -> str:
        self.stderr.seek(0)
        err = self.stderr.read().decode(errors="replace")[-3000:]
        out = "\n".join(self.seen[-10:])
        return f"\n-- stdout (last lines):\n{out}\n-- stderr:\n{err}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(30)


@pytest.fixture
def runners() -> Iterator[List[Runner]]:
    started: List[Runner] = []
    yield started
    for runner in started:
        runner.kill()


def test_second_session_gets_the_schedule_from_ddod(client, daemon, runners):
    """A session learns the schedule; a new process with the same plan streams from its first
    forward on, without a learning forward (no sync use)."""
    dtype = torch.bfloat16
    key = "test/stream-known-schedule"
    model, reference = _register(client, key, dtype)
    session = client.stream(model, key, device=DEVICE, settings=sm.stream_settings("linear"))
    try:
        for forward in range(2):
            out, expected = _run(model, reference, forward, dtype)
            assert torch.equal(out, expected)
    finally:
        session.close()
    runner = Runner(daemon, key, phases="3", wait_go=False)
    runners.append(runner)
    result = runner.result()
    assert result["mismatches"] == 0, result
    first = result["first_stats"]
    assert first["schedule_length"] > 0 and first["sync_uses"] == 0, (
        f"the new session did not stream its first forward: {first}")


def test_two_runner_processes_on_one_component(client, daemon, runners):
    key = "test/stream-two-runners"
    _register(client, key, torch.bfloat16)
    a = Runner(daemon, key, phases="20", input_offset=0)
    b = Runner(daemon, key, phases="20", input_offset=100)
    runners += [a, b]
    a.expect("READY ")
    b.expect("READY ")
    assert _sessions_of(client, a.proc.pid) and _sessions_of(client, b.proc.pid), (
        f"ddod lists no session for one runner: {_sessions(client)}")
    a.go()
    b.go()
    results = [a.result(), b.result()]
    for result in results:
        assert result["forwards"] == 20 and result["mismatches"] == 0, result
        assert result["stats"]["streamed_uses"] > 0, result


def test_runner_killed_mid_step_leaves_the_other_running(client, daemon, runners):
    key = "test/stream-kill"
    _register(client, key, torch.bfloat16)
    victim = Runner(daemon, key, phases="100000", input_offset=0)
    survivor = Runner(daemon, key, phases="40,12", input_offset=500)
    runners += [victim, survivor]
    victim.expect("READY ")
    survivor.expect("READY ")
    assert _sessions_of(client, victim.proc.pid), _sessions(client)
    victim.go()
    survivor.go()
    victim.expect("STEP 3 ")  # past its learning forward: streaming, forwards back to back
    survivor.expect("STEP 2 ")
    victim.proc.send_signal(signal.SIGKILL)  # mid-step: it runs forwards without pause
    killed = time.monotonic()
    victim.proc.wait(30)
    survivor.expect("PHASE 0 DONE")
    gone_after = None
    while time.monotonic() - killed < 10:
        if not _sessions_of(client, victim.proc.pid):
            gone_after = time.monotonic() - killed
            break
        time.sleep(0.02)
    assert gone_after is not None, (
        f"ddod still lists the dead runner's session 10 s after SIGKILL: {_sessions(client)}")
    assert gone_after <= DEAD_SESSION_GONE_S, (
        f"ddod dropped the dead runner's session {gone_after:.2f} s after SIGKILL "
        f"(at most {DEAD_SESSION_GONE_S} s)")
    survivor.go()  # forwards after the death, on the same device
    result = survivor.result()
    assert result["forwards"] == 52 and result["mismatches"] == 0, result
    assert not _sessions_of(client, survivor.proc.pid), "the survivor's session outlived it"
