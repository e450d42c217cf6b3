"""RpcChannel: how the package's modules talk to ddod over one client's connection.

:class:`~diffusers_dynamic_offloader.DdoClient` is the public facade: it finds the daemon,
proves this process's identity and opens the lease, then hands what every call needs to an
:class:`RpcChannel`. The modules that make calls (the component store, streaming sessions,
settings resolution, phases, profiles...) take the channel, or get it from a client as
``client.rpc``, and never import the client's module: the dependencies point one way only
(``client`` -> the modules -> ``rpc_channel``).

The channel holds the lease id and the deadline every call gets, makes unary and
server-streaming calls with this process's identity token, and reaches the identity socket for
what travels beside gRPC: descriptors of ddod's segments (:attr:`RpcChannel.segment_opener`)
and files passed to ddod (:meth:`RpcChannel.pass_file`). Thread-safe, as the gRPC channel and
the identity channel it uses.

The channel owns the lease: attached components and streaming sessions hold the channel, so
the lease (which owns their sessions in ddod) lasts while the client or any of them is
referenced, and ends when the client is closed or the last of them is collected.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any, Callable, Optional

import grpc
from google.protobuf.message import Message

from ._proto import ddo_pb2_grpc
from ._transport import check_health
from .errors import DaemonError, DdoError
from .identity import IdentityChannel
from .lease import Lease

if TYPE_CHECKING:
    from .shm import SegmentOpener

__all__ = ["MODEL_SIZED_TIMEOUT_S", "RpcChannel"]

# The deadline of calls whose work in ddod grows with the model: Attach (it may read a
# component back from its files and fill a slab of resident weights, and answers with the whole
# tensor table) and Phase (it reads needed components back into the pool). The connection's
# deadline (5 s by default) is for calls that cost the same whatever the model; on a loaded
# 2-core machine a 6 GiB Attach took more than that. A ddod that goes away ends the call at
# once, so the long deadline only matters for a ddod that is alive and working.
MODEL_SIZED_TIMEOUT_S = 3600.0


class RpcChannel:
    """One client's calls to ddod: its lease, its deadline, its identity (see the module
    documentation). Made and closed by :class:`~diffusers_dynamic_offloader.DdoClient`."""

    def __init__(
        self,
        channel: grpc.Channel,
        lease: Lease,
        identity: IdentityChannel,
        *,
        timeout: float,
        target: str,
        on_close: Optional[Callable[[], None]] = None,
    ) -> None:
        """Takes ownership of an open ``channel``, ``lease`` and ``identity`` (:meth:`close`
        releases them, then calls ``on_close``: the client stops its private ddod there);
        ``target`` names the daemon in messages."""
        self._channel = channel
        self._lease = lease
        self._identity = identity
        self._metadata = identity.metadata
        self._stub = ddo_pb2_grpc.DdoStub(channel)
        self._timeout = timeout
        self._target = target
        # Releases everything at the latest when the channel is collected or the interpreter
        # exits; the lease and channel go first, so that a private ddod stops at once.
        self._finalizer = weakref.finalize(self, _release, lease, channel, identity, on_close)

    @property
    def lease_id(self) -> str:
        """The id of the client's lease: what requests that act for the client carry."""
        return self._lease.lease_id

    @property
    def timeout(self) -> float:
        """The deadline in seconds of every unary call."""
        return self._timeout

    @property
    def closed(self) -> bool:
        """True once the client closed: the lease, and every session it held, ended."""
        return not self._finalizer.alive

    def unary(self, rpc: str, request: Message, *, timeout: Optional[float] = None) -> Any:
        """Calls the unary RPC ``rpc`` of the Ddo service, bounded by ``timeout`` (default: the
        client's).

        Raises:
            DaemonError: the call failed (its status code says why).
            DdoError: the client is closed.
        """
        self.ensure_open()
        try:
            return getattr(self._stub, rpc)(
                request,
                timeout=timeout or self._timeout,
                metadata=self._metadata,
                wait_for_ready=False,
            )
        except grpc.RpcError as error:
            raise DaemonError(rpc, error) from error

    def server_stream(self, rpc: str, request: Message, *, timeout: Optional[float] = None) -> Any:
        """Starts the server-streaming RPC ``rpc`` (no deadline unless ``timeout``); the caller
        iterates it, cancels it, and turns grpc.RpcError into DaemonError.

        Raises:
            DdoError: the client is closed.
        """
        self.ensure_open()
        return getattr(self._stub, rpc)(
            request, timeout=timeout, metadata=self._metadata, wait_for_ready=False
        )

    def health(self, service: str = "") -> str:
        """The standard health status of ``service`` ("" is the daemon), e.g. ``"SERVING"``.

        Raises:
            DaemonError: the check failed.
        """
        self.ensure_open()
        try:
            return check_health(self._channel, service, timeout=self._timeout)
        except grpc.RpcError as error:
            raise DaemonError("Health.Check", error) from error

    @property
    def segment_opener(self) -> "SegmentOpener":
        """How this client opens ddod's segments: by name when ddod runs as this user, else
        through ddod (OPEN on the identity socket)."""
        from .shm import SegmentOpener  # imports torch: only when segments are used

        return SegmentOpener(self._identity.open_segment, self._identity.daemon_uid)

    def open_upload_stream(self, name: str) -> int:
        """The write end of the streamed upload's pipe ``name`` (a stream name of ddod's
        RegisterComponent answer), opened once through the identity socket; the caller owns
        (and closes) it."""
        return self._identity.open_segment(name, True)

    def pass_file(self, name: str, fd: int) -> int:
        """Passes the open file ``fd`` to ddod under the base name ``name`` over the identity
        socket; returns the handle a request names it by."""
        return self._identity.pass_file(name, fd)

    def ensure_open(self) -> None:
        """Raises DdoError once the client is closed."""
        if not self._finalizer.alive:
            raise DdoError(f"the client of {self._target} is closed")

    def close(self) -> None:
        """Ends the lease, closes the gRPC channel and the identity channel, then calls
        ``on_close``. Idempotent."""
        self._finalizer()


def _release(
    lease: Lease,
    channel: grpc.Channel,
    identity: IdentityChannel,
    on_close: Optional[Callable[[], None]],
) -> None:
    lease.close()
    channel.close()
    identity.close()
    if on_close is not None:
        on_close()
