"""Where to find ddod: the ``DDO_DAEMON`` setting and the default socket locations.

``DDO_DAEMON`` (or the ``address`` argument of :meth:`DdoClient.connect`) takes one of:

- unset, ``""`` or ``"auto"``: try the default sockets (:func:`default_socket_candidates`);
  when none answers, start a private ddod bound to this process (the embedded default);
- ``"embedded"``: always start a private ddod;
- ``"unix:/abs/path"``, ``"unix:///abs/path"`` or ``"/abs/path"``: that Unix socket only;
- ``"host:port"`` or ``"[ipv6]:port"``: that TCP address only.

A fixed address (the last two forms) never falls back to a private daemon: the user asked for
that daemon, and silently using another would hide the mistake.

Who may serve this client (:func:`trusted_daemon_uids`): a ddod running as the user itself, as
root, or as the service user (``DDO_SERVICE_USER``, default ``ddo``, when that user exists).
:func:`check_socket_location` refuses a Unix socket that another user could have put there:
its directory must belong to a trusted user and be writable by its owner only, and the
per-user directory ``/tmp/ddo-<uid>`` (used without ``XDG_RUNTIME_DIR``) must be the user's
own, mode 0700. The process behind the socket is checked when the client connects
(:mod:`diffusers_dynamic_offloader.identity`).
"""

from __future__ import annotations

import enum
import ipaddress
import os
import pwd
import re
import stat
from dataclasses import dataclass
from typing import Iterable, List, Mapping, Optional, Tuple

from .errors import ConfigurationError, UntrustedDaemonError

#: The environment variable that names the daemon to use.
DAEMON_ENV_VAR = "DDO_DAEMON"

#: The socket of the system service (ddod run by root or by systemd).
SYSTEM_SOCKET_PATH = "/run/ddo/ddod.sock"

#: The file name of ddod's socket inside its directory.
SOCKET_FILE_NAME = "ddod.sock"

#: The environment variable that names the service user, whose ddod clients trust.
SERVICE_USER_ENV_VAR = "DDO_SERVICE_USER"
DEFAULT_SERVICE_USER = "ddo"

# sockaddr_un.sun_path holds 108 bytes including the terminating NUL.
_MAX_SOCKET_PATH_BYTES = 107

_ACCEPTED_FORMS = (
    '"auto" (or unset), "embedded", "unix:/abs/path.sock", "unix:///abs/path.sock", '
    '"/abs/path.sock", "host:port" or "[ipv6]:port"'
)
_HOST_PORT = re.compile(r"^(?P<host>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?):(?P<port>\d+)$")
_IPV6_PORT = re.compile(r"^\[(?P<host>[0-9A-Fa-f:.]+)\]:(?P<port>\d+)$")


class Discovery(enum.Enum):
    """How the client finds its daemon."""

    #: Try the candidate sockets in order; start a private ddod when none answers.
    AUTO = "auto"
    #: Always start a private ddod.
    EMBEDDED = "embedded"
    #: Use the one candidate address; never start a private ddod.
    FIXED = "fixed"


@dataclass(frozen=True)
class DaemonAddress:
    """One address a ddod may listen on.

    Attributes:
        target: The gRPC target, as ddod reports it in ``listen_addresses``:
            ``"unix:/run/ddo/ddod.sock"``, ``"127.0.0.1:50051"``, ``"[::1]:50051"``.
        socket_path: The socket file for a Unix address, else None.
    """

    target: str
    socket_path: Optional[str] = None

    @classmethod
    def unix(cls, path: str) -> "DaemonAddress":
        """The address of the Unix socket at the absolute ``path``."""
        return cls(target=f"unix:{path}", socket_path=path)

    def __str__(self) -> str:
        return self.target


@dataclass(frozen=True)
class DaemonLocation:
    """The result of reading ``DDO_DAEMON``: how to find the daemon and where to look."""

    discovery: Discovery
    #: Addresses to try, in order; empty for :attr:`Discovery.EMBEDDED`.
    candidates: Tuple[DaemonAddress, ...]


def default_socket_candidates(
    environ: Optional[Mapping[str, str]] = None, uid: Optional[int] = None
) -> Tuple[DaemonAddress, ...]:
    """The sockets the client tries when ``DDO_DAEMON`` is unset, in order.

    First the socket ddod uses by default for this user: ``/run/ddo/ddod.sock`` for root,
    ``$XDG_RUNTIME_DIR/ddo/ddod.sock``, or ``/tmp/ddo-<uid>/ddod.sock`` without
    ``XDG_RUNTIME_DIR``. Then the system service's socket, ``/run/ddo/ddod.sock``.
    """
    environ = os.environ if environ is None else environ
    uid = os.getuid() if uid is None else uid
    runtime_dir = environ.get("XDG_RUNTIME_DIR", "")
    if uid == 0:
        user_socket = SYSTEM_SOCKET_PATH
    elif runtime_dir:
        user_socket = os.path.join(runtime_dir, "ddo", SOCKET_FILE_NAME)
    else:
        user_socket = os.path.join(per_user_directory(uid), SOCKET_FILE_NAME)
    paths = [user_socket]
    if user_socket != SYSTEM_SOCKET_PATH:
        paths.append(SYSTEM_SOCKET_PATH)
    return tuple(DaemonAddress.unix(path) for path in paths)


def per_user_directory(uid: Optional[int] = None) -> str:
    """The directory of a user's ddod socket without ``XDG_RUNTIME_DIR``: ``/tmp/ddo-<uid>``."""
    return f"/tmp/ddo-{os.getuid() if uid is None else uid}"


def trusted_daemon_uids(
    environ: Optional[Mapping[str, str]] = None, uid: Optional[int] = None
) -> Tuple[int, ...]:
    """The uids a daemon may run as (and own its socket) for this client to talk to it: the
    user's own, root's, and the service user's (``DDO_SERVICE_USER``, default ``ddo``) when
    such a user exists."""
    environ = os.environ if environ is None else environ
    uids = [os.getuid() if uid is None else uid, 0]
    service_user = environ.get(SERVICE_USER_ENV_VAR) or DEFAULT_SERVICE_USER
    try:
        uids.append(pwd.getpwnam(service_user).pw_uid)
    except (KeyError, UnicodeEncodeError):
        pass  # no such user: nobody else is trusted
    return tuple(dict.fromkeys(uids))


def describe_uids(uids: Iterable[int]) -> str:
    """``"uid 1000 (you), 0 (root), 998 (ddo)"``."""
    me = os.getuid()
    parts = []
    for uid in uids:
        if uid == 0:
            parts.append("0 (root, you)" if me == 0 else "0 (root)")
        elif uid == me:
            parts.append(f"{uid} (you)")
        else:
            try:
                parts.append(f"{uid} ({pwd.getpwuid(uid).pw_name})")
            except KeyError:
                parts.append(str(uid))
    return "uid " + ", ".join(parts)


def check_socket_location(
    path: str,
    *,
    trusted_uids: Optional[Tuple[int, ...]] = None,
    uid: Optional[int] = None,
) -> None:
    """Refuses a Unix socket that a user this client does not trust may have put there.

    Checks, without following symbolic links: the socket's directory is a directory owned by
    a trusted uid and writable by its owner only (a sticky, world-writable directory such as
    /tmp is not acceptable either); ``/tmp/ddo-<uid>`` is, moreover, owned by the user and
    mode 0700; the socket file, when it exists, is a socket owned by a trusted uid. A missing
    socket or directory passes: nothing can be connected to there.

    Args:
        path: The socket file.
        trusted_uids: Default :func:`trusted_daemon_uids`.
        uid: The user this client runs as (default: the process's).

    Raises:
        UntrustedDaemonError: the message names the path, what was found and what is accepted.
    """
    uid = os.getuid() if uid is None else uid
    trusted = trusted_daemon_uids(uid=uid) if trusted_uids is None else trusted_uids
    directory = os.path.dirname(path) or "/"
    try:
        found = os.lstat(directory)
    except FileNotFoundError:
        return
    except OSError as error:
        raise UntrustedDaemonError(
            f"cannot check the daemon's socket directory {directory}: {error.strerror}"
        ) from error
    mode = stat.S_IMODE(found.st_mode)
    if directory == per_user_directory(uid):
        if not stat.S_ISDIR(found.st_mode) or found.st_uid != uid or mode != 0o700:
            raise UntrustedDaemonError(
                f"refusing the daemon socket directory {directory}: it is "
                f"{_describe(found)}, but it must be a directory owned by you (uid {uid}) with "
                f"mode 0700: another user may have created it to impersonate your ddod and "
                f"serve you their weights. Remove it (as root if need be: rm -r {directory}) "
                "and start your ddod again, or set XDG_RUNTIME_DIR to a directory only you own"
            )
    elif (
        not stat.S_ISDIR(found.st_mode)
        or found.st_uid not in trusted
        or mode & (stat.S_IWGRP | stat.S_IWOTH)
    ):
        raise UntrustedDaemonError(
            f"refusing the daemon socket directory {directory}: it is {_describe(found)}; "
            f"it must be a directory owned by {describe_uids(trusted)} and writable by its "
            "owner only, or another user could have put a socket there (move the socket to "
            "such a directory, e.g. /run/ddo or $XDG_RUNTIME_DIR/ddo)"
        )
    try:
        socket_file = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as error:
        raise UntrustedDaemonError(
            f"cannot check the daemon's socket {path}: {error.strerror}"
        ) from error
    if not stat.S_ISSOCK(socket_file.st_mode) or socket_file.st_uid not in trusted:
        raise UntrustedDaemonError(
            f"refusing the daemon socket {path}: it is {_describe(socket_file)}; it must be a "
            f"socket owned by {describe_uids(trusted)}"
        )


def tcp_listener_owners(
    port: int, tables: Tuple[str, ...] = ("/proc/net/tcp", "/proc/net/tcp6")
) -> List[int]:
    """The uids owning a listener on ``port`` in the kernel's socket tables (this network
    namespace's); empty when nothing listens there. The client dials a TCP address only once
    its listeners are known to be trusted: no byte, not even a health check, goes to a port
    another user holds."""
    owners = []
    for table in tables:
        try:
            with open(table, encoding="ascii", errors="replace") as rows:
                next(rows, None)  # the header
                for row in rows:
                    fields = row.split()
                    # local_address is ADDR:PORT in hex; st 0A is LISTEN; uid is field 7.
                    if len(fields) > 7 and fields[3] == "0A":
                        if int(fields[1].rpartition(":")[2], 16) == port:
                            owners.append(int(fields[7]))
        except (OSError, ValueError):
            continue
    return owners


def check_tcp_listener(
    address: DaemonAddress,
    *,
    trusted_uids: Optional[Tuple[int, ...]] = None,
    tables: Tuple[str, ...] = ("/proc/net/tcp", "/proc/net/tcp6"),
) -> None:
    """Refuses a TCP daemon address whose listening socket belongs to an untrusted user.

    Any local user may listen on a free loopback port; the kernel's socket tables
    (``/proc/net/tcp``, ``/proc/net/tcp6``, this network namespace's) say which uid owns each
    listener. Every listener on the address's port must be owned by a trusted uid, and there
    must be one.

    Raises:
        UntrustedDaemonError: no listener is visible, or one belongs to an untrusted uid.
    """
    trusted = trusted_daemon_uids() if trusted_uids is None else trusted_uids
    port = int(address.target.rpartition(":")[2])
    owners = tcp_listener_owners(port, tables)
    if not owners:
        raise UntrustedDaemonError(
            f"refusing the daemon at {address.target}: no listener on port {port} is visible "
            "in /proc/net/tcp, so its owner cannot be checked"
        )
    strangers = sorted(set(owners) - set(trusted))
    if strangers:
        raise UntrustedDaemonError(
            f"refusing the daemon at {address.target}: port {port} is held by uid "
            f"{', '.join(map(str, strangers))}, and this client trusts only "
            f"{describe_uids(trusted)}; another user may be impersonating ddod"
        )


def _describe(found: os.stat_result) -> str:
    """``"a directory owned by uid 1234 with mode 0777"``."""
    if stat.S_ISDIR(found.st_mode):
        kind = "a directory"
    elif stat.S_ISSOCK(found.st_mode):
        kind = "a socket"
    elif stat.S_ISLNK(found.st_mode):
        kind = "a symbolic link"
    else:
        kind = "not a directory or socket"
    return f"{kind} owned by uid {found.st_uid} with mode {stat.S_IMODE(found.st_mode):04o}"


def resolve_daemon_location(
    address: Optional[str] = None, environ: Optional[Mapping[str, str]] = None
) -> DaemonLocation:
    """Reads ``address`` when given, else ``DDO_DAEMON`` from ``environ``.

    Raises:
        ConfigurationError: the value is not one of the accepted forms; the message names
            the setting, the value and the accepted forms.
    """
    environ = os.environ if environ is None else environ
    if address is not None:
        return parse_daemon_location(address, source="address", environ=environ)
    return parse_daemon_location(
        environ.get(DAEMON_ENV_VAR), source=DAEMON_ENV_VAR, environ=environ
    )


def parse_daemon_location(
    value: Optional[str],
    *,
    source: str = DAEMON_ENV_VAR,
    environ: Optional[Mapping[str, str]] = None,
) -> DaemonLocation:
    """Parses one ``DDO_DAEMON`` value; ``source`` names the setting in error messages."""
    text = (value or "").strip()
    keyword = text.lower()
    if keyword in ("", "auto"):
        return DaemonLocation(Discovery.AUTO, default_socket_candidates(environ))
    if keyword == "embedded":
        return DaemonLocation(Discovery.EMBEDDED, ())
    return DaemonLocation(Discovery.FIXED, (_parse_fixed_address(text, source),))


def _parse_fixed_address(text: str, source: str) -> DaemonAddress:
    if text.startswith("unix://"):
        # "unix:///abs/path": the authority is empty and the path is absolute.
        return _unix_address(text[len("unix://") :], text, source)
    if text.startswith("unix:"):
        return _unix_address(text[len("unix:") :], text, source)
    if text.startswith("/"):
        return _unix_address(text, text, source)
    match = _IPV6_PORT.match(text)
    if match:
        try:
            ipaddress.IPv6Address(match["host"])
        except ValueError:
            raise _invalid(source, text, f"{match['host']!r} is not an IPv6 address") from None
        return DaemonAddress(target=f"[{match['host']}]:{_port(match['port'], text, source)}")
    match = _HOST_PORT.match(text)
    if match:
        return DaemonAddress(target=f"{match['host']}:{_port(match['port'], text, source)}")
    raise _invalid(source, text)


def _unix_address(path: str, text: str, source: str) -> DaemonAddress:
    if not path.startswith("/"):
        raise _invalid(source, text, "a Unix socket path must be absolute")
    if "\0" in path:
        raise _invalid(source, text, "the path contains a NUL byte")
    if len(os.fsencode(path)) > _MAX_SOCKET_PATH_BYTES:
        raise _invalid(
            source, text, f"Unix socket paths are limited to {_MAX_SOCKET_PATH_BYTES} bytes"
        )
    return DaemonAddress.unix(path)


def _port(digits: str, text: str, source: str) -> int:
    port = int(digits)
    if not 1 <= port <= 65535:
        raise _invalid(source, text, f"port {port} is outside 1-65535")
    return port


def _invalid(source: str, value: str, reason: str = "") -> ConfigurationError:
    because = f" ({reason})" if reason else ""
    return ConfigurationError(
        f"{source}={value!r} is not a valid daemon address{because}; "
        f"accepted forms: {_ACCEPTED_FORMS}"
    )
