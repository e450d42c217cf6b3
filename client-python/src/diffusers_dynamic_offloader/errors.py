"""Exceptions raised by the ddod client.

Every error the client raises on purpose is a :class:`DdoError`, so a runner can catch one
type. The subclasses say what went wrong:

- :class:`ConfigurationError`: a setting (``DDO_DAEMON``, an argument) has an invalid value.
- :class:`DaemonUnavailableError`: no daemon answered at any address that was tried.
- :class:`EmbeddedDaemonError`: a private ddod could not be started.
- :class:`DaemonError`: the daemon answered an RPC with an error status.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import grpc

START_HINT = (
    "start a shared daemon with `ddod --preset warm_process`, "
    "or set DDO_DAEMON to the address of a running ddod"
)


class DdoError(Exception):
    """Base class of every error raised by diffusers_dynamic_offloader."""


class ConfigurationError(DdoError, ValueError):
    """A setting or argument has an invalid value; the message names it and the accepted forms."""


class DaemonUnavailableError(DdoError):
    """No ddod answered.

    Attributes:
        attempts: ``(address, reason)`` for every address that was tried, in order.
    """

    def __init__(self, attempts: Sequence[Tuple[str, str]]) -> None:
        self.attempts: Tuple[Tuple[str, str], ...] = tuple(attempts)
        super().__init__(f"no ddod answered at {describe_attempts(self.attempts)}: {START_HINT}")


class EmbeddedDaemonError(DdoError):
    """A private (embedded) ddod could not be found or started."""


class DaemonError(DdoError):
    """ddod answered an RPC with an error status.

    Attributes:
        rpc: The RPC's name, e.g. ``"GetInfo"``.
        code: The gRPC status code.
        details: The daemon's message.
    """

    def __init__(self, rpc: str, error: grpc.RpcError) -> None:
        self.rpc = rpc
        self.code: grpc.StatusCode = _status_code(error)
        self.details: str = _details(error)
        super().__init__(f"ddod {rpc} failed: {self.code.name}: {self.details}")


def describe_attempts(attempts: Sequence[Tuple[str, str]]) -> str:
    """``"unix:/a.sock (no socket file); unix:/b.sock (UNAVAILABLE: ...)"``."""
    return "; ".join(f"{address} ({reason})" for address, reason in attempts) or "no address"


def _status_code(error: grpc.RpcError) -> grpc.StatusCode:
    # A grpc.RpcError raised by a call is also a grpc.Call; the bare base class has no code().
    code = getattr(error, "code", None)
    return code() if callable(code) else grpc.StatusCode.UNKNOWN


def _details(error: grpc.RpcError) -> str:
    details = getattr(error, "details", None)
    text = details() if callable(details) else None
    return text or str(error) or "(no message)"
