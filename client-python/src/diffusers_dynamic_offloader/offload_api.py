"""The seed's entry points, backed by ddod: ``enable_offload``, ``enable_pipeline_offload``,
``enable_dynamic_offload`` and ``enable_diffusers_group_offload``.

ddod decides: the settings are resolved by ``ResolveSettings`` (explicit keywords > the DDO_*
environment > ddod's environment > the preset > defaults), the route per component follows
from them, and a component whose weights are quantized or packed is diverted to Diffusers
group offload when its route was left to ``auto``. The DDO route uploads the component into
ddod's pool (a warm hit when ddod already holds the same bytes) and opens a streaming session
on the execution device; the group route calls ``diffusers.hooks.apply_group_offloading``
with the resolved arguments; ``none`` moves the module to the execution device.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Tuple, Union

import torch
from torch import nn

from .errors import ConfigurationError, DaemonError
from .offload_settings import DynamicOffloadSettings
from .quantized import detect_quantized_backend_modules
from .resolved_settings import ResolvedSettings, setting_text

#: Keyword overrides of the seed's DynamicOffloadConfig, by field name -> DDO_* variable.
CONFIG_FIELDS: Dict[str, str] = {
    "execution_mode": "DDO_EXECUTION_MODE",
    "linear_runtime_strategy": "DDO_LINEAR_RUNTIME_STRATEGY",
    "pin_cpu_memory": "DDO_PIN_CPU_MEMORY",
    "allow_pin_memory_fallback": "DDO_ALLOW_PIN_MEMORY_FALLBACK",
    "pin_cpu_workers": "DDO_PIN_CPU_WORKERS",
    "cache_plan": "DDO_CACHE_PLAN",
    "cache_pinned_weights": "DDO_CACHE_PINNED_WEIGHTS",
    "pinned_weight_cache_namespace": "DDO_PINNED_WEIGHT_CACHE_NAMESPACE",
    "auto_budget_policy": "DDO_AUTO_BUDGET_POLICY",
    "max_resident_module_budget_gb": "DDO_MAX_RESIDENT_MODULE_BUDGET_GB",
    "auto_vram_headroom_gb": "DDO_AUTO_VRAM_HEADROOM_GB",
    "auto_full_pin_min_model_to_vram_ratio": "DDO_AUTO_FULL_PIN_MIN_MODEL_TO_VRAM_RATIO",
    "max_pin_weight_budget_gb": "DDO_MAX_PIN_WEIGHT_BUDGET_GB",
    "system_ram_headroom_gb": "DDO_SYSTEM_RAM_HEADROOM_GB",
    "pin_weight_budget_gb": "DDO_PIN_WEIGHT_BUDGET_GB",
    "pin_weight_budget_ratio": "DDO_PIN_WEIGHT_BUDGET_RATIO",
    "pin_weight_selection": "DDO_PIN_WEIGHT_SELECTION",
    "resident_module_budget_gb": "DDO_RESIDENT_MODULE_BUDGET_GB",
    "resident_module_patterns": "DDO_RESIDENT_MODULE_PATTERNS",
    "resident_module_selection": "DDO_RESIDENT_MODULE_SELECTION",
    "small_tensor_threshold_kb": "DDO_SMALL_TENSOR_THRESHOLD_KB",
    "always_resident_modules_pattern": "DDO_ALWAYS_RESIDENT_MODULE_PATTERNS",
    "stream_unit": "DDO_STREAM_UNIT",
    "ring_slots": "DDO_RING_SLOTS",
    "vram_budget_gb": "DDO_VRAM_BUDGET_GB",
    "activation_reserve_gb": "DDO_ACTIVATION_RESERVE_GB",
    "available_system_ram_gb": "DDO_AVAILABLE_SYSTEM_RAM_GB",
    "profile_vram_headroom_gb": "DDO_PROFILE_VRAM_HEADROOM_GB",
    "load_safetensors_backend": "DDO_LOAD_SAFETENSORS_BACKEND",
    "verbose": "DDO_VERBOSE",
    "show_profile": "DDO_SHOW_PROFILE",
    "profile_resident_module_budget_gb": "DDO_PROFILE_RESIDENT_MODULE_BUDGET_GB",
}

#: The resolved settings a streaming session reads (docs/streaming.md), and those of the
#: balanced planner that sizes its resident budget when none is explicit.
SESSION_SETTINGS = (
    "DDO_STREAM_UNIT", "DDO_RING_SLOTS", "DDO_VRAM_BUDGET_GB", "DDO_ACTIVATION_RESERVE_GB",
    "DDO_RESIDENT_MODULE_BUDGET_GB", "DDO_RESIDENT_MODULE_SELECTION",
    "DDO_SMALL_TENSOR_THRESHOLD_KB", "DDO_ALWAYS_RESIDENT_MODULE_PATTERNS",
    "DDO_RESIDENT_MODULE_PATTERNS",
    "DDO_AUTO_BUDGET_POLICY", "DDO_MAX_RESIDENT_MODULE_BUDGET_GB", "DDO_AUTO_VRAM_HEADROOM_GB",
    "DDO_AVAILABLE_SYSTEM_RAM_GB", "DDO_PIN_CPU_MEMORY", "DDO_PIN_WEIGHT_BUDGET_GB",
    "DDO_PIN_WEIGHT_BUDGET_RATIO", "DDO_MAX_PIN_WEIGHT_BUDGET_GB", "DDO_SYSTEM_RAM_HEADROOM_GB",
    "DDO_AUTO_FULL_PIN_MIN_MODEL_TO_VRAM_RATIO", "DDO_PROFILE_RESIDENT_MODULE_BUDGET_GB",
    "DDO_RESIDENT_BUDGET_RULE",
)

VALID_ROUTES = "auto, dynamic_offload, diffusers_group_offload, none"

#: DynamicOffloadConfig fields with no DDO_* variable: accepted, reported in the payload.
_PYTHON_ONLY_FIELDS = ("profile_name", "build_profile", "target_module_classes",
                       "skip_modules_pattern", "execution_device", "offload_device",
                       "small_tensor_threshold_bytes", "_profile_budget_applied")


def _config_fields(config: Any):
    """The fields of a DynamicOffloadConfig (or any dataclass with the seed's field names)."""
    from dataclasses import fields as dataclass_fields

    for item in dataclass_fields(config):
        yield item.name, getattr(config, item.name)


# The streaming session and the state of a module enable_offload put on the DDO route live in
# the module's own attributes: nothing global keeps a module (or its device memory) alive, so
# dropping a pipeline without releasing its results still frees everything when collected.
_SESSION_ATTRIBUTE = "_ddo_streaming_session"
_STATE_ATTRIBUTE = "_ddo_offload_state"


def _attach_to(module: nn.Module, name: str, value: Any) -> None:
    object.__setattr__(module, name, value)


def _detach_from(module: nn.Module, name: str) -> Any:
    return module.__dict__.pop(name, None)
EventCallback = Callable[..., Any]


@dataclass
class DynamicOffloadApplyResult:
    """What ``enable_offload`` did to one component (the seed's result object).

    ``hook`` is the :class:`StreamingSession` on the DDO route (close it, or call
    :func:`remove_dynamic_offload`, to give the device memory back), else None. The fields
    come in the seed's order with its defaults; ``component`` is DDO's addition.
    """

    module: nn.Module
    hook: Any = None
    settings: Any = None  # DynamicOffloadSettings (its ``resolved``: ddod's answer with sources)
    should_move_to_execution_device: bool = True
    event_payload: Dict[str, Any] = field(default_factory=dict)
    route: str = "dynamic_offload"
    component: str = "model"
    _profile: Any = field(default=None, repr=False)

    def profile_run(self) -> contextlib.AbstractContextManager:
        """The seed's profiling context: a calibration run (``build_profile=True``) measures
        the block's peak VRAM and saves the resident budget; otherwise it does nothing."""
        from .named_profiles import profile_run_of

        return profile_run_of(self._profile)

    def release(self) -> None:
        """Gives back everything the route took: the streaming session closes (ddod frees its
        device memory), Diffusers group offload hooks come off (the weights stay on the offload
        device), and a module the result moved to the execution device moves back. What the
        seed's users had to do by hand before ``gc.collect()``. Idempotent."""
        remove_dynamic_offload(self)
        if self.route == "diffusers_group_offload":
            remove_diffusers_group_offload(self.module)
        if self.event_payload.pop("unmanaged_module_moved_to_execution_device", False):
            self.module.to(getattr(self.settings, "offload_device", None) or "cpu")

    def __enter__(self) -> "DynamicOffloadApplyResult":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()


@dataclass
class DiffusersGroupOffloadResult:
    module: nn.Module
    event_payload: Dict[str, Any] = field(default_factory=dict)


def _client(client):
    from .default_client import client_or_default

    return client_or_default(client)


def _prefix(component: str) -> str:
    """The seed's DDO_<C>_ prefix of a component name."""
    out, pending = [], False
    for char in component.upper():
        if char.isascii() and char.isalnum():
            if pending and out:
                out.append("_")
            pending = False
            out.append(char)
        else:
            pending = True
    return "DDO_" + ("".join(out) or "MODEL") + "_"


def resolve_offload_settings(
    *,
    components: Iterable[str],
    preset: str = "auto",
    environ: Optional[Mapping[str, str]] = None,
    use_environment: bool = True,
    overrides: Optional[Mapping[str, object]] = None,
    component_policies: Optional[Mapping[str, Mapping[str, object]]] = None,
    client=None,
) -> ResolvedSettings:
    """ddod's settings for these components (``use_environment=False``: an empty environment,
    as in the seed)."""
    return _client(client).resolve_settings(
        preset, environ=environ if use_environment else {}, overrides=overrides or {},
        components=list(components), component_policies=component_policies,
    )


def enable_offload(
    module: nn.Module,
    *,
    settings: Optional[ResolvedSettings] = None,
    component: str = "model",
    preset: str = "auto",
    route: Optional[str] = None,
    group_offload: Optional[bool] = None,
    dynamic_offload: Optional[bool] = None,
    offload_type: Optional[str] = None,
    use_stream: Optional[bool] = None,
    record_stream: Optional[bool] = None,
    group_low_cpu_mem_usage: Optional[bool] = None,
    num_blocks_per_group: Optional[int] = None,
    execution_device: Union[str, torch.device] = "cuda:0",
    offload_device: Union[str, torch.device] = "cpu",
    low_cpu_mem_usage: bool = True,
    running_on_wsl: Optional[bool] = None,
    environ: Optional[Mapping[str, str]] = None,
    use_environment: bool = True,
    component_policies: Optional[Mapping[str, Mapping[str, object]]] = None,
    config: Any = None,
    apply_hook: bool = True,
    record_event: Optional[EventCallback] = None,
    dynamic_event_name: Optional[str] = None,
    group_event_name: Optional[str] = None,
    cache_key: Optional[str] = None,
    client=None,
    **config_overrides: Any,
) -> DynamicOffloadApplyResult:
    """Routes one component (the seed's ``enable_offload``): DDO streaming, Diffusers group
    offload, or nothing, as ddod's resolved settings say.

    ``cache_key``: the key the component is stored under in ddod; by default the module's class
    and the component name, with a content hash so that different weights never share a key's
    warm copy (hashing reads every byte once per process; pass your own key to skip it).

    Raises:
        ValueError: an invalid route ("Valid values: auto, dynamic_offload, ...").
        TypeError: a keyword that is no DynamicOffloadConfig field.
        DaemonError: ddod refused a setting (INVALID_ARGUMENT names it).
    """
    unknown = sorted(set(config_overrides) - set(CONFIG_FIELDS) - set(_PYTHON_ONLY_FIELDS))
    if unknown:
        raise TypeError(f"Unknown DynamicOffloadConfig override(s): {', '.join(unknown)}")
    prefix = _prefix(component)
    # Explicit fields, weakest first: a config edited on pre-resolved settings
    # (dataclasses.replace), config=, then keyword overrides. None means "the default".
    explicit = _edited_config_fields(settings) if isinstance(settings, DynamicOffloadSettings) else {}
    if config is not None:
        explicit.update(_config_fields(config))
    explicit.update(config_overrides)
    explicit = {name: value for name, value in explicit.items() if value is not None}
    overrides = _setting_overrides(explicit)
    explicit_route = route is not None and route.strip().lower() != "auto"
    for suffix, value in (("ROUTE", route), ("GROUP_OFFLOAD", group_offload),
                          ("DYNAMIC_OFFLOAD", dynamic_offload), ("OFFLOAD_TYPE", offload_type),
                          ("OFFLOAD_STREAM", use_stream), ("OFFLOAD_RECORD_STREAM", record_stream),
                          ("OFFLOAD_LOW_CPU_MEM_USAGE", group_low_cpu_mem_usage),
                          ("NUM_BLOCKS_PER_GROUP", num_blocks_per_group)):
        if value is not None:
            overrides[prefix + suffix] = value
    if not low_cpu_mem_usage and group_low_cpu_mem_usage is None:
        overrides[prefix + "OFFLOAD_LOW_CPU_MEM_USAGE"] = False
    if route is not None and route.strip().lower() not in {
            "auto", "dynamic_offload", "diffusers_group_offload", "none", "diffusers",
            "diffusers_group", "group", "group_offload", "dynamic", "ddo", "cuda", "standard", "off"}:
        raise ValueError(f"Invalid route {route!r}. Valid values: {VALID_ROUTES}")
    client = _client(client)
    given = settings
    settings = _resolved_of(settings)
    if settings is None and isinstance(given, DynamicOffloadSettings):
        preset = given.requested_preset or preset
    if settings is None:
        settings = resolve_offload_settings(
            components=[component], preset=preset, environ=environ,
            use_environment=use_environment, overrides=overrides,
            component_policies=component_policies, client=client)
    elif (_adds_to(settings, overrides) or component_policies
          or component not in settings.components):
        # Pre-resolved settings (the seed's from_env) serve as they are unless this call adds
        # overrides, policies or a component they lack: then ddod resolves again from what
        # they were resolved from (their preset, environment and policies), plus the additions.
        settings = _resolve_again(settings, component, overrides, component_policies, client)
    profile = None
    if explicit.get("profile_name") or explicit.get("build_profile"):
        # A named profile: calibration keeps nothing resident, a later run applies the
        # measured budget (research/seed-ddo.md §5.2); then ddod resolves with that.
        from .named_profiles import NamedProfile

        profile = NamedProfile(str(explicit.get("profile_name") or ""), module,
                               build=bool(explicit.get("build_profile")), client=client)
        prepared = profile.prepare(
            explicit, execution_device=_device_text(execution_device),
            execution_mode=settings.value("DDO_EXECUTION_MODE"),
            policy=settings.value("DDO_AUTO_BUDGET_POLICY"),
            headroom_gb=float(settings.value("DDO_PROFILE_VRAM_HEADROOM_GB") or 1),
            max_resident_gb=float(settings.value("DDO_MAX_RESIDENT_MODULE_BUDGET_GB") or 0),
            manual_budget_gb=float(settings.value("DDO_RESIDENT_MODULE_BUDGET_GB") or 0))
        if prepared != explicit:
            explicit = prepared
            settings = _resolve_again(settings, component, _setting_overrides(explicit),
                                      component_policies, client)
    values = settings.components[component]

    chosen = values[prefix + "ROUTE"]
    payload: Dict[str, Any] = {
        "component": component,
        "preset": settings.effective_preset,
        "execution_mode": settings.value("DDO_EXECUTION_MODE"),
        "pin_cpu_memory": settings.value("DDO_PIN_CPU_MEMORY") == "1",
    }
    payload.update({name: value for name, value in explicit.items() if name in _PYTHON_ONLY_FIELDS})
    quantized = detect_quantized_backend_modules(module)
    if quantized:
        payload["quantized_backend"] = quantized
        route_left_to_policy = chosen.source in ("default", "preset") and not explicit_route
        if chosen.value == "dynamic_offload" and route_left_to_policy:
            chosen = type(chosen)("diffusers_group_offload", "quantized_backend")
            payload["route_reason"] = "quantized weights are moved whole by Diffusers group offload"
    if profile is not None and profile.build and chosen.value != "dynamic_offload":
        raise ValueError("Profile calibration requires the dynamic_offload route.")
    payload["route"] = chosen.value
    if isinstance(given, DynamicOffloadSettings) and given.resolved is settings:
        seed_settings = given  # shared, as the seed's pipeline helper shares one object
    else:
        seed_settings = DynamicOffloadSettings.from_resolved(
            settings, execution_device=_device_text(execution_device),
            offload_device=_device_text(offload_device), running_on_wsl=running_on_wsl,
            component_policies=component_policies or settings.inputs.component_policies,
            **{name: tuple(explicit[name]) for name in (
                "target_module_classes", "skip_modules_pattern", "always_resident_modules_pattern")
               if name in explicit})
    result = DynamicOffloadApplyResult(module, settings=seed_settings,
                                       should_move_to_execution_device=False,
                                       route=chosen.value, component=component, _profile=profile)
    if profile is not None:
        payload["profile"] = profile.report
    started = time.perf_counter()

    if chosen.value == "dynamic_offload":
        enabled = (settings.value("DDO_EXECUTION_MODE") != "plan"
                   or settings.value("DDO_PLAN") == "1" or config is not None)
        streaming = settings.value("DDO_EXECUTION_MODE") != "plan"
        from .event_payload import build_dynamic_offload_event_payload
        from .offload_state import build_state
        from .streaming import streamable_weights

        session_settings = {name: settings.value(name) for name in SESSION_SETTINGS
                            if settings.values.get(name) and settings.value(name) != ""}
        if profile is not None and profile.build:
            session_settings["DDO_PROFILE_CALIBRATION"] = "1"
        if apply_hook and enabled and streaming:
            key = cache_key or default_cache_key(module, component)
            registered = time.perf_counter()
            bound = getattr(module, "_ddo_attached_component", None)
            if bound is not None and not bound.closed and bound.cache_key == key:
                # Built by load_from_ddod: its weights are ddod's copy under this key already
                # (in the checkpoint's order, which a fresh registration would not match).
                stored = client.component(key)
            else:
                stored = client.register_module(key, module, content_hash=cache_key is None)
            opened = time.perf_counter()
            result.hook = client.stream(module, key, device=_device_text(execution_device),
                                        settings=session_settings,
                                        keep_resident=_kept_resident(seed_settings.config))
            _attach_to(module, _SESSION_ATTRIBUTE, result.hook)
            state = build_state(
                module, streamed=[p.name for unit in result.hook.resources.units for p in unit.tensors],
                streamable=streamable_weights(module),
                decisions={d.key: d.value for d in result.hook.plan.decisions},
                device=_device_text(execution_device),
                pinned=seed_settings.effective_pin_cpu_memory, session=result.hook)
            state.add_setup("register_module", opened - registered, stored.total_bytes)
            state.add_setup("open_session", time.perf_counter() - opened,
                            result.hook.resources.resident_slab_bytes)
            result.hook.state = state
            result.hook.config = seed_settings.config
            payload.update({"cache_key": key, "session": result.hook.stats()})
        else:
            result.should_move_to_execution_device = True
            # Plan mode: ddod's decisions for the module, without a session.
            plan = client.explain_plan(module, component=component,
                                       device=_device_text(execution_device),
                                       settings=session_settings)
            state = build_state(module, streamed=[], streamable=[],
                                decisions={d.key: d.value for d in plan.decisions},
                                device=_device_text(offload_device), pinned=False)
            state.entries = []  # placements are known only once a session plans them
            state.bytes_by_placement = {"resident_module": int(plan.resident_bytes),
                                        "streamed_large": int(plan.streamed_bytes)}
        _attach_to(module, _STATE_ATTRIBUTE, state)
        payload.update(build_dynamic_offload_event_payload(seed_settings, state))
        payload["execution_mode"] = settings.value("DDO_EXECUTION_MODE")
        # Explicit fields without a DDO_* variable are reported as given.
        payload.update({name: value for name, value in explicit.items()
                        if name in _PYTHON_ONLY_FIELDS})
        _fire(record_event, dynamic_event_name or f"setup_{component}_dynamic_offload",
              started, payload)
    elif chosen.value == "diffusers_group_offload":
        use_group_stream = values[prefix + "OFFLOAD_STREAM"].value == "1"
        record_group_stream = values[prefix + "OFFLOAD_RECORD_STREAM"].value == "1"
        # The seed's WSL rule, for a caller that says it runs on WSL (ddod applies it itself
        # when it sees WSL).
        if running_on_wsl and settings.value("DDO_DISABLE_PIN_ON_WSL") == "1":
            use_group_stream = record_group_stream = False
        group = enable_diffusers_group_offload(
            module,
            onload_device=execution_device,
            offload_device=offload_device,
            offload_type=values[prefix + "OFFLOAD_TYPE"].value,
            use_stream=use_group_stream,
            record_stream=record_group_stream,
            low_cpu_mem_usage=values[prefix + "OFFLOAD_LOW_CPU_MEM_USAGE"].value == "1",
            num_blocks_per_group=int(values[prefix + "NUM_BLOCKS_PER_GROUP"].value or 1),
            apply_hook=apply_hook,
        )
        payload.update(group.event_payload)
        _fire(record_event, group_event_name or f"setup_{component}_group_offload", started, payload)
    else:
        if apply_hook:
            module.to(_device_text(execution_device))
            payload["unmanaged_module_moved_to_execution_device"] = True
            _fire(record_event, f"move_{component}_to_execution_device", started, payload)
        else:
            result.should_move_to_execution_device = True
    result.event_payload = payload
    return result


def enable_dynamic_offload(module: nn.Module, *, event_name: str = "setup_dynamic_offload",
                           **kwargs: Any) -> DynamicOffloadApplyResult:
    """The DDO route, whatever the component's policy says (the seed's direct entry point)."""
    kwargs["route"] = "dynamic_offload"
    kwargs.setdefault("dynamic_event_name", event_name)
    return enable_offload(module, **kwargs)


def apply_dynamic_offload(module: nn.Module, config: Any = None, *, client=None,
                          **kwargs: Any) -> Any:
    """The seed's low-level entry point: the DDO route for ``module`` as ``config`` (a
    DynamicOffloadConfig; the seed's defaults when None) says, on its execution device.

    Returns the streaming session (the seed's DynamicOffloadHook: ``config``, ``state``,
    ``print_profile_summary``), or None in plan mode, where no session opens and the plan is
    ``get_dynamic_offload_state(module)``.
    """
    from .offload_settings import DynamicOffloadConfig

    config = config if config is not None else DynamicOffloadConfig()
    kwargs.setdefault("execution_device", config.execution_device)
    kwargs.setdefault("offload_device", config.offload_device)
    return enable_dynamic_offload(module, config=config, client=client, **kwargs).hook


def clear_dynamic_offload_plan_cache() -> None:
    """The seed's process-wide plan cache has no counterpart here: ddod plans each session
    when it opens (and remembers a component's learned schedule, which a new registration of
    the component replaces). Kept so that a seed runner that calls it runs unchanged."""


def enable_diffusers_group_offload(
    module: nn.Module,
    *,
    onload_device: Union[str, torch.device] = "cuda:0",
    offload_device: Union[str, torch.device] = "cpu",
    offload_type: str = "leaf_level",
    use_stream: bool = True,
    record_stream: bool = False,
    low_cpu_mem_usage: bool = True,
    num_blocks_per_group: int = 1,
    apply_hook: bool = True,
    record_event: Optional[EventCallback] = None,
    event_name: str = "setup_diffusers_group_offload",
) -> DiffusersGroupOffloadResult:
    """``diffusers.hooks.apply_group_offloading`` with the seed's arguments:
    ``num_blocks_per_group`` only for ``block_level``."""
    kwargs: Dict[str, Any] = {
        "onload_device": torch.device(onload_device),
        "offload_device": torch.device(offload_device),
        "offload_type": offload_type,
        "use_stream": use_stream,
        "record_stream": record_stream,
        "low_cpu_mem_usage": low_cpu_mem_usage,
    }
    if offload_type == "block_level":
        kwargs["num_blocks_per_group"] = num_blocks_per_group
    payload = {key: value for key, value in kwargs.items() if key not in ("onload_device", "offload_device")}
    started = time.perf_counter()
    if apply_hook:
        try:
            from diffusers.hooks import apply_group_offloading
        except ImportError as error:
            raise ConfigurationError(
                "the Diffusers group-offload route needs the diffusers package "
                f"({error}); install it or choose another route") from error
        apply_group_offloading(module, **kwargs)
    _fire(record_event, event_name, started, payload)
    return DiffusersGroupOffloadResult(module, payload)


# diffusers.hooks.group_offloading's hook names (module constants, not public API).
_GROUP_OFFLOAD_HOOKS = ("lazy_prefetch_group_offloading", "layer_execution_tracker",
                        "group_offloading")


def remove_diffusers_group_offload(module: nn.Module) -> bool:
    """Takes Diffusers' group offload hooks off ``module`` and its submodules (their weights
    stay where the last offload left them, on the offload device), so that the module can be
    routed again. Returns whether any hook was removed."""
    removed = False
    for submodule in module.modules():
        registry = getattr(submodule, "_diffusers_hook", None)
        if registry is None:
            continue
        for name in _GROUP_OFFLOAD_HOOKS:
            if registry.get_hook(name) is not None:
                registry.remove_hook(name, recurse=False)
                removed = True
    return removed


def enable_pipeline_offload(
    pipeline: Any,
    *,
    settings: Any = None,
    components: Union[None, Mapping[str, Any], Iterable[str]] = None,
    preset: str = "auto",
    environ: Optional[Mapping[str, str]] = None,
    use_environment: bool = True,
    client=None,
    **kwargs: Any,
) -> Dict[str, DynamicOffloadApplyResult]:
    """Routes every ``nn.Module`` component of a Diffusers pipeline, a ModularPipeline, a
    mapping, or the named attributes (schedulers, tokenizers and other non-modules are
    skipped). Settings are resolved once, for all components, and shared."""
    found = _pipeline_components(pipeline, components)
    client = _client(client)
    resolved = _resolved_of(settings)
    policies = kwargs.pop("component_policies", None)
    # Config fields given for the whole pipeline are resolved once, with the rest, so that
    # every component shares one settings object (as the seed's helper did).
    explicit = dict(_config_fields(kwargs["config"])) if kwargs.get("config") is not None else {}
    explicit.update({name: value for name, value in kwargs.items() if name in CONFIG_FIELDS})
    overrides = _setting_overrides({k: v for k, v in explicit.items() if v is not None})
    if resolved is None:
        resolved = resolve_offload_settings(
            components=list(found), preset=preset, environ=environ,
            use_environment=use_environment, overrides=overrides, component_policies=policies,
            client=client)
        settings = None
    elif (policies or _adds_to(resolved, overrides)
          or any(name not in resolved.components for name in found)):
        resolved = _resolve_again(resolved, "", overrides, policies, client,
                                  components=list(found))
        settings = None
    if not isinstance(settings, DynamicOffloadSettings):
        settings = DynamicOffloadSettings.from_resolved(
            resolved, execution_device=_device_text(kwargs.get("execution_device", "cuda:0")),
            offload_device=_device_text(kwargs.get("offload_device", "cpu")),
            running_on_wsl=kwargs.get("running_on_wsl"), component_policies=policies)
    results = {}
    for name, module in found.items():
        result = enable_offload(module, settings=settings, component=name, preset=preset,
                                environ=environ, use_environment=use_environment,
                                client=client, **kwargs)
        if result.should_move_to_execution_device and kwargs.get("apply_hook", True):
            # As the seed's pipeline helper: what no route placed runs on the device.
            module.to(_device_text(kwargs.get("execution_device", "cuda:0")))
            result.should_move_to_execution_device = False
            result.event_payload["unmanaged_module_moved_to_execution_device"] = True
        results[name] = result
    return results


def remove_dynamic_offload(target: Union[nn.Module, DynamicOffloadApplyResult],
                           recurse: bool = True) -> None:
    """Closes the streaming session of a module (and, with ``recurse``, of its submodules) or
    of an ``enable_offload`` result: the weights go back to host views and ddod frees the
    device memory."""
    if isinstance(target, DynamicOffloadApplyResult):
        if target.hook is not None:
            target.hook.close()
            _detach_from(target.module, _SESSION_ATTRIBUTE)
            target.hook = None
        _detach_from(target.module, _STATE_ATTRIBUTE)
        return
    modules = list(target.modules()) if recurse else [target]
    for module in modules:
        session = _detach_from(module, _SESSION_ATTRIBUTE)
        _detach_from(module, _STATE_ATTRIBUTE)
        if session is not None:
            session.close()


def get_dynamic_offload_state(module: nn.Module) -> Optional[Any]:
    """The DynamicOffloadState of a module on the DDO route (its session open, or planned in
    plan mode), or None."""
    state = module.__dict__.get(_STATE_ATTRIBUTE)
    if state is None or (state.session is not None and state.session.closed):
        return None
    return state


def default_cache_key(module: nn.Module, component: str) -> str:
    """The key enable_offload stores a component under when none is given: its class and
    component name (the content hash, checked at registration, tells different weights apart)."""
    return f"{type(module).__module__}.{type(module).__qualname__}/{component}"


def _kept_resident(config: Any) -> Tuple[str, ...]:
    """Module-path regexes whose weights never stream: the config's skip_modules_pattern, and
    everything when its target classes leave nn.Linear out."""
    if not any(issubclass(nn.Linear, target) for target in config.target_module_classes):
        return ("",)
    return tuple(config.skip_modules_pattern)


def _setting_overrides(explicit: Mapping[str, Any]) -> Dict[str, object]:
    """DDO_* overrides of explicit config fields."""
    overrides: Dict[str, object] = {CONFIG_FIELDS[name]: setting_text(value)
                                    for name, value in explicit.items() if name in CONFIG_FIELDS}
    if "small_tensor_threshold_bytes" in explicit:
        kib = explicit["small_tensor_threshold_bytes"] / 1024
        overrides["DDO_SMALL_TENSOR_THRESHOLD_KB"] = setting_text(int(kib) if kib == int(kib) else kib)
    if not explicit.get("available_system_ram_gb"):  # 0: measure it, as the seed's resolver
        overrides.pop("DDO_AVAILABLE_SYSTEM_RAM_GB", None)
    return overrides


def _edited_config_fields(settings: Any) -> Dict[str, Any]:
    """The fields of ``settings.config`` that differ from what its resolved values gave: a
    caller's ``dataclasses.replace(settings, config=replace(settings.config, ...))``; every
    field of settings built by hand."""
    if settings.resolved is None or settings.resolved_config is None:
        return dict(_config_fields(settings.config))
    return {name: value for name, value in _config_fields(settings.config)
            if value != getattr(settings.resolved_config, name)}


def _resolve_again(settings: ResolvedSettings, component: str, overrides: Mapping[str, object],
                   component_policies: Optional[Mapping[str, Mapping[str, object]]],
                   client, components: Iterable[str] = ()) -> ResolvedSettings:
    inputs = settings.inputs
    policies: Dict[str, Dict[str, object]] = {
        name: dict(values) for name, values in inputs.component_policies.items()}
    for name, values in (component_policies or {}).items():
        policies.setdefault(name, {}).update(values)
    return client.resolve_settings(
        inputs.preset, environ=inputs.environ, overrides={**inputs.overrides, **overrides},
        components=sorted((set(settings.components) | {component} | set(components)) - {""}),
        component_policies=policies)


def _adds_to(settings: ResolvedSettings, overrides: Mapping[str, object]) -> bool:
    """Whether ``overrides`` change what ``settings`` were resolved with."""
    given = settings.inputs.overrides
    return any(given.get(name) != setting_text(value) for name, value in overrides.items())


def _resolved_of(settings: Any) -> Optional[ResolvedSettings]:
    """ResolvedSettings from either form the seed's callers pass."""
    if settings is None or isinstance(settings, ResolvedSettings):
        return settings
    resolved = getattr(settings, "resolved", None)
    if isinstance(resolved, ResolvedSettings):
        return resolved
    if hasattr(settings, "config") and resolved is None:
        return None  # built by hand: resolved afresh, its config fields explicit
    raise ConfigurationError(
        f"settings must come from DynamicOffloadSettings.from_env() or resolve_settings(), "
        f"not {type(settings).__name__}")


def _pipeline_components(pipeline: Any, components) -> Dict[str, nn.Module]:
    if isinstance(components, Mapping):
        items = list(components.items())
    elif components is not None:
        items = [(name, getattr(pipeline, name, None)) for name in components]
    elif isinstance(getattr(pipeline, "components", None), Mapping):
        items = list(pipeline.components.items())
    elif isinstance(pipeline, Mapping):
        items = list(pipeline.items())
    else:
        items = [(name, getattr(pipeline, name, None))
                 for name in ("text_encoder", "text_encoder_2", "transformer", "unet", "vae")]
    return {name: module for name, module in items if isinstance(module, nn.Module)}


def _device_text(device: Union[str, torch.device]) -> str:
    return str(torch.device(device)) if not isinstance(device, str) else device


def _fire(callback: Optional[EventCallback], name: str, started: float, payload: Dict[str, Any]) -> None:
    if callback is not None:
        callback(name, time.perf_counter() - started, **payload)


def clear_dynamic_offload_pinned_tensor_cache(client=None) -> int:
    """The seed's pinned-weight cache lives in ddod here: evicts from ddod's pool the
    components this client stored or found there (``client.stored_keys``) that no session
    uses, and their warm device slabs with them. Other runners' components stay: a shared
    ddod keeps them warm, and evicts by its own RAM budget. Returns the bytes freed."""
    client = _client(client)
    freed = 0
    for component in client.components():
        if (component.cache_key not in client.stored_keys or component.sessions
                or component.state != "READY"):
            continue
        try:
            freed += client.evict(component.cache_key)
        except DaemonError as error:  # attached meanwhile, or gone: keep the rest going
            if error.code.name not in ("FAILED_PRECONDITION", "NOT_FOUND"):
                raise
    return freed
