"""The Python client on the C++ ring consumer (DDO_CLIENT_CONSUMER, cpp_consumer.py,
consumer_build.py): which consumer a session gets, where its extension comes from (the
package's prebuilt build, the private per-user cache; no compiler in a session), the fallback
when there is none, the error when it is required, the build command and what a wheel carries,
its errors as the Python client's classes, and the GIL let go while it waits on ddod.
Every streaming behaviour itself runs on both consumers in test_streaming.py."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import tarfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest
import torch

from diffusers_dynamic_offloader import DdoClient, consumer_build, cpp_consumer
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


def test_cpp_mode_compiles_in_a_child_whose_output_stays_off_the_runners_output(
        client, monkeypatch, fresh_attempt, tmp_path, capfd):
    monkeypatch.setenv("DDO_CLIENT_CONSUMER", "cpp")
    monkeypatch.setenv("DDO_CLIENT_CPP_SOURCES", broken_sources(str(tmp_path / "src")))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    # torch's build helpers print "No CUDA runtime is found, using CUDA_HOME=..." when
    # CUDA_HOME names a directory on a machine without CUDA.
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    model, reference = registered_model(client)
    log = tmp_path / "cache" / "ddo" / "consumer" / "build.log"
    with pytest.raises(ConfigurationError) as raised:
        stream(client, model)
    message = str(raised.value)
    assert message.startswith("DDO_CLIENT_CONSUMER=cpp, but building the C++ consumer failed: ")
    assert "error" in message and f"(the whole output: {log})" in message
    assert "this is not C++" in log.read_text()  # the compiler's complaint, in the log
    captured = capfd.readouterr()
    for text in ("No CUDA runtime", "this is not C++", "ninja"):
        assert text not in captured.out and text not in captured.err, captured
    assert session_count(client) == 0
    assert mismatches(model, reference, [0], DTYPE) == []


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


# ---------------------------------------------------------------------------------------------
# Where the extension comes from: the build command, the package's prebuilt build, the private
# per-user cache, a wheel. Sessions are opened by fresh interpreters (FRESH_SESSION).

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIR = Path(cpp_consumer.__file__).resolve().parent
#: A fresh process's first session opens within this (issue 30's goal; 0.08-0.2 s measured
#: here on 2 loaded cores). Compiling is excluded by behaviour, not by this bound alone.
OPEN_BOUND_S = 1.0

# A fresh interpreter streams the test model once (DDO_DAEMON names ddod) and reports, as one
# JSON line on stdout: how long client.stream took, the consumer, the processes it started, the
# client's log lines and whether torch's build helpers were imported.
FRESH_SESSION = r"""
import json, logging, os, subprocess, sys, time
started = []
popen_init, fork = subprocess.Popen.__init__, os.fork
def spy_popen(self, args, *rest, **options):
    started.append(str(args))
    popen_init(self, args, *rest, **options)
def spy_fork():
    started.append("fork")
    return fork()
subprocess.Popen.__init__, os.fork = spy_popen, spy_fork

import torch
import streaming_support as support
from diffusers_dynamic_offloader import DdoClient

lines = []
class Keep(logging.Handler):
    def emit(self, record):
        lines.append(record.getMessage())
logging.getLogger("diffusers_dynamic_offloader").addHandler(Keep())
logging.getLogger("diffusers_dynamic_offloader").setLevel(logging.INFO)
model = support.make_model()
reference = support.frozen_copy(model)
with DdoClient.connect(timeout=10) as client:
    begun = time.monotonic()
    session = client.stream(model, support.CACHE_KEY, device="cpu",
                            settings=dict(support.STREAM_ALL, DDO_STREAM_UNIT="linear"))
    opened = time.monotonic() - begun
    with session:
        consumer = session.stats()["consumer"]
        bad = support.mismatches(model, reference, [0, 1], torch.float32)
print(json.dumps({
    "opened": opened, "consumer": consumer, "mismatches": bad, "processes": started,
    "lines": lines, "cpp_extension": "torch.utils.cpp_extension" in sys.modules,
    "extension": [m.__file__ for n, m in sys.modules.items() if n.startswith("ddo_consumer_")],
}))
"""


def fresh_session(client: DdoClient, daemon, site: Path, **environment: str) -> Dict:
    """FRESH_SESSION's report, run with the package from ``site`` (the model registered
    first); its stdout must hold that one line and nothing a build would print."""
    registered_model(client)
    env = dict(os.environ, DDO_DAEMON=daemon.address, PYTHONPATH=f"{site}:{TESTS_DIR}",
               PYTHONDONTWRITEBYTECODE="1", **environment)
    env.pop("DDO_CLIENT_CPP_SOURCES", None)
    done = subprocess.run([sys.executable, "-c", FRESH_SESSION], capture_output=True, text=True,
                          timeout=120, env=env, cwd="/")
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == 1, done.stdout
    for text in ("No CUDA runtime", "ninja", "c++"):
        assert text not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    assert report["mismatches"] == [], report
    return report


def assert_no_compiler(report: Dict) -> None:
    """The session started no process and never imported torch's build helpers."""
    assert report["processes"] == [], report
    assert not report["cpp_extension"], report


def build_command(*options: str, **environment: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, **environment)
    return subprocess.run([sys.executable, "-m", "diffusers_dynamic_offloader.cpp_consumer",
                           "--build", *options], capture_output=True, text=True, timeout=900,
                          env=env)


@pytest.fixture(scope="module")
def built() -> Path:
    """The extension built into this user's cache (tools/run-tests.sh built it already; else
    this builds it, skipped where it cannot be built unless DDO_REQUIRE_CPP_CONSUMER=1)."""
    done = build_command()
    if done.returncode != 0:
        if os.environ.get("DDO_REQUIRE_CPP_CONSUMER") == "1":
            pytest.fail(f"the C++ consumer is required here: {done.stderr}")
        pytest.skip(f"no C++ consumer here: {done.stderr[-2000:]}")
    assert done.stdout.startswith("cpp_consumer: "), done.stdout
    return Path(done.stdout.split(": ", 1)[1].strip())


def package_copy(site: Path) -> Path:
    """The package as an install lays it out: its modules and ``_cpp_src``, no build."""
    package = site / "diffusers_dynamic_offloader"
    shutil.copytree(PACKAGE_DIR, package, ignore=shutil.ignore_patterns(
        "__pycache__", "*.so", consumer_build.METADATA_NAME, "_cpp_src"))
    root = cpp_consumer.source_root()
    for name in cpp_consumer.SOURCE_FILES:
        (package / "_cpp_src" / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / name, package / "_cpp_src" / name)
    return package


def python_consumer_lines(report: Dict) -> List[str]:
    return [line for line in report["lines"] if "Python consumer" in line]


def test_a_fresh_process_streams_on_the_cached_build_without_compiling(client, daemon, built):
    report = fresh_session(client, daemon, PACKAGE_DIR.parent)
    assert report["consumer"] == "cpp", report
    assert report["extension"] == [str(built)], report
    assert_no_compiler(report)
    assert report["opened"] < OPEN_BOUND_S, report


def test_a_fresh_process_with_no_build_falls_back_at_once_with_one_line(
        client, daemon, tmp_path):
    report = fresh_session(client, daemon, PACKAGE_DIR.parent,
                           XDG_CACHE_HOME=str(tmp_path / "empty"))
    assert report["consumer"] == "python", report
    assert_no_compiler(report)
    assert report["opened"] < OPEN_BOUND_S, report
    lines = python_consumer_lines(report)
    assert len(lines) == 1, report
    assert "no build of the C++ consumer matches torch" in lines[0]
    assert str(tmp_path / "empty" / "ddo" / "consumer") in lines[0]
    assert "python3 -m diffusers_dynamic_offloader.cpp_consumer --build" in lines[0]


def test_build_output_writes_the_extension_and_its_metadata_and_nothing_to_stdout(
        built, tmp_path):
    done = build_command("--output", str(tmp_path / "out"), CUDA_HOME=str(tmp_path))
    assert done.returncode == 0, done.stderr
    metadata = json.loads((tmp_path / "out" / consumer_build.METADATA_NAME).read_text())
    library = tmp_path / "out" / f"{metadata['module']}.so"
    # stdout: where the extension went, nothing from the build.
    assert done.stdout == f"cpp_consumer: {library}\n"
    assert library.read_bytes() == built.read_bytes()
    assert metadata == {
        "module": built.stem, "torch": torch.__version__,
        "torch_git": str(getattr(torch.version, "git_version", "")),
        "python_abi": sysconfig.get_config_var("SOABI"),
        "source_hash": consumer_build.source_hash(cpp_consumer.source_root()),
    }
    # Again over a build of other sources: replaced, the old .so removed.
    (tmp_path / "out" / "ddo_consumer_0123456789abcdef.so").write_bytes(b"old")
    (tmp_path / "out" / consumer_build.METADATA_NAME).write_text(
        json.dumps(dict(metadata, module="ddo_consumer_0123456789abcdef")))
    assert build_command("--output", str(tmp_path / "out")).returncode == 0
    assert sorted(os.listdir(tmp_path / "out")) == sorted([consumer_build.METADATA_NAME,
                                                           library.name])


def test_a_fresh_process_loads_its_packages_prebuilt_build_and_refuses_a_stale_one(
        client, daemon, built, tmp_path):
    site = tmp_path / "site"
    package = package_copy(site)
    done = build_command("--output", str(package), PYTHONPATH=str(site))
    assert done.returncode == 0, done.stderr
    empty_cache = {"XDG_CACHE_HOME": str(tmp_path / "empty")}
    report = fresh_session(client, daemon, site, **empty_cache)
    assert report["consumer"] == "cpp", report
    assert report["extension"] == [str(package / built.name)], report
    assert_no_compiler(report)
    assert report["opened"] < OPEN_BOUND_S, report

    # Sources edited after the build: the build is stale, not used.
    edited = package / "_cpp_src" / cpp_consumer.SOURCE_FILES[0]
    original = edited.read_bytes()
    edited.write_bytes(original + b"// edited\n")
    report = fresh_session(client, daemon, site, **empty_cache)
    assert report["consumer"] == "python", report
    assert_no_compiler(report)
    [line] = python_consumer_lines(report)
    assert f"the build in {package} is stale: its source_hash is" in line

    # A build for another torch: not used either.
    edited.write_bytes(original)
    metadata = json.loads((package / consumer_build.METADATA_NAME).read_text())
    (package / consumer_build.METADATA_NAME).write_text(json.dumps(dict(metadata, torch="0.1")))
    report = fresh_session(client, daemon, site, **empty_cache)
    assert report["consumer"] == "python", report
    [line] = python_consumer_lines(report)
    assert f"its torch is '0.1', this client needs '{torch.__version__}'" in line


def test_the_cache_is_used_only_when_it_is_this_users_alone(
        monkeypatch, fresh_attempt, built, tmp_path, caplog):
    cache = tmp_path / "cache" / "ddo" / "consumer"
    shutil.copytree(built.parent, cache / built.parent.name)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("DDO_CLIENT_CONSUMER", "auto")
    opened = "is open to other users (mode 0755; it must be 0700)"
    os.chmod(cache, 0o755)
    with caplog.at_level(logging.INFO, logger="diffusers_dynamic_offloader"):
        assert cpp_consumer.extension() is None
    [line] = [r.getMessage() for r in caplog.records if "Python consumer" in r.getMessage()]
    assert f"the consumer cache {cache} {opened}" in line
    # cpp neither loads it nor builds there.
    monkeypatch.setattr(cpp_consumer, "_attempt", None)
    monkeypatch.setenv("DDO_CLIENT_CONSUMER", "cpp")
    with pytest.raises(ConfigurationError, match=f"cpp, but the consumer cache {cache} "
                                                 + opened.replace("(", r"\(").replace(")", r"\)")):
        cpp_consumer.extension()
    assert not (cache / consumer_build.BUILD_LOG_NAME).exists()
    if os.geteuid() == 0:  # another owner (only root can hand it over)
        os.chmod(cache, 0o700)
        os.chown(cache, 65534, 65534)
        monkeypatch.setattr(cpp_consumer, "_attempt", None)
        with pytest.raises(ConfigurationError, match=f"the consumer cache {cache} belongs to "
                                                     "uid 65534, not to this user"):
            cpp_consumer.extension()


def test_a_new_cache_is_made_private(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    old = os.umask(0)  # not even a permissive umask opens it
    try:
        made = consumer_build.private_directory(consumer_build.cache_directory(), create=True)
    finally:
        os.umask(old)
    assert made == tmp_path / "cache" / "ddo" / "consumer"
    assert os.stat(made).st_mode & 0o777 == 0o700


def checkout_copy(root: Path) -> Path:
    """client-python and the consumer's sources, as a checkout lays them out (a wheel built in
    the real checkout would write build/ and egg-info/ into it)."""
    checkout = cpp_consumer.source_root()
    shutil.copytree(PACKAGE_DIR.parents[1], root / "client-python", ignore=shutil.ignore_patterns(
        "__pycache__", "build", "*.egg-info", "*.so", consumer_build.METADATA_NAME, "_cpp_src"))
    for name in cpp_consumer.SOURCE_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(checkout / name, root / name)
    return root / "client-python"


def pip(*arguments: str, **environment: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *arguments, "--no-deps", "--no-index",
                           "--no-cache-dir", "--no-build-isolation", "--disable-pip-version-check"],
                          capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, PIP_NO_INPUT="1", **environment))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def needs_pip() -> None:
    if subprocess.run([sys.executable, "-m", "pip", "--version"],
                      capture_output=True).returncode != 0:
        pytest.skip(f"{sys.executable} has no pip")


def test_a_wheel_carries_the_sources_and_the_built_extension_which_an_install_loads(
        needs_pip, client, daemon, built, tmp_path):
    project = checkout_copy(tmp_path / "checkout")
    pip("wheel", "-w", str(tmp_path / "dist"), str(project))
    [wheel] = list((tmp_path / "dist").glob("*.whl"))
    assert not wheel.name.endswith("-py3-none-any.whl"), wheel.name  # it holds an extension
    names = set(zipfile.ZipFile(wheel).namelist())
    package = "diffusers_dynamic_offloader/"
    for name in cpp_consumer.SOURCE_FILES:
        assert f"{package}_cpp_src/{name}" in names, name
    assert {f"{package}{built.name}", f"{package}{consumer_build.METADATA_NAME}"} <= names

    pip("install", "--target", str(tmp_path / "site"), str(wheel))
    report = fresh_session(client, daemon, tmp_path / "site",
                           XDG_CACHE_HOME=str(tmp_path / "empty"))
    assert report["consumer"] == "cpp", report
    assert report["extension"] == [str(tmp_path / "site" / package / built.name)], report
    assert_no_compiler(report)


def test_an_sdist_carries_the_sources_and_builds_a_wheel_without_the_checkout(
        needs_pip, tmp_path):
    project = checkout_copy(tmp_path / "checkout")
    done = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "-d", str(tmp_path)],
                          cwd=project, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    [archive] = list(tmp_path.glob("*.tar.gz"))
    with tarfile.open(archive) as opened:
        opened.extractall(tmp_path / "unpacked")
    [unpacked] = list((tmp_path / "unpacked").iterdir())
    for name in cpp_consumer.SOURCE_FILES:
        assert (unpacked / "src" / "diffusers_dynamic_offloader" / "_cpp_src" / name).is_file()
    # Without the checkout, and with the compile turned off: the sources, no extension.
    shutil.rmtree(tmp_path / "checkout")
    pip("wheel", "-w", str(tmp_path / "dist"), str(unpacked), DDO_BUILD_CONSUMER="0")
    [wheel] = list((tmp_path / "dist").glob("*.whl"))
    assert wheel.name.endswith("-py3-none-any.whl"), wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    for name in cpp_consumer.SOURCE_FILES:
        assert f"diffusers_dynamic_offloader/_cpp_src/{name}" in names, name
    assert not [name for name in names
                if name.endswith(".so") or name.endswith(consumer_build.METADATA_NAME)]
