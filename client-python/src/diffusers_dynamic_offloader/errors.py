"""Exceptions raised by the ddod client.

Every error the client raises on purpose is a :class:`DdoError`, so a runner can catch one
type. The subclasses say what went wrong:

- :class:`ConfigurationError`: a setting (``DDO_DAEMON``, an argument) has an invalid value.
- :class:`DaemonUnavailableError`: no daemon answered at any address that was tried.
- :class:`EmbeddedDaemonError`: a private ddod could not be started.
- :class:`DaemonError`: the daemon answered an RPC with an error status.
- :class:`UntrustedDaemonError`: the daemon's socket, its directory or its process belongs to
  a user the client does not trust (another user may be impersonating ddod).
- :class:`IdentityError`: the identity socket failed or ddod refused a request on it.
- :class:`InputFileError`: a file given to ``load_safetensors`` cannot be opened and passed to
  ddod (missing, unreadable, a FIFO or device, a name that cannot be passed).
- :class:`TensorTableError`: tensors given to the client cannot be registered as they are
  (not a tensor, a dtype the protocol has no code for, a sparse or quantized tensor).
- :class:`BindError`: an attached component does not fit the module it is bound to.
- :class:`WeightEditError`: an edit of a weight that ddod streams cannot be served (another
  dtype, shape or device; training through streamed weights); the message names the module
  tensor and says what to do instead.
- :class:`MissingDependencyError`: an optional package (``xxhash``) is needed and absent.
- :class:`StreamingError`: a streaming session cannot go on; its subclasses
  :class:`SessionClosedError` (ddod closed or failed the session) and :class:`DaemonGoneError`
  (ddod's process is gone) say why.
"""

from __future__ import annotations

from typing import Iterable, Sequence, Tuple

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
        self.cause = error
        self.code: grpc.StatusCode = _status_code(error)
        self.details: str = _details(error)
        super().__init__(f"ddod {rpc} failed: {self.code.name}: {self.details}")


class UntrustedDaemonError(DdoError):
    """The daemon's socket, its directory or the process behind it belongs to a user this
    client does not trust (not itself, root or the service user): the message names the path,
    what was found and what is accepted."""


class IdentityError(DdoError):
    """The identity socket failed, or ddod refused a request on it (the message is ddod's)."""


class InputFileError(DdoError):
    """A file to load cannot be opened here and passed to ddod; the message names it."""


class InvalidSettingError(DaemonError, ValueError):
    """ddod refused a setting (INVALID_ARGUMENT): the message names the variable, its value,
    where it came from and what is valid. A ValueError, as the seed's resolver raised."""


class TensorTableError(DdoError, ValueError):
    """Tensors cannot be registered as given; the message names the tensor and the reason."""


class BindError(DdoError, ValueError):
    """A component does not fit a module: names missing or unexpected, or shapes or dtypes differ.

    Attributes:
        missing: Names the module has and the component lacks.
        unexpected: Names the component has and the module lacks.
        mismatched: ``"name: component float16 [4, 4], module float32 [4, 4]"`` lines.
    """

    def __init__(
        self,
        message: str,
        *,
        missing: Sequence[str] = (),
        unexpected: Sequence[str] = (),
        mismatched: Sequence[str] = (),
    ) -> None:
        self.missing: Tuple[str, ...] = tuple(missing)
        self.unexpected: Tuple[str, ...] = tuple(unexpected)
        self.mismatched: Tuple[str, ...] = tuple(mismatched)
        super().__init__(message)


class WeightEditError(DdoError, RuntimeError):
    """An edit of a weight on the DDO route that cannot be served.

    Attributes:
        module_tensor: ``"<module path>.<attribute>"`` of the weight in the runner's module.
    """

    def __init__(self, message: str, *, module_tensor: str = "") -> None:
        super().__init__(message)
        self.module_tensor = module_tensor


class MissingDependencyError(DdoError, ImportError):
    """An optional package that the requested feature needs is not installed."""


class StreamingError(DdoError):
    """A streaming session cannot serve a weight: the control block is inconsistent (a slot
    holds another use than the one expected), ddod stopped producing, or the session ended."""


class GraphCaptureError(StreamingError):
    """A CUDA graph capture reached a module on the DDO route: its weights come from a ring
    that ddod refills while the forward runs, which a replayed graph cannot follow."""


class SessionClosedError(StreamingError):
    """ddod closed the streaming session (detached, or ddod is stopping) or marked it failed."""


class DaemonGoneError(StreamingError):
    """ddod's process ended while a streaming session was waiting for it."""


def describe_attempts(attempts: Sequence[Tuple[str, str]]) -> str:
    """``"unix:/a.sock (no socket file); unix:/b.sock (UNAVAILABLE: ...)"``."""
    return "; ".join(f"{address} ({reason})" for address, reason in attempts) or "no address"


def describe_names(names: Iterable[str], limit: int = 20) -> str:
    """``"'a', 'b', ... (3 more)"``: at most ``limit`` names, quoted; ``"none"`` for none."""
    names = list(names)
    shown = ", ".join(repr(name) for name in names[:limit])
    if len(names) > limit:
        shown += f", ... ({len(names) - limit} more)"
    return shown or "none"


def _status_code(error: grpc.RpcError) -> grpc.StatusCode:
    # A grpc.RpcError raised by a call is also a grpc.Call; the bare base class has no code().
    code = getattr(error, "code", None)
    return code() if callable(code) else grpc.StatusCode.UNKNOWN


def _details(error: grpc.RpcError) -> str:
    details = getattr(error, "details", None)
    text = details() if callable(details) else None
    return text or str(error) or "(no message)"
