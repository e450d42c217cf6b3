"""The process's own connection to ddod, for the seed-style functions that take no client.

It is opened on first use (``DDO_DAEMON``, else the user's daemon, else an embedded private
ddod, as :meth:`DdoClient.connect` does) and kept for the life of the process, like the seed's
process-wide caches. Thread-safe.
"""

from __future__ import annotations

import threading
from typing import Optional

from .client import DdoClient

_lock = threading.Lock()
_client: Optional[DdoClient] = None


def default_client() -> DdoClient:
    """The shared client; reconnects when the previous one was closed or lost its lease."""
    global _client
    with _lock:
        if _client is None or _client.closed or _client.lease_lost_reason is not None:
            _client = DdoClient.connect()
        return _client


def client_or_default(client: Optional[DdoClient]) -> DdoClient:
    """``client``, or the shared one when it is None (the seed's functions take no client)."""
    return client if client is not None else default_client()


def close_default_client() -> None:
    """Closes the shared client (tests; a process that wants its lease gone early)."""
    global _client
    with _lock:
        if _client is not None:
            _client.close()
            _client = None
