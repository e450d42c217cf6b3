"""The client's lease: one ``Connect`` stream held open for the client's whole life.

ddod answers ``Connect`` with a ``connected`` event carrying the lease id, then keeps the stream
open. When the stream ends (the client closes it, exits or dies), ddod releases everything the
lease owns. Before ddod itself stops, it sends a ``shutting_down`` event. A background thread
consumes the events so that the lease's state is always current.
"""

from __future__ import annotations

import os
import threading
from typing import Optional, Sequence, Tuple

import grpc

from ._proto import ddo_pb2_grpc, info_pb2, sessions_pb2
from .errors import DaemonError, DdoError

# How long close() waits for the event thread to notice the cancelled stream.
_JOIN_TIMEOUT_S = 2.0


class Lease:
    """A held ``Connect`` stream.

    Thread safety: the properties may be read from any thread; ``close()`` may be called from
    any thread, more than once. ``_lock`` guards the fields the event thread writes.
    """

    def __init__(
        self,
        stub: ddo_pb2_grpc.DdoStub,
        request: sessions_pb2.ConnectRequest,
        metadata: Sequence[Tuple[str, str]] = (),
    ) -> None:
        """Starts the stream and its event thread; :meth:`open` also waits for the lease id."""
        self._lock = threading.Lock()
        self._connected = threading.Event()
        self._closing = False
        self._lease_id = ""
        self._daemon_info: Optional[info_pb2.DaemonInfo] = None
        self._shutting_down = False
        self._lost_reason: Optional[str] = None
        self._error: Optional[grpc.RpcError] = None
        # The metadata carries the identity token (ddo-token) that ddod requires.
        self._call = stub.Connect(request, metadata=tuple(metadata), wait_for_ready=False)
        self._thread = threading.Thread(target=self._consume, name="ddo-lease", daemon=True)
        self._thread.start()

    @classmethod
    def open(
        cls,
        stub: ddo_pb2_grpc.DdoStub,
        *,
        client_name: str,
        timeout: float,
        metadata: Sequence[Tuple[str, str]] = (),
    ) -> "Lease":
        """Opens a lease and waits up to ``timeout`` seconds for ddod to confirm it.

        ``metadata`` goes with the Connect call: the identity token (``ddo-token``).

        Raises:
            DaemonError: ddod refused or broke the stream before confirming.
            DdoError: no confirmation within ``timeout``.
        """
        request = sessions_pb2.ConnectRequest(client_pid=os.getpid(), client_name=client_name)
        lease = cls(stub, request, metadata)
        confirmed = lease._connected.wait(timeout)
        with lease._lock:
            lease_id, error, lost_reason = lease._lease_id, lease._error, lease._lost_reason
        if lease_id:
            return lease
        lease.close()
        if error is not None:
            raise DaemonError("Connect", error)
        if confirmed:
            raise DdoError(f"ddod did not grant a lease: {lost_reason}")
        raise DdoError(f"ddod did not confirm the lease within {timeout:g} s")

    @property
    def lease_id(self) -> str:
        """The id ddod gave this lease; pass it in requests that create what the lease owns."""
        with self._lock:
            return self._lease_id

    @property
    def daemon_info(self) -> Optional[info_pb2.DaemonInfo]:
        """The DaemonInfo that came with the ``connected`` event."""
        with self._lock:
            return self._daemon_info

    @property
    def shutting_down(self) -> bool:
        """True once ddod announced that it is shutting down."""
        with self._lock:
            return self._shutting_down

    @property
    def lost_reason(self) -> Optional[str]:
        """Why the lease ended without the client closing it; None while it is held."""
        with self._lock:
            return self._lost_reason

    def close(self) -> None:
        """Ends the stream; ddod then releases everything the lease owns."""
        with self._lock:
            self._closing = True
        self._call.cancel()
        if self._thread is not threading.current_thread():
            self._thread.join(_JOIN_TIMEOUT_S)

    def _consume(self) -> None:
        try:
            for event in self._call:
                kind = event.WhichOneof("event")
                if kind == "connected":
                    with self._lock:
                        self._lease_id = event.connected.lease_id
                        self._daemon_info = event.connected.daemon
                    self._connected.set()
                elif kind == "shutting_down":
                    with self._lock:
                        self._shutting_down = True
                        self._lost_reason = event.shutting_down.reason or "ddod is shutting down"
                # Event kinds added by newer daemons are ignored.
            self._record_loss("ddod ended the lease stream")
        except grpc.RpcError as error:
            with self._lock:
                self._error = error
            failure = DaemonError("Connect", error)
            self._record_loss(f"the lease stream failed ({failure.code.name}: {failure.details})")
        finally:
            self._connected.set()

    def _record_loss(self, reason: str) -> None:
        with self._lock:
            if not self._closing and self._lost_reason is None:
                self._lost_reason = reason
