"""DdoClient against a running ddod: info, health, the lease, addresses and errors."""

import os
import socket
import subprocess
import sys
import time

import grpc
import pytest

from diffusers_dynamic_offloader import (
    DaemonError,
    DaemonUnavailableError,
    DdoClient,
    DdoError,
)
from diffusers_dynamic_offloader._proto import info_pb2, profiles_pb2, stats_pb2
from support import ddo_stub, live_children, python_env, wait_until


def lease_count(address: str) -> int:
    with ddo_stub(address) as stub:
        return stub.GetStats(stats_pb2.GetStatsRequest(), timeout=5).leases


def free_tcp_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_get_info(daemon):
    with DdoClient.connect(daemon.address) as client:
        info = client.info()
    assert info.version
    assert info.api_version == "ddo.v1"
    assert info.pid == daemon.proc.pid
    assert info.backend in (info_pb2.BACKEND_HOST, info_pb2.BACKEND_CUDA)
    assert info.backend_detail
    assert daemon.address in info.listen_addresses
    assert info.platform.ram_total_bytes > 0
    assert not info.embedded and info.parent_pid == 0


def test_health_stats_and_presets(daemon):
    with DdoClient.connect(daemon.address) as client:
        assert client.health() == "SERVING"
        assert client.health("ddo.v1.Ddo") == "SERVING"
        assert client.stats().uptime_seconds > 0
        presets = client.presets()
    names = {preset.name for preset in presets.presets}
    assert "warm_process" in names
    assert presets.daemon_preset in names


def test_lease_is_held_until_close(daemon, monkeypatch):
    monkeypatch.setenv("DDO_DAEMON", daemon.address)
    client = DdoClient.connect()
    assert client.address == daemon.address
    assert not client.embedded and client.embedded_pid is None
    assert len(client.lease_id) > 0
    assert client.daemon_info.pid == daemon.proc.pid
    assert lease_count(daemon.address) == 1
    with DdoClient.connect() as second:
        assert second.lease_id != client.lease_id
        assert lease_count(daemon.address) == 2
    client.close()
    assert wait_until(lambda: lease_count(daemon.address) == 0, 2)
    assert client.lease_lost_reason is None and not client.daemon_shutting_down
    with pytest.raises(DdoError, match="closed"):
        client.info()
    client.close()  # idempotent


def test_every_unix_address_form(daemon, monkeypatch):
    for form in (daemon.address, f"unix://{daemon.socket}", daemon.socket):
        monkeypatch.setenv("DDO_DAEMON", form)
        with DdoClient.connect() as client:
            assert client.address == daemon.address, form
            assert client.info().pid == daemon.proc.pid


def test_loopback_tcp_address(daemon_factory, short_dir, monkeypatch):
    port = free_tcp_port()
    daemon = daemon_factory(os.path.join(short_dir, "ddod.sock"), "--listen", f"127.0.0.1:{port}")
    monkeypatch.setenv("DDO_DAEMON", f"127.0.0.1:{port}")
    with DdoClient.connect() as client:
        info = client.info()
    assert info.pid == daemon.proc.pid
    assert f"127.0.0.1:{port}" in info.listen_addresses
    assert daemon.address in info.listen_addresses


def stale_socket(path: str) -> str:
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(path)
    leftover.close()
    return path


@pytest.mark.parametrize("kind", ["missing socket", "stale socket", "closed tcp port"])
def test_fixed_address_without_daemon(kind, short_dir, monkeypatch, ddod_binary):
    if kind == "missing socket":
        address = f"unix:{short_dir}/none.sock"
    elif kind == "stale socket":
        address = f"unix:{stale_socket(os.path.join(short_dir, 'stale.sock'))}"
    else:
        address = f"127.0.0.1:{free_tcp_port()}"
    monkeypatch.setenv("DDO_DAEMON", address)  # DDO_DDOD_BINARY is set: embedding is possible
    children_before = live_children(os.getpid())
    started = time.monotonic()
    with pytest.raises(DaemonUnavailableError) as raised:
        DdoClient.connect(timeout=5)
    assert time.monotonic() - started < 3
    message = str(raised.value)
    assert address in message
    assert "ddod --preset warm_process" in message and "DDO_DAEMON" in message
    assert [attempt[0] for attempt in raised.value.attempts] == [address]
    assert live_children(os.getpid()) == children_before  # no private ddod was started


def test_a_refused_rpc_is_reported_and_harmless(daemon):
    request = profiles_pb2.GetProfileRequest(ref=profiles_pb2.ProfileRef(key="../not-a-key"))
    with ddo_stub(daemon.address) as stub:
        with pytest.raises(grpc.RpcError) as raised:
            stub.GetProfile(request, timeout=5)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "../not-a-key" in raised.value.details()
        error = DaemonError("GetProfile", raised.value)
        assert str(error) == f"ddod GetProfile failed: INVALID_ARGUMENT: {raised.value.details()}"
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        assert stub.GetInfo(info_pb2.GetInfoRequest(), timeout=5).pid == daemon.proc.pid


def test_rpc_errors_become_daemon_errors(daemon):
    client = DdoClient.connect(daemon.address, timeout=2)
    try:
        with pytest.raises(DaemonError) as raised:
            client.health("no.such.Service")
        assert raised.value.code == grpc.StatusCode.NOT_FOUND
        assert str(raised.value).startswith("ddod Health.Check failed: NOT_FOUND")
        daemon.proc.kill()  # a crash: no goodbye on the lease stream
        daemon.proc.wait()
        assert wait_until(lambda: client.lease_lost_reason is not None, 5)
        assert "lease stream" in client.lease_lost_reason
        assert not client.daemon_shutting_down
        with pytest.raises(DaemonError) as raised:
            client.info()
        assert raised.value.rpc == "GetInfo"
        assert raised.value.code == grpc.StatusCode.UNAVAILABLE
        assert str(raised.value).startswith("ddod GetInfo failed: UNAVAILABLE: ")
    finally:
        client.close()


def test_demo(daemon):
    result = subprocess.run(
        [sys.executable, "-m", "diffusers_dynamic_offloader.demo", "--no-embedded"],
        env=python_env(DDO_DAEMON=daemon.address),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert f"pid {daemon.proc.pid}" in result.stdout
    assert daemon.address in result.stdout
    assert "health:    SERVING" in result.stdout
    assert "lease:     " in result.stdout
    assert "stream:    on cpu:" in result.stdout
    assert "outputs match the unstreamed model's" in result.stdout
