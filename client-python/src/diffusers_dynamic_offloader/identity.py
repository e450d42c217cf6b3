"""The identity socket: the client proves who it is to ddod, and checks who ddod is.

gRPC does not tell ddod who is on the other end of its socket, so ddod listens on a second
Unix socket, ``<grpc socket>.id`` (``SOCK_SEQPACKET``), where the kernel reports each side's
uid to the other (``SO_PEERCRED``); docs/security.md gives the protocol. Over one connection,
held for the client's whole life:

- ``HELLO 1`` -> ``OK <token>``: the token every ``ddo.v1.Ddo`` call carries in its
  ``ddo-token`` metadata (valid while the connection stays open);
- ``FILE <name>`` + a descriptor -> ``OK <handle>``: a file this process opened, for ddod to
  read (``LoadSafetensorsRequest.file_handles``);
- ``OPEN <shm-name> ro|rw`` -> ``OK`` + a descriptor: a segment ddod granted this process;
- a refused request -> ``ERR <message>`` (the connection stays usable).

Before sending anything, :meth:`IdentityChannel.connect` checks the daemon: the socket file and
its directory must belong to a trusted user (:func:`~.addresses.check_socket_location`) and the
process listening on it must run as this user, as root or as the service user
(:func:`~.addresses.trusted_daemon_uids`); otherwise :class:`UntrustedDaemonError`. The process
that answers HELLO is checked the same way (its credentials come with the answer): under
socket activation systemd listens and ddod answers.

Thread-safety: :class:`IdentityChannel` may be used from any thread; a lock covers each request
and its answer, so answers never cross.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import struct
import threading
from typing import List, Optional, Tuple

from .addresses import check_socket_location, describe_uids, trusted_daemon_uids
from .errors import DdoError, IdentityError, UntrustedDaemonError

#: The identity socket's path is the gRPC socket's path plus this.
IDENTITY_SOCKET_SUFFIX = ".id"
#: The metadata key that carries the token on every ddo.v1.Ddo call.
TOKEN_METADATA_KEY = "ddo-token"
#: The protocol version this client speaks.
PROTOCOL_VERSION = 1
#: The largest message either side sends.
MAX_PACKET_BYTES = 4096
#: The longest file name FILE takes, in bytes (NAME_MAX).
MAX_FILE_NAME_BYTES = 255

_TOKEN = re.compile(r"[0-9a-f]{32}")
_HANDLE = re.compile(r"[1-9][0-9]{0,19}")
# struct ucred: pid, uid, gid.
_UCRED = struct.Struct("3i")
# One descriptor in SCM_RIGHTS.
_FD = struct.Struct("i")
# How a connection ddod closed unanswered ends on this side.
_ENDED = (errno.ECONNRESET, errno.EPIPE, errno.ENOTCONN)
# ddod's messages are short; more than this of one is not quoted back.
_MAX_QUOTED_CHARS = 300


def identity_socket_path(grpc_socket_path: str) -> str:
    """Where ddod's identity socket is when its gRPC socket is ``grpc_socket_path``."""
    return grpc_socket_path + IDENTITY_SOCKET_SUFFIX


def check_file_name(name: str) -> bytes:
    """The bytes of ``name`` as FILE sends them.

    ddod takes base names of printable ASCII without spaces (the protocol separates fields
    with spaces): ``[!-~]`` without ``/``, at most 255 bytes, not ``.`` or ``..``.

    Raises:
        IdentityError: ``name`` is not such a name; the message quotes it escaped.
    """
    encoded = os.fsencode(name)
    shown = quote(os.fsdecode(encoded))
    if not encoded or name in (".", ".."):
        raise IdentityError(f"cannot pass file name {shown}: it is not a file's base name")
    if b"/" in encoded:
        raise IdentityError(f"cannot pass file name {shown}: a base name has no '/'")
    if len(encoded) > MAX_FILE_NAME_BYTES:
        raise IdentityError(
            f"cannot pass file name {shown}: {len(encoded)} bytes, over the "
            f"{MAX_FILE_NAME_BYTES}-byte limit"
        )
    if any(byte <= 0x20 or byte >= 0x7F for byte in encoded):
        raise IdentityError(
            f"cannot pass file name {shown}: ddod takes names of printable ASCII without "
            "spaces, and this one holds a space, a control character or a non-ASCII one "
            "(rename the file, or load it through a symbolic link with such a name)"
        )
    return encoded


def quote(text: str, limit: int = _MAX_QUOTED_CHARS) -> str:
    """``text`` quoted with its unprintable characters escaped, cut at ``limit`` characters."""
    cut = text[:limit]
    return repr(cut) + ("..." if len(text) > limit else "")


class IdentityChannel:
    """One connection to ddod's identity socket, with the token it was given.

    Create it with :meth:`connect`; :meth:`close` it with the client (the token dies with it).
    """

    def __init__(self, sock: socket.socket, path: str, daemon_uid: int, daemon_pid: int) -> None:
        """Takes ownership of a connected ``sock``; use :meth:`connect`."""
        self._sock: Optional[socket.socket] = sock
        self._lock = threading.Lock()
        self.path = path
        #: The uid ddod runs as, as the kernel reported it: first the socket's listener
        #: (SO_PEERCRED), then, once HELLO is answered, the process that answered it.
        self.daemon_uid = daemon_uid
        #: ddod's pid, likewise (0 when ddod is in another pid namespace).
        self.daemon_pid = daemon_pid
        self.token = ""
        self._answered_by: Optional[Tuple[int, int]] = None

    @classmethod
    def connect(
        cls, path: str, *, timeout: float, trusted_uids: Optional[Tuple[int, ...]] = None
    ) -> "IdentityChannel":
        """Connects to the identity socket at ``path``, checks ddod's uid and says HELLO.

        Args:
            path: The identity socket.
            timeout: Seconds to wait for each answer.
            trusted_uids: The uids ddod may run as (default: :func:`trusted_daemon_uids`).

        Raises:
            UntrustedDaemonError: the socket, its directory or the process behind it belongs
                to a user this client does not trust.
            IdentityError: nothing listens there, or ddod refused or broke the handshake.
        """
        trusted = trusted_daemon_uids() if trusted_uids is None else tuple(trusted_uids)
        # Step 3 of docs/security.md, "Finding the daemon": the identity socket's location is
        # checked as the daemon's own was; then step 4, the handshake (the peer's uid, HELLO).
        check_socket_location(path, trusted_uids=trusted)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            sock.settimeout(timeout)
            try:
                sock.connect(path)
            except OSError as error:
                raise IdentityError(
                    f"cannot connect to ddod's identity socket {path}: "
                    f"{error.strerror or error} (is ddod older than this client?)"
                ) from error
            pid, uid, _gid = _UCRED.unpack(
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size)
            )
            if uid not in trusted:
                raise UntrustedDaemonError(
                    f"refusing the daemon at {path}: it runs as uid {uid}, and this client "
                    f"trusts only {describe_uids(trusted)}; another user may be impersonating "
                    "ddod (stop that process and remove the socket, or point DDO_DAEMON at "
                    "your own ddod)"
                )
            channel = cls(sock, path, uid, pid)
        except BaseException:
            sock.close()
            raise
        try:
            channel.token = channel._hello(trusted)
        except BaseException:
            channel.close()
            raise
        return channel

    @property
    def closed(self) -> bool:
        """True after :meth:`close`, or once the connection broke."""
        return self._sock is None

    @property
    def metadata(self) -> Tuple[Tuple[str, str], ...]:
        """The gRPC metadata that every ddo.v1.Ddo call carries."""
        return ((TOKEN_METADATA_KEY, self.token),)

    def pass_file(self, name: str, fd: int) -> int:
        """Passes the open file ``fd`` to ddod under its base name ``name``; returns the handle
        that names it in a request (valid once, with this channel's token).

        Raises:
            IdentityError: the name is not acceptable, or ddod refused the file.
        """
        encoded = check_file_name(name)
        fields, fds = self._request(b"FILE " + encoded, [fd], f"FILE {quote(name)}")
        _close_all(fds)
        if len(fields) != 2 or not _HANDLE.fullmatch(fields[1]):
            raise self._broken(f"ddod answered FILE with {quote(' '.join(fields))}")
        return int(fields[1])

    def open_segment(self, shm_name: str, writable: bool) -> int:
        """A descriptor of the shared-memory segment ``shm_name``, opened by ddod read-write
        (``writable``) or read-only; the caller owns (and closes) it.

        Raises:
            IdentityError: ddod refused (the segment was not granted to this process), or
                sent no descriptor.
        """
        name = os.fsencode(shm_name)
        if not name or b" " in name or len(name) > MAX_FILE_NAME_BYTES + 1:
            raise IdentityError(f"cannot ask ddod for segment {quote(shm_name)}: invalid name")
        access = b"rw" if writable else b"ro"
        fields, fds = self._request(b"OPEN " + name + b" " + access, [], f"OPEN {quote(shm_name)}")
        if fields != ["OK"] or len(fds) != 1:
            _close_all(fds)
            raise IdentityError(
                f"ddod answered OPEN {quote(shm_name)} with {quote(' '.join(fields))} and "
                f"{len(fds)} descriptors, not OK and one"
            )
        return fds[0]

    def close(self) -> None:
        """Closes the connection; the token stops being valid. Idempotent."""
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"daemon uid {self.daemon_uid}"
        return f"IdentityChannel({self.path!r}, {state})"

    def _hello(self, trusted: Tuple[int, ...]) -> str:
        """HELLO, and who answered it. The process that listens on the socket is not always
        the one that serves it: under socket activation systemd made the socket (SO_PEERCRED
        names it) and ddod answers. So the answer comes with its sender's credentials, which
        the kernel attaches (SO_PASSCRED, SCM_CREDENTIALS); that process must be trusted too,
        and it is the daemon whose uid owns the segments."""
        sock = self._sock
        assert sock is not None
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        try:
            fields, fds = self._request(f"HELLO {PROTOCOL_VERSION}".encode(), [], "HELLO",
                                        credentials=True)
        finally:
            if self._sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 0)
        _close_all(fds)
        if len(fields) != 2 or not _TOKEN.fullmatch(fields[1]):
            raise self._broken(f"ddod answered HELLO with {quote(' '.join(fields))}")
        if self._answered_by is None:
            raise self._broken(f"ddod's answer to HELLO on {self.path} came without its sender's "
                               "credentials")
        pid, uid = self._answered_by
        if uid not in trusted:
            self.close()
            raise UntrustedDaemonError(
                f"refusing the daemon at {self.path}: the socket is uid {self.daemon_uid}'s, but "
                f"the process that answers on it (pid {pid}) runs as uid {uid}, and this client "
                f"trusts only {describe_uids(trusted)}"
            )
        self.daemon_uid, self.daemon_pid = uid, pid
        return fields[1]

    def _request(self, message: bytes, fds: List[int], what: str,
                 credentials: bool = False) -> Tuple[List[str], List[int]]:
        """Sends one request and reads its answer: the answer's fields (``["OK", ...]``) and
        the descriptors that came with it. ``ERR`` answers raise IdentityError. With
        ``credentials``, the sender's (pid, uid) from SCM_CREDENTIALS go to ``_answered_by``."""
        if len(message) > MAX_PACKET_BYTES:
            raise IdentityError(f"the {what} request is over {MAX_PACKET_BYTES} bytes")
        with self._lock:
            sock = self._sock
            if sock is None:
                raise IdentityError(f"the identity connection to {self.path} is closed")
            try:
                if fds:
                    socket.send_fds(sock, [message], fds)
                else:
                    sock.send(message)
                data, received, flags, sender = _receive(sock, credentials)
            except socket.timeout as error:
                # The answer may still come: the connection no longer pairs requests with
                # answers, so it is given up.
                self._give_up(sock)
                raise IdentityError(f"ddod did not answer {what} on {self.path} in time") from error
            except OSError as error:
                self._give_up(sock)
                if what == "HELLO" and error.errno in _ENDED:
                    raise self._refused() from error
                raise IdentityError(
                    f"the identity connection to {self.path} failed during {what}: "
                    f"{error.strerror or error}"
                ) from error
            if not data and not received:
                self._give_up(sock)
                if what == "HELLO":
                    raise self._refused()
                raise IdentityError(f"ddod closed the identity connection {self.path}")
            if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC):
                _close_all(received)
                self._give_up(sock)
                raise IdentityError(f"ddod's answer to {what} was truncated")
        if credentials:
            self._answered_by = sender
        text = data.decode("utf-8", errors="replace")
        fields = text.split(" ")
        if fields[0] == "OK":
            return fields, received
        _close_all(received)
        if fields[0] == "ERR":
            raise IdentityError(f"ddod refused {what}: {quote(text[4:])}")
        raise self._broken(f"ddod answered {what} with {quote(text)}")

    def _refused(self) -> IdentityError:
        """ddod closes a connection over one of its limits at once, unanswered (a connection
        kept to answer would hold the slot it was refused)."""
        return IdentityError(
            f"ddod refused the identity connection {self.path} (a connection limit? it closed "
            "the connection before answering HELLO: this user may hold too many connections, "
            "or ddod too many in all; ddod's log names the limit)"
        )

    def _give_up(self, sock: socket.socket) -> None:
        """Closes a connection that can no longer be trusted to pair requests and answers.
        Called with the lock held."""
        self._sock = None
        sock.close()

    def _broken(self, message: str) -> DdoError:
        self.close()
        return IdentityError(message)


def _receive(
    sock: socket.socket, credentials: bool
) -> Tuple[bytes, List[int], int, Optional[Tuple[int, int]]]:
    """One packet: its bytes, the descriptors that came with it (at most one is expected; more
    are closed and truncate), the flags, and with ``credentials`` the sender's (pid, uid)."""
    space = socket.CMSG_SPACE(_FD.size)
    if credentials:
        space += socket.CMSG_SPACE(_UCRED.size)
    data, ancillary, flags, _ = sock.recvmsg(MAX_PACKET_BYTES, space)
    fds: List[int] = []
    sender: Optional[Tuple[int, int]] = None
    for level, kind, payload in ancillary:
        if level != socket.SOL_SOCKET:
            continue
        if kind == socket.SCM_RIGHTS:
            usable = len(payload) - len(payload) % _FD.size
            fds.extend(value for (value,) in _FD.iter_unpack(payload[:usable]))
        elif kind == socket.SCM_CREDENTIALS and len(payload) >= _UCRED.size:
            pid, uid, _gid = _UCRED.unpack_from(payload)
            sender = (pid, uid)
    if len(fds) > 1:
        flags |= socket.MSG_CTRUNC  # never sent by ddod: treated as a broken answer
    return data, fds, flags, sender


def _close_all(fds: List[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass
