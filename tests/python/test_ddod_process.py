"""ddod as a process: its socket, the instance lock, the command line, signals and health."""

import grp
import os
import queue
import signal
import socket
import stat
import subprocess
import threading
import time

import grpc
import pytest

from diffusers_dynamic_offloader import DaemonUnavailableError, DdoClient
from diffusers_dynamic_offloader._proto import info_pb2
from diffusers_dynamic_offloader._transport import health_pb2, health_pb2_grpc
from support import ddo_stub, wait_until


def test_socket_is_private(daemon):
    mode = os.stat(daemon.socket).st_mode
    assert stat.S_ISSOCK(mode)
    assert stat.S_IMODE(mode) == 0o600
    directory = os.stat(os.path.dirname(daemon.socket)).st_mode
    assert stat.S_ISDIR(directory)
    assert stat.S_IMODE(directory) == 0o700  # ddod created it


def test_lock_file_and_log(daemon):
    assert os.path.isfile(daemon.socket + ".lock")
    assert f"serving on unix:{daemon.socket}" in daemon.log()


def test_socket_group(daemon_factory, short_dir):
    group = grp.getgrgid(os.getgid()).gr_name
    daemon = daemon_factory(os.path.join(short_dir, "ddod.sock"), "--socket-group", group)
    status = os.stat(daemon.socket)
    assert stat.S_IMODE(status.st_mode) == 0o660
    assert status.st_gid == os.getgid()


def test_health_check_serving(daemon):
    with grpc.insecure_channel(daemon.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("", "ddo.v1.Ddo"):
            response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert response.status == health_pb2.HealthCheckResponse.SERVING, service


def test_health_watch_sees_shutdown(daemon):
    updates = queue.Queue()

    def watch(call):
        try:
            for response in call:
                updates.put(health_pb2.HealthCheckResponse.ServingStatus.Name(response.status))
            updates.put("stream ended")
        except grpc.RpcError as error:
            updates.put(f"stream ended: {error.code().name}")

    with grpc.insecure_channel(daemon.address) as channel:
        call = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service=""), timeout=15
        )
        watcher = threading.Thread(target=watch, args=(call,), daemon=True)
        watcher.start()
        assert updates.get(timeout=5) == "SERVING"
        daemon.proc.send_signal(signal.SIGTERM)
        after_sigterm = updates.get(timeout=5)
        assert after_sigterm in ("NOT_SERVING", "stream ended") or (
            after_sigterm.startswith("stream ended: ") and "DEADLINE" not in after_sigterm
        )
        call.cancel()
        watcher.join(5)
    assert daemon.terminate() == 0


def test_second_daemon_on_the_same_socket_exits_3(daemon, ddod_binary):
    second = subprocess.run(
        [ddod_binary, "--socket", daemon.socket],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert second.returncode == 3, second.stderr
    assert daemon.socket in second.stderr
    assert "already" in second.stderr
    assert f"pid {daemon.proc.pid}" in second.stderr
    # The first daemon is untouched: its socket is still there and it still answers.
    assert os.path.exists(daemon.socket)
    with ddo_stub(daemon.address) as stub:
        assert stub.GetInfo(info_pb2.GetInfoRequest(), timeout=5).pid == daemon.proc.pid


def test_stale_socket_and_lock_are_replaced(daemon_factory, short_dir):
    path = os.path.join(short_dir, "ddod.sock")
    # A socket file nobody listens on, as a crashed daemon leaves it.
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(path)
    leftover.close()
    # A lock file naming a process that has exited.
    exited = subprocess.Popen(["true"])
    exited.wait()
    with open(path + ".lock", "w") as lock:
        lock.write(f"{exited.pid}\n")

    daemon = daemon_factory(path)
    with ddo_stub(daemon.address) as stub:
        assert stub.GetInfo(info_pb2.GetInfoRequest(), timeout=5).pid == daemon.proc.pid


def test_sigterm_is_a_graceful_shutdown(daemon):
    client = DdoClient.connect(daemon.address)
    try:
        assert client.lease_id
        assert client.info().pid == daemon.proc.pid  # a client that has used the daemon
        # How fast ddod exits is test_sigterm_with_an_idle_connection_exits_promptly's concern.
        assert daemon.terminate(timeout=10) == 0
        assert wait_until(lambda: client.daemon_shutting_down, 5), client.lease_lost_reason
        assert client.lease_lost_reason
        assert not os.path.exists(daemon.socket)
    finally:
        client.close()
    with pytest.raises(DaemonUnavailableError, match="no socket file"):
        DdoClient.connect(daemon.address)


def test_sigterm_with_an_idle_connection_exits_promptly(daemon):
    with ddo_stub(daemon.address) as stub:
        assert stub.GetInfo(info_pb2.GetInfoRequest(), timeout=5).pid == daemon.proc.pid
        # The connection stays open but no call is in flight: ddod has nothing to wait for.
        started = time.monotonic()
        code = daemon.terminate(timeout=10)
        elapsed = time.monotonic() - started
    assert code == 0
    assert elapsed < 3, f"ddod took {elapsed:.1f} s to exit after SIGTERM:\n{daemon.log()}"


@pytest.mark.parametrize(
    "flag, value",
    [
        ("--log-level", "loud"),
        ("--ram-budget-gb", "lots"),
        ("--parent-pid", "-5"),
        ("--listen", "0.0.0.0:50051"),
    ],
)
def test_bad_command_line_exits_2(ddod_binary, short_dir, flag, value):
    result = subprocess.run(
        [ddod_binary, "--socket", os.path.join(short_dir, "ddod.sock"), flag, value],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert result.returncode == 2, result.stderr
    assert flag in result.stderr and value in result.stderr
    assert not os.path.exists(os.path.join(short_dir, "ddod.sock"))
