"""DdoClient: the connection to ddod.

:meth:`DdoClient.connect` finds the daemon (``DDO_DAEMON``, the default sockets, or a private
ddod started for this process), checks that it is trusted and proves this process's identity
to it over the identity socket (:mod:`diffusers_dynamic_offloader.identity`: every RPC then
carries the token it got there), then opens the client's lease, which it holds until
:meth:`DdoClient.close`.

The client is a facade: the calls themselves go through its
:class:`~diffusers_dynamic_offloader.rpc_channel.RpcChannel` (``client.rpc``), which the modules
behind the methods take. The component store methods (``register_state_dict``, ``attach``, ...)
are thin wrappers of :mod:`diffusers_dynamic_offloader.store`, which is imported (with torch)
on first use.
"""

from __future__ import annotations

import os
import stat
import sys
from typing import TYPE_CHECKING, Any, List, Mapping, Optional, Sequence, Set, Tuple, Union

import grpc
from google.protobuf.message import Message

from ._proto import ddo_pb2_grpc, info_pb2, settings_pb2, stats_pb2
from ._transport import check_health, open_channel
from ._version import __version__
from .addresses import (
    DaemonAddress,
    Discovery,
    check_socket_location,
    check_tcp_listener,
    per_user_directory,
    resolve_daemon_location,
    tcp_listener_owners,
)
from .embedded import EmbeddedDaemon
from .errors import (
    ConfigurationError,
    DaemonError,
    DaemonUnavailableError,
    EmbeddedDaemonError,
    IdentityError,
    describe_attempts,
)
from .identity import IdentityChannel, identity_socket_path
from .lease import Lease
from .rpc_channel import RpcChannel
from ._closeable import Closeable

if TYPE_CHECKING:
    import torch
    from torch import nn

    from ._proto import sessions_pb2
    from .attached import AttachedComponent
    from .component_info import Component
    from .progress import LogFunction
    from .resolved_settings import ResolvedSettings
    from .store import PathArgument, UnitsArgument
    from .streaming import StreamingSession

#: How this client introduces itself in ConnectRequest.client_name.
CLIENT_NAME = (
    f"diffusers_dynamic_offloader {__version__} "
    f"(python {sys.version_info.major}.{sys.version_info.minor})"
)

# The longest wait for one candidate address during discovery.
_PROBE_TIMEOUT_S = 2.0


class DdoClient(Closeable):
    """A connection to ddod and the lease this client holds on it.

    Every RPC is bounded by the ``timeout`` given to :meth:`connect`, and a failed RPC raises
    :class:`DaemonError`. The client is a context manager; leaving the ``with`` block closes it.
    """

    def __init__(
        self,
        channel: grpc.Channel,
        address: DaemonAddress,
        lease: Lease,
        *,
        timeout: float,
        identity: IdentityChannel,
        embedded_daemon: Optional[EmbeddedDaemon] = None,
    ) -> None:
        """Takes ownership of an open ``channel``, ``identity`` and ``lease``; use
        :meth:`connect`."""
        self._address = address
        self._lease = lease
        self._identity = identity
        self._embedded_daemon = embedded_daemon
        # The channel owns the lease, the connections and the private ddod: they are released
        # at close(), or when neither this client nor a session made through it is referenced.
        self._rpc = RpcChannel(
            channel, lease, identity, timeout=timeout, target=address.target,
            on_close=embedded_daemon.stop if embedded_daemon is not None else None,
        )
        # Cache keys this client stored or found warm (register_*, load_safetensors): what
        # clear_dynamic_offload_pinned_tensor_cache may evict.
        self.stored_keys: Set[str] = set()

    @classmethod
    def connect(
        cls,
        address: Optional[str] = None,
        *,
        timeout: float = 5.0,
        allow_embedded: Optional[bool] = None,
    ) -> "DdoClient":
        """Connects to ddod and opens a lease.

        Args:
            address: Where ddod is, in any form ``DDO_DAEMON`` accepts (see
                :mod:`diffusers_dynamic_offloader.addresses`); default: ``DDO_DAEMON``.
            timeout: The deadline in seconds of every RPC, and of waiting for the lease.
            allow_embedded: Whether a private ddod may be started when no daemon answers.
                None (the default): yes, unless the address is a fixed one. False: never.
                True: also when a fixed address does not answer.

        Raises:
            ConfigurationError: the address, or a setting, is invalid.
            DaemonUnavailableError: no daemon answered and none could be started here.
            UntrustedDaemonError: the daemon's socket, its directory or its process belongs to
                a user this client does not trust (itself, root and the service user are).
            IdentityError: the daemon's identity socket failed or refused this client.
            EmbeddedDaemonError: starting the private ddod failed.
            DaemonError: the daemon refused the lease.
        """
        if not timeout > 0:
            raise ConfigurationError(f"timeout={timeout!r} must be a positive number of seconds")
        location = resolve_daemon_location(address)
        if location.discovery is Discovery.EMBEDDED and allow_embedded is False:
            raise ConfigurationError(
                "the daemon address is 'embedded' (a private ddod), but allow_embedded=False"
            )
        if allow_embedded is None:
            may_embed = location.discovery is not Discovery.FIXED
        else:
            may_embed = allow_embedded

        # The sequence of docs/security.md, "Finding the daemon" (ConnectToDaemon in C++,
        # proto/wire/include/ddo/wire/connect_to_daemon.h): steps 1 and 2 pass an address over
        # or refuse it (_probe); after them a failure is raised (_open: steps 3 and 4).
        attempts: List[Tuple[str, str]] = []
        for candidate in location.candidates:
            channel, reason = _probe(candidate, min(timeout, _PROBE_TIMEOUT_S))
            if channel is not None:
                return cls._open(channel, candidate, timeout=timeout)
            attempts.append((candidate.target, reason))
        if not may_embed:
            raise DaemonUnavailableError(attempts)

        try:
            daemon = EmbeddedDaemon.start()
        except EmbeddedDaemonError as error:
            if not attempts:
                raise
            raise EmbeddedDaemonError(
                f"no ddod answered at {describe_attempts(attempts)}, "
                f"and starting a private one failed: {error}"
            ) from error
        # The private ddod goes through the same sequence as any other.
        try:
            channel, reason = _probe(daemon.address, min(timeout, _PROBE_TIMEOUT_S))
        except BaseException:
            daemon.stop()
            raise
        if channel is None:
            daemon.stop()
            raise EmbeddedDaemonError(
                f"no ddod answered at {describe_attempts([(daemon.address.target, reason)])}"
            )
        return cls._open(channel, daemon.address, timeout=timeout, embedded_daemon=daemon)

    @classmethod
    def _open(
        cls,
        channel: grpc.Channel,
        address: DaemonAddress,
        *,
        timeout: float,
        embedded_daemon: Optional[EmbeddedDaemon] = None,
    ) -> "DdoClient":
        identity: Optional[IdentityChannel] = None
        try:
            stub = ddo_pb2_grpc.DdoStub(channel)
            # Steps 3 (the identity socket, checked like the daemon's) and 4 (the handshake).
            identity = IdentityChannel.connect(
                _identity_socket(stub, address, timeout), timeout=timeout
            )
            lease = Lease.open(
                stub, client_name=CLIENT_NAME, timeout=timeout, metadata=identity.metadata
            )
        except BaseException:
            channel.close()
            if identity is not None:
                identity.close()
            if embedded_daemon is not None:
                embedded_daemon.stop()
            raise
        return cls(
            channel,
            address,
            lease,
            timeout=timeout,
            identity=identity,
            embedded_daemon=embedded_daemon,
        )

    # Connection state.

    @property
    def address(self) -> str:
        """The daemon's address as a gRPC target, e.g. ``"unix:/run/user/1000/ddo/ddod.sock"``."""
        return self._address.target

    @property
    def lease_id(self) -> str:
        """The id of this client's lease."""
        return self._lease.lease_id

    @property
    def timeout(self) -> float:
        """The deadline in seconds of every RPC."""
        return self._rpc.timeout

    @property
    def rpc(self) -> RpcChannel:
        """The channel this client's calls go through: what the modules behind its methods
        (and code that makes calls the client has no method for) use; see
        :mod:`diffusers_dynamic_offloader.rpc_channel`."""
        return self._rpc

    @property
    def daemon_info(self) -> Optional[info_pb2.DaemonInfo]:
        """What ddod reported about itself when it granted the lease (see :meth:`info`)."""
        return self._lease.daemon_info

    @property
    def daemon_uid(self) -> int:
        """The uid ddod runs as, as the kernel reported it on the identity socket."""
        return self._identity.daemon_uid

    @property
    def embedded(self) -> bool:
        """True when this client started its daemon privately."""
        return self._embedded_daemon is not None

    @property
    def embedded_pid(self) -> Optional[int]:
        """The private daemon's pid, or None when the daemon is shared."""
        return self._embedded_daemon.pid if self._embedded_daemon is not None else None

    @property
    def daemon_shutting_down(self) -> bool:
        """True once ddod announced on the lease stream that it is shutting down."""
        return self._lease.shutting_down

    @property
    def lease_lost_reason(self) -> Optional[str]:
        """Why the lease ended without :meth:`close`; None while it is held."""
        return self._lease.lost_reason

    # RPCs.

    def info(self) -> info_pb2.DaemonInfo:
        """What ddod reports now: version, platform, backend, devices, budgets, addresses."""
        return self._rpc.unary("GetInfo", info_pb2.GetInfoRequest())

    def stats(self) -> stats_pb2.Stats:
        """ddod's counters: uptime, leases, sessions, pool accounting, RPC counts."""
        return self._rpc.unary("GetStats", stats_pb2.GetStatsRequest())

    def presets(self) -> settings_pb2.ListPresetsResponse:
        """The presets ddod knows, their aliases, and the preset ddod runs with."""
        return self._rpc.unary("ListPresets", settings_pb2.ListPresetsRequest())

    def resolve_settings(self, preset: str = "", **kwargs: Any) -> "ResolvedSettings":
        """The DDO_* settings ddod resolves for one call; see
        :func:`diffusers_dynamic_offloader.resolved_settings.resolve_settings`."""
        from .resolved_settings import resolve_settings

        return resolve_settings(self._rpc, preset, **kwargs)

    def explain_plan(
        self,
        module: "nn.Module",
        *,
        component: str = "",
        device: str = "",
        settings: Optional[Mapping[str, str]] = None,
    ) -> "sessions_pb2.PlanExplanation":
        """ddod's whole decision for ``module`` (route, resident budget, units, ring, every
        decision with its reason) without uploading anything. ``settings`` are explicit
        overrides by DDO_* name (DDO_PRESET among them picks the preset; default auto)."""
        from .layout import explain_request

        request = explain_request(module, component=component, device=device, settings=settings)
        return self._rpc.unary("ExplainPlan", request)

    def health(self, service: str = "") -> str:
        """The standard health status of ``service`` ("" is the daemon), e.g. ``"SERVING"``."""
        return self._rpc.health(service)

    # Component store (see diffusers_dynamic_offloader.store for the details).

    def register_state_dict(
        self,
        cache_key: str,
        state_dict: Mapping[str, "torch.Tensor"],
        *,
        units: "UnitsArgument" = "tensor",
        content_hash: Union[bool, str] = False,
        progress: Optional[bool] = None,
        wait: Optional[float] = None,
        log: Optional["LogFunction"] = None,
        stall_timeout: Optional[float] = None,
    ) -> "Component":
        """Uploads a state dict into ddod's pool under ``cache_key`` (a warm hit when it is
        already there); see :func:`diffusers_dynamic_offloader.store.register_state_dict`."""
        from . import store

        stored = store.register_state_dict(
            self._rpc,
            cache_key,
            state_dict,
            units=units,
            content_hash=content_hash,
            progress=progress,
            wait=wait,
            log=log,
            stall_timeout=stall_timeout,
        )
        self.stored_keys.add(cache_key)
        return stored

    def register_module(
        self,
        cache_key: str,
        module: "nn.Module",
        *,
        units: "UnitsArgument" = "tensor",
        content_hash: Union[bool, str] = False,
        progress: Optional[bool] = None,
        wait: Optional[float] = None,
        log: Optional["LogFunction"] = None,
        stall_timeout: Optional[float] = None,
    ) -> "Component":
        """Uploads a module's parameters and persistent buffers under ``cache_key``; see
        :func:`diffusers_dynamic_offloader.store.register_module`."""
        from . import store

        stored = store.register_module(
            self._rpc,
            cache_key,
            module,
            units=units,
            content_hash=content_hash,
            progress=progress,
            wait=wait,
            log=log,
            stall_timeout=stall_timeout,
        )
        self.stored_keys.add(cache_key)
        return stored

    def load_safetensors(
        self,
        cache_key: str,
        paths: Union["PathArgument", Sequence["PathArgument"]],
        *,
        index_file: Optional["PathArgument"] = None,
        units: Optional[Mapping[str, int]] = None,
        content_hash: str = "",
        progress: Optional[bool] = None,
        log: Optional["LogFunction"] = None,
        stall_timeout: Optional[float] = None,
        keep_alive: Optional[Union[float, str]] = None,
        file_tier: str = "auto",
    ) -> "Component":
        """Has ddod read safetensors files (or a model folder) into its pool; see
        :func:`diffusers_dynamic_offloader.store.load_safetensors`."""
        from . import store

        stored = store.load_safetensors(
            self._rpc,
            cache_key,
            paths,
            index_file=index_file,
            units=units,
            content_hash=content_hash,
            progress=progress,
            log=log,
            stall_timeout=stall_timeout,
            keep_alive=keep_alive,
            file_tier=file_tier,
        )
        self.stored_keys.add(cache_key)
        return stored

    def attach(self, cache_key: str) -> "AttachedComponent":
        """Maps a READY component copy-on-write into this process (zero-copy tensors, inference
        only); see :func:`diffusers_dynamic_offloader.store.attach`."""
        from . import store

        return store.attach(self._rpc, cache_key)

    def stream(
        self,
        module: "nn.Module",
        cache_key: str,
        *,
        device: Union[str, int, "torch.device"] = "cuda:0",
        settings: Optional[Mapping[str, object]] = None,
        keep_resident: Sequence[str] = (),
    ) -> "StreamingSession":
        """Opens a streaming session: ``module`` runs on ``device`` ("cpu": the host backend)
        with its large Linear weights streamed by ddod from the component ``cache_key``; see
        :func:`diffusers_dynamic_offloader.streaming.stream`."""
        from . import streaming

        return streaming.stream(self._rpc, module, cache_key, device=device, settings=settings,
                                keep_resident=keep_resident)

    def component(self, cache_key: str, *, with_layout: bool = False) -> "Component":
        """The READY component under ``cache_key``; DaemonError NOT_FOUND otherwise."""
        from . import store

        return store.get_component(self._rpc, cache_key, with_layout=with_layout)

    def components(self) -> "List[Component]":
        """Every component in ddod's store, uploads in progress included."""
        from . import store

        return store.components(self._rpc)

    def evict(self, cache_key: str) -> int:
        """Evicts an unused component; returns the bytes freed."""
        from . import store

        return store.evict(self._rpc, cache_key)

    # Lifetime.

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._rpc.closed

    def close(self) -> None:
        """Ends the lease, closes the channel and stops the private daemon, if any. Idempotent."""
        self._rpc.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"lease_id={self.lease_id!r}"
        return f"DdoClient(address={self.address!r}, {state}, embedded={self.embedded})"

    def _unary(self, rpc: str, request: Message, *, timeout: Optional[float] = None) -> Any:
        """Deprecated: ``client.rpc.unary``. Kept for the GPU tests and benchmarks that list
        sessions through it."""
        return self._rpc.unary(rpc, request, timeout=timeout)


def _probe(address: DaemonAddress, timeout: float) -> Tuple[Optional[grpc.Channel], str]:
    """Steps 1 and 2 of the sequence: ``(channel, "")`` when a daemon at ``address`` reports
    SERVING, else ``(None, why)``. Where the socket lies, or who holds the port, is checked
    before a byte is sent to it, the health check included."""
    # Step 1, location.
    if address.socket_path is not None:
        # A squatted /tmp/ddo-<uid> is refused even when it holds no socket (yet).
        if os.path.dirname(address.socket_path) == per_user_directory():
            check_socket_location(address.socket_path)
        problem = _socket_file_problem(address.socket_path)
        if problem is not None:
            return None, problem
        # A socket another user could have put there is refused outright, not skipped: the
        # user should learn that someone may be impersonating their ddod.
        check_socket_location(address.socket_path)
    else:
        port = int(address.target.rpartition(":")[2])
        if not tcp_listener_owners(port):
            return None, f"nothing listens on port {port}"
        # Over TCP the identity socket proves only who serves *it*: the port must be held by
        # a trusted user too, or an impostor on the port would receive the token.
        check_tcp_listener(address)
    # Step 2, health.
    channel = open_channel(address)
    try:
        status = check_health(channel, timeout=timeout)
    except grpc.RpcError as error:
        channel.close()
        failure = DaemonError("Health.Check", error)
        return None, f"{failure.code.name}: {failure.details}"
    if status != "SERVING":
        channel.close()
        return None, f"health {status}"
    return channel, ""


def _identity_socket(stub: ddo_pb2_grpc.DdoStub, address: DaemonAddress, timeout: float) -> str:
    """Step 3, identity socket: where the daemon at ``address`` has it: beside a Unix socket;
    for a TCP address, where GetInfo (which needs no token) says. IdentityChannel.connect checks
    its location before it connects."""
    if address.socket_path is not None:
        return identity_socket_path(address.socket_path)
    check_tcp_listener(address)  # again, right before the identity socket it names is used
    try:
        info = stub.GetInfo(info_pb2.GetInfoRequest(), timeout=timeout, wait_for_ready=False)
    except grpc.RpcError as error:
        raise DaemonError("GetInfo", error) from error
    if not info.identity_socket:
        raise IdentityError(
            f"ddod at {address.target} names no identity socket in GetInfo: it is older than "
            "this client (update ddod)"
        )
    return info.identity_socket


def _socket_file_problem(path: str) -> Optional[str]:
    """Why nothing can listen at ``path``; None when a socket file is there."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return "no socket file"
    except OSError as error:
        return f"cannot stat the socket: {error.strerror}"
    return None if stat.S_ISSOCK(mode) else "not a socket"
