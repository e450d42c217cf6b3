"""The seed's entry points, backed by ddod: ``enable_offload``, ``enable_pipeline_offload``,
``enable_dynamic_offload`` and ``enable_diffusers_group_offload``.

``enable_offload`` is three steps, resolve, choose the route and apply (route.py has them);
here are the entry points with the seed's keywords, which hand the apply step the seed's hook
class (``DynamicOffloadHook``), and their result objects (defined in route.py, named here as
before).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Mapping, Optional, Union

import torch
from torch import nn

from ..errors import DaemonError
from ..resolved_settings import ResolvedSettings
from .component_keys import default_cache_key, default_key  # noqa: F401 (its old home)
from .offload_call import (
    CONFIG_FIELDS,
    ComponentArguments,
    adds_to,
    client_of as _client,
    config_fields,
    device_text,
    resolve_again,
    resolve_offload_settings,
    resolved_of,
    setting_overrides,
)
from .offload_hook import DynamicOffloadHook
from .offload_settings import DynamicOffloadSettings
from .route import (  # noqa: F401 (the results and the route's helpers: their old home)
    SESSION_SETTINGS,
    _STATE_ATTRIBUTE,
    ApplyOptions,
    DiffusersGroupOffloadResult,
    DynamicOffloadApplyResult,
    EventCallback,
    apply_route,
    enable_diffusers_group_offload,
    remove_diffusers_group_offload,
    remove_dynamic_offload,
    route_component,
    same_library_values,
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
    execution_device: Union[None, str, torch.device] = None,
    offload_device: Union[None, str, torch.device] = None,
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

    ``cache_key``: the key the component is stored under in ddod; by default the module's
    class, the component name, the caller's uid and a digest of its tensor table and content
    hash (component_keys.py): two models of one class never share a key, the same model gets
    the same key in the next process (its warm copy). Hashing reads every byte once per call;
    pass your own key to skip it (ddod then trusts that the key names these weights).

    ``execution_device`` and ``offload_device`` default to those of ``settings`` (or
    ``config``), else ``cuda:0`` and ``cpu``. With ``settings`` given, its library settings are
    the ones it was resolved with; the component's ``DDO_<C>_*`` variables are read now, from
    ``environ`` (default ``os.environ``; none with ``use_environment=False``), as in the seed.

    Raises:
        ValueError: an invalid route (ddod's InvalidSettingError: "DDO_<C>_ROUTE='x' must be
            one of auto, dynamic_offload, ...").
        TypeError: a keyword that is no DynamicOffloadConfig field.
        DaemonError: ddod refused a setting (INVALID_ARGUMENT names it).
    """
    options = ApplyOptions(
        apply_hook=apply_hook, cache_key=cache_key, low_cpu_mem_usage=low_cpu_mem_usage,
        running_on_wsl=running_on_wsl, record_event=record_event,
        dynamic_event_name=dynamic_event_name, group_event_name=group_event_name,
        hook_type=DynamicOffloadHook)
    return route_component(
        module, options, settings=settings, component=component, preset=preset,
        arguments=ComponentArguments(route, group_offload, dynamic_offload, offload_type,
                                     use_stream, record_stream, group_low_cpu_mem_usage,
                                     num_blocks_per_group),
        environ=environ, use_environment=use_environment, component_policies=component_policies,
        config=config, config_overrides=config_overrides, execution_device=execution_device,
        offload_device=offload_device, client=client)


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

    Returns the seed's DynamicOffloadHook (``config``, ``state``, ``print_profile_summary``):
    holding the streaming session, or plan-only in plan mode (no session opens; the plan is
    its ``state``, also ``get_dynamic_offload_state(module)``).
    """
    from .offload_settings import DynamicOffloadConfig

    config = config if config is not None else DynamicOffloadConfig()
    kwargs.setdefault("execution_device", config.execution_device)
    kwargs.setdefault("offload_device", config.offload_device)
    return enable_dynamic_offload(module, config=config, client=client, **kwargs).hook


def clear_dynamic_offload_plan_cache() -> None:
    """Empties the process-wide plan cache (``DDO_CACHE_PLAN``): the next plan-mode setup of
    a structure asks ddod again, and every plan reports ``plan_cache: miss``."""
    from .plan_tools import PLAN_CACHE

    PLAN_CACHE.clear()


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
    given = settings
    # The devices default to the settings' (or config's) own, as in enable_offload.
    source_config = getattr(settings, "config", None) or kwargs.get("config")
    for name, fallback in (("execution_device", "cuda:0"), ("offload_device", "cpu")):
        if kwargs.get(name) is None:
            kwargs[name] = getattr(source_config, name, None) or fallback
    resolved = resolved_of(settings)
    policies = kwargs.pop("component_policies", None)
    # Config fields given for the whole pipeline are resolved once, with the rest, so that
    # every component shares one settings object (as the seed's helper did).
    explicit = dict(config_fields(kwargs["config"])) if kwargs.get("config") is not None else {}
    explicit.update({name: value for name, value in kwargs.items() if name in CONFIG_FIELDS})
    overrides = setting_overrides({k: v for k, v in explicit.items() if v is not None})
    hand_built = isinstance(settings, DynamicOffloadSettings) and settings.resolved is None
    if hand_built:
        pass  # used as given by every component (enable_offload resolves each from its fields)
    elif resolved is None:
        resolved = resolve_offload_settings(
            components=list(found), preset=preset, environ=environ,
            use_environment=use_environment, overrides=overrides, component_policies=policies,
            client=client)
        settings = None
    elif (policies or adds_to(resolved, overrides)
          or any(name not in resolved.components for name in found)):
        resolved = resolve_again(resolved, "", overrides, policies, client,
                                  components=list(found))
        settings = None
    if not isinstance(settings, DynamicOffloadSettings):
        settings = DynamicOffloadSettings.from_resolved(
            resolved, execution_device=device_text(kwargs.get("execution_device", "cuda:0")),
            offload_device=device_text(kwargs.get("offload_device", "cpu")),
            running_on_wsl=kwargs.get("running_on_wsl"), component_policies=policies)
    results = {}
    for name, module in found.items():
        result = enable_offload(module, settings=settings, component=name, preset=preset,
                                environ=environ, use_environment=use_environment,
                                client=client, **kwargs)
        if result.should_move_to_execution_device and kwargs.get("apply_hook", True):
            # As the seed's pipeline helper: what no route placed runs on the device.
            module.to(device_text(kwargs.get("execution_device", "cuda:0")))
            result.should_move_to_execution_device = False
            result.event_payload["unmanaged_module_moved_to_execution_device"] = True
        if (result.settings is settings and isinstance(given, DynamicOffloadSettings)
                and given.resolved is not None
                and same_library_values(given.resolved, settings.resolved)):
            # Resolved again only for the components' own values: the seed's helper hands
            # every component the caller's settings object itself.
            result.settings = given
        results[name] = result
    return results


def get_dynamic_offload_state(module: nn.Module) -> Optional[Any]:
    """The DynamicOffloadState of a module on the DDO route (its session open, or planned in
    plan mode), or None."""
    state = module.__dict__.get(_STATE_ATTRIBUTE)
    if state is None or (state.session is not None and state.session.closed):
        return None
    return state


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
