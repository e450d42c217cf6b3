"""The component store: put a model component's weights into ddod's host pool once, and map them
from any number of processes.

A **component** is a table of named tensors (a state dict) stored by ddod under a **cache key**
that the client chooses (model id, revision, subfolder, dtype...). It gets there in one of two
ways, and tensor bytes never travel through gRPC in either:

- **Upload** (:func:`register_state_dict`, :func:`register_module`): the client sends the
  tensor table; ddod reserves a shared-memory segment and says where each tensor goes; the
  client writes the bytes straight into the mapped segment and commits. When ddod already
  holds the key with the same structure (and content hash, when given), nothing is written:
  a *warm hit*. When another process is uploading the same key, the call waits until that
  upload is committed (then it is a warm hit) or ``wait`` runs out.
- **Load** (:func:`load_safetensors`): ddod reads ``*.safetensors`` files itself, through
  descriptors this process opened and passed it (so ddod reads only what the caller can;
  :mod:`.safetensors_inputs` opens them).

:func:`attach` maps a component into this process: :class:`AttachedComponent` holds a session
(which keeps ddod from evicting the component) and a zero-copy tensor for every entry.

Attached tensors are copy-on-write views of ddod's copy
-------------------------------------------------------
They are views of pages shared with ddod and every other process that attached the same
component, mapped copy-on-write (``MAP_PRIVATE``): reading costs no memory, and a write (an
in-place op, ``load_state_dict`` into a bound module, a fine-tune step) copies the pages it
touches into this process, so it changes this process's tensors only, never ddod's copy or
another runner's. ``bind()`` sets ``requires_grad=False`` on every parameter it creates.
The tensors stay valid until ``close()``, and in fact for as long as any of them is referenced:
the mapping is released only when the last of them goes. After ``close()`` the session is gone
and ddod may evict the component (its RAM then returns when the last view is released).

These functions take the :class:`~diffusers_dynamic_offloader.rpc_channel.RpcChannel` of a
connected :class:`~diffusers_dynamic_offloader.DdoClient` (``client.rpc``); the client has a
method for each (``client.register_state_dict(...)``, ``client.attach(...)``, ...).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Dict, List, Mapping, Optional, Sequence, Union

import grpc
import torch
from torch import nn

from . import dtypes
from ._proto import components_pb2, sessions_pb2
from .attached import AttachedComponent
from .component_info import Component
from .detach import detach_session
from .errors import ConfigurationError, DaemonError, DdoError, TensorTableError, describe_names
from .hashing import content_hash as compute_content_hash
from .hashing import is_hash
from .module_tensors import module_tensors, unique
from .pool_views import map_component
from .progress import LogFunction, ProgressReporter, format_bytes
from .progress_call import follow_progress
from .rpc_channel import MODEL_SIZED_TIMEOUT_S, RpcChannel
from .safetensors_inputs import PathArgument, SafetensorsInputs, naming_paths
from .segment_writer import SegmentWriter, write_placements
from .shm import SegmentOpener
from .stream_writer import upload_streams, write_streams

__all__ = [
    "AttachedComponent",
    "Component",
    "UnitsArgument",
    "attach",
    "components",
    "evict",
    "get_component",
    "load_safetensors",
    "register_module",
    "register_state_dict",
]

#: ``"tensor"`` (one streaming unit per tensor), ``"module"`` (one per owning module), or an
#: explicit unit number for every tensor name.
UnitsArgument = Union[str, Mapping[str, int]]

# How often a register call retries while another process uploads the same key.
_RETRY_INTERVAL_S = 0.1
# A register waits for a concurrent upload this many client timeouts by default.
_WAIT_TIMEOUTS = 6


# Registering (upload).


def register_state_dict(
    rpc: RpcChannel,
    cache_key: str,
    state_dict: Mapping[str, torch.Tensor],
    *,
    units: UnitsArgument = "tensor",
    content_hash: Union[bool, str] = False,
    progress: Optional[bool] = None,
    wait: Optional[float] = None,
    log: Optional[LogFunction] = None,
    stall_timeout: Optional[float] = None,
) -> Component:
    """Puts the tensors of ``state_dict`` into ddod's pool under ``cache_key``.

    Tensors may live on any device and need not be contiguous; they are copied to the segment
    as contiguous CPU bytes. ``module_path`` is the name up to its last dot, ``module_class``
    is empty.

    Args:
        rpc: The channel of a connected client (``client.rpc``).
        cache_key: The component's name in the store.
        state_dict: Names and tensors, in the order the table should have.
        units: ``"tensor"`` (default), ``"module"`` (tensors of one owning module form one
            unit) or a mapping from every name to a unit number.
        content_hash: False (default): none. True: compute the XXH3 content hash and have ddod
            verify it at commit (needs xxhash; costs one pass over the bytes). A string: that
            hash, as given.
        progress: True, False or None (auto: only for 1 GiB and more); see
            :mod:`diffusers_dynamic_offloader.progress`.
        wait: Seconds to keep retrying while another process uploads the same key (default:
            six times the client's timeout).
        log: Receives the summary line instead of stderr.
        stall_timeout: Give up when ddod, reserving or verifying and pinning the component's
            memory, sends no progress for this many seconds (default: the larger of 60 s and
            12 client timeouts). No fixed deadline bounds that work: it grows with the model.

    Returns:
        The READY component; ``warm_hit`` says whether the upload was skipped.

    Raises:
        TensorTableError: a value is not a dense tensor, or has a dtype ddod cannot store.
        DaemonError: ddod refused: INVALID_ARGUMENT (a bad table, a content hash mismatch),
            RESOURCE_EXHAUSTED (the pool budget), FAILED_PRECONDITION (the key is held by
            sessions with another structure), ABORTED (still being uploaded elsewhere when
            ``wait`` ran out).
    """
    entries = []
    for name, tensor in state_dict.items():
        if not isinstance(name, str):
            raise TensorTableError(f"state dict key {name!r} is not a string")
        module_path = name.rpartition(".")[0]
        entries.append(_Entry(name, tensor, module_path, "", False))
    return _register(
        rpc, cache_key, entries, units, content_hash, progress, wait, log, stall_timeout
    )


def register_module(
    rpc: RpcChannel,
    cache_key: str,
    module: nn.Module,
    *,
    units: UnitsArgument = "tensor",
    content_hash: Union[bool, str] = False,
    progress: Optional[bool] = None,
    wait: Optional[float] = None,
    log: Optional[LogFunction] = None,
    stall_timeout: Optional[float] = None,
) -> Component:
    """Puts a module's parameters and persistent buffers into ddod's pool under ``cache_key``.

    Names are the module's ``state_dict()`` names; a tensor shared by several names (tied
    weights) is stored once, under its first name, and :meth:`AttachedComponent.bind` binds it
    to every name again. ``module_path``, ``module_class`` and ``is_buffer`` come from the
    module. The other arguments are those of :func:`register_state_dict`.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"register_module takes an nn.Module, not {type(module).__name__}")
    entries = [
        _Entry(found.name, found.tensor, found.module_path, found.module_class, found.is_buffer)
        for found in unique(module_tensors(module))
    ]
    return _register(
        rpc, cache_key, entries, units, content_hash, progress, wait, log, stall_timeout
    )


class _Entry:
    """One tensor to register, with its table metadata."""

    __slots__ = ("name", "tensor", "module_path", "module_class", "is_buffer")

    def __init__(
        self, name: str, tensor: torch.Tensor, module_path: str, module_class: str, is_buffer: bool
    ) -> None:
        self.name = name
        self.tensor = tensor
        self.module_path = module_path
        self.module_class = module_class
        self.is_buffer = is_buffer


def _register(
    rpc: RpcChannel,
    cache_key: str,
    entries: List[_Entry],
    units: UnitsArgument,
    content_hash: Union[bool, str],
    progress: Optional[bool],
    wait: Optional[float],
    log: Optional[LogFunction],
    stall_timeout: Optional[float],
) -> Component:
    started = time.monotonic()
    _check_key(cache_key)
    specs = _tensor_table(entries, units)
    tensors = [entry.tensor for entry in entries]
    total = sum(spec.byte_size for spec in specs)
    reporter = ProgressReporter(cache_key, progress=progress, log=log)
    expected_hash = _content_hash_argument(content_hash, tensors)
    request = components_pb2.RegisterComponentRequest(
        lease_id=rpc.lease_id, cache_key=cache_key, tensors=specs, content_hash=expected_hash,
        upload_streams=upload_streams(),
    )
    with reporter:
        # One bar through the three stages: ddod reserves its memory, this process writes the
        # bytes, ddod verifies and pins them. It opens with the first stage: a warm hit has none.
        reporter.start(total, bar=False)
        response = _register_with_retry(rpc, request, wait, reporter, stall_timeout)
        if response.warm_hit:
            reporter.close()
            seconds = time.monotonic() - started
            reporter.message(
                f"ddo: {cache_key!r} is already in the pool ({format_bytes(total)}): "
                "nothing to upload"
            )
            return _warm_component(rpc, response.component, specs, seconds)
        try:
            if response.stream_names:
                info = _stream_upload(rpc, response, specs, tensors, reporter, stall_timeout)
            else:
                reporter.stage("writing", 0)
                _write_upload(response, specs, tensors, reporter, rpc.segment_opener)
                info = _commit_upload(rpc, response.upload_id, reporter, stall_timeout)
        except BaseException:
            _abort_upload(rpc, response.upload_id)
            raise
        seconds = time.monotonic() - started
        reporter.finish("registered", count=total, seconds=seconds)
    return Component.from_proto(info, warm_hit=False, seconds=seconds)


def register_derived(
    rpc: RpcChannel,
    cache_key: str,
    base_key: str,
    changed_specs: Sequence[components_pb2.TensorSpec],
    changed_bytes: Sequence[torch.Tensor],
    content_hash: str,
    *,
    wait: Optional[float] = None,
    seconds: Optional[Dict[str, float]] = None,
) -> Component:
    """Stores a derived version of the READY component ``base_key`` under ``cache_key``: the
    tensors ``changed_specs`` (in table order) hold ``changed_bytes`` (flat uint8 CPU tensors,
    hashed as ``content_hash``); every other tensor shares the base's bytes in ddod.

    ``seconds``, when given, receives the time of each step (``register``, ``write``,
    ``commit``: ddod verifies the hash and pins).

    Returns:
        The READY derived version; ``warm_hit`` when ddod had it already (nothing written).

    Raises:
        DaemonError: NOT_FOUND (no such base this caller may read), INVALID_ARGUMENT (a bad
            name, a hash mismatch at commit), RESOURCE_EXHAUSTED (no room for the changed
            bytes).
    """
    started = time.monotonic()
    _check_key(cache_key)
    request = components_pb2.RegisterComponentRequest(
        lease_id=rpc.lease_id, cache_key=cache_key, base_cache_key=base_key,
        changed_tensors=[spec.name for spec in changed_specs], content_hash=content_hash,
    )
    response = _register_with_retry(rpc, request, wait, ProgressReporter(cache_key, progress=False))
    registered = time.monotonic()
    steps = seconds if seconds is not None else {}
    steps["register"] = registered - started
    specs = list(changed_specs)
    if response.warm_hit:
        info = rpc.unary("GetComponent", components_pb2.GetComponentRequest(
            cache_key=cache_key))
        return Component.from_proto(info, warm_hit=True, seconds=time.monotonic() - started)
    reporter = ProgressReporter(cache_key, progress=False)
    try:
        _write_upload(response, specs, list(changed_bytes), reporter, rpc.segment_opener)
        written = time.monotonic()
        steps["write"] = written - registered
        info = _commit_upload(rpc, response.upload_id, reporter)
        steps["commit"] = time.monotonic() - written
    except BaseException:
        _abort_upload(rpc, response.upload_id)
        raise
    return Component.from_proto(info, warm_hit=False, seconds=time.monotonic() - started)


def _check_key(cache_key: str) -> None:
    if not isinstance(cache_key, str) or not cache_key:
        raise ConfigurationError(f"cache_key={cache_key!r} must be a non-empty string")


def _tensor_table(entries: List[_Entry], units: UnitsArgument) -> List[components_pb2.TensorSpec]:
    """The TensorSpecs of ``entries``; raises TensorTableError for what ddod cannot take."""
    if not entries:
        raise TensorTableError("there are no tensors to register")
    unit_of = _unit_numbers(entries, units)
    seen = set()
    specs = []
    for entry in entries:
        name, tensor = entry.name, entry.tensor
        if not name:
            raise TensorTableError("a tensor has an empty name")
        if name in seen:
            raise TensorTableError(f"tensor name {name!r} appears twice")
        seen.add(name)
        if not isinstance(tensor, torch.Tensor):
            raise TensorTableError(f"{name!r} is a {type(tensor).__name__}, not a torch.Tensor")
        if tensor.layout != torch.strided:
            raise TensorTableError(f"tensor {name!r} is {tensor.layout}; only dense tensors")
        if tensor.is_quantized:
            raise TensorTableError(f"tensor {name!r} is quantized; ddod stores plain dtypes")
        if tensor.device.type == "meta":
            raise TensorTableError(f"tensor {name!r} is on the meta device: it has no data")
        code = dtypes.to_proto(tensor.dtype, tensor_name=name)
        specs.append(
            components_pb2.TensorSpec(
                name=name,
                dtype=code,
                shape=list(tensor.shape),
                byte_size=tensor.numel() * dtypes.itemsize(code),
                module_path=entry.module_path,
                module_class=entry.module_class,
                unit=unit_of[name],
                is_buffer=entry.is_buffer,
            )
        )
    return specs


def _unit_numbers(entries: List[_Entry], units: UnitsArgument) -> Dict[str, int]:
    if isinstance(units, Mapping):
        missing = [entry.name for entry in entries if entry.name not in units]
        if missing:
            raise TensorTableError(f"units has no unit for {describe_names(missing)}")
        result = {}
        for entry in entries:
            unit = units[entry.name]
            if not isinstance(unit, int) or isinstance(unit, bool) or not 0 <= unit < 2**32:
                raise TensorTableError(f"units[{entry.name!r}]={unit!r} is not a uint32")
            result[entry.name] = unit
        return result
    if units == "tensor":
        return {entry.name: number for number, entry in enumerate(entries)}
    if units == "module":
        modules: Dict[str, int] = {}
        return {
            entry.name: modules.setdefault(entry.module_path, len(modules)) for entry in entries
        }
    raise ConfigurationError(
        f"units={units!r} must be 'tensor', 'module' or a mapping from tensor names to units"
    )


def _content_hash_argument(content_hash: Union[bool, str], tensors: List[torch.Tensor]) -> str:
    if content_hash is True:
        return compute_content_hash(tensors)
    if content_hash is False or content_hash is None:
        return ""
    if isinstance(content_hash, str):
        if content_hash and not is_hash(content_hash):
            raise ConfigurationError(
                f"content_hash={content_hash!r} is not of the form 'xxh3-64:<16 lowercase hex>'"
            )
        return content_hash
    raise ConfigurationError(f"content_hash={content_hash!r} must be a bool or a hash string")


def _register_with_retry(
    rpc: RpcChannel,
    request: components_pb2.RegisterComponentRequest,
    wait: Optional[float],
    reporter: ProgressReporter,
    stall_timeout: Optional[float] = None,
) -> components_pb2.RegisterComponentResponse:
    """RegisterComponent, retried every 100 ms while ddod answers ABORTED (someone else is
    uploading the key), for up to ``wait`` seconds. ddod's reservation of the upload's
    memory is the bar's "reserving" stage."""
    if wait is None:
        wait = rpc.timeout * _WAIT_TIMEOUTS
    deadline = time.monotonic() + wait
    while True:
        staged = False

        def on_progress(message: components_pb2.RegisterProgress) -> None:
            nonlocal staged
            if not staged and message.bytes_total:
                reporter.stage("reserving", message.bytes_total)
                staged = True
            reporter.update_to(message.bytes_done)

        try:
            final = follow_progress(
                rpc, "RegisterComponent", request, on_progress=on_progress,
                stall_timeout=stall_timeout,
            )
            return final.result
        except DaemonError as error:
            left = deadline - time.monotonic()
            if error.code != grpc.StatusCode.ABORTED or left <= 0:
                raise
        time.sleep(min(_RETRY_INTERVAL_S, left))


def _commit_upload(
    rpc: RpcChannel,
    upload_id: str,
    reporter: ProgressReporter,
    stall_timeout: Optional[float] = None,
    stage: str = "verifying and pinning",
) -> components_pb2.ComponentInfo:
    """CommitUpload: ddod reads a streamed upload's pipes, verifies the content hash and pins
    the segment (the bar's ``stage``); returns the READY component."""
    staged = False

    def on_progress(message: components_pb2.CommitProgress) -> None:
        nonlocal staged
        if not staged:
            reporter.stage(stage, message.bytes_total)
            staged = True
        reporter.update_to(message.bytes_done)

    request = components_pb2.CommitUploadRequest(lease_id=rpc.lease_id, upload_id=upload_id)
    final = follow_progress(
        rpc, "CommitUpload", request, on_progress=on_progress, stall_timeout=stall_timeout
    )
    return final.component


def _write_upload(
    response: components_pb2.RegisterComponentResponse,
    specs: List[components_pb2.TensorSpec],
    tensors: List[torch.Tensor],
    reporter: ProgressReporter,
    opener: SegmentOpener,
) -> None:
    """Writes every tensor into the segments at the placements ddod chose."""
    by_name = _placed_entries(response, specs, tensors)
    placements = list(response.placements)
    pieces = []
    for placement in placements:
        spec, tensor = by_name[placement.name]
        if placement.byte_size != spec.byte_size or placement.segment >= len(response.segments):
            raise DdoError(
                f"ddod placed {placement.name!r} at segment {placement.segment} with "
                f"{placement.byte_size} bytes; the table says {spec.byte_size} bytes and "
                f"there are {len(response.segments)} segments"
            )
        if spec.byte_size:
            pieces.append((placement.segment, placement.offset, tensor))
    segments = [(segment.shm_name, segment.size_bytes) for segment in response.segments]
    with SegmentWriter(segments, opener) as writer:
        write_placements(writer, pieces, on_bytes=reporter.update)


def _stream_upload(
    rpc: RpcChannel,
    response: components_pb2.RegisterComponentResponse,
    specs: List[components_pb2.TensorSpec],
    tensors: List[torch.Tensor],
    reporter: ProgressReporter,
    stall_timeout: Optional[float],
) -> components_pb2.ComponentInfo:
    """A streamed upload: writes each stream's tensors into its pipe on threads of their own
    while CommitUpload has ddod read them; returns the READY component. On failure the upload
    is aborted (ddod closes the pipes, so the writers end) before the writers are joined; a
    writer's own failure is the one raised."""
    streams = _stream_tensors(response, specs, tensors)
    fds: List[int] = []
    try:
        for name in response.stream_names:
            fds.append(rpc.open_upload_stream(name))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    failures: List[BaseException] = []

    def write() -> None:
        try:
            write_streams(fds, streams)
        except BaseException as error:  # reported by the caller's thread
            failures.append(error)

    writer = threading.Thread(target=write, name="ddo-stream-writers", daemon=True)
    writer.start()
    try:
        info = _commit_upload(rpc, response.upload_id, reporter, stall_timeout, "streaming")
    except BaseException as error:
        _abort_upload(rpc, response.upload_id)
        writer.join()
        if failures and isinstance(error, DaemonError):
            raise failures[0] from error
        raise
    writer.join()
    return info


def _stream_tensors(
    response: components_pb2.RegisterComponentResponse,
    specs: List[components_pb2.TensorSpec],
    tensors: List[torch.Tensor],
) -> List[List[torch.Tensor]]:
    """The tensors each stream carries, in the order of their offsets, from ddod's placements
    (checked against the table)."""
    by_name = _placed_entries(response, specs, tensors)
    placements = list(response.placements)
    count = len(response.stream_names)
    streams: List[List[torch.Tensor]] = [[] for _ in range(count)]
    for placement in sorted(placements, key=lambda p: p.offset):
        spec, tensor = by_name[placement.name]
        if placement.byte_size != spec.byte_size or placement.stream >= count:
            raise DdoError(
                f"ddod placed {placement.name!r} on stream {placement.stream} with "
                f"{placement.byte_size} bytes; the table says {spec.byte_size} bytes and "
                f"there are {count} streams"
            )
        if spec.byte_size:
            streams[placement.stream].append(tensor)
    return streams


def _placed_entries(
    response: components_pb2.RegisterComponentResponse,
    specs: List[components_pb2.TensorSpec],
    tensors: List[torch.Tensor],
) -> Dict[str, tuple]:
    """``{name: (spec, tensor)}`` once ddod's placements name each tensor of the table once."""
    by_name = {spec.name: (spec, tensor) for spec, tensor in zip(specs, tensors)}
    placed = [placement.name for placement in response.placements]
    if len(set(placed)) != len(placed) or set(placed) != set(by_name):
        raise DdoError(
            f"ddod's placements do not match the tensor table: missing "
            f"{describe_names(sorted(set(by_name) - set(placed)))}, unknown "
            f"{describe_names(sorted(set(placed) - set(by_name)))}"
        )
    return by_name


def _abort_upload(rpc: RpcChannel, upload_id: str) -> None:
    """AbortUpload, ignoring its failure (the upload may already be gone)."""
    try:
        rpc.unary(
            "AbortUpload",
            components_pb2.AbortUploadRequest(lease_id=rpc.lease_id, upload_id=upload_id),
        )
    except DdoError:
        pass


def _warm_component(
    rpc: RpcChannel,
    ref: components_pb2.ComponentRef,
    specs: List[components_pb2.TensorSpec],
    seconds: float,
) -> Component:
    """The Component of a warm hit: ddod's current record of it, or, when it was evicted in
    the meantime, what the RegisterComponent answer said."""
    try:
        info = rpc.unary(
            "GetComponent", components_pb2.GetComponentRequest(cache_key=ref.cache_key)
        )
    except DaemonError as error:
        if error.code != grpc.StatusCode.NOT_FOUND:
            raise
        info = components_pb2.ComponentInfo(
            ref=ref,
            state=components_pb2.COMPONENT_STATE_READY,
            tensor_count=len(specs),
            unit_count=len({spec.unit for spec in specs}),
        )
    return Component.from_proto(info, warm_hit=True, seconds=seconds)


# Loading safetensors files (ddod reads them, through descriptors the client passes:
# safetensors_inputs.py opens them).


def _keep_alive_seconds(keep_alive: Optional[Union[float, str]]) -> int:
    """LoadSafetensorsRequest.keep_alive_seconds: 0 for ddod's default, -1 for never."""
    if keep_alive is None:
        return 0
    if keep_alive == "never":
        return -1
    if isinstance(keep_alive, bool) or not isinstance(keep_alive, (int, float)) \
            or not 1 <= keep_alive <= 10 * 365 * 24 * 3600:
        raise ConfigurationError(
            f"keep_alive={keep_alive!r} must be seconds from 1 to ten years, \"never\" or None")
    return int(keep_alive)


# load_safetensors's file_tier argument.
_FILE_TIERS = {
    "auto": components_pb2.FILE_TIER_AUTO,
    "never": components_pb2.FILE_TIER_NEVER,
    "prefer": components_pb2.FILE_TIER_PREFER,
}


def load_safetensors(
    rpc: RpcChannel,
    cache_key: str,
    paths: Union[PathArgument, Sequence[PathArgument]],
    *,
    index_file: Optional[PathArgument] = None,
    units: Optional[Mapping[str, int]] = None,
    content_hash: str = "",
    progress: Optional[bool] = None,
    log: Optional[LogFunction] = None,
    stall_timeout: Optional[float] = None,
    keep_alive: Optional[Union[float, str]] = None,
    file_tier: str = "auto",
) -> Component:
    """Has ddod read ``*.safetensors`` files into its pool under ``cache_key``.

    The client opens the files (so they must be readable by this process) and passes their
    descriptors to ddod over the identity socket; ddod reads them and streams its progress
    back. Names, dtypes and shapes come from the files.

    Args:
        rpc: The channel of a connected client (``client.rpc``).
        cache_key: The component's name in the store.
        paths: A ``*.safetensors`` file, a list of them, or a model folder; relative paths are
            made absolute here.
        index_file: A ``*.safetensors.index.json`` whose shard list ddod checks against the
            files.
        units: Streaming unit per tensor name (default: one unit per tensor).
        content_hash: ``"xxh3-64:..."`` of the bytes in table order, for ddod to verify.
        progress: True, False or None (auto); see :mod:`diffusers_dynamic_offloader.progress`.
        log: Receives the summary line instead of stderr.
        stall_timeout: Give up when ddod sends no progress for this many seconds (default:
            the larger of 60 s and 12 client timeouts).
        keep_alive: Seconds without a session after which ddod evicts the component, or
            ``"never"``; None: ddod's ``--keep-alive`` (docs/deploy.md).
        file_tier: ``"auto"``: when the pool cannot hold the component, ddod keeps it in its
            files (the file tier: nothing read into the pool; sessions read the files as they
            stream); ``"never"``: refuse instead (RESOURCE_EXHAUSTED); ``"prefer"``: always
            keep it in its files.

    Returns:
        The READY component; ``warm_hit`` says whether it was already in the pool, ``tier``
        where its bytes are (``"POOL"`` or ``"FILE"``).

    Raises:
        InputFileError: an input is missing, unreadable, a FIFO or device, a folder without
            ``*.safetensors``, or has a name that cannot be passed (nothing is sent then).
        DaemonError: INVALID_ARGUMENT for a malformed file (the message names the file and the
            tensor), RESOURCE_EXHAUSTED for the pool budget.
        DdoError: ddod stalled, refused a file, or ended the stream without a result.
    """
    started = time.monotonic()
    _check_key(cache_key)
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    if content_hash and not is_hash(content_hash):
        raise ConfigurationError(
            f"content_hash={content_hash!r} is not of the form 'xxh3-64:<16 lowercase hex>'"
        )
    keep_alive_seconds = _keep_alive_seconds(keep_alive)
    tier = _FILE_TIERS.get(file_tier)
    if tier is None:
        raise ConfigurationError(
            f"file_tier={file_tier!r}: use one of {', '.join(sorted(_FILE_TIERS))}"
        )
    inputs = SafetensorsInputs.open(list(paths), index_file)
    passed = inputs.names_and_paths()
    try:
        file_handles, index_handle = inputs.pass_to(rpc)
    finally:
        inputs.close()  # ddod holds its own copies of the descriptors now
    # No paths: ddod reads only the descriptors passed above.
    request = components_pb2.LoadSafetensorsRequest(
        lease_id=rpc.lease_id,
        cache_key=cache_key,
        file_handles=file_handles,
        index_handle=index_handle,
        content_hash=content_hash,
        units=dict(units or {}),
        keep_alive_seconds=keep_alive_seconds,
        file_tier=tier,
    )
    with ProgressReporter(cache_key, progress=progress, log=log) as reporter:
        begun = False

        def on_progress(message: components_pb2.LoadProgress) -> None:
            nonlocal begun
            if not begun and message.bytes_total:
                reporter.start(message.bytes_total)
                begun = True
            reporter.update_to(message.bytes_done)

        try:
            final = follow_progress(
                rpc, "LoadSafetensors", request, on_progress=on_progress,
                stall_timeout=stall_timeout,
            )
        except DaemonError as error:
            raise naming_paths(error, passed) from error
        if not begun:
            # A warm hit answers at once with done: no bar for it.
            reporter.start(final.bytes_total, bar=False)
        seconds = time.monotonic() - started
        total = final.component.ref.total_bytes or final.bytes_total
        if final.warm_hit:
            reporter.message(
                f"ddo: {cache_key!r} is already in the pool ({format_bytes(total)}): "
                "nothing to load"
            )
        elif final.component.tier == components_pb2.COMPONENT_TIER_FILE:
            reporter.message(
                f"ddo: {cache_key!r} ({format_bytes(total)}) stays in its files (the file "
                "tier): ddod reads them as it streams"
            )
        elif final.component.tier == components_pb2.COMPONENT_TIER_SPLIT:
            reporter.message(
                f"ddo: {cache_key!r} ({format_bytes(total)}) is larger than the pool can give "
                f"it: {format_bytes(final.component.pool_bytes)} in the pool, "
                f"{format_bytes(final.component.file_bytes)} read from its files as it streams"
            )
        else:
            reporter.finish("loaded", count=total, seconds=final.seconds or seconds)
    return Component.from_proto(final.component, warm_hit=final.warm_hit, seconds=seconds)


# Attaching and managing.


def attach(rpc: RpcChannel, cache_key: str) -> AttachedComponent:
    """Opens a host session on a READY component and maps it copy-on-write into this process.

    Returns:
        The attached component; close it (or use it as a context manager) to end the session.
        Its tensors are copy-on-write views of ddod's copy: see the module documentation.

    Raises:
        DaemonError: NOT_FOUND (no READY component has the key), FAILED_PRECONDITION.
        DdoError: the segment cannot be mapped, or ddod's layout is inconsistent.
    """
    _check_key(cache_key)
    response = rpc.unary(
        "Attach", sessions_pb2.AttachRequest(lease_id=rpc.lease_id, cache_key=cache_key),
        timeout=MODEL_SIZED_TIMEOUT_S,
    )
    info = response.component
    try:
        mappings, tensors = map_component(info, rpc.segment_opener)
    except BaseException:
        detach_session(rpc, response.session_id, best_effort=True)
        raise
    return AttachedComponent(
        rpc, response.session_id, Component.from_proto(info), tensors, mappings
    )


def get_component(rpc: RpcChannel, cache_key: str, *, with_layout: bool = False) -> Component:
    """The READY component stored under ``cache_key``.

    Raises:
        DaemonError: NOT_FOUND when no READY component has the key.
    """
    info = rpc.unary(
        "GetComponent",
        components_pb2.GetComponentRequest(cache_key=cache_key, with_layout=with_layout),
    )
    return Component.from_proto(info)


def components(rpc: RpcChannel) -> List[Component]:
    """Every component in ddod's store, uploads in progress included (state UPLOADING)."""
    response = rpc.unary("ListComponents", components_pb2.ListComponentsRequest())
    return [Component.from_proto(info) for info in response.components]


def evict(rpc: RpcChannel, cache_key: str) -> int:
    """Removes a component from the pool; returns the bytes freed.

    Raises:
        DaemonError: NOT_FOUND (unknown key), FAILED_PRECONDITION (sessions hold it).
    """
    response = rpc.unary(
        "EvictComponent", components_pb2.EvictComponentRequest(cache_key=cache_key)
    )
    return response.freed_bytes
