"""What an attacker (or a victim) running as a throwaway user uses to talk to the shared ddod.

Imported by the programs the security tests run as other users (``run_as``), and by the test
process itself (root: ddod's own uid, the admin). It speaks the wire protocol directly, the way
a hostile local user would: raw gRPC stubs, and the identity socket of docs/security.md for a
token the caller obtains legitimately for itself (``HELLO 1``) and for passing descriptors
(``FILE``) or getting a granted segment's descriptor (``OPEN``). Against a ddod without an
identity socket (the old code) calls go without a token and files go by path.

Thread safety: a ``Ddo`` is used from one thread, except that RPCs may be issued from several
threads at once (gRPC channels are thread-safe).
"""

from __future__ import annotations

import array
import json
import os
import socket
import struct
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

import grpc

# Re-exported: the programs run as other users build their requests with these.
from diffusers_dynamic_offloader._proto import (
    components_pb2,
    ddo_pb2_grpc,
    info_pb2,
    profiles_pb2,
    sessions_pb2,
    settings_pb2,
    stats_pb2,
)

# Programs run as other users start with `from attacker_kit import *`: every public name.

IDENTITY_SUFFIX = ".id"
PACKET_BYTES = 4096


class Outcome(dict):
    """The result of one RPC as plain data: ``code`` ("OK" or the status name), ``details``,
    ``seconds``, and for OK the fields the test asked to keep."""

    @property
    def ok(self) -> bool:
        return self["code"] == "OK"


def _failure(error: grpc.RpcError, started: float) -> Outcome:
    code = error.code() if hasattr(error, "code") else None
    details = error.details() if hasattr(error, "details") else str(error)
    return Outcome(code=code.name if code else "UNKNOWN", details=details or "",
                   seconds=time.monotonic() - started)


class IdentityConnection:
    """One connection to ddod's identity socket; the token it hands out lives as long as it."""

    def __init__(self, path: str) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.settimeout(10)
        self.sock.connect(path)

    def ask(self, message: str, fds: Sequence[int] = ()) -> Tuple[str, List[int]]:
        ancillary = []
        if fds:
            ancillary = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        self.sock.sendmsg([message.encode()], ancillary)
        data, received, _flags, _address = socket.recv_fds(self.sock, PACKET_BYTES, 4)
        return data.decode(errors="replace"), list(received)

    def hello(self) -> str:
        answer, _ = self.ask("HELLO 1")
        if not answer.startswith("OK "):
            raise RuntimeError(f"identity socket refused HELLO: {answer!r}")
        return answer[3:].strip()

    def close(self) -> None:
        self.sock.close()


class Ddo:
    """A connection to the ddod at ``socket_path`` as the current user."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.channel = grpc.insecure_channel(f"unix:{socket_path}")
        self.stub = ddo_pb2_grpc.DdoStub(self.channel)
        self.identity: Optional[IdentityConnection] = None
        self.token = ""
        if os.path.exists(socket_path + IDENTITY_SUFFIX):
            self.identity = IdentityConnection(socket_path + IDENTITY_SUFFIX)
            self.token = self.identity.hello()

    @property
    def has_identity(self) -> bool:
        """True when ddod has the identity layer (the new code)."""
        return self.identity is not None

    @property
    def metadata(self) -> List[Tuple[str, str]]:
        return [("ddo-token", self.token)] if self.token else []

    # Plain RPCs.

    def call(self, rpc: str, request, timeout: float = 10.0, keep=None) -> Outcome:
        """Calls ``rpc``; ``keep(response)`` picks what an OK outcome carries. For a
        progress-streaming RPC (RegisterComponent, CommitUpload) the response is its last
        message."""
        started = time.monotonic()
        try:
            response = getattr(self.stub, rpc)(request, timeout=timeout, metadata=self.metadata)
            if isinstance(response, grpc.Call):  # a server stream: read it to its end
                response = list(response)[-1]
        except grpc.RpcError as error:
            return _failure(error, started)
        outcome = Outcome(code="OK", details="", seconds=time.monotonic() - started)
        outcome["response"] = keep(response) if keep else None
        return outcome

    def alive(self, timeout: float = 5.0) -> bool:
        """ddod answers GetInfo (needs no token) within ``timeout``."""
        return self.call("GetInfo", info_pb2.GetInfoRequest(), timeout=timeout).ok

    # Leases.

    def open_lease(self, client_name: str = "attacker", client_pid: Optional[int] = None,
                   timeout: float = 10.0, stub=None):
        """Opens a Connect stream (on ``stub``'s channel when given); returns
        ``(call, lease_id)``; ``call.cancel()`` ends it."""
        request = sessions_pb2.ConnectRequest(
            client_pid=os.getpid() if client_pid is None else client_pid,
            client_name=client_name,
        )
        call = (stub or self.stub).Connect(request, metadata=self.metadata)
        # The first event is `connected`; a deadline through a helper thread would be overkill.
        deadline_timer = _Timer(timeout, call.cancel)
        try:
            event = next(call)
        finally:
            deadline_timer.stop()
        return call, event.connected.lease_id

    # Files.

    def pass_file(self, path: str) -> int:
        """Passes a file this user opened itself over the identity socket; returns the handle."""
        assert self.identity is not None
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            answer, _ = self.identity.ask(f"FILE {os.path.basename(path)}", [fd])
        finally:
            os.close(fd)
        if not answer.startswith("OK "):
            raise PermissionError(f"FILE refused: {answer}")
        return int(answer.split()[1])

    def load_request(self, lease_id: str, cache_key: str, paths: Sequence[str], *,
                     by_path: bool = False, **fields) -> components_pb2.LoadSafetensorsRequest:
        """A LoadSafetensors request for files this user may read: passed as descriptors when
        ddod has the identity layer, by path otherwise (or when ``by_path``)."""
        request = components_pb2.LoadSafetensorsRequest(lease_id=lease_id, cache_key=cache_key,
                                                        **fields)
        if self.has_identity and not by_path:
            request.file_handles.extend(self.pass_file(path) for path in paths)
        else:
            request.files.extend(paths)
        return request

    def load(self, request: components_pb2.LoadSafetensorsRequest,
             timeout: float = 20.0) -> Outcome:
        """Runs a LoadSafetensors call to its end; OK carries ``warm_hit`` and the ``ref``."""
        started = time.monotonic()
        last = None
        try:
            for progress in self.stub.LoadSafetensors(request, timeout=timeout,
                                                      metadata=self.metadata):
                last = progress
        except grpc.RpcError as error:
            return _failure(error, started)
        outcome = Outcome(code="OK", details="", seconds=time.monotonic() - started)
        if last is not None and last.done:
            outcome["warm_hit"] = last.warm_hit
            outcome["content_hash"] = last.component.ref.content_hash
            outcome["total_bytes"] = last.component.ref.total_bytes
        return outcome

    # Segments.

    def map_segment(self, shm_name: str, size: int) -> bytes:
        """The bytes of a pool segment this user was granted: by descriptor (OPEN) with the
        identity layer, by shm_open's path under /dev/shm otherwise."""
        if self.has_identity:
            answer, fds = self.identity.ask(f"OPEN {shm_name} ro")
            if not answer.startswith("OK") or not fds:
                raise PermissionError(f"OPEN {shm_name} refused: {answer}")
            fd = fds[0]
        else:
            fd = os.open("/dev/shm/" + shm_name.lstrip("/"), os.O_RDONLY)
        try:
            return os.pread(fd, size, 0)
        finally:
            os.close(fd)

    def close(self) -> None:
        self.channel.close()
        if self.identity is not None:
            self.identity.close()


class _Timer:
    """Runs ``action`` after ``seconds`` unless stopped first."""

    def __init__(self, seconds: float, action) -> None:
        import threading

        self._timer = threading.Timer(seconds, action)
        self._timer.daemon = True
        self._timer.start()

    def stop(self) -> None:
        self._timer.cancel()


def safetensors_bytes(tensors: Dict[str, bytes], header: Optional[dict] = None) -> bytes:
    """A safetensors file of U8 tensors (one dimension each) with these bytes, or with the
    given ``header`` (as a dict, written verbatim) and the concatenated bytes."""
    data = b"".join(tensors.values())
    if header is None:
        header, offset = {}, 0
        for name, payload in tensors.items():
            header[name] = {"dtype": "U8", "shape": [len(payload)],
                            "data_offsets": [offset, offset + len(payload)]}
            offset += len(payload)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def write_safetensors(path: str, tensors: Dict[str, bytes], header: Optional[dict] = None,
                      mode: int = 0o600) -> str:
    if os.path.lexists(path):
        os.unlink(path)  # whatever an earlier attack left there (a FIFO, a symlink)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as out:
        out.write(safetensors_bytes(tensors, header))
    os.chmod(path, mode)
    return path


def report(**fields) -> None:
    """Prints the program's result for the test (the last line starting with RESULT)."""
    sys.stdout.write("RESULT " + json.dumps(fields, default=str) + "\n")
    sys.stdout.flush()


def from_environment() -> Ddo:
    """The Ddo of the socket the test named in DDO_SEC_SOCKET."""
    return Ddo(os.environ["DDO_SEC_SOCKET"])


def read_component(ddo: Ddo, lease_id: str, cache_key: str) -> Dict[str, bytes]:
    """Attaches on the host (a read-only session) and returns each tensor's bytes, as a runner
    that uses the shared copy sees them; detaches afterwards."""
    attached = ddo.stub.Attach(sessions_pb2.AttachRequest(lease_id=lease_id, cache_key=cache_key),
                               timeout=10, metadata=ddo.metadata)
    try:
        segments = [ddo.map_segment(segment.shm_name, segment.size_bytes)
                    for segment in attached.component.segments]
        return {placement.name: segments[placement.segment][
                    placement.offset:placement.offset + placement.byte_size]
                for placement in attached.component.placements}
    finally:
        ddo.stub.Detach(sessions_pb2.DetachRequest(session_id=attached.session_id), timeout=10,
                        metadata=ddo.metadata)


def own_file(name: str, tensors: Dict[str, bytes]) -> str:
    """A safetensors file of this user's, readable by it only, in its home directory."""
    return write_safetensors(os.path.join(os.path.expanduser("~"), name), tensors)


def u8_specs(tensors: Dict[str, bytes]) -> List[components_pb2.TensorSpec]:
    """One U8 tensor spec per entry (one dimension: its length)."""
    return [components_pb2.TensorSpec(name=name, dtype=components_pb2.DTYPE_U8,
                                      shape=[len(payload)], byte_size=len(payload))
            for name, payload in tensors.items()]


def upload(ddo: Ddo, lease_id: str, cache_key: str, tensors: Dict[str, bytes]):
    """Registers U8 tensors under ``cache_key``, writes them through a read-write mapping of
    the upload segment (OPEN rw) and commits. Returns ``(outcome, mapping)``: the outcome of
    the registration (or of the commit), with ``warm_hit``; the mapping (an ``mmap``, still
    open: the caller may keep writing through it) or None on a warm hit or a failure."""
    import mmap

    register = ddo.call("RegisterComponent", components_pb2.RegisterComponentRequest(
        lease_id=lease_id, cache_key=cache_key, tensors=u8_specs(tensors)),
        keep=lambda response: response.result)
    if not register.ok:
        return register, None
    result = register.pop("response")
    register["warm_hit"] = result.warm_hit
    if result.warm_hit:
        return register, None
    segment = result.segments[0]
    answer, fds = ddo.identity.ask(f"OPEN {segment.shm_name} rw")
    if not answer.startswith("OK") or not fds:
        raise PermissionError(f"OPEN {segment.shm_name} rw refused: {answer}")
    mapping = mmap.mmap(fds[0], segment.size_bytes, mmap.MAP_SHARED,
                        mmap.PROT_READ | mmap.PROT_WRITE)
    os.close(fds[0])
    for placement in result.placements:
        payload = tensors[placement.name]
        mapping[placement.offset:placement.offset + len(payload)] = payload
    commit = ddo.call("CommitUpload", components_pb2.CommitUploadRequest(
        lease_id=lease_id, upload_id=result.upload_id), timeout=60)
    commit["warm_hit"] = False
    commit["placements"] = {p.name: p.offset for p in result.placements}
    return commit, mapping


def begin_streamed_upload(ddo: Ddo, lease_id: str, cache_key: str, tensors: Dict[str, bytes],
                          streams: int):
    """Registers U8 tensors under ``cache_key`` as a streamed upload of ``streams`` streams;
    returns the outcome, with ``result`` (the answer) when OK."""
    return ddo.call("RegisterComponent", components_pb2.RegisterComponentRequest(
        lease_id=lease_id, cache_key=cache_key, tensors=u8_specs(tensors),
        upload_streams=streams), keep=lambda response: response.result)


def open_streams(ddo: Ddo, result) -> List[int]:
    """The write end of every stream of the answer ``result`` (OPEN rw on the identity
    socket); PermissionError when one is refused."""
    fds = []
    for name in result.stream_names:
        answer, received = ddo.identity.ask(f"OPEN {name} rw")
        if not answer.startswith("OK") or not received:
            raise PermissionError(f"OPEN {name} rw refused: {answer}")
        fds.append(received[0])
    return fds


def stream_payloads(result, tensors: Dict[str, bytes]) -> List[bytes]:
    """What each stream of ``result`` carries: its tensors' bytes in the order of their
    offsets."""
    payloads = [b""] * len(result.stream_names)
    for placement in sorted(result.placements, key=lambda p: p.offset):
        payloads[placement.stream] += tensors[placement.name]
    return payloads


def write_stream(fd: int, payload: bytes, close: bool = True) -> str:
    """Writes ``payload`` whole into the pipe ``fd`` on a thread of its own (ddod reads only
    once CommitUpload comes); closes it after unless ``close`` is False. Returns at once."""
    def run() -> None:
        try:
            _write_all(fd, payload)
        except OSError:
            pass
        finally:
            if close:
                os.close(fd)
    threading.Thread(target=run, daemon=True).start()
    return "started"


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        view = view[os.write(fd, view):]


def commit(ddo: Ddo, lease_id: str, upload_id: str, timeout: float = 60.0) -> Outcome:
    return ddo.call("CommitUpload", components_pb2.CommitUploadRequest(
        lease_id=lease_id, upload_id=upload_id), timeout=timeout)


def write_after_commit(mapping, offset: int, payload: bytes) -> str:
    """Writes through ``mapping`` in a child process (a fault there kills only the child):
    "written" or how the child ended."""
    pid = os.fork()
    if pid == 0:
        try:
            mapping[offset:offset + len(payload)] = payload
            mapping.flush()
        except BaseException:
            os._exit(3)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"signal {os.WTERMSIG(status)}"
    return "written" if os.WEXITSTATUS(status) == 0 else f"exit {os.WEXITSTATUS(status)}"
