"""The Python client on the C++ ring consumer (DDO_CLIENT_CONSUMER, cpp_consumer.py): which
consumer a session gets, the fallback when the extension cannot be built, the error when it is
required, its errors as the Python client's classes, and the GIL let go while it waits on ddod.
Every streaming behaviour itself runs on both consumers in test_streaming.py."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import threading
import time

import pytest
import torch

from diffusers_dynamic_offloader import DdoClient, cpp_consumer
from diffusers_dynamic_offloader._proto import sessions_pb2
from diffusers_dynamic_offloader.errors import (ConfigurationError, SessionClosedError,
                                                StreamingError)
from streaming_support import (CACHE_KEY, STREAM_ALL, frozen_copy, make_model, mismatches, run,
                               use_consumer)

DTYPE = torch.float32


@pytest.fixture
def fresh_attempt(monkeypatch):
    """This process tries the extension again (the choice is made once per process)."""
    monkeypatch.setattr(cpp_consumer, "_attempt", None)


def stream(client: DdoClient, model, **settings):
    return client.stream(model, CACHE_KEY, device="cpu",
                         settings=dict(STREAM_ALL, DDO_STREAM_UNIT="linear", **settings))


def registered_model(client: DdoClient):
    """The test model registered in ddod, and a frozen copy of it to compare with."""
    model = make_model(DTYPE)
    reference = frozen_copy(model)
    client.register_module(CACHE_KEY, model)
    return model, reference


def streams_on_the_python_consumer(client: DdoClient, model, reference) -> None:
    with stream(client, model) as session:
        assert session.stats()["consumer"] == "python"
        assert mismatches(model, reference, [0, 1], DTYPE) == []


def session_count(client: DdoClient) -> int:
    return len(client.rpc.unary("ListSessions", sessions_pb2.ListSessionsRequest()).sessions)


def broken_sources(directory: str) -> str:
    """A copy of the extension's sources whose first file does not compile."""
    root = cpp_consumer.source_root()
    for name in cpp_consumer.SOURCE_FILES:
        target = os.path.join(directory, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(root / name, target)
    first = os.path.join(directory, "client-cpp/src/consumer/control_block.cc")
    with open(first, "a") as source:
        source.write("\nthis is not C++;\n")
    return directory


def test_the_mode_is_checked_and_names_the_accepted_values(monkeypatch):
    monkeypatch.setenv("DDO_CLIENT_CONSUMER", "fast")
    with pytest.raises(ConfigurationError, match="DDO_CLIENT_CONSUMER='fast' is not one of "
                                                 "auto, python, cpp"):
        cpp_consumer.extension()
    monkeypatch.setenv("DDO_CLIENT_CONSUMER", " CPP ")
    assert cpp_consumer.consumer_mode() == "cpp"
    monkeypatch.delenv("DDO_CLIENT_CONSUMER")
    assert cpp_consumer.consumer_mode() == "auto"


def test_python_mode_never_builds(monkeypatch, fresh_attempt, tmp_path):
    monkeypatch.setenv("DDO_CLIENT_CONSUMER", "python")
    monkeypatch.setenv("DDO_CLIENT_CPP_SOURCES", str(tmp_path))  # nothing there
    assert cpp_consumer.extension() is None
    assert cpp_consumer._attempt is None


def test_auto_falls_back_to_python_with_one_line_saying_why(
        client, monkeypatch, fresh_attempt, tmp_path, caplog):
    monkeypatch.setenv("DDO_CLIENT_CONSUMER", "auto")
    monkeypatch.setenv("DDO_CLIENT_CPP_SOURCES", str(tmp_path / "nowhere"))
    model, reference = registered_model(client)
    with caplog.at_level(logging.INFO, logger="diffusers_dynamic_offloader"):
        streams_on_the_python_consumer(client, model, reference)
        # No second attempt, no second line.
        streams_on_the_python_consumer(client, model, reference)
    lines = [r.getMessage() for r in caplog.records if "Python consumer" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "sources are not installed" in lines[0] and "nowhere" in lines[0]


def test_cpp_mode_refuses_to_stream_without_the_extension_and_leaves_no_session(
        client, monkeypatch, fresh_attempt, tmp_path):
    monkeypatch.setenv("DDO_CLIENT_CONSUMER", "cpp")
    monkeypatch.setenv("DDO_CLIENT_CPP_SOURCES", str(tmp_path / "nowhere"))
    model, reference = registered_model(client)
    with pytest.raises(ConfigurationError, match="DDO_CLIENT_CONSUMER=cpp, but the C\\+\\+ "
                                                 "consumer's sources are not installed"):
        stream(client, model)
    assert session_count(client) == 0
    # The module is untouched and runs on its own weights.
    assert mismatches(model, reference, [0], DTYPE) == []


def test_a_compile_error_falls_back_and_reports_the_failed_build(
        client, monkeypatch, fresh_attempt, tmp_path, caplog):
    monkeypatch.setenv("DDO_CLIENT_CONSUMER", "auto")
    monkeypatch.setenv("DDO_CLIENT_CPP_SOURCES", broken_sources(str(tmp_path / "src")))
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path / "build"))
    model, reference = registered_model(client)
    with caplog.at_level(logging.INFO, logger="diffusers_dynamic_offloader"):
        streams_on_the_python_consumer(client, model, reference)
    assert any("building the C++ consumer failed" in r.getMessage() for r in caplog.records)


def test_the_cpp_consumer_raises_the_python_clients_errors(client, monkeypatch):
    use_consumer(monkeypatch, "cpp")
    model, reference = registered_model(client)
    session = stream(client, model)
    consumer = session._consumer
    try:
        assert type(consumer).__module__.startswith("ddo_consumer_")
        assert mismatches(model, reference, [0, 1], DTYPE) == []
        with pytest.raises(StreamingError, match=r"unit 999 does not exist \(the session has "
                                                 r"24 units\)"):
            consumer.tensors(999)
        # ddod detaches the session under the runner: the next wait says so.
        client.rpc.unary("Detach", sessions_pb2.DetachRequest(session_id=session.session_id))
        with pytest.raises(SessionClosedError, match="ddod closed this streaming session"):
            run(model, 2, DTYPE)
    finally:
        session.close()
    # Closed: the consumer no longer touches the unmapped block.
    with pytest.raises(SessionClosedError, match="the streaming session is closed"):
        consumer.tensors(0)
    assert consumer.statistics()["uses"] > 0
    assert mismatches(model, reference, [3], DTYPE) == []


def test_the_gil_is_released_while_the_cpp_consumer_waits_for_ddod(client, daemon, monkeypatch):
    use_consumer(monkeypatch, "cpp")
    model, reference = registered_model(client)
    with stream(client, model) as session:
        assert session.stats()["learning"]
        # ddod stops for a second (a separate process wakes it: this one may be stuck in
        # the wait); the learning forward asks ddod for every unit, so it waits meanwhile.
        os.kill(daemon.proc.pid, signal.SIGSTOP)
        waker = subprocess.Popen(["sh", "-c", f"sleep 1; kill -CONT {daemon.proc.pid}"])
        counted = {"ticks": 0}
        stop = threading.Event()

        def tick() -> None:
            while not stop.is_set():
                counted["ticks"] += 1
                time.sleep(0.001)

        ticker = threading.Thread(target=tick, daemon=True)
        try:
            ticker.start()
            started = time.monotonic()
            output = run(model, 0, DTYPE)
            waited = time.monotonic() - started
        finally:
            stop.set()
            ticker.join()
            waker.wait()
        assert waited > 0.5, waited
        # A thread holding the GIL for the second would have left the ticker at a few ticks.
        assert counted["ticks"] > 200, counted
        assert session.stats()["wait_seconds"] > 0.5
        assert torch.equal(output, run(reference, 0, DTYPE))


def test_a_close_from_another_thread_ends_a_waiting_forward_with_an_error_not_a_crash(
        client, daemon, monkeypatch):
    use_consumer(monkeypatch, "cpp")
    model, reference = registered_model(client)
    session = stream(client, model)
    # ddod stops; the learning forward waits for it in another thread (the GIL let go).
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    waker = subprocess.Popen(["sh", "-c", f"sleep 2; kill -CONT {daemon.proc.pid}"])
    outcome = {}

    def forward() -> None:
        try:
            run(model, 0, DTYPE)
            outcome["result"] = "finished"
        except BaseException as error:  # noqa: B902 - the test inspects it
            outcome["result"] = error

    runner = threading.Thread(target=forward, daemon=True)
    try:
        runner.start()
        time.sleep(0.5)
        assert runner.is_alive(), outcome  # waiting for ddod
        # A second forward meanwhile is refused, not interleaved with the waiting one.
        with pytest.raises(StreamingError, match="another thread is running a forward"):
            session._consumer.tensors(0)
        session.close()  # the detach waits for ddod to run again
        runner.join(10)
    finally:
        waker.wait()
    assert not runner.is_alive()
    error = outcome["result"]
    assert isinstance(error, SessionClosedError), error
    assert "closed by another thread while this forward waited" in str(error)
    assert session_count(client) == 0
    assert mismatches(model, reference, [1], DTYPE) == []
