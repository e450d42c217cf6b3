"""Streaming sessions: a module runs on a device whose memory ddod owns, and its large Linear
weights stream through a ring of slots, one unit at a time, in the order the forward uses them.

``client.stream(module, cache_key, device=...)`` (see :func:`stream`) opens a session on a
component that is already in ddod's pool (``register_module`` or ``load_safetensors``):

1. It finds the *streamable* weights: the plain 2-D floating ``(out_features, in_features)``
   ``weight`` (float8 included) of every ``torch.nn.Linear`` and Linear subclass with nothing
   quantized or packed (PEFT LoRA base layers included), and sends them with ``Attach``;
   ddod's planner decides what streams and what stays resident (``StreamingSession.plan``
   says why).
2. It maps what ddod returns: the component's host pool (copy-on-write), the resident slab and the
   ring (shared-memory segments on the host backend, CUDA IPC memory on a GPU), the ring's
   CUDA events, and the control block and the device's doorbell (read-write).
3. It binds the module: every resident tensor becomes a view of the slab; each streamed
   weight becomes the host pool view (copy-on-write), so ``linear.weight`` keeps its shape and
   dtype and costs no memory; on a GPU, non-persistent buffers are moved to the device. Every
   bound tensor is guarded (:mod:`.shared_weights`): a write gives it private memory, and the
   session stores the edited weights in ddod as a derived version of the component before the
   next forward (:mod:`.edit_sync`); edits ddod cannot serve raise WeightEditError. Adapters
   (PEFT's LoRA layers wrap a Linear: the base weights stream, the adapters are the runner's
   own, see :mod:`.module_tensors`) are kept on the execution device (:mod:`.weight_watch`).
4. It patches the ``forward`` of every streamed Linear (an instance attribute) to take its
   weight from the ring (:mod:`diffusers_dynamic_offloader.ring_consumer`), casting weight and
   bias to the input's dtype when they differ; a Linear subclass, or a Linear carrying
   Diffusers' layerwise-casting hook, runs its own forward (or the hook) on the ring's view in
   the stored dtype, and resident modules with that hook run it on plain aliases of their
   views (:mod:`.casting_hooks`). It hooks the root module's forward to mark the
   cycle's boundaries. The first forward teaches ddod the order of the units (unless ddod knew
   it from an earlier session), every later one streams it.

``close()`` (or leaving the ``with`` block) waits for the device, unpatches the forwards and
gives the module back with ordinary writable tensors on the CPU (copy-on-write views of ddod's
copy, or the runner's edits), then releases the mappings and detaches.

The session's parts: this module keeps the life cycle (Attach, mapping what ddod returned,
the consumer, the schedule, moving to a derived version, closing); binding and hooking the
module are :mod:`.session_binding`'s, storing weight edits :mod:`.session_edits`'s, and the
statistics :mod:`.session_stats`'s (mixins of :class:`StreamingSession`, none of which imports
this module).

Streamed weights cannot be trained through (a backward pass raises). One forward at a time: a
session is not thread-safe, and two threads running the module at once would interleave their
uses of the ring.
"""

from __future__ import annotations

import time
import weakref

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from ._closeable import Closeable
from ._proto import components_pb2, sessions_pb2
from . import cpp_consumer
from .device_memory import DeviceMemory
from .compile_support import refuse_capture
from .control_block import DEFAULT_STALL_TIMEOUT_S, ControlBlock, Doorbell
from .detach import detach_session
from .errors import ConfigurationError, DdoError, describe_names
from .edit_versions import EditVersions
from .learned_rows import RowCounter
from .fused_on_arrival import FUSED_MODES, write_back_fused
from .module_tensors import ModuleTensor
from .pool_views import map_component
from .ring_consumer import RingConsumer, RingEvents, RingViews
from .rpc_channel import MODEL_SIZED_TIMEOUT_S, RpcChannel
from .session_binding import SessionBinding, _dtype, streamable_weights
from .session_edits import SessionEdits
from .session_stats import SessionStats
from .shm import SegmentMapping
from .weight_watch import WeightWatch, structure_version

__all__ = ["StreamingSession", "stream", "streamable_weights"]

DeviceArgument = Union[str, int, torch.device]

#: The device_uuid of the host backend.
HOST_DEVICE = "cpu"


def stream(
    rpc: RpcChannel,
    module: nn.Module,
    cache_key: str,
    *,
    device: DeviceArgument = "cuda:0",
    settings: Optional[Mapping[str, object]] = None,
    keep_resident: Sequence[str] = (),
    stall_timeout: float = DEFAULT_STALL_TIMEOUT_S,
) -> "StreamingSession":
    """Opens a streaming session of ``module`` on the component ``cache_key``.

    Args:
        rpc: The channel of a connected client (``client.rpc``).
        module: A module of the component's architecture (its ``state_dict()`` names, shapes
            and dtypes); it is rebound in place.
        cache_key: The READY component in ddod's pool.
        device: ``"cpu"`` for the host backend (shared memory, memcpy; ``"cpu:1"`` ... name
            further host devices of a ddod started with ``--host-devices``), or a CUDA device
            (``"cuda:1"``, ``1``, ``torch.device``); a GPU is named to ddod by its UUID, or as
            ``cuda:N`` when this torch cannot tell the UUID (then ddod's numbering must match
            torch's).
        settings: Per-session ``DDO_*`` settings (docs/streaming.md), e.g.
            ``{"DDO_STREAM_UNIT": "block", "DDO_RING_SLOTS": "3"}``; values are sent as text.
        keep_resident: Regexes (``re.search``) of module paths whose weights never stream
            (the seed's ``skip_modules_pattern``): they stay in the resident slab.
        stall_timeout: Seconds a wait for ddod tolerates without any progress before it
            raises StreamingError (ddod's death or the session's end raise within ~2 s).

    Returns:
        The open session; close it (or use it as a context manager) to restore the module.

    Raises:
        ConfigurationError: ``device`` or ``settings`` is invalid.
        BindError: the module does not fit the component (names, shapes or dtypes differ).
        DaemonError: ddod refused: NOT_FOUND (no READY component), INVALID_ARGUMENT (a bad
            setting), RESOURCE_EXHAUSTED (the device budget), UNIMPLEMENTED (no such device).
        DdoError: what ddod returned cannot be mapped or is inconsistent.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"stream() takes an nn.Module, not {type(module).__name__}")
    if not isinstance(cache_key, str) or not cache_key:
        raise ConfigurationError(f"cache_key={cache_key!r} must be a non-empty string")
    torch_device, device_uuid = _resolve_device(device)
    _check_transient_buffers(module)
    request = sessions_pb2.AttachRequest(
        lease_id=rpc.lease_id,
        cache_key=cache_key,
        device_uuid=device_uuid,
        settings=_settings_text(settings),
        streamable=streamable_weights(module, keep_resident),
    )
    began = time.perf_counter()
    response = rpc.unary("Attach", request, timeout=MODEL_SIZED_TIMEOUT_S)
    session = StreamingSession(rpc, module, response, torch_device, stall_timeout, request)
    session.open_seconds["attach"] = time.perf_counter() - began
    try:
        session._open()
        session._watch_root()
    except BaseException:
        session.close()
        raise
    session.open_seconds["total"] = time.perf_counter() - began
    return session


class _PhaseClock:
    """Records the seconds since its last lap under each lap's name."""

    def __init__(self, laps: Dict[str, float]) -> None:
        self._laps = laps
        self._last = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self._laps[name] = now - self._last
        self._last = now


def _check_transient_buffers(module: nn.Module) -> None:
    """Non-persistent buffers are not in a component: a module built on the meta device
    must have computed them before it streams."""
    empty = [
        f"{path}.{attribute}" if path else attribute
        for path, owner in module.named_modules()
        for attribute, buffer in owner._buffers.items()
        if buffer is not None and buffer.is_meta
        and attribute in getattr(owner, "_non_persistent_buffers_set", set())
    ]
    if empty:
        raise ConfigurationError(
            f"non-persistent buffers on the meta device have no data and are not in the "
            f"component: {describe_names(empty)}; compute them (or build the module on the "
            f"CPU) before streaming"
        )


def _resolve_device(device: DeviceArgument) -> Tuple[torch.device, str]:
    """The torch device and the device_uuid to send for it."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ConfigurationError(f"device={device!r} is not a torch device: {error}") from None
    if resolved.type == "cpu":
        # "cpu:1" ...: another host-backend device of a ddod started with --host-devices.
        if resolved.index:
            return torch.device("cpu"), f"{HOST_DEVICE}:{resolved.index}"
        return torch.device("cpu"), HOST_DEVICE
    if resolved.type != "cuda":
        raise ConfigurationError(
            f"device={device!r}: streaming sessions run on 'cpu' (the host backend) or a "
            f"CUDA device"
        )
    if not torch.cuda.is_available():
        raise ConfigurationError(f"device={device!r}, but this torch sees no CUDA device")
    index = resolved.index if resolved.index is not None else torch.cuda.current_device()
    resolved = torch.device("cuda", index)
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    if uuid is None:
        return resolved, f"cuda:{index}"
    # torch 2.x prints "03b97b76-f68a-..." where ddod (like nvidia-smi) says "GPU-03b97b76-...".
    text = str(uuid)
    return resolved, text if text.startswith(("GPU-", "MIG-")) else f"GPU-{text}"


def _settings_text(settings: Optional[Mapping[str, object]]) -> Dict[str, str]:
    if settings is None:
        return {}
    if not isinstance(settings, Mapping):
        raise ConfigurationError(f"settings={settings!r} must be a mapping of DDO_* names")
    text = {}
    for name, value in settings.items():
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"setting name {name!r} must be a non-empty string")
        text[name] = value if isinstance(value, str) else str(value)
    return text


class StreamingSession(Closeable, SessionBinding, SessionEdits, SessionStats):
    """A module running on a streaming session (see the module documentation).

    Create it with ``client.stream(module, cache_key, device=...)``; it is a context manager.
    One forward at a time: not thread-safe.

    Attributes:
        session_id: ddod's id of the session (a new one after edits moved the session to a
            derived version of the component).
        device: The torch device the module runs on.
        module: The module the session rebound and patched.
        last_sync: What the last :meth:`sync_edits` stored (``changed_tensors``,
            ``uploaded_bytes``, ``warm_hit``, ``seconds``, ``cache_key``), or None.
    """

    def __init__(
        self,
        rpc: RpcChannel,
        module: nn.Module,
        response: sessions_pb2.AttachResponse,
        device: torch.device,
        stall_timeout: float,
        request: Optional[sessions_pb2.AttachRequest] = None,
    ) -> None:
        """Takes over an attached session; :func:`stream` calls :meth:`_open` next."""
        self.session_id: str = response.session_id
        self.last_sync: Optional[Dict[str, object]] = None
        #: Where opening the session went, in seconds: "attach" (ddod's answer), "map"
        #: (the component's pool segments), "device_memory" (the slab and the ring: CUDA IPC
        #: handles on a GPU), "bind" (the module's tensors rebound), "consumer" (the control
        #: block, the ring's events, the consumer) and "total" (from the Attach call on).
        self.open_seconds: Dict[str, float] = {}
        #: The seed's DynamicOffloadState and DynamicOffloadConfig, when enable_offload
        #: opened the session (the seed's hook had both).
        self.state: Any = None
        self.config: Any = None
        #: ``verbose``: log one line per finished forward pass (runner_log.log_pass), under
        #: ``log_name`` (enable_offload sets both: the component and DDO_VERBOSE).
        self.verbose = False
        self.log_name = response.component.ref.cache_key
        self.device = device
        self.module = module
        self._rpc: Optional[RpcChannel] = rpc
        self._response = response
        self._request = request
        self._base_cache_key = (getattr(response.component, "base_cache_key", "")
                                or response.component.ref.cache_key)
        self._stall_timeout = stall_timeout
        #: DDO_FUSED_LORA: "on_arrival" (LoRAs fused into streamed Linears are added as the
        #: weight arrives, :mod:`.fused_on_arrival`) or "stored" (a derived version in ddod).
        self.fused_lora = _fused_lora_mode(request)
        self._closed = False
        self._pool_mappings: List[SegmentMapping] = []
        self._pool_views: Dict[str, torch.Tensor] = {}
        self._slab: Optional[DeviceMemory] = None
        self._ring: Optional[DeviceMemory] = None
        self._block: Optional[ControlBlock] = None
        self._doorbell: Optional[Doorbell] = None
        self._events: Optional[RingEvents] = None
        self._consumer: Optional[RingConsumer] = None  # or cpp_consumer's
        #: Which consumer serves the streamed Linears: "python" or "cpp" (:mod:`.cpp_consumer`);
        #: "none" while nothing streams.
        self.consumer_kind = "none"
        self._bound = False
        self._groups: List[Tuple[str, List[ModuleTensor]]] = []
        # What _bind bound, by component name: the guarded tensor and the view it started as.
        self._bound_tensors: Dict[str, torch.Tensor] = {}
        self._bound_views: Dict[str, torch.Tensor] = {}
        # Each tensor's requires_grad before the session, given back at close.
        self._requires_grad: Dict[str, bool] = {}
        # Edited tensors not yet stored in ddod, by component name.
        self._dirty: Dict[str, torch.Tensor] = {}
        # The versions of the component this session has streamed, and what they hold.
        self._versions = EditVersions(self._open_rpc, self._base_cache_key)
        self._watch: Optional[WeightWatch] = None
        self._adapter_methods: List[str] = []  # wrapped by _watch_root
        self._adapters_placed_at: Optional[int] = None  # structure_version() then
        self._merges_taken_at: Optional[int] = None  # structure_version() then
        self._edit_syncs = 0
        self._uploaded_edit_bytes = 0
        # Verbose runs: passes finished, and the clock and counters when this one began.
        self._passes = 0
        self._pass_began: Optional[Tuple[float, int, int, int]] = None
        self._patched: List[nn.Module] = []
        # Every forward the session replaced, with what it was (None: the class's).
        self._original_forwards: List[Tuple[nn.Module, Optional[Callable[..., Any]]]] = []
        self._hooks: List[torch.utils.hooks.RemovableHandle] = []
        # Rows per streamable Linear during the learning forward, sent with the schedule.
        self._row_counter: Optional[RowCounter] = None
        # Non-persistent buffers moved to the device: (owner, attribute, original).
        self._moved_buffers: List[Tuple[nn.Module, str, torch.Tensor]] = []
        # A session nobody closed (its module dropped with it) is detached when collected, so
        # ddod frees its device memory without waiting for the client's lease to end.
        self._finalizer = _detach_when_collected(self, rpc, response.session_id)
        self._finalizer.atexit = False  # at exit the client's lease ends, and ddod frees it all

    # Opening.

    def _open(self) -> None:
        response = self._response
        self.consumer_kind = "none"
        if not response.HasField("device") or not response.device.control_block_shm:
            raise DdoError(
                f"ddod answered the streaming Attach of {self.cache_key!r} without device "
                f"resources (is ddod older than this client?)"
            )
        resources = response.device
        info = response.component
        opener = self._open_rpc().segment_opener
        clock = _PhaseClock(self.open_seconds)
        self._pool_mappings, self._pool_views = map_component(info, opener)
        specs = {spec.name: spec for spec in info.tensors}
        groups = self._match_module()
        clock.lap("map")

        slots = resources.ring_slots
        slot_bytes = resources.ring_slot_bytes
        self._slab = DeviceMemory(
            "resident slab", resources.resident_slab_bytes, resources.resident_slab_shm,
            resources.resident_slab_handle, self.device, opener,
        )
        # The arena (units of the schedule, packed) and the out-of-schedule slot after it.
        self._ring = DeviceMemory(
            "ring", resources.ring_arena_bytes + slot_bytes if resources.units else 0,
            resources.ring_shm, resources.ring_handle, self.device, opener,
            copy_on_write=False,  # ddod keeps refilling it: every update must show
        )
        clock.lap("device_memory")
        resident = self._resident_views(resources, specs)
        streamed = self._streamed_layout(resources, specs, slot_bytes)
        self._check_coverage(groups, resident, streamed)

        self._bound = True  # from here on, close() rebinds the module to the host pool
        self._groups = groups
        self._bind(groups, resident)
        self._watch = WeightWatch(
            self.module, self._bound_tensors,
            {spec.name: (_dtype(spec), tuple(spec.shape)) for spec in info.tensors},
            self.device)
        clock.lap("bind")
        if not resources.units:
            self._take_over_merges()
            self._wrap_casting_hooks()
            return  # everything is resident: nothing streams, the module runs as it is

        self._block = ControlBlock(
            resources.control_block_shm, resources.control_block_bytes,
            stall_timeout=self._stall_timeout, opener=opener,
        )
        if (self._block.slots != slots or self._block.units != len(resources.units)
                or self._block.arena_bytes != resources.ring_arena_bytes):
            raise DdoError(
                f"the control block says K={self._block.slots}, {self._block.units} units and a "
                f"{self._block.arena_bytes}-byte arena, the Attach answer K={slots}, "
                f"{len(resources.units)} units and {resources.ring_arena_bytes} bytes"
            )
        self._doorbell = Doorbell(resources.doorbell_shm, opener=opener)
        self._open_consumer(resources, specs)
        self._patch(groups, streamed)
        self._wrap_casting_hooks()
        if self._consumer.learning:
            self._row_counter = self._count_rows(groups, specs)
        clock.lap("consumer")

    def _open_consumer(
        self, resources: sessions_pb2.DeviceResources,
        specs: Mapping[str, components_pb2.TensorSpec],
    ) -> None:
        """The C++ consumer or the Python one, as DDO_CLIENT_CONSUMER says
        (:mod:`.cpp_consumer`)."""
        extension = cpp_consumer.extension()
        if extension is not None:
            cuda = self.device.type == "cuda"  # the extension opens the events and checks them
            self._consumer = cpp_consumer.open_consumer(
                extension, self._block, self._doorbell, self._ring.whole(),
                self._unit_layouts(resources, specs), list(self._response.schedule),
                self._send_schedule,
                list(resources.ready_event_handles) if cuda else [],
                list(resources.consumed_event_handles) if cuda else [],
                self.device,
            )
            self.consumer_kind = "cpp"
            return
        if self.device.type == "cuda":
            self._events = self._open_events(resources)
        self._consumer = RingConsumer(
            self._block,
            self._doorbell,
            RingViews(self._ring.whole(), self._unit_layouts(resources, specs)),
            list(self._response.schedule),
            self._send_schedule,
            self._events,
        )
        self.consumer_kind = "python"

    def _open_events(self, resources: sessions_pb2.DeviceResources) -> RingEvents:
        count = resources.ring_slots + 1
        if (len(resources.ready_event_handles) != count
                or len(resources.consumed_event_handles) != count):
            raise DdoError(
                f"ddod sent {len(resources.ready_event_handles)} ready and "
                f"{len(resources.consumed_event_handles)} consumed event handles for "
                f"{count} slots"
            )

        def open_event(handle: bytes) -> "torch.cuda.Event":
            return torch.cuda.Event.from_ipc_handle(self.device, handle)

        return RingEvents(
            self.device,
            [open_event(handle) for handle in resources.ready_event_handles],
            [open_event(handle) for handle in resources.consumed_event_handles],
        )

    def _send_schedule(self, order: List[int]) -> int:
        rows = self._row_counter.take() if self._row_counter is not None else {}
        self._row_counter = None
        response = self._open_rpc().unary(
            "SetSchedule",
            sessions_pb2.SetScheduleRequest(session_id=self.session_id, unit_order=order,
                                            weight_rows=rows),
        )
        return response.uses_per_cycle

    def _before_forward(self) -> None:
        if self.device.type == "cuda":
            refuse_capture(f"{type(self.module).__name__} ({self.log_name})")
        self.sync_edits()  # what changed since the last forward reaches what streams
        if self.fused_lora == "on_arrival":
            # LoRA layers PEFT injected directly since (an older torch cannot tell: they are
            # taken over when adapters are placed, at diffusers' load and fuse).
            version = structure_version()
            if version is not None and version != self._merges_taken_at:
                self._take_over_merges()
                self._merges_taken_at = version
        if self._consumer is not None:
            self._consumer.begin_forward()
            if self.verbose:
                consumer = self._consumer
                self._pass_began = (time.perf_counter(), consumer.bytes_used, consumer.wait_ns,
                                    consumer.sync_uses)

    # Edits.

    @property
    def base_cache_key(self) -> str:
        """The key of the component the session started from (before any edit)."""
        return self._base_cache_key

    def _reattach(self, cache_key: str) -> Dict[str, float]:
        """Moves the session to the component ``cache_key`` (a derived version of this one):
        the old session ends, the module is bound and patched anew. If that fails, the module
        is left on host views (and its private edits), and the session closed. Returns the
        seconds of each step (``detach``, ``attach``: ddod opens the new session, ``bind``)."""
        rpc = self._open_rpc()
        started = time.perf_counter()
        self._end_session(restore_for_release=False)
        request = sessions_pb2.AttachRequest()
        request.CopyFrom(self._request)
        request.cache_key = cache_key
        request.lease_id = rpc.lease_id
        try:
            detached = time.perf_counter()
            response = rpc.unary("Attach", request, timeout=MODEL_SIZED_TIMEOUT_S)
            attached = time.perf_counter()
            self._response = response
            self.session_id = response.session_id
            self._finalizer = _detach_when_collected(self, rpc, response.session_id)
            self._finalizer.atexit = False
            self._open()
        except BaseException:
            self.close()
            raise
        return {"detach": detached - started, "attach": attached - detached,
                "bind": time.perf_counter() - attached}

    # Reading.

    @property
    def cache_key(self) -> str:
        """The key of the component the session streams (a derived version's once edits
        were stored)."""
        return self._response.component.ref.cache_key

    @property
    def plan(self) -> sessions_pb2.PlanExplanation:
        """ddod's plan for the session: what streams, what stays resident, and why."""
        return self._response.plan

    @property
    def resources(self) -> sessions_pb2.DeviceResources:
        """The device resources ddod returned (names, sizes, units)."""
        return self._response.device

    @property
    def schedule(self) -> Tuple[int, ...]:
        """The units in the order a forward uses them (empty before the first forward when
        ddod did not know it)."""
        return self._consumer.schedule if self._consumer is not None else ()

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    # Closing.

    def close(self) -> None:
        """Gives the module back and ends the session. Idempotent.

        Releases the held unit, waits for the device, unpatches the forwards and gives every
        tensor back as an ordinary, writable tensor on the CPU with its ``requires_grad`` as it
        was: weights nobody edited become copy-on-write views of ddod's copy (no copy is made:
        a page is copied when it is first written), edited ones keep their edits (moved to the
        host). Adapters move to the host too. Then it closes the mappings and detaches. A
        session whose ddod is gone closes without error.
        """
        if self._closed:
            return
        self._closed = True
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        if self._row_counter is not None:
            self._row_counter.remove()
            self._row_counter = None
        for name in ("_apply", *self._adapter_methods):
            self.module.__dict__.pop(name, None)
        try:
            self._end_session(restore_for_release=True)
        finally:
            try:
                self._versions.close()
            finally:
                self._rpc = None

    def _end_session(self, restore_for_release: bool) -> None:
        """Stops streaming and detaches; the module is left on host views (given back for
        good when ``restore_for_release``, else until a new session binds it)."""
        consumer, self._consumer = self._consumer, None
        try:
            if consumer is not None and self._block is not None and not self._block.closed:
                consumer.release()
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
        finally:
            for module, forward in reversed(self._original_forwards):
                if forward is None:
                    module.__dict__.pop("forward", None)
                else:
                    module.__dict__["forward"] = forward
            self._original_forwards = []
            self._patched = []
            # Bound now, or bound before a sync that failed to bind anew.
            if self._bound or (restore_for_release and self._requires_grad):
                self._restore(release=restore_for_release)
            if consumer is not None:
                consumer.drop_views()
            self._release_memory()
            self._detach()
        if restore_for_release:
            # After the ring and slab are gone (less device memory at its peak); a failure
            # here leaves the session ended and the records in place.
            write_back_fused(self.module)

    def _release_memory(self) -> None:
        self._events = None
        for part in (self._doorbell, self._block, self._ring, self._slab):
            if part is not None:
                part.close()
        self._doorbell = self._block = None
        self._ring = self._slab = None
        for mapping in self._pool_mappings:
            mapping.close()  # the views bound to the module keep their pages mapped
        self._pool_mappings = []
        self._pool_views = {}

    def _detach(self) -> None:
        self._finalizer.detach()
        if self._rpc is not None:
            detach_session(self._rpc, self.session_id)

    def _open_rpc(self) -> RpcChannel:
        if self._rpc is None:
            raise DdoError(f"the streaming session of {self.cache_key!r} is closed")
        return self._rpc

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"{len(self._response.device.units)} units"
        return (
            f"StreamingSession({self.cache_key!r}, session {self.session_id!r}, "
            f"device {self.device}, {state})"
        )


def _fused_lora_mode(request: Optional[sessions_pb2.AttachRequest]) -> str:
    """The session's DDO_FUSED_LORA (ddod checked the value at Attach); on_arrival by default."""
    value = request.settings.get("DDO_FUSED_LORA", "") if request is not None else ""
    value = value.strip().lower() or FUSED_MODES[0]
    if value not in FUSED_MODES:
        raise ConfigurationError(
            f"DDO_FUSED_LORA={value!r} must be one of {', '.join(FUSED_MODES)}")
    return value


def _detach_when_collected(
    session: "StreamingSession", rpc: RpcChannel, session_id: str
) -> weakref.finalize:
    """Detaches a session that was collected without close() (best effort, with nobody to
    report to: ddod also frees it when the client's lease ends)."""
    return weakref.finalize(session, detach_session, rpc, session_id, best_effort=True,
                            timeout=2)


#: The seed's name for the object that streams a module's weights (its Diffusers ModelHook):
#: here the streaming session, with the seed's ``config``, ``state`` and
#: ``print_profile_summary``.
DynamicOffloadHook = StreamingSession
