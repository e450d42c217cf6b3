"""Ending a session in ddod: the one Detach every session kind (attached components, streaming
sessions, a failed attach rolled back, a session collected without close) goes through.

A session is owned by the client's lease, so ddod ends it by itself when the lease ends or ddod
stops; what can go wrong with a Detach is mostly that the session is gone already, which is
what the caller wanted. The failures that say so are ignored everywhere (:data:`GONE`); any
other failure is raised, unless the caller has nobody to report it to (``best_effort``).
"""

from __future__ import annotations

from typing import Optional

import grpc

from ._proto import sessions_pb2
from .errors import DaemonError
from .rpc_channel import RpcChannel

__all__ = ["GONE", "detach_session"]

#: Detach failures that mean the session is gone already: NOT_FOUND (the lease ended, taking
#: the session with it, or ddod restarted), UNAVAILABLE (ddod is stopping or gone, and its
#: sessions with it), CANCELLED (the channel closed under the call at shutdown).
GONE = (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


def detach_session(
    rpc: RpcChannel,
    session_id: str,
    *,
    best_effort: bool = False,
    timeout: Optional[float] = None,
) -> None:
    """Ends the session ``session_id``; nothing to do once the client is closed (its lease
    ended, and every session with it), also when it closes during the call.

    Args:
        rpc: The channel of the client that holds the session.
        session_id: ddod's id of the session.
        best_effort: Ignore every failure, not only :data:`GONE`: for callers with nobody to
            report to (a finalizer) or with a more telling error in flight (a failed attach
            being rolled back).
        timeout: The call's deadline (default: the client's).

    Raises:
        DaemonError: ddod refused for another reason than :data:`GONE` (not when
            ``best_effort``).
    """
    if rpc.closed:
        return
    try:
        rpc.unary("Detach", sessions_pb2.DetachRequest(session_id=session_id), timeout=timeout)
    except Exception as error:  # noqa: BLE001 - re-raised below unless harmless
        gone = isinstance(error, DaemonError) and error.code in GONE
        # rpc.closed: the client closed meanwhile, and its lease took the session.
        if not (gone or best_effort or rpc.closed):
            raise
