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

Streamed weights cannot be trained through (a backward pass raises). One forward at a time: a
session is not thread-safe, and two threads running the module at once would interleave their
uses of the ring.
"""

from __future__ import annotations

import re
import time
import weakref

from typing import (
    Any,
    Callable,
    Dict,
    List,
    Mapping,
    NamedTuple,
    Optional,
    Sequence,
    Tuple,
    Union,
)

import torch
from torch import nn

from ._closeable import Closeable
from ._proto import components_pb2, sessions_pb2
from . import cpp_consumer, dtypes
from .device_memory import DeviceMemory
from .casting_hooks import (CASTING_HOOK_FORWARD, CLASS_FORWARD, by_input_dtype,
                            casting_forward, describe_forward, forward_kind,
                            linear_compute_dtype)
from .compile_support import eager_only, refuse_capture
from .control_block import DEFAULT_STALL_TIMEOUT_S, ControlBlock, Doorbell
from .detach import detach_session
from .errors import BindError, ConfigurationError, DaemonError, DdoError, describe_names
from .edit_lineage import root_state
from .edit_sync import EditSync, same_bytes, store_edits
from .edit_versions import EditVersions
from .learned_rows import RowCounter
from .fused_on_arrival import (FUSED_MODES, arrival_deltas, streamed_deltas, take_over_merges,
                               write_back_fused)
from .module_tensors import (
    ModuleTensor,
    alias_groups,
    assign,
    bind_group,
    match_module,
    module_tensors,
)
from .pool_views import map_component
from .quantized import dense_linear_weight, quantized_backend_of
from .ring_consumer import RingConsumer, RingEvents, RingViews
from .rpc_channel import RpcChannel
from .runner_log import log_pass
from .shared_weights import EditListener, WeightGuard, guard, is_guarded, plain
from .shm import SegmentMapping
from .streamed_linear import cpp_streamed_forward, own_streamed_forward, streamed_forward
from .weight_watch import (WeightWatch, move_runner_owned, place_adapters_around,
                           structure_version)

__all__ = ["StreamingSession", "stream", "streamable_weights"]

DeviceArgument = Union[str, int, torch.device]

#: The device_uuid of the host backend.
HOST_DEVICE = "cpu"


def streamable_weights(module: nn.Module, keep_resident: Sequence[str] = ()) -> List[str]:
    """The names of the weights a streaming session can stream: the ``weight`` of every
    ``nn.Linear`` (subclasses too) with nothing quantized or packed, plain 2-D floating
    (float8 included) of shape ``(out_features, in_features)``, under the name a component
    stores it by (the first of its names); a weight tied to
    anything else than another Linear's weight is left out, and so is one whose module path
    matches a ``keep_resident`` regex.

    Raises:
        ConfigurationError: a ``keep_resident`` pattern is not a valid regex.
    """
    try:
        patterns = [re.compile(pattern) for pattern in keep_resident]
    except re.error as error:
        raise ConfigurationError(f"keep_resident pattern {error.pattern!r}: {error}") from error
    names = []
    for group in alias_groups(module_tensors(module)):
        if not all(_is_linear_weight(entry) for entry in group):
            continue
        paths = [entry.name.rsplit(".", 1)[0] for entry in group]
        if any(pattern.search(path) for pattern in patterns for path in paths):
            continue
        names.append(group[0].name)
    return names


def _is_linear_weight(entry: ModuleTensor) -> bool:
    """A Linear's (subclasses too) own plain 2-D floating ``(out_features, in_features)``
    weight, of a module with nothing quantized or packed (its scales, if any, are plain
    tensors that stay resident)."""
    owner = entry.owner
    return (
        entry.attribute == "weight"
        and not entry.is_buffer
        and dense_linear_weight(owner) is entry.tensor
        and not quantized_backend_of(owner)[0]
    )


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
    response = rpc.unary("Attach", request)
    session = StreamingSession(rpc, module, response, torch_device, stall_timeout, request)
    try:
        session._open()
        session._watch_root()
    except BaseException:
        session.close()
        raise
    return session


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


class _Streamed(NamedTuple):
    """Where a streamed weight is: its unit and its index in the unit's tensors."""

    unit: int
    index: int


class StreamingSession(Closeable, EditListener):
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
        self._pool_mappings, self._pool_views = map_component(info, opener)
        specs = {spec.name: spec for spec in info.tensors}
        groups = self._match_module()

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

    def _match_module(self) -> List[Tuple[str, List[ModuleTensor]]]:
        """Every tensor of the module with the component's name for it; BindError when they
        do not correspond one to one, or a shape or dtype differs."""
        match = match_module(self.module, self._pool_views)
        groups, missing, mismatched = match.groups, match.missing, match.mismatched
        unexpected = match.unexpected
        if missing or unexpected or mismatched:
            parts = []
            if missing:
                parts.append(f"{len(missing)} missing from the component: "
                             f"{describe_names(missing)}")
            if unexpected:
                parts.append(f"{len(unexpected)} not in the module: "
                             f"{describe_names(unexpected)}")
            if mismatched:
                parts.append(f"{len(mismatched)} with another shape or dtype: "
                             + "; ".join(mismatched[:20]))
            raise BindError(
                f"cannot stream {self.cache_key!r} into {type(self.module).__name__}: "
                + "; ".join(parts),
                missing=missing, unexpected=unexpected, mismatched=mismatched,
            )
        return groups

    def _resident_views(
        self, resources: sessions_pb2.DeviceResources,
        specs: Mapping[str, components_pb2.TensorSpec],
    ) -> Dict[str, torch.Tensor]:
        """A view of the slab for every resident tensor."""
        views = {}
        for placement in resources.resident:
            spec = _spec(specs, placement.name, "resident")
            if placement.byte_size != spec.byte_size:
                raise DdoError(
                    f"ddod placed {placement.byte_size} bytes of {placement.name!r} in the "
                    f"slab; its spec says {spec.byte_size}"
                )
            views[placement.name] = self._slab.view(
                placement.offset, placement.byte_size, _dtype(spec), list(spec.shape),
                placement.name,
            )
        return views

    def _streamed_layout(
        self, resources: sessions_pb2.DeviceResources,
        specs: Mapping[str, components_pb2.TensorSpec], slot_bytes: int,
    ) -> Dict[str, _Streamed]:
        """The unit and index of every streamed weight; DdoError for an inconsistent layout."""
        streamed: Dict[str, _Streamed] = {}
        for unit, layout in enumerate(resources.units):
            if layout.unit != unit:
                raise DdoError(f"ddod listed unit {layout.unit} at position {unit}")
            if not layout.tensors:
                raise DdoError(f"ddod sent unit {unit} ({layout.name!r}) without tensors")
            for index, placement in enumerate(layout.tensors):
                spec = _spec(specs, placement.name, f"unit {unit}")
                if placement.byte_size != spec.byte_size or (
                    placement.offset + placement.byte_size > slot_bytes
                ):
                    raise DdoError(
                        f"ddod placed {placement.name!r} of unit {unit} at bytes "
                        f"[{placement.offset}, {placement.offset + placement.byte_size}) of a "
                        f"{slot_bytes}-byte slot; its spec says {spec.byte_size} bytes"
                    )
                if placement.name in streamed:
                    raise DdoError(f"ddod streams {placement.name!r} in two units")
                streamed[placement.name] = _Streamed(unit, index)
        return streamed

    def _check_coverage(
        self,
        groups: List[Tuple[str, List[ModuleTensor]]],
        resident: Mapping[str, torch.Tensor],
        streamed: Mapping[str, _Streamed],
    ) -> None:
        """Every tensor must be resident or streamed, and only Linear weights stream."""
        uncovered = [name for name, _ in groups if name not in resident and name not in streamed]
        both = [name for name in streamed if name in resident]
        not_linear = [
            name for name, group in groups
            if name in streamed and not all(_is_linear_weight(entry) for entry in group)
        ]
        problems = []
        if uncovered:
            problems.append(f"neither resident nor streamed: {describe_names(uncovered)}")
        if both:
            problems.append(f"both resident and streamed: {describe_names(both)}")
        if not_linear:
            problems.append(f"streamed but not a Linear weight: {describe_names(not_linear)}")
        if problems:
            raise DdoError(
                f"ddod's plan for {self.cache_key!r} does not fit the module: "
                + "; ".join(problems)
            )

    @staticmethod
    def _unit_layouts(
        resources: sessions_pb2.DeviceResources,
        specs: Mapping[str, components_pb2.TensorSpec],
    ) -> List[List[Tuple[str, int, int, torch.dtype, List[int]]]]:
        """Per unit, where its tensors lie in it: what views of the ring are made from."""
        return [
            [(p.name, p.offset, p.byte_size, _dtype(specs[p.name]), list(specs[p.name].shape))
             for p in layout.tensors]
            for layout in resources.units
        ]

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

    def _bind(
        self, groups: List[Tuple[str, List[ModuleTensor]]], resident: Mapping[str, torch.Tensor]
    ) -> None:
        """Resident tensors to their slab views, streamed weights to their host pool views;
        on a GPU, non-persistent buffers to the device."""
        self._bound_tensors = {}
        self._bound_views = {}
        for source, group in groups:
            view = resident.get(source)
            if view is None:
                view = self._pool_views[source]
            for entry in group:
                self._requires_grad.setdefault(entry.name, bool(entry.tensor.requires_grad))
            self._bind_group(source, group, view)
        if self.device.type != "cpu":
            for owner in self.module.modules():
                transient = getattr(owner, "_non_persistent_buffers_set", set())
                for attribute, buffer in list(owner._buffers.items()):
                    if buffer is not None and attribute in transient:
                        self._moved_buffers.append((owner, attribute, buffer))
                        owner._buffers[attribute] = buffer.to(self.device)

    def _patch(
        self, groups: List[Tuple[str, List[ModuleTensor]]], streamed: Mapping[str, _Streamed]
    ) -> None:
        """Replaces the forward of every streamed Linear and hooks the root forward."""
        consumer = self._consumer
        patched = set()
        for source, group in groups:
            where = streamed.get(source)
            if where is None:
                continue
            for entry in group:
                linear = entry.owner
                if id(linear) in patched:
                    continue  # one module under several names: patched once
                # (Gives back the forward of a Linear that was resident with fused adapters.)
                fused = streamed_deltas(linear) if self.fused_lora == "on_arrival" else None
                kind = forward_kind(linear)
                if kind not in (CLASS_FORWARD, CASTING_HOOK_FORWARD):
                    raise ConfigurationError(
                        f"the forward of {entry.module_path!r} is already replaced on the "
                        f"instance by {describe_forward(linear)} (accelerate or another "
                        f"offloading hook?); remove that hook before streaming (Diffusers' "
                        f"layerwise casting is the one hook kept: it casts the streamed "
                        f"weight)"
                    )
                self._original_forwards.append((linear, linear.__dict__.get("forward")))
                compute_dtype = linear_compute_dtype(linear) if not fused else None
                if kind == CASTING_HOOK_FORWARD or type(linear) is not nn.Linear:
                    # Its own forward (a subclass's, or the casting hooks') on the ring's view.
                    own = own_streamed_forward(
                        consumer.tensors, where.unit, where.index, linear, linear.forward,
                        entry.module_path, kind == CASTING_HOOK_FORWARD, fused)
                    if compute_dtype is not None:
                        # Layerwise casting alone: DDO's forward computes what the hook
                        # would for an input of the compute dtype (casting_hooks.py).
                        own = by_input_dtype(
                            compute_dtype, self._linear_forward(linear, where, entry), own)
                    linear.forward = own
                elif self.consumer_kind == "cpp":
                    linear.forward = cpp_streamed_forward(
                        consumer, where.unit, where.index, linear.bias, entry.module_path,
                        fused)
                else:
                    linear.forward = streamed_forward(
                        consumer.tensors, where.unit, where.index, linear.bias,
                        entry.module_path, fused)
                patched.add(id(linear))
                self._patched.append(linear)
        self._take_over_merges()

    def _linear_forward(self, linear: nn.Module, where: "_Streamed",
                        entry: ModuleTensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """DDO's forward of the streamed ``linear`` without adapters, on the session's
        consumer."""
        if self.consumer_kind == "cpp":
            return cpp_streamed_forward(self._consumer, where.unit, where.index, linear.bias,
                                        entry.module_path)
        return streamed_forward(self._consumer.tensors, where.unit, where.index, linear.bias,
                                entry.module_path)

    def _wrap_casting_hooks(self) -> None:
        """Every module the session binds that carries Diffusers' casting hooks and keeps its
        tensors resident runs its hook chain on plain aliases of them (:mod:`.casting_hooks`):
        the hook's casts must not reach the bound views."""
        patched = {id(module) for module in self._patched}
        for module in self.module.modules():
            if id(module) in patched or forward_kind(module) != CASTING_HOOK_FORWARD:
                continue
            hooked = module.__dict__["forward"]
            self._original_forwards.append((module, hooked))
            module.forward = casting_forward(module, hooked)

    def _take_over_merges(self) -> None:
        """DDO_FUSED_LORA=on_arrival: fused LoRAs are added as weights arrive
        (:func:`.fused_on_arrival.take_over_merges`)."""
        if self.fused_lora == "on_arrival":
            take_over_merges(self.module, self.device, self._patched)

    def _count_rows(
        self, groups: List[Tuple[str, List[ModuleTensor]]],
        specs: Mapping[str, components_pb2.TensorSpec],
    ) -> RowCounter:
        """Counts what every streamable Linear (streamed or resident) computes in the learning
        forward (:mod:`.learned_rows`)."""
        streamable = set(self._request.streamable) if self._request is not None else set()
        linears = []
        for source, group in groups:
            spec = specs.get(source)
            if source not in streamable or spec is None or len(spec.shape) != 2:
                continue
            for entry in group:
                if entry.attribute == "weight":
                    linears.append((source, entry.owner, int(spec.shape[1])))
        return RowCounter(linears)

    def _send_schedule(self, order: List[int]) -> int:
        rows = self._row_counter.take() if self._row_counter is not None else {}
        self._row_counter = None
        response = self._open_rpc().unary(
            "SetSchedule",
            sessions_pb2.SetScheduleRequest(session_id=self.session_id, unit_order=order,
                                            weight_rows=rows),
        )
        return response.uses_per_cycle

    def _bind_group(self, source: str, group: List[ModuleTensor], view: torch.Tensor) -> None:
        """Binds every name of one tensor to a guarded tensor over ``view``."""
        where = f"{group[0].name} ({type(self.module).__name__})"
        state = self._versions.state(self.cache_key, source)
        self._bound_tensors[source] = bind_group(
            group,
            lambda parameter: guard(view, name=source, where=where, parameter=parameter,
                                    listener=self, state=state),
        )
        self._bound_views[source] = view

    def _watch_root(self) -> None:
        """Hooks the root module's forward (edits are stored, then the cycle begins and ends
        with it) and its ``_apply`` (``module.to``/``half``/``cuda``: refused before anything
        converts when they would change a weight ddod serves) and its adapter methods
        (``load_lora_adapter``, ``fuse_lora``...: adapters go to the execution device at once,
        :func:`.weight_watch.place_adapters_around`). Once per session: syncs reopen the
        session beneath these hooks."""
        session = weakref.ref(self)  # the module must not keep its session alive

        def before(_module: nn.Module, _inputs: Any) -> None:
            live = session()
            if live is not None and not live._closed:
                live._before_forward()

        def after(_module: nn.Module, _inputs: Any, _output: Any) -> None:
            live = session()
            if live is not None and live._consumer is not None:
                live._consumer.end_forward()
                if live._pass_began is not None:
                    live._log_pass()

        # Under torch.compile, graph breaks: they wait on ddod and store edits.
        self._hooks.append(self.module.register_forward_pre_hook(eager_only(before)))
        self._hooks.append(self.module.register_forward_hook(eager_only(after)))
        original_apply = self.module._apply

        def guarded_apply(fn: Callable[[torch.Tensor], torch.Tensor], *args: Any, **kwargs: Any):
            live = session()
            if live is not None and not live._closed and live._check_conversion(fn):
                return live.module  # .to(execution device): where it runs already
            return original_apply(fn, *args, **kwargs)

        self.module.__dict__["_apply"] = guarded_apply

        def place_adapters() -> None:
            live = session()
            if live is not None and not live._closed:
                live._place_adapters()

        self._adapter_methods = place_adapters_around(self.module, place_adapters)

    def _place_adapters(self) -> None:
        """Moves adapters to the execution device, unless no module registered anything since
        the last time (a walk of a FLUX transformer's modules costs tens of milliseconds)."""
        version = structure_version()
        if version is not None and version == self._adapters_placed_at:
            return
        move_runner_owned(self.module, self.device, strict=False)
        if self._bound:
            self._take_over_merges()  # LoRA layers made since
        self._adapters_placed_at = version

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

    def _log_pass(self) -> None:
        """Logs the pass that just ended (verbose runs), after the device finished it."""
        began, used, waited, sync_uses = self._pass_began
        self._pass_began = None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        consumer = self._consumer
        self._passes += 1
        log_pass(self.log_name, self._passes, consumer.bytes_used - used,
                 time.perf_counter() - began, (consumer.wait_ns - waited) / 1e9,
                 consumer.sync_uses - sync_uses)

    def _check_conversion(self, convert: Callable[[torch.Tensor], torch.Tensor]) -> bool:
        """Refuses a ``module._apply(convert)`` that would give a weight ddod serves another
        dtype or device: ``convert`` is tried on an empty tensor of each kind bound. True when
        it only moves weights to the execution device (``pipe.to("cuda")``): the module runs
        there already, so nothing is to be done."""
        tried = set()
        to_execution_device = False
        for source, tensor in self._bound_tensors.items():
            kind = (tensor.dtype, tensor.device, isinstance(tensor, nn.Parameter))
            if kind in tried:
                continue
            tried.add(kind)
            with torch.no_grad():
                probe = convert(torch.empty(0, dtype=tensor.dtype, device=tensor.device))
            if not isinstance(probe, torch.Tensor):
                continue
            if probe.dtype != tensor.dtype:
                raise tensor._ddo_guard.refusal(
                    f"converting the module's weights from {str(tensor.dtype)[6:]} to "
                    f"{str(probe.dtype)[6:]} is not supported while it is on the DDO route "
                    f"(nothing was converted)",
                    "load the model in the dtype you want before enable_offload (DDO casts "
                    "streamed weights to the input's dtype at each use), or call "
                    "remove_dynamic_offload() / result.release() first: the module then gets "
                    "ordinary tensors on the CPU.")
            if probe.device != tensor.device and probe.device == self.device:
                to_execution_device = True
            elif probe.device != tensor.device:
                raise tensor._ddo_guard.refusal(
                    f"moving the module's weights from {tensor.device} to {probe.device} is "
                    f"not supported while it is on the DDO route (nothing was moved)",
                    f"the module already runs on {self.device}: DDO places its weights there "
                    f"as they are used. To move it elsewhere, call remove_dynamic_offload() / "
                    f"result.release() first (the module then gets ordinary tensors on the "
                    f"CPU), then enable_offload with another execution_device.")
        return to_execution_device

    # Edits.

    def weight_written(self, written: WeightGuard) -> None:
        """A guarded weight was written (EditListener): store it before the next forward."""
        tensor = written.tensor
        if tensor is not None and self._bound_tensors.get(written.name) is tensor:
            self._dirty[written.name] = tensor

    def known_bytes(self, name: str, state: str) -> Optional[torch.Tensor]:
        """ddod's bytes of ``name`` in lineage ``state``, if a version at hand has them
        (EditListener)."""
        if self._closed or self._rpc is None:
            return None
        try:
            return self._versions.view(name, state, self.cache_key, self._pool_views)
        except (DaemonError, OSError):
            return None  # not at hand after all: the edit is computed (called mid-fuse)

    @property
    def base_cache_key(self) -> str:
        """The key of the component the session started from (before any edit)."""
        return self._base_cache_key

    def sync_edits(self) -> Optional[Dict[str, object]]:
        """Stores the weights edited since the last sync in ddod, as a derived version of the
        component (:mod:`.edit_sync`), and moves the session to it; runs by itself before the
        next forward. Returns what it stored (also in :attr:`last_sync`), or None when no
        weight was edited.

        Raises:
            DaemonError: ddod refused to store them (RESOURCE_EXHAUSTED: no room in the pool);
                the edits stay in the module and are tried again at the next forward.
        """
        if self._watch is not None and not self._closed:
            self._dirty.update(self._watch.check())
        if not self._dirty or self._closed:
            return None
        started = time.perf_counter()
        rpc = self._open_rpc()
        dirty, self._dirty = self._dirty, {}
        try:
            current = self._versions.states(self.cache_key)
            states = {name: self._state_of(name, tensor) for name, tensor in dirty.items()}
            wanted = self._stored_version(self._with(current, states))
            changed: Dict[str, torch.Tensor] = {}
            if wanted is None:
                for name, tensor in dirty.items():
                    if (states[name] != self._versions.state(self.cache_key, name)
                            and not same_bytes(tensor, self._pool_views[name])):
                        changed[name] = tensor
                    else:
                        states[name] = self._versions.state(self.cache_key, name)
                wanted = self._stored_version(self._with(current, states))
            for name in dirty:
                if states[name] == self._versions.state(self.cache_key, name):
                    self._bind_unedited(name)
            compared = time.perf_counter()
            if wanted == self.cache_key:
                result = EditSync(0, 0, False, compared - started, self.cache_key,
                                  {"compare": compared - started})
            elif wanted is not None:
                # A version this session stored before holds these weights: nothing to upload.
                previous = self.cache_key
                steps = self._reattach(wanted)
                done = time.perf_counter()
                moved = sum(1 for name in states
                            if states[name] != self._versions.state(previous, name))
                result = EditSync(moved, 0, True, done - started, wanted,
                                  {"compare": compared - started, "reattach": done - compared,
                                   **{f"reattach_{step}": value for step, value in steps.items()}})
                self._edit_syncs += 1
            else:
                stored = store_edits(rpc, self.cache_key, self._response.component.tensors,
                                     changed)
                self._versions.add(stored.cache_key, self._with(current, states))
                attaching = time.perf_counter()
                steps = self._reattach(stored.cache_key)
                done = time.perf_counter()
                result = EditSync(stored.changed_tensors, stored.uploaded_bytes, stored.warm_hit,
                                  done - started, stored.cache_key,
                                  {"compare": compared - started, **stored.parts,
                                   "reattach": done - attaching,
                                   **{f"reattach_{step}": value for step, value in steps.items()}})
                self._edit_syncs += 1
                self._uploaded_edit_bytes += stored.uploaded_bytes
        except BaseException:
            # Nothing lost: every edit is looked at again at the next sync (ddod unreachable,
            # no room in its pool, a version it no longer has...).
            self._dirty = {**dirty, **self._dirty}
            raise
        self.last_sync = result.as_dict()
        return self.last_sync

    def _stored_version(self, states: Mapping[str, str]) -> Optional[str]:
        """The key of a version ddod holds with exactly ``states`` (kept attached from now on,
        so that it stays), or None."""
        wanted = self._versions.find(states)
        if wanted is None or wanted == self.cache_key or self._versions.hold(wanted):
            return wanted
        return None  # evicted meanwhile: stored anew

    def _bind_unedited(self, name: str) -> None:
        """Binds ``name``, whose bytes are this version's after all, to its view of them."""
        group = next(group for source, group in self._groups if source == name)
        self._bind_group(name, group, self._bound_views[name])  # ddod's copy again

    def _state_of(self, name: str, tensor: torch.Tensor) -> str:
        """The lineage state of an edited tensor (a replaced one has a state of its own)."""
        if is_guarded(tensor) and self._bound_tensors.get(name) is tensor:
            return tensor._ddo_guard.lineage.state
        return f"replaced:{id(tensor):x}:{time.monotonic_ns():x}"

    def _with(self, current: Mapping[str, str], states: Mapping[str, str]) -> Dict[str, str]:
        """The states of a version: ``current``'s with ``states`` applied (root states are
        not listed)."""
        merged = dict(current)
        for name, state in states.items():
            if state == root_state(self._base_cache_key, name):
                merged.pop(name, None)
            else:
                merged[name] = state
        return merged

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
            response = rpc.unary("Attach", request)
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

    def print_profile_summary(self, top_n: int = 8) -> None:
        """The seed's hook summary: where the bytes are, what setting up cost, how the ring
        served, and the ``top_n`` largest streamed units."""
        stats = self.stats()
        print(f"[ddo] {self.cache_key} on {self.device}: {stats['units']} streamed units, "
              f"{stats['resident_bytes'] / 2**30:.2f} GiB resident, "
              f"{stats['streamed_bytes_per_cycle'] / 2**30:.2f} GiB streamed per pass")
        print(f"[ddo] uses {stats['uses']} ({stats['streamed_uses']} from the ring, "
              f"{stats['sync_uses']} out of schedule, {stats['skipped_uses']} skipped), waited "
              f"{stats['wait_seconds']:.3f} s, {stats['overhead_us_per_unit']:.1f} us per unit")
        if self.state is not None:
            for action, seconds in self.state.setup_seconds_by_action.items():
                print(f"[ddo] setup {action}: {seconds:.3f} s")
        units = sorted(self._response.device.units, key=lambda unit: -unit.byte_size)
        for unit in units[:top_n]:
            print(f"[ddo]   {unit.name}: {unit.byte_size / 2**20:.1f} MiB")

    def stats(self) -> Dict[str, Union[int, float, bool, str]]:
        """The session's counters and sizes.

        ``uses``: units acquired (``streamed_uses`` from the schedule + ``sync_uses`` out of
        schedule); ``skipped_uses``: uses of the schedule passed over; ``bytes_used``: bytes
        of the units acquired; ``wait_seconds``: time
        blocked on ddod; ``overhead_us_per_unit``: mean CPU time of the acquire and release
        bookkeeping per acquired unit, waits excluded; ``units``; ``ring_slots`` (units in
        flight at most), ``ring_slot_bytes`` (the largest unit: the out-of-schedule slot),
        ``ring_arena_bytes`` (where the schedule's units pack); ``resident_bytes``;
        ``streamed_bytes_per_cycle``: the bytes of the units of one schedule cycle;
        ``schedule_length``; ``learning``: True until the schedule is known;
        ``edit_syncs`` and ``uploaded_edit_bytes``: edits stored in ddod; ``fused_lora``:
        DDO_FUSED_LORA; ``consumer``: ``"cpp"`` or ``"python"`` (which consumer serves the
        streamed Linears, DDO_CLIENT_CONSUMER), ``"none"`` when nothing streams;
        ``linears_fused_on_arrival``: Linears with fused adapters added on
        arrival (:mod:`.fused_on_arrival`).
        """
        resources = self._response.device
        schedule = self.schedule
        sizes = [layout.byte_size for layout in resources.units]
        if self._consumer is not None:
            counters = self._consumer.statistics()
            learning = self._consumer.learning
        else:
            counters = {"uses": 0, "streamed_uses": 0, "sync_uses": 0, "skipped_uses": 0,
                        "bytes_used": 0,
                        "wait_seconds": 0.0, "overhead_us_per_unit": 0.0}
            learning = False
        return dict(
            counters,
            session_id=self.session_id,
            device=str(self.device),
            units=len(resources.units),
            ring_slots=resources.ring_slots,
            ring_slot_bytes=resources.ring_slot_bytes,
            ring_arena_bytes=resources.ring_arena_bytes,
            resident_bytes=resources.resident_slab_bytes,
            streamed_bytes_per_cycle=sum(sizes[unit] for unit in schedule),
            schedule_length=len(schedule),
            learning=learning,
            edit_syncs=self._edit_syncs,
            uploaded_edit_bytes=self._uploaded_edit_bytes,
            fused_lora=self.fused_lora,
            consumer=self.consumer_kind,
            linears_fused_on_arrival=sum(
                1 for linear in self.module.modules() if arrival_deltas(linear)),
        )

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

    def _restore(self, release: bool) -> None:
        """Every tensor to memory of the runner's own: ddod's untouched weights to
        copy-on-write host views, edited ones as they are (on the host when ``release``);
        moved buffers back to the host."""
        for group in alias_groups(module_tensors(self.module)):
            current = group[0].tensor
            source = next((entry.name for entry in group if entry.name in self._pool_views), None)
            if (source is not None and is_guarded(current) and current._ddo_guard.shared
                    and plain(current).data_ptr() == self._bound_views[source].data_ptr()):
                data = self._pool_views[source]
            else:
                data = plain(current).detach()
                if release and data.device.type != "cpu":
                    data = data.to("cpu")
            wanted = self._requires_grad.get(group[0].name, False) if release else False
            assign(group, data, requires_grad=wanted)
        if release:
            move_runner_owned(self.module, torch.device("cpu"), strict=False)
        for owner, attribute, original in self._moved_buffers:
            owner._buffers[attribute] = original
        self._moved_buffers = []
        self._bound_tensors = {}
        self._bound = False

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


def _spec(
    specs: Mapping[str, components_pb2.TensorSpec], name: str, where: str
) -> components_pb2.TensorSpec:
    spec = specs.get(name)
    if spec is None:
        raise DdoError(f"ddod's {where} names {name!r}, which the component does not have")
    return spec


def _dtype(spec: components_pb2.TensorSpec) -> torch.dtype:
    return dtypes.to_torch(spec.dtype, tensor_name=spec.name)


#: The seed's name for the object that streams a module's weights (its Diffusers ModelHook):
#: here the streaming session, with the seed's ``config``, ``state`` and
#: ``print_profile_summary``.
DynamicOffloadHook = StreamingSession
