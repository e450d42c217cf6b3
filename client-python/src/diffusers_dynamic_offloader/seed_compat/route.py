"""Steps 1 to 3 of ``enable_offload`` for one component, and what undoes step 3.

Resolve: ddod resolves the settings (``ResolveSettings``: explicit keywords > the DDO_*
environment > ddod's environment > the preset > defaults). Choose the route: ddod's answer
gives it, and a component whose weights are quantized or packed is diverted to Diffusers group
offload when its route was left to ``auto`` (offload_call.py has both). Apply (here): the DDO
route uploads the component into ddod's pool (a warm hit when ddod already holds the same
bytes) and opens a streaming session on the execution device; the group route calls
``diffusers.hooks.apply_group_offloading`` with the resolved arguments; ``none`` moves the
module to the execution device.

Both ``offload_api`` (the seed's entry points) and ``offload_hook`` (the seed's hook, whose
``initialize_hook`` routes its module) import this module, which imports neither: the hook
class the DDO route hands back comes in ``ApplyOptions.hook_type``. That is what keeps the
two, mutually recursive by the seed's API, out of an import cycle.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch
from torch import nn

from ..errors import ConfigurationError
from ..loaded_binding import bind_again, forget_rebind, loaded_key
from ..quantized import route_reason
from ..resolved_settings import ResolvedSettings
from .component_keys import default_key
from .offload_call import (
    PYTHON_ONLY_FIELDS,
    ComponentArguments,
    ResolvedCall,
    RouteChoice,
    choose_route,
    device_text,
    resolve_call,
    with_named_profile,
)
from .offload_settings import DynamicOffloadSettings

#: The resolved settings a streaming session reads (docs/streaming.md), and those of the
#: balanced planner that sizes its resident budget when none is explicit. Kept here: ddod does
#: not answer which settings Attach reads, and the list is also part of the plan cache's key.
SESSION_SETTINGS = (
    "DDO_STREAM_UNIT", "DDO_RING_SLOTS", "DDO_VRAM_BUDGET_GB", "DDO_ACTIVATION_RESERVE_GB",
    "DDO_RESIDENT_MODULE_BUDGET_GB", "DDO_RESIDENT_MODULE_SELECTION",
    "DDO_SMALL_TENSOR_THRESHOLD_KB", "DDO_ALWAYS_RESIDENT_MODULE_PATTERNS",
    "DDO_RESIDENT_MODULE_PATTERNS",
    "DDO_AUTO_BUDGET_POLICY", "DDO_MAX_RESIDENT_MODULE_BUDGET_GB", "DDO_AUTO_VRAM_HEADROOM_GB",
    "DDO_AVAILABLE_SYSTEM_RAM_GB", "DDO_PIN_CPU_MEMORY", "DDO_PIN_WEIGHT_BUDGET_GB",
    "DDO_PIN_WEIGHT_BUDGET_RATIO", "DDO_MAX_PIN_WEIGHT_BUDGET_GB", "DDO_SYSTEM_RAM_HEADROOM_GB",
    "DDO_AUTO_FULL_PIN_MIN_MODEL_TO_VRAM_RATIO", "DDO_PROFILE_RESIDENT_MODULE_BUDGET_GB",
    "DDO_RESIDENT_BUDGET_RULE", "DDO_FUSED_LORA",
)

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

    ``hook`` is the :class:`DynamicOffloadHook` on the DDO route: holding the streaming session
    (close it, or call :func:`remove_dynamic_offload`, to give the device memory back), or the
    seed's plan-only hook in plan mode; else None. The fields
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


@dataclass(frozen=True)
class ApplyOptions:
    """enable_offload's keywords for the apply step."""

    apply_hook: bool = True
    cache_key: Optional[str] = None
    low_cpu_mem_usage: bool = True
    running_on_wsl: Optional[bool] = None
    record_event: Optional[EventCallback] = None
    dynamic_event_name: Optional[str] = None
    group_event_name: Optional[str] = None
    #: The DDO route's hook: ``hook_type.for_session(config, session, state)`` (the seed's
    #: DynamicOffloadHook; given by the caller, which keeps this module below offload_hook).
    hook_type: Any = None


def apply_route(module: nn.Module, call: ResolvedCall, choice: RouteChoice,
                options: ApplyOptions) -> DynamicOffloadApplyResult:
    """Step 3 of ``enable_offload``: puts the module on the chosen route (a streaming session
    of ddod, Diffusers group offload, or the execution device; with ``apply_hook=False`` only
    planned), fires the route's event and logs the component's setup line."""
    settings, component, explicit = call.settings, call.component, call.explicit
    chosen = choice.route
    payload: Dict[str, Any] = {
        "component": component,
        "preset": settings.effective_preset,
        "execution_mode": settings.value("DDO_EXECUTION_MODE"),
        "pin_cpu_memory": settings.value("DDO_PIN_CPU_MEMORY") == "1",
    }
    payload.update({name: value for name, value in explicit.items() if name in PYTHON_ONLY_FIELDS})
    if choice.quantized:
        payload["quantized_backend"] = choice.quantized
        if chosen.source == "quantized_backend":
            payload["route_reason"] = route_reason(choice.quantized)
    payload["route"] = chosen.value
    result = DynamicOffloadApplyResult(module, settings=_seed_settings(call, options),
                                       should_move_to_execution_device=False,
                                       route=chosen.value, component=component,
                                       _profile=call.profile)
    if call.profile is not None:
        payload["profile"] = call.profile.report
    started = time.perf_counter()
    warm_hit: Optional[bool] = None  # whether ddod had the weights (the DDO route)
    if chosen.value != "dynamic_offload" and loaded_key(module) is not None:
        bind_again(module)  # the other routes use the weights in this process
    if chosen.value == "dynamic_offload":
        warm_hit = _apply_dynamic_offload(module, call, result, payload, options, started)
    elif chosen.value == "diffusers_group_offload":
        _apply_group_offload(module, call, result.settings, payload, options, started)
    elif options.apply_hook:
        module.to(device_text(call.execution_device))
        payload["unmanaged_module_moved_to_execution_device"] = True
        _fire(options.record_event, f"move_{component}_to_execution_device", started, payload)
    else:
        result.should_move_to_execution_device = True
    result.event_payload = payload
    _log_setup(result, component, chosen.value, call.execution_device, call.offload_device,
               options.apply_hook, time.perf_counter() - started, warm_hit,
               payload.get("route_reason"))
    return result


def route_component(module: nn.Module, options: ApplyOptions, *,
                    settings: Optional[ResolvedSettings] = None, component: str = "model",
                    preset: str = "auto",
                    arguments: ComponentArguments = ComponentArguments(),
                    environ=None, use_environment: bool = True, component_policies=None,
                    config: Any = None, config_overrides: Optional[Dict[str, Any]] = None,
                    execution_device: Union[None, str, torch.device] = None,
                    offload_device: Union[None, str, torch.device] = None,
                    client=None) -> "DynamicOffloadApplyResult":
    """``enable_offload``'s three steps (its keywords, with its defaults): resolve, choose the
    route, apply. The DDO route's hook is an ``options.hook_type``."""
    call = resolve_call(
        component=component, settings=settings, preset=preset, arguments=arguments,
        environ=environ, use_environment=use_environment, component_policies=component_policies,
        config=config, config_overrides=config_overrides or {},
        execution_device=execution_device, offload_device=offload_device, client=client)
    choice = choose_route(module, call)
    call, choice = with_named_profile(module, call, choice)
    return apply_route(module, call, choice, options)


def _seed_settings(call: ResolvedCall, options: ApplyOptions) -> DynamicOffloadSettings:
    """The result's DynamicOffloadSettings: the caller's own when they are what ddod's answer
    came from (shared, as the seed's pipeline helper shares one object; settings built by hand
    are used as given), else built from ddod's answer (on WSL when the caller's say so)."""
    given, settings, explicit = call.given_settings, call.settings, call.explicit
    if isinstance(given, DynamicOffloadSettings) and given.resolved in (settings, None):
        return given
    wsl = options.running_on_wsl
    if wsl is None and isinstance(given, DynamicOffloadSettings):
        wsl = given.running_on_wsl
    return DynamicOffloadSettings.from_resolved(
        settings, execution_device=device_text(call.execution_device),
        offload_device=device_text(call.offload_device), running_on_wsl=wsl,
        component_policies=call.component_policies or settings.inputs.component_policies,
        **{name: tuple(explicit[name]) for name in (
            "target_module_classes", "skip_modules_pattern", "always_resident_modules_pattern")
           if name in explicit})


def same_library_values(first: ResolvedSettings, second: ResolvedSettings) -> bool:
    """Whether ddod gave both the same library values (sources and components aside)."""
    return ({name: value.value for name, value in first.values.items()}
            == {name: value.value for name, value in second.values.items()})


def _apply_dynamic_offload(module: nn.Module, call: ResolvedCall,
                           result: DynamicOffloadApplyResult, payload: Dict[str, Any],
                           options: ApplyOptions, started: float) -> Optional[bool]:
    """The DDO route: the component stored in ddod and a streaming session opened (plan mode:
    ddod's plan without a session). Returns whether ddod had the weights warm (None: no
    session)."""
    from ..runner_log import log_dynamic_setup
    from ..streaming import streamable_weights
    from .event_payload import build_dynamic_offload_event_payload
    from .offload_state import build_state
    from .plan_tools import PLAN_CACHE, plan_cache_key

    settings, component, client = call.settings, call.component, call.client
    seed_settings = result.settings
    execution_device = device_text(call.execution_device)
    apply_hook = options.apply_hook
    warm_hit: Optional[bool] = None
    enabled = (settings.value("DDO_EXECUTION_MODE") != "plan"
               or settings.value("DDO_PLAN") == "1" or call.config is not None)
    streaming = settings.value("DDO_EXECUTION_MODE") != "plan"
    session_settings = {name: settings.value(name) for name in SESSION_SETTINGS
                        if settings.values.get(name) and settings.value(name) != ""}
    if call.profile is not None and call.profile.build:
        session_settings["DDO_PROFILE_CALIBRATION"] = "1"
    if streaming and apply_hook and enabled:
        refuse_swap(settings.value("DDO_LINEAR_RUNTIME_STRATEGY"))
    cache_plan = settings.value("DDO_CACHE_PLAN") == "1"
    plan_key = plan_cache_key(module, seed_settings.config, execution_device,
                              session_settings, streaming)
    cached_plan = PLAN_CACHE.get(plan_key) if cache_plan else None
    if apply_hook and enabled and streaming:
        registered = time.perf_counter()
        # The default key holds the content hash, sent with the upload for ddod to check
        # (one pass over the bytes); a caller's own key is trusted as given.
        # A module built by load_from_ddod is its component: no hash, no upload (its weights
        # are ddod's copy, bound or given back, in the checkpoint's order, which a fresh
        # registration would not match).
        loaded = loaded_key(module)
        key, content_hash = ((options.cache_key or loaded, False)
                             if options.cache_key or loaded else default_key(module, component))
        if loaded is not None and loaded == key:
            stored = client.component(key)
            forget_rebind(module)
        else:
            stored = client.register_module(key, module, content_hash=content_hash)
        opened = time.perf_counter()
        session = client.stream(module, key, device=execution_device,
                                settings=session_settings,
                                keep_resident=_kept_resident(seed_settings.config))
        state = build_state(
            module, streamed=[p.name for unit in session.resources.units for p in unit.tensors],
            streamable=streamable_weights(module),
            decisions={d.key: d.value for d in session.plan.decisions},
            device=execution_device,
            pinned=seed_settings.effective_pin_cpu_memory, session=session)
        state.add_setup("register_module", opened - registered, stored.total_bytes)
        state.add_setup("open_session", time.perf_counter() - opened,
                        session.resources.resident_slab_bytes)
        session.state = state
        session.config = seed_settings.config
        session.verbose = bool(seed_settings.config.verbose)
        session.log_name = component
        warm_hit = bool(getattr(stored, "warm_hit", True))
        # ddod plans every session itself; the process's plan cache only records that
        # this structure was planned with these settings before.
        if cache_plan and cached_plan is None:
            PLAN_CACHE.put(plan_key, dict(state.planner_decisions))
        result.hook = options.hook_type.for_session(seed_settings.config, session, state)
        _attach_to(module, _SESSION_ATTRIBUTE, result.hook)
        payload.update({"cache_key": key, "session": session.stats()})
    else:
        result.should_move_to_execution_device = True
        # Plan mode: ddod's decisions for the module, without a session; the process's
        # plan cache answers a structure planned before with the same settings.
        if cached_plan is None:
            plan = client.explain_plan(module, component=component, device=execution_device,
                                       settings=session_settings)
            cached_plan = {"decisions": {d.key: d.value for d in plan.decisions},
                           "resident_bytes": int(plan.resident_bytes),
                           "streamed_bytes": int(plan.streamed_bytes)}
            if cache_plan:
                PLAN_CACHE.put(plan_key, cached_plan)
            cache_answer = "miss"
        else:
            cache_answer = "hit"
        state = build_state(module, streamed=[], streamable=[],
                            decisions=cached_plan["decisions"],
                            device=device_text(call.offload_device), pinned=False)
        state.entries = []  # placements are known only once a session plans them
        state.bytes_by_placement = {"resident_module": cached_plan["resident_bytes"],
                                    "streamed_large": cached_plan["streamed_bytes"]}
        state.planner_decisions["plan_cache"] = cache_answer if cache_plan else "disabled"
        if apply_hook and enabled:
            # The seed's plan-only hook: the plan is recorded, execution is unchanged.
            result.hook = options.hook_type.for_session(seed_settings.config, None, state)
            _attach_to(module, _SESSION_ATTRIBUTE, result.hook)
    if streaming and apply_hook and enabled:
        state.planner_decisions["plan_cache"] = (
            "disabled" if not cache_plan else "hit" if cached_plan is not None else "miss")
    _attach_to(module, _STATE_ATTRIBUTE, state)
    if seed_settings.config.verbose and result.hook is not None:
        log_dynamic_setup(component, state, seed_settings.config, time.perf_counter() - started)
    payload.update(build_dynamic_offload_event_payload(seed_settings, state))
    payload["execution_mode"] = settings.value("DDO_EXECUTION_MODE")
    # Explicit fields without a DDO_* variable are reported as given.
    payload.update({name: value for name, value in call.explicit.items()
                    if name in PYTHON_ONLY_FIELDS})
    _fire(options.record_event, options.dynamic_event_name or f"setup_{component}_dynamic_offload",
          started, payload)
    return warm_hit


def _apply_group_offload(module: nn.Module, call: ResolvedCall,
                         seed_settings: DynamicOffloadSettings, payload: Dict[str, Any],
                         options: ApplyOptions, started: float) -> None:
    """The Diffusers group-offload route, with the component's resolved arguments."""
    use_group_stream = call.component_value("OFFLOAD_STREAM").value == "1"
    record_group_stream = call.component_value("OFFLOAD_RECORD_STREAM").value == "1"
    # The seed's WSL rule: streams off where the settings (or the call's running_on_wsl) say
    # the process runs on WSL with DDO_DISABLE_PIN_ON_WSL on, over any explicit use_stream
    # (ddod applies it itself when it sees WSL).
    wsl = (options.running_on_wsl if options.running_on_wsl is not None
           else seed_settings.running_on_wsl)
    if wsl and seed_settings.disable_pin_on_wsl:
        use_group_stream = record_group_stream = False
    low_cpu = call.component_value("OFFLOAD_LOW_CPU_MEM_USAGE")
    group = enable_diffusers_group_offload(
        module,
        onload_device=call.execution_device,
        offload_device=call.offload_device,
        offload_type=call.component_value("OFFLOAD_TYPE").value,
        use_stream=use_group_stream,
        record_stream=record_group_stream,
        # The low_cpu_mem_usage argument is only the default: any layer that sets the
        # component's variable (policy, environment, preset, override) wins, as in the seed.
        low_cpu_mem_usage=(low_cpu.value == "1" if low_cpu.source != "default"
                           else options.low_cpu_mem_usage),
        num_blocks_per_group=int(call.component_value("NUM_BLOCKS_PER_GROUP").value or 1),
        apply_hook=options.apply_hook,
    )
    payload.update(group.event_payload)
    _fire(options.record_event, options.group_event_name or f"setup_{call.component}_group_offload",
          started, payload)


def _log_setup(result: DynamicOffloadApplyResult, component: str, route: str,
               execution_device: Union[str, torch.device],
               offload_device: Union[str, torch.device], applied: bool, seconds: float,
               warm_hit: Optional[bool], reason: Optional[str] = None) -> None:
    """The component's setup line (runner_log.log_component_setup), with why it took its
    route when that was not ddod's answer (``reason``)."""
    from ..runner_log import log_component_setup

    session = getattr(result.hook, "session", None)
    if route == "dynamic_offload":
        where = device_text(execution_device) if session is not None else "plan only"
    elif route == "diffusers_group_offload":
        where = f"{device_text(execution_device)} from {device_text(offload_device)}"
    else:
        where = device_text(execution_device) if applied else "where it was (not moved)"
    log_component_setup(component, route, where, seconds,
                        verbose=bool(getattr(result.settings.config, "verbose", False)),
                        session=session, warm_hit=warm_hit, reason=reason)


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


def _kept_resident(config: Any) -> Tuple[str, ...]:
    """Module-path regexes whose weights never stream: the config's skip_modules_pattern, and
    everything when its target classes leave nn.Linear out."""
    if not any(issubclass(nn.Linear, target) for target in config.target_module_classes):
        return ("",)
    return tuple(config.skip_modules_pattern)


def _fire(callback: Optional[EventCallback], name: str, started: float, payload: Dict[str, Any]) -> None:
    if callback is not None:
        callback(name, time.perf_counter() - started, **payload)


def refuse_swap(strategy: str) -> None:
    """The seed's experimental ``swap`` strategy (device copies assigned into ``weight.data``
    around the original forward) has no counterpart: a streamed Linear takes its weight from
    ddod's ring. Refused rather than ignored."""
    if strategy == "swap":
        raise ValueError(
            "DDO_LINEAR_RUNTIME_STRATEGY='swap' is not supported: ddod streams each Linear's "
            "weight through its device ring and the Linear computes with it (the seed's "
            "'functional' strategy). Unset DDO_LINEAR_RUNTIME_STRATEGY or set it to "
            "'functional'.")
