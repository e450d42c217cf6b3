"""gRPC plumbing shared by the client and the embedded daemon: channels and health checks.

The health stubs come from ``grpc_health`` (grpcio-health-checking) when it is installed, and
from this package's own generated copy otherwise. Exactly one of the two is ever imported:
both register ``grpc/health/v1/health.proto`` in protobuf's default descriptor pool, and a
second, different registration of that file fails.
"""

from __future__ import annotations

from typing import Tuple

import grpc

try:
    from grpc_health.v1 import health_pb2, health_pb2_grpc
except ImportError:
    from ._proto import health_pb2, health_pb2_grpc

from .addresses import DaemonAddress

__all__ = ["health_pb2", "health_pb2_grpc", "open_channel", "check_health"]

#: ddod's message size limit, in both directions.
MAX_MESSAGE_BYTES = 64 << 20

_CHANNEL_OPTIONS: Tuple[Tuple[str, int], ...] = (
    # ddod listens on a Unix socket or on loopback: never route through an HTTP proxy.
    ("grpc.enable_http_proxy", 0),
    # Tensor tables of large models (Attach, GetComponent with layout) exceed gRPC's 4 MiB
    # default; ddod's own limit is 64 MiB both ways.
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
)


def open_channel(address: DaemonAddress) -> grpc.Channel:
    """An insecure channel to ``address`` (ddod listens on a Unix socket or loopback only).

    A channel whose first connection attempt failed retries only after gRPC's reconnect
    backoff (seconds), so code that waits for a daemon to appear opens a fresh channel for
    each attempt.
    """
    return grpc.insecure_channel(address.target, options=_CHANNEL_OPTIONS)


def check_health(channel: grpc.Channel, service: str = "", *, timeout: float) -> str:
    """The serving status of ``service`` ("" is the whole daemon), e.g. ``"SERVING"``.

    Fails fast (no wait for the channel to become ready) when nothing listens.

    Raises:
        grpc.RpcError: the check failed (UNAVAILABLE when nothing listens, NOT_FOUND for an
            unknown service, DEADLINE_EXCEEDED after ``timeout`` seconds).
    """
    stub = health_pb2_grpc.HealthStub(channel)
    response = stub.Check(
        health_pb2.HealthCheckRequest(service=service), timeout=timeout, wait_for_ready=False
    )
    return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
