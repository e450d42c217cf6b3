"""How a streaming session binds its module to what ddod mapped, and hooks it.

The methods of :class:`SessionBinding`, a part of :class:`.streaming.StreamingSession`, which
keeps the RPC life cycle (Attach, mapping, the consumer, reattaching, closing) and calls these:
the module matched to the component, the resident tensors bound to their slab views and the
streamed weights to their host pool views (each a guarded tensor, :mod:`.shared_weights`), the
forward of every streamed Linear patched to take its weight from the ring, the root module's
forward, ``_apply`` and adapter methods hooked, and at the end every tensor given back
(``_restore``). Also :func:`streamable_weights`, what a session may stream.

Thread-safety: as the session (one forward at a time).
"""

from __future__ import annotations

import re
import weakref

from typing import Any, Callable, Dict, List, Mapping, NamedTuple, Sequence, Tuple

import torch
from torch import nn

from ._proto import components_pb2, sessions_pb2
from . import dtypes
from .casting_hooks import (
    CASTING_HOOK_FORWARD,
    CLASS_FORWARD,
    by_input_dtype,
    casting_forward,
    describe_forward,
    forward_kind,
    linear_compute_dtype,
)
from .compile_support import eager_only
from .errors import BindError, ConfigurationError, DdoError, describe_names
from .learned_rows import RowCounter
from .fused_on_arrival import streamed_deltas, take_over_merges
from .module_tensors import (
    ModuleTensor,
    alias_groups,
    assign,
    bind_group,
    match_module,
    module_tensors,
)
from .quantized import dense_linear_weight, quantized_backend_of
from .shared_weights import guard, is_guarded, plain
from .streamed_linear import cpp_streamed_forward, own_streamed_forward, streamed_forward
from .weight_watch import move_runner_owned, place_adapters_around, structure_version


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


class _Streamed(NamedTuple):
    """Where a streamed weight is: its unit and its index in the unit's tensors."""

    unit: int
    index: int


def _spec(
    specs: Mapping[str, components_pb2.TensorSpec], name: str, where: str
) -> components_pb2.TensorSpec:
    spec = specs.get(name)
    if spec is None:
        raise DdoError(f"ddod's {where} names {name!r}, which the component does not have")
    return spec


def _dtype(spec: components_pb2.TensorSpec) -> torch.dtype:
    return dtypes.to_torch(spec.dtype, tensor_name=spec.name)

class SessionBinding:
    """Binding and hooking the session's module (the module docstring). A mixin of
    StreamingSession over its state: reads ``module``, ``device``, ``fused_lora``,
    ``consumer_kind``, ``_consumer``, ``_slab``, ``_pool_views``, ``_request``, ``_versions``,
    ``_closed``, ``_bound``; owns ``_groups``, ``_bound_tensors``, ``_bound_views``,
    ``_requires_grad``, ``_moved_buffers``, ``_patched``, ``_original_forwards``, ``_hooks``,
    ``_adapter_methods``, ``_adapters_placed_at`` (declared in ``StreamingSession.__init__``)."""

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
