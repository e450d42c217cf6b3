"""The first two steps of ``enable_offload``: resolve (ask ddod for the settings of the call)
and choose the route (from ddod's answer). The third, apply, is offload_api's.

Every rule here is ddod's: the precedence of the call's keywords, the environment, presets and
component policies, the names of a component's variables (``DDO_<C>_*``, from ddod's
``variable_prefix``) and the valid routes (ddod refuses another value, naming the choices).
What stays in Python is what ddod cannot see: which config fields the caller set, and whether
the module's weights are quantized (the quantized-backend rule of :func:`choose_route`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from dataclasses import fields as dataclass_fields
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple, Union

import torch
from torch import nn

from ..errors import ConfigurationError
from ..loaded_binding import loaded_key
from ..quantized import detect_quantized_backend_modules
from ..resolved_settings import ResolvedSettings, ResolvedValue, setting_text
from .offload_settings import DynamicOffloadSettings

#: Keyword overrides of the seed's DynamicOffloadConfig, by field name -> DDO_* variable: the
#: seed API's names for ddod's settings (ddod's catalog has the variables, not the fields).
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

#: DynamicOffloadConfig fields with no DDO_* variable: accepted, reported in the payload.
PYTHON_ONLY_FIELDS = ("profile_name", "build_profile", "target_module_classes",
                      "skip_modules_pattern", "execution_device", "offload_device",
                      "small_tensor_threshold_bytes", "_profile_budget_applied")


@dataclass(frozen=True)
class ComponentArguments:
    """enable_offload's keywords for the component itself (None: not given), sent to ddod as
    overrides of the component's ``DDO_<C>_<NAME>`` variables. The keyword -> NAME pairs are
    the seed API's; ddod checks the values (an unknown route is refused with the choices)."""

    route: Optional[str] = None
    group_offload: Optional[bool] = None
    dynamic_offload: Optional[bool] = None
    offload_type: Optional[str] = None
    use_stream: Optional[bool] = None
    record_stream: Optional[bool] = None
    group_low_cpu_mem_usage: Optional[bool] = None
    num_blocks_per_group: Optional[int] = None

    def overrides(self, prefix: str) -> Dict[str, object]:
        """The given keywords as ``{prefix + NAME: value}`` (``prefix``: ddod's ``DDO_<C>_``)."""
        pairs = (("ROUTE", self.route), ("GROUP_OFFLOAD", self.group_offload),
                 ("DYNAMIC_OFFLOAD", self.dynamic_offload), ("OFFLOAD_TYPE", self.offload_type),
                 ("OFFLOAD_STREAM", self.use_stream),
                 ("OFFLOAD_RECORD_STREAM", self.record_stream),
                 ("OFFLOAD_LOW_CPU_MEM_USAGE", self.group_low_cpu_mem_usage),
                 ("NUM_BLOCKS_PER_GROUP", self.num_blocks_per_group))
        return {prefix + name: value for name, value in pairs if value is not None}

    @property
    def any_given(self) -> bool:
        return any(getattr(self, item.name) is not None for item in dataclass_fields(self))

    @property
    def explicit_route(self) -> bool:
        """Whether the caller chose the route (anything but ``auto``)."""
        return self.route is not None and self.route.strip().lower() != "auto"


@dataclass(frozen=True)
class ResolvedCall:
    """What the resolve step found for one ``enable_offload`` call."""

    component: str
    settings: ResolvedSettings  # ddod's answer, the component among its components
    given_settings: Any  # the call's ``settings`` argument, as passed
    explicit: Dict[str, Any]  # the config fields the caller set (None dropped)
    execution_device: Union[str, torch.device]
    offload_device: Union[str, torch.device]
    arguments: ComponentArguments
    component_policies: Optional[Mapping[str, Mapping[str, object]]]
    config: Any  # the call's ``config`` argument
    client: Any
    profile: Any = None  # the NamedProfile of ``profile_name`` / ``build_profile``

    @property
    def values(self) -> Dict[str, ResolvedValue]:
        """ddod's values of the component, by ``DDO_<C>_<NAME>``."""
        return self.settings.components[self.component]

    def component_value(self, name: str) -> ResolvedValue:
        """The component's value of ``DDO_<C>_<name>`` (``name``: ``"OFFLOAD_TYPE"``...)."""
        return self.values[self.settings.variable_prefix(self.component) + name]


@dataclass(frozen=True)
class RouteChoice:
    """The route a component takes: ``route.value`` is ``dynamic_offload``,
    ``diffusers_group_offload`` or ``none``, ``route.source`` why (ddod's sources, or
    ``quantized_backend``); ``quantized`` is detect_quantized_backend_modules's report."""

    route: ResolvedValue
    quantized: Dict[str, Any] = field(default_factory=dict)


def client_of(client):
    """``client``, or the process's shared one."""
    from ..default_client import client_or_default

    return client_or_default(client)


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
    return client_of(client).resolve_settings(
        preset, environ=environ if use_environment else {}, overrides=overrides or {},
        components=list(components), component_policies=component_policies,
    )


def resolve_call(
    *,
    component: str,
    settings: Any,
    preset: str,
    arguments: ComponentArguments,
    environ: Optional[Mapping[str, str]],
    use_environment: bool,
    component_policies: Optional[Mapping[str, Mapping[str, object]]],
    config: Any,
    config_overrides: Mapping[str, Any],
    execution_device: Union[None, str, torch.device],
    offload_device: Union[None, str, torch.device],
    client,
) -> ResolvedCall:
    """Step 1 of ``enable_offload``: ddod's settings for the call (``ResolveSettings``), from
    its keywords, config fields, environment and the ``settings`` it was given.

    Raises:
        TypeError: a keyword that is no DynamicOffloadConfig field.
        InvalidSettingError: (a ValueError) ddod refused a value, e.g. an unknown route.
    """
    unknown = sorted(set(config_overrides) - set(CONFIG_FIELDS) - set(PYTHON_ONLY_FIELDS))
    if unknown:
        raise TypeError(f"Unknown DynamicOffloadConfig override(s): {', '.join(unknown)}")
    # Explicit fields, weakest first: a config edited on pre-resolved settings
    # (dataclasses.replace), config=, then keyword overrides. None means "the default".
    explicit = edited_config_fields(settings) if isinstance(settings, DynamicOffloadSettings) else {}
    if config is not None:
        explicit.update(config_fields(config))
    explicit.update(config_overrides)
    explicit = {name: value for name, value in explicit.items() if value is not None}
    overrides = setting_overrides(explicit)
    client = client_of(client)
    given = settings
    resolved = resolved_of(settings)
    seed_config = getattr(given, "config", None) if given is not None else config
    if execution_device is None:
        execution_device = getattr(seed_config, "execution_device", None) or "cuda:0"
    if offload_device is None:
        offload_device = getattr(seed_config, "offload_device", None) or "cpu"
    call_environ: Mapping[str, str] = (
        (os.environ if environ is None else environ) if use_environment else (environ or {}))
    # The component's variable names are ddod's (its variable_prefix), so they are read from
    # an answer of ddod before this call's resolve: the given settings when they have the
    # component, else ddod's answer for the component alone. Only when this call needs them.
    naming = (_naming(resolved, component, client)
              if arguments.any_given or given is not None else None)
    if arguments.any_given:
        overrides.update(arguments.overrides(naming.variable_prefix(component)))
    if resolved is None and isinstance(given, DynamicOffloadSettings):
        # Settings built by hand are used as given (the seed did): their preset, even "", their
        # plan switch and every config field; of the environment only the component's variables.
        overrides.setdefault("DDO_PLAN", given.plan)
        resolved = resolve_offload_settings(
            components=[component], preset=given.effective_preset,
            environ=_component_variables(call_environ, naming, component),
            overrides=overrides, component_policies=component_policies or given.component_policies,
            client=client)
    elif resolved is None:
        resolved = resolve_offload_settings(
            components=[component], preset=preset, environ=environ,
            use_environment=use_environment, overrides=overrides,
            component_policies=component_policies, client=client)
    else:
        component_environ = _component_variables(call_environ, naming, component)
        if (adds_to(resolved, overrides) or component_policies
                or component not in resolved.components
                or component_environ != _component_variables(resolved.inputs.environ, naming,
                                                             component)):
            # Pre-resolved settings (the seed's from_env) serve as they are unless this call
            # adds overrides, policies, a component they lack, or the component's variables
            # changed since: then ddod resolves again from what they were resolved from (their
            # preset, library environment and policies), with the component's variables read now.
            own = set(naming.component_variables(component))
            library_environ = {name: value for name, value in resolved.inputs.environ.items()
                               if name not in own}
            resolved = resolve_again(resolved, component, overrides, component_policies, client,
                                     environ={**library_environ, **component_environ})
    return ResolvedCall(component=component, settings=resolved, given_settings=given,
                        explicit=explicit, execution_device=execution_device,
                        offload_device=offload_device, arguments=arguments,
                        component_policies=component_policies,
                        config=config, client=client)


def choose_route(module: nn.Module, call: ResolvedCall,
                 quantized: Optional[Dict[str, Any]] = None) -> RouteChoice:
    """Step 2 of ``enable_offload``: the route ddod's answer gives the component
    (``DDO_<C>_ROUTE``, ``auto`` already decided by ddod). The one rule kept here, as ddod does
    not see the module's weights: a quantized or packed component whose route came from the
    defaults or a preset goes to Diffusers group offload instead of DDO (source
    ``quantized_backend``). ``quantized``: the module's report, when already detected."""
    if quantized is None:
        quantized = detect_quantized_backend_modules(module)
    chosen = call.component_value("ROUTE")
    if (quantized and chosen.value == "dynamic_offload" and not call.arguments.explicit_route
            and chosen.source in ("default", "preset")):
        chosen = ResolvedValue("diffusers_group_offload", "quantized_backend")
    elif (not quantized and loaded_key(module) is not None and chosen.value != "dynamic_offload"
          and not call.arguments.explicit_route and chosen.source in ("default", "preset")):
        # Built by load_from_ddod: ddod holds its weights, this process perhaps none.
        chosen = ResolvedValue("dynamic_offload", "loaded_from_ddod")
    return RouteChoice(chosen, quantized)


def with_named_profile(module: nn.Module, call: ResolvedCall,
                       choice: RouteChoice) -> Tuple[ResolvedCall, RouteChoice]:
    """A named profile's adjustment between steps 2 and 3 (``profile_name`` /
    ``build_profile``): calibration keeps nothing resident, a later run applies the measured
    budget (docs/seed.md, "Profiles"); ddod resolves again with that.

    Raises:
        ValueError: calibration off the DDO route, or what NamedProfile.prepare refuses.
    """
    explicit = call.explicit
    if explicit.get("build_profile") and choice.route.value != "dynamic_offload":
        raise ValueError("Profile calibration requires the dynamic_offload route.")
    if not (explicit.get("profile_name") or explicit.get("build_profile")):
        return call, choice
    from .named_profiles import NamedProfile

    settings = call.settings
    profile = NamedProfile(str(explicit.get("profile_name") or ""), module,
                           build=bool(explicit.get("build_profile")), client=call.client)
    call = dataclasses.replace(call, profile=profile)
    prepared = profile.prepare(
        explicit, execution_device=device_text(call.execution_device),
        execution_mode=settings.value("DDO_EXECUTION_MODE"),
        policy=settings.value("DDO_AUTO_BUDGET_POLICY"),
        headroom_gb=float(settings.value("DDO_PROFILE_VRAM_HEADROOM_GB") or 1),
        max_resident_gb=float(settings.value("DDO_MAX_RESIDENT_MODULE_BUDGET_GB") or 0),
        manual_budget_gb=float(settings.value("DDO_RESIDENT_MODULE_BUDGET_GB") or 0))
    if prepared != explicit:
        call = dataclasses.replace(call, explicit=prepared, settings=resolve_again(
            settings, call.component, setting_overrides(prepared), call.component_policies,
            call.client))
        choice = choose_route(module, call, choice.quantized)
    return call, choice


def _naming(resolved: Optional[ResolvedSettings], component: str, client) -> ResolvedSettings:
    """Settings resolved for ``component``, to read its variable names from: ``resolved`` when
    it has the component, else ddod's answer for the component alone (no preset, environment
    or overrides, so that nothing of the call can make this resolve fail)."""
    if resolved is not None and component in resolved.components:
        return resolved
    return client.resolve_settings("", environ={}, components=[component])


def _component_variables(environ: Mapping[str, str], naming: ResolvedSettings,
                         component: str) -> Dict[str, str]:
    """The component's own variables in ``environ`` (their names from ddod's answer)."""
    names = set(naming.component_variables(component))
    return {name: value for name, value in environ.items() if name in names}


def config_fields(config: Any):
    """The fields of a DynamicOffloadConfig (or any dataclass with the seed's field names)."""
    for item in dataclass_fields(config):
        yield item.name, getattr(config, item.name)


def setting_overrides(explicit: Mapping[str, Any]) -> Dict[str, object]:
    """DDO_* overrides of explicit config fields."""
    overrides: Dict[str, object] = {CONFIG_FIELDS[name]: setting_text(value)
                                    for name, value in explicit.items() if name in CONFIG_FIELDS}
    if "small_tensor_threshold_bytes" in explicit:
        kib = explicit["small_tensor_threshold_bytes"] / 1024
        overrides["DDO_SMALL_TENSOR_THRESHOLD_KB"] = setting_text(int(kib) if kib == int(kib) else kib)
    if not explicit.get("available_system_ram_gb"):  # 0: measure it, as the seed's resolver
        overrides.pop("DDO_AVAILABLE_SYSTEM_RAM_GB", None)
    return overrides


def edited_config_fields(settings: Any) -> Dict[str, Any]:
    """The fields of ``settings.config`` that differ from what its resolved values gave: a
    caller's ``dataclasses.replace(settings, config=replace(settings.config, ...))``; every
    field of settings built by hand."""
    if settings.resolved is None or settings.resolved_config is None:
        return dict(config_fields(settings.config))
    return {name: value for name, value in config_fields(settings.config)
            if value != getattr(settings.resolved_config, name)}


def resolve_again(settings: ResolvedSettings, component: str, overrides: Mapping[str, object],
                  component_policies: Optional[Mapping[str, Mapping[str, object]]],
                  client, components: Iterable[str] = (),
                  environ: Optional[Mapping[str, str]] = None) -> ResolvedSettings:
    """ddod's settings again, from what ``settings`` were resolved from, with more overrides,
    policies or components (``environ`` replaces their environment)."""
    inputs = settings.inputs
    policies: Dict[str, Dict[str, object]] = {
        name: dict(values) for name, values in inputs.component_policies.items()}
    for name, values in (component_policies or {}).items():
        policies.setdefault(name, {}).update(values)
    return client.resolve_settings(
        inputs.preset, environ=inputs.environ if environ is None else environ,
        overrides={**inputs.overrides, **overrides},
        components=sorted((set(settings.components) | {component} | set(components)) - {""}),
        component_policies=policies)


def adds_to(settings: ResolvedSettings, overrides: Mapping[str, object]) -> bool:
    """Whether ``overrides`` change what ``settings`` were resolved with."""
    given = settings.inputs.overrides
    return any(given.get(name) != setting_text(value) for name, value in overrides.items())


def resolved_of(settings: Any) -> Optional[ResolvedSettings]:
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


def device_text(device: Union[str, torch.device]) -> str:
    return str(torch.device(device)) if not isinstance(device, str) else device
