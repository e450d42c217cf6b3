"""Calls to ddod whose work grows with the component: RegisterComponent (ddod reserves the
component's memory), CommitUpload (ddod verifies and pins its bytes) and LoadSafetensors (ddod
reads its files).

A fixed deadline cannot bound such a call: reserving and pinning 40 GiB takes longer than
any deadline that still notices a hung daemon quickly. These calls stream their progress
instead: ddod answers at once and then at least every second, and the client gives up only
when ddod has sent nothing for a *stall timeout* (by default the larger of 60 s and twelve
client timeouts).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional

import grpc
from google.protobuf.message import Message

from .errors import DaemonError, DdoError
from .rpc_channel import RpcChannel


def default_stall_timeout(rpc: RpcChannel) -> float:
    """Seconds without progress after which a progress call gives up, by default."""
    return max(60.0, 12 * rpc.timeout)


def follow_progress(
    rpc: RpcChannel,
    method: str,
    request: Message,
    *,
    on_progress: Optional[Callable[[Any], None]] = None,
    stall_timeout: Optional[float] = None,
) -> Any:
    """Calls the progress-streaming RPC ``method`` and returns its last message (the one with
    ``done`` set); every message before it goes to ``on_progress``.

    Leaving early (an exception in ``on_progress``, KeyboardInterrupt) cancels the call, and
    ddod then stops the work and undoes it.

    Raises:
        DaemonError: ddod refused or failed the call (its status code and message).
        DdoError: ddod sent nothing for ``stall_timeout`` seconds, or ended the stream
            without a result.
    """
    if stall_timeout is None:
        stall_timeout = default_stall_timeout(rpc)
    call = rpc.server_stream(method, request)
    watchdog = StallWatchdog(call.cancel, stall_timeout)
    try:
        for message in call:
            watchdog.reset()
            if message.done:
                return message
            if on_progress is not None:
                on_progress(message)
    except grpc.RpcError as error:
        if watchdog.fired:
            raise DdoError(
                f"ddod sent no {method} progress for {stall_timeout:g} s; gave up"
            ) from error
        raise DaemonError(method, error) from error
    finally:
        watchdog.stop()
        call.cancel()
    raise DdoError(f"ddod ended the {method} stream without a result")


class StallWatchdog:
    """Calls ``action`` once when :meth:`reset` has not been called for ``seconds``; one
    background thread, until :meth:`stop`."""

    def __init__(self, action: Callable[[], object], seconds: float) -> None:
        self._action = action
        self._seconds = seconds
        self._last = time.monotonic()
        self._stopped = threading.Event()
        self.fired = False
        self._thread = threading.Thread(target=self._run, name="ddo-stall-watchdog", daemon=True)
        self._thread.start()

    def reset(self) -> None:
        self._last = time.monotonic()

    def stop(self) -> None:
        self._stopped.set()

    def _run(self) -> None:
        while True:
            left = self._last + self._seconds - time.monotonic()
            if left <= 0:
                self.fired = True
                self._action()
                return
            if self._stopped.wait(left):
                return
