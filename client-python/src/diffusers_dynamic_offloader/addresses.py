"""Where to find ddod: the ``DDO_DAEMON`` setting and the default socket locations.

``DDO_DAEMON`` (or the ``address`` argument of :meth:`DdoClient.connect`) takes one of:

- unset, ``""`` or ``"auto"``: try the default sockets (:func:`default_socket_candidates`);
  when none answers, start a private ddod bound to this process (the embedded default);
- ``"embedded"``: always start a private ddod;
- ``"unix:/abs/path"``, ``"unix:///abs/path"`` or ``"/abs/path"``: that Unix socket only;
- ``"host:port"`` or ``"[ipv6]:port"``: that TCP address only.

A fixed address (the last two forms) never falls back to a private daemon: the user asked for
that daemon, and silently using another would hide the mistake.
"""

from __future__ import annotations

import enum
import ipaddress
import os
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Tuple

from .errors import ConfigurationError

#: The environment variable that names the daemon to use.
DAEMON_ENV_VAR = "DDO_DAEMON"

#: The socket of the system service (ddod run by root or by systemd).
SYSTEM_SOCKET_PATH = "/run/ddo/ddod.sock"

#: The file name of ddod's socket inside its directory.
SOCKET_FILE_NAME = "ddod.sock"

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
        user_socket = f"/tmp/ddo-{uid}/{SOCKET_FILE_NAME}"
    paths = [user_socket]
    if user_socket != SYSTEM_SOCKET_PATH:
        paths.append(SYSTEM_SOCKET_PATH)
    return tuple(DaemonAddress.unix(path) for path in paths)


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
