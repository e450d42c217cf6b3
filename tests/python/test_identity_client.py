"""The client's side of the identity protocol (docs/security.md), against hostile servers.

The attacker here is real: a gRPC + identity server run by a throwaway user (created with
useradd for the test, removed after it), which answers the way ddod would. The client must
refuse it before it says anything: when its process runs as another user (SO_PEERCRED), and when
it squats the per-user directory /tmp/ddo-<uid> of a victim (itself a throwaway user). Files the
client passes by descriptor are checked client-side first: a FIFO is refused without blocking,
a name with a newline is refused. The last tests run against the real ddod.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from typing import Dict, Iterator, List

import grpc
import pytest
import torch

from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader._proto import info_pb2, stats_pb2
from diffusers_dynamic_offloader.errors import (
    IdentityError,
    InputFileError,
    UntrustedDaemonError,
)
from diffusers_dynamic_offloader.identity import IdentityChannel, check_file_name
from store_support import write_safetensors
from support import SOURCE_ROOT, ddo_stub

# The attacker: serves gRPC health (SERVING) on <dir>/ddod.sock and the identity protocol on
# <dir>/ddod.sock.id, answering HELLO with a token, and logs every packet it receives.
HOSTILE_SERVER = r'''
import concurrent.futures, os, socket, sys
import grpc
from diffusers_dynamic_offloader._transport import health_pb2, health_pb2_grpc

directory, received_log = sys.argv[1], sys.argv[2]
tcp_port = sys.argv[3] if len(sys.argv) > 3 else ""

class Health(health_pb2_grpc.HealthServicer):
    def Check(self, request, context):
        return health_pb2.HealthCheckResponse(status=health_pb2.HealthCheckResponse.SERVING)

server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
health_pb2_grpc.add_HealthServicer_to_server(Health(), server)
server.add_insecure_port("unix:" + os.path.join(directory, "ddod.sock"))
if tcp_port:
    server.add_insecure_port("127.0.0.1:" + tcp_port)
server.start()
listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
listener.bind(os.path.join(directory, "ddod.sock.id"))
listener.listen(8)
print("ready", flush=True)
while True:
    connection, _ = listener.accept()
    while True:
        packet = connection.recv(4096)
        if not packet:
            break
        with open(received_log, "ab") as log:
            log.write(packet + b"\n")
        connection.send(b"OK " + b"ab" * 16)
    connection.close()
'''


def _require_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("creating throwaway users needs root (this machine and CI run as root)")


@pytest.fixture
def make_user() -> Iterator:
    """``make_user(role)`` creates a throwaway system user; all are deleted after the test."""
    _require_root()
    created: List[str] = []

    def make(role: str) -> pwd.struct_passwd:
        name = f"ddo-{role}-{secrets.token_hex(3)}"
        subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
            check=True,
            capture_output=True,
        )
        created.append(name)
        return pwd.getpwnam(name)

    yield make
    for name in created:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def public_dir() -> Iterator[str]:
    """A directory under /tmp that every user can read (for the scripts other users run)."""
    path = tempfile.mkdtemp(prefix="ddo-id-", dir="/tmp")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Hostile:
    """A hostile server process run as another user."""

    def __init__(self, proc: subprocess.Popen, directory: str, received_log: str) -> None:
        self.proc = proc
        self.directory = directory
        self.received_log = received_log

    def received(self) -> bytes:
        try:
            with open(self.received_log, "rb") as log:
                return log.read()
        except FileNotFoundError:
            return b""


@pytest.fixture
def start_hostile(public_dir: str) -> Iterator:
    """``start_hostile(user, directory)`` runs the hostile server as ``user``, listening in
    ``directory`` (which that user must be able to write to); stopped after the test."""
    script = os.path.join(public_dir, "hostile_server.py")
    with open(script, "w", encoding="utf-8") as out:
        out.write(HOSTILE_SERVER)
    os.chmod(script, 0o644)
    started: List[Hostile] = []

    def start(user: pwd.struct_passwd, directory: str, tcp_port: str = "") -> Hostile:
        received_log = os.path.join(public_dir, f"received-{len(started)}.log")
        with open(received_log, "wb"):
            pass
        os.chown(received_log, user.pw_uid, user.pw_gid)
        proc = subprocess.Popen(
            [sys.executable, script, directory, received_log] + ([tcp_port] if tcp_port else []),
            env={"PYTHONPATH": SOURCE_ROOT, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            user=user.pw_uid,
            group=user.pw_gid,
            extra_groups=[],
            cwd="/",
        )
        hostile = Hostile(proc, directory, received_log)
        started.append(hostile)
        line = proc.stdout.readline()
        if line.strip() != b"ready":
            proc.kill()
            pytest.fail(f"the hostile server did not start: {proc.stderr.read().decode()}")
        return hostile

    yield start
    for hostile in started:
        hostile.proc.kill()
        hostile.proc.wait()


def test_a_daemon_run_by_another_user_is_refused(make_user, start_hostile, short_dir):
    squatter = make_user("squat")
    # The squatter listens in a directory of its own...
    own_dir = tempfile.mkdtemp(prefix="ddo-sq-", dir="/tmp")
    os.chown(own_dir, squatter.pw_uid, squatter.pw_gid)
    try:
        hostile = start_hostile(squatter, own_dir)
        # ...and its sockets end up where the client looks, in a directory and with an owner
        # that pass the file checks: only the kernel's word on the process is left to catch it.
        run_dir = os.path.join(short_dir, "run")
        os.mkdir(run_dir, 0o700)
        for name in ("ddod.sock", "ddod.sock.id"):
            os.rename(os.path.join(own_dir, name), os.path.join(run_dir, name))
            os.chown(os.path.join(run_dir, name), 0, 0, follow_symlinks=False)
        socket_path = os.path.join(run_dir, "ddod.sock")

        with pytest.raises(UntrustedDaemonError) as raised:
            DdoClient.connect(f"unix:{socket_path}", timeout=5)
        message = str(raised.value)
        assert socket_path + ".id" in message, message
        assert f"uid {squatter.pw_uid}" in message, message  # the uid found
        assert "uid 0 (root" in message, message  # the uids accepted
        with pytest.raises(UntrustedDaemonError):
            IdentityChannel.connect(socket_path + ".id", timeout=5)
        # Refused before a word was said: the attacker got no HELLO, no file, no token use.
        time.sleep(0.2)
        assert hostile.received() == b""
    finally:
        shutil.rmtree(own_dir, ignore_errors=True)


def test_a_tcp_port_held_by_another_user_is_refused(make_user, start_hostile, short_dir):
    squatter = make_user("squat")
    own_dir = tempfile.mkdtemp(prefix="ddo-sq-", dir="/tmp")
    os.chown(own_dir, squatter.pw_uid, squatter.pw_gid)
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        start_hostile(squatter, own_dir, str(port))
        with pytest.raises(UntrustedDaemonError) as raised:
            DdoClient.connect(f"127.0.0.1:{port}", timeout=5)
        message = str(raised.value)
        assert f"127.0.0.1:{port}" in message and f"uid {squatter.pw_uid}" in message, message
    finally:
        shutil.rmtree(own_dir, ignore_errors=True)


def _victim_connects(victim: pwd.struct_passwd) -> subprocess.CompletedProcess:
    """Runs DdoClient.connect() as ``victim`` with the default discovery and no
    XDG_RUNTIME_DIR (so /tmp/ddo-<uid> is the first candidate); prints the error."""
    code = (
        "from diffusers_dynamic_offloader import DdoClient\n"
        "try:\n"
        "    DdoClient.connect(timeout=5, allow_embedded=False)\n"
        "except Exception as error:\n"
        "    print(type(error).__name__ + ': ' + str(error))\n"
        "else:\n"
        "    print('connected')\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env={"PYTHONPATH": SOURCE_ROOT, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
        capture_output=True,
        user=victim.pw_uid,
        group=victim.pw_gid,
        extra_groups=[],
        cwd="/",
        timeout=60,
    )


@pytest.mark.parametrize("squatted_by", ["another user", "the victim, mode 0777"])
def test_a_squatted_per_user_directory_is_refused(make_user, start_hostile, squatted_by):
    victim = make_user("victim")
    squatter = make_user("squat")
    directory = f"/tmp/ddo-{victim.pw_uid}"
    assert not os.path.lexists(directory), f"{directory} exists already"
    os.mkdir(directory)
    try:
        if squatted_by == "another user":
            os.chown(directory, squatter.pw_uid, squatter.pw_gid)
            os.chmod(directory, 0o755)
        else:
            os.chown(directory, victim.pw_uid, victim.pw_gid)
            os.chmod(directory, 0o777)
        hostile = start_hostile(squatter, directory)

        result = _victim_connects(victim)
        output = result.stdout.decode() + result.stderr.decode()
        assert output.startswith("UntrustedDaemonError: "), output
        assert directory in output, output
        assert "another user may have created it" in output, output
        assert f"rm -r {directory}" in output and "XDG_RUNTIME_DIR" in output, output
        assert hostile.received() == b""
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_the_socket_directory_must_be_writable_by_its_owner_only(short_dir):
    from diffusers_dynamic_offloader.addresses import check_socket_location

    shared = os.path.join(short_dir, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o1777)  # sticky and world-writable, like /tmp: not good enough
    with pytest.raises(UntrustedDaemonError, match="writable by its owner only"):
        check_socket_location(os.path.join(shared, "ddod.sock"))
    os.chmod(shared, 0o750)  # a group-readable service directory is fine
    check_socket_location(os.path.join(shared, "ddod.sock"))


def test_file_names_that_cannot_be_passed():
    assert check_file_name("model.safetensors") == b"model.safetensors"
    for name, why in [
        ("bad\nname.safetensors", "control character"),
        ("with space.safetensors", "holds a space"),
        ("modèle.safetensors", "non-ASCII"),
        ("a/b.safetensors", "no '/'"),
        ("x" * 256, "over the 255-byte limit"),
        ("", "not a file's base name"),
        ("..", "not a file's base name"),
    ]:
        with pytest.raises(IdentityError, match=why):
            check_file_name(name)


# Against the real ddod.

TENSORS = OrderedDict(w=torch.arange(6, dtype=torch.float32))


def _in_thread(function, timeout: float) -> Dict[str, object]:
    """Runs ``function`` in a thread; fails the test when it does not return in time (it would
    block on a FIFO)."""
    outcome: Dict[str, object] = {}

    def run() -> None:
        try:
            outcome["result"] = function()
        except BaseException as error:  # noqa: BLE001 - handed back to the test
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "load_safetensors blocked on the FIFO"
    return outcome


def test_a_fifo_is_refused_without_blocking(client, short_dir):
    good = write_safetensors(os.path.join(short_dir, "good.safetensors"), TENSORS)
    fifo = os.path.join(short_dir, "fifo.safetensors")
    os.mkfifo(fifo)
    outcome = _in_thread(lambda: client.load_safetensors("fifo", [good, fifo]), 10)
    error = outcome.get("error")
    assert isinstance(error, InputFileError), outcome
    assert fifo in str(error) and "FIFO" in str(error), str(error)
    # The same in a model folder.
    folder = os.path.join(short_dir, "folder")
    os.mkdir(folder)
    write_safetensors(os.path.join(folder, "a.safetensors"), TENSORS)
    os.mkfifo(os.path.join(folder, "b.safetensors"))
    outcome = _in_thread(lambda: client.load_safetensors("fifo", folder), 10)
    assert isinstance(outcome.get("error"), InputFileError), outcome
    assert client.components() == []


def test_a_file_name_with_a_newline_is_refused(client, short_dir):
    folder = os.path.join(short_dir, "folder")
    os.mkdir(folder)
    path = write_safetensors(os.path.join(folder, "bad\nname.safetensors"), TENSORS)
    for argument in (path, folder):
        with pytest.raises(InputFileError, match=r"control character") as raised:
            client.load_safetensors("newline", argument)
        assert "\n" not in str(raised.value), str(raised.value)  # escaped, not echoed
    assert client.components() == []


def test_a_missing_file_is_refused_here(client, short_dir):
    path = os.path.join(short_dir, "absent.safetensors")
    with pytest.raises(InputFileError, match="no such file"):
        client.load_safetensors("absent", path)


def test_the_token_is_required_and_carried(daemon, client):
    assert client.stats().leases >= 1  # the client's calls carry its token
    with ddo_stub(daemon.address, token=False) as stub:
        with pytest.raises(grpc.RpcError) as raised:
            stub.GetStats(stats_pb2.GetStatsRequest(), timeout=5)
        assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
        info = stub.GetInfo(info_pb2.GetInfoRequest(), timeout=5)
    assert info.identity_socket == daemon.socket + ".id"
    assert client.daemon_uid == os.getuid() == info.uid
    with ddo_stub(daemon.address) as stub:
        assert stub.GetStats(stats_pb2.GetStatsRequest(), timeout=5).leases >= 1


def test_a_connection_over_a_limit_is_refused_with_the_reason(daemon_factory, short_dir):
    # ddod closes a connection over its limit at once, unanswered (docs/security.md §5): the
    # client's error still says that a limit may be why.
    daemon = daemon_factory(os.path.join(short_dir, "lim", "ddod.sock"),
                            "--max-connections-per-user", "1")
    first = IdentityChannel.connect(daemon.socket + ".id", timeout=10)
    try:
        with pytest.raises(IdentityError, match=r"ddod refused the identity connection .*"
                                                r"\(a connection limit\?"):
            IdentityChannel.connect(daemon.socket + ".id", timeout=10)
    finally:
        first.close()


def test_refusals_come_back_as_identity_errors(client):
    with pytest.raises(IdentityError, match="ddod refused OPEN"):
        client._identity.open_segment("/ddo-never-granted", False)
    # The connection stays usable after a refusal.
    assert client.stats().leases >= 1


def test_segments_come_through_ddod_when_they_cannot_be_opened_by_name(client):
    from diffusers_dynamic_offloader.shm import SegmentMapping, SegmentOpener

    client.register_state_dict("by-fd", TENSORS)
    with client.attach("by-fd") as attached:
        segment = attached.component.info.segments[0]
        asked: List[str] = []

        def ask(name: str, writable: bool) -> int:
            asked.append(name)
            return client._identity.open_segment(name, writable)

        # A daemon uid other than this process's: the opener must go through ddod.
        opener = SegmentOpener(ask, daemon_uid=os.getuid() + 1)
        with SegmentMapping(segment.shm_name, segment.size_bytes, writable=False,
                            opener=opener) as mapping:
            view = mapping.tensor(0, 24, torch.float32, [6])
            assert torch.equal(view, TENSORS["w"])
            del view
        assert asked == [segment.shm_name]


def test_the_embedded_daemon_never_uses_a_runtime_directory_of_someone_else(
    make_user, short_dir, monkeypatch
):
    from diffusers_dynamic_offloader.embedded import _make_private_directory

    squatter = make_user("squat")
    foreign = os.path.join(short_dir, "foreign")
    os.mkdir(foreign, 0o700)
    os.chown(foreign, squatter.pw_uid, squatter.pw_gid)
    shared = os.path.join(short_dir, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    for runtime_dir in (foreign, shared):
        monkeypatch.setenv("XDG_RUNTIME_DIR", runtime_dir)
        directory = _make_private_directory()
        try:
            assert not directory.startswith(runtime_dir + "/"), directory
            found = os.lstat(directory)
            assert found.st_uid == os.getuid() and (found.st_mode & 0o777) == 0o700
        finally:
            os.rmdir(directory)
    monkeypatch.setenv("XDG_RUNTIME_DIR", os.path.join(short_dir, "xdg"))  # the user's own
    directory = _make_private_directory()
    assert directory.startswith(os.path.join(short_dir, "xdg") + "/")
    os.rmdir(directory)
