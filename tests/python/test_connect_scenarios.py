"""Finding and trusting ddod (docs/security.md, "Finding the daemon"): the scenario table
tests/connect_scenarios.json, which proto/wire/tests/connect_to_daemon_test.cc runs against the
C++ ConnectToDaemon, run here against the Python client and ddoctl's command line. Real sockets
and files; a daemon that misbehaves is a small grpcio server (Health and GetInfo only), a good
one is the real ddod."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from concurrent import futures
from pathlib import Path
from typing import Any, Dict, Iterator, List

import grpc
import pytest

from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader._proto import ddo_pb2_grpc, info_pb2
from diffusers_dynamic_offloader._transport import health_pb2, health_pb2_grpc
from diffusers_dynamic_offloader.errors import DaemonUnavailableError, UntrustedDaemonError
from diffusers_dynamic_offloader.identity import identity_socket_path
from support import ddoctl_path

SCENARIOS: List[Dict[str, Any]] = json.loads(
    (Path(__file__).resolve().parents[1] / "connect_scenarios.json").read_text()
)["scenarios"]
ERRORS = {"unavailable": DaemonUnavailableError, "untrusted": UntrustedDaemonError}
#: ddoctl's exit status when it found no daemon it may use.
EXIT_NO_DAEMON = 3


class _Health(health_pb2_grpc.HealthServicer):
    def __init__(self, status: str) -> None:
        self.status = health_pb2.HealthCheckResponse.ServingStatus.Value(status)

    def Check(self, request: Any, context: Any) -> Any:
        return health_pb2.HealthCheckResponse(status=self.status)


class _Info(ddo_pb2_grpc.DdoServicer):
    def __init__(self, identity_socket: str) -> None:
        self.identity_socket = identity_socket

    def GetInfo(self, request: Any, context: Any) -> Any:
        return info_pb2.DaemonInfo(identity_socket=self.identity_socket)


@pytest.fixture
def scene(short_dir: str, daemon_factory: Any) -> Iterator[Any]:
    """``build(row)``: sets up the row's daemon address and returns its target."""
    servers: List[grpc.Server] = []
    sockets: List[socket.socket] = []

    def build(row: Dict[str, Any]) -> str:
        directory = os.path.join(short_dir, "d")
        os.mkdir(directory, 0o700)
        if row.get("directory") == "world_writable":
            os.chmod(directory, 0o777)
        elif row.get("directory") == "other_user":
            if os.geteuid() != 0:
                pytest.skip("needs root to give a directory to another user")
            os.chmod(directory, 0o755)
            os.chown(directory, 4242, 4242)
        path = os.path.join(directory, "ddod.sock")
        if row["transport"] == "unix" and row.get("socket") != "daemon":
            if row.get("socket") == "file":
                Path(path).write_text("not a socket")
            return f"unix:{path}"
        if row["expect"]["outcome"] == "ok":
            return daemon_factory(path).address
        identity = identity_socket_path(path)
        if row.get("identity") == "world_writable":
            open_directory = os.path.join(short_dir, "open")
            os.mkdir(open_directory)
            os.chmod(open_directory, 0o777)
            identity = os.path.join(open_directory, "ddod.sock.id")
            squatter = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            squatter.bind(identity)
            squatter.listen(1)
            sockets.append(squatter)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        health_pb2_grpc.add_HealthServicer_to_server(_Health(row["health"]), server)
        ddo_pb2_grpc.add_DdoServicer_to_server(_Info(identity), server)
        if row["transport"] == "unix":
            server.add_insecure_port(f"unix:{path}")
            target = f"unix:{path}"
        else:
            target = f"127.0.0.1:{server.add_insecure_port('127.0.0.1:0')}"
        server.start()
        servers.append(server)
        return target

    yield build
    for server in servers:
        server.stop(None)
    for squatter in sockets:
        squatter.close()


@pytest.mark.parametrize("row", SCENARIOS, ids=[row["name"] for row in SCENARIOS])
def test_the_python_client(row: Dict[str, Any], scene: Any) -> None:
    target = scene(row)
    expect = row["expect"]
    if expect["outcome"] == "ok":
        with DdoClient.connect(target, timeout=10, allow_embedded=False) as client:
            assert client.address == target
            assert client.health() == "SERVING"
        return
    with pytest.raises(ERRORS[expect["outcome"]]) as raised:
        DdoClient.connect(target, timeout=5, allow_embedded=False)
    assert expect["phrase"] in str(raised.value)


@pytest.mark.parametrize("row", SCENARIOS, ids=[row["name"] for row in SCENARIOS])
def test_ddoctl(row: Dict[str, Any], scene: Any) -> None:
    target = scene(row)
    done = subprocess.run([ddoctl_path(), "--daemon", target, "--timeout", "5", "status"],
                          capture_output=True, text=True, timeout=30)
    if row["expect"]["outcome"] == "ok":
        assert done.returncode == 0, done.stderr
        assert "SERVING" in done.stdout
        return
    assert done.returncode == EXIT_NO_DAEMON, done.stderr
    assert row["expect"]["phrase"] in done.stderr
    if row["expect"]["outcome"] == "unavailable":
        assert "Start one with `ddod --preset warm_process`" in done.stderr
