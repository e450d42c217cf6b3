"""diffusers_dynamic_offloader: run Diffusers models larger than VRAM, with weights served by ddod.

This package is the Python client of ddod, the DDO daemon. Importing it is cheap: it loads
gRPC and the protocol stubs, never torch. ``AttachedComponent``, ``BindResult`` and
``StreamingSession`` (and the component store and streaming methods of :class:`DdoClient`) load
torch when first used.
"""

from typing import Any

from ._version import __version__
from .client import DdoClient
from .component_info import Component
from .errors import (
    BindError,
    ConfigurationError,
    DaemonError,
    DaemonGoneError,
    DaemonUnavailableError,
    DdoError,
    EmbeddedDaemonError,
    InvalidSettingError,
    MissingDependencyError,
    SessionClosedError,
    StreamingError,
    TensorTableError,
)

__all__ = [
    "__version__",
    "DdoClient",
    "Component",
    "AttachedComponent",
    "BindResult",
    "DdoError",
    "ConfigurationError",
    "DaemonError",
    "DaemonUnavailableError",
    "EmbeddedDaemonError",
    "TensorTableError",
    "BindError",
    "MissingDependencyError",
    "StreamingError",
    "SessionClosedError",
    "DaemonGoneError",
    "StreamingSession",
    "detect_quantized_backend_modules",
    "ResolvedSettings",
    "DDO_PRESETS",
    "get_dynamic_offload_presets",
    "resolve_dynamic_offload_preset",
    "format_dynamic_offload_presets",
    "is_wsl_environment",
    "get_available_system_ram_gb",
    "enable_offload",
    "enable_pipeline_offload",
    "enable_dynamic_offload",
    "enable_diffusers_group_offload",
    "remove_dynamic_offload",
    "DynamicOffloadApplyResult",
    "DiffusersGroupOffloadResult",
    "get_dynamic_offload_state",
    "DynamicOffloadConfig",
    "DynamicOffloadSettings",
    "load_dynamic_offload_settings_from_env",
    "build_dynamic_offload_event_payload",
    "dynamic_offload_env_value",
    "dynamic_offload_preset_env_value",
    "from_pretrained_with_dynamic_offload",
    "DynamicOffloadLoadResult",
    "clear_dynamic_offload_pinned_tensor_cache",
    "InvalidSettingError",
    "enter_phase",
    "PHASES",
    "purge_windows_standby_cache",
    "purge_windows_standby_cache_event",
    "maybe_purge_windows_standby_cache",
    "DYNAMIC_OFFLOAD_PROFILE_SCHEMA_VERSION",
    "dynamic_offload_profile_key",
    "dynamic_offload_profile_path",
    "get_dynamic_offload_profile_capacity",
    "get_dynamic_offload_profile_dir",
    "get_dynamic_offload_profile_recommendation",
    "load_dynamic_offload_profile",
    "normalize_dynamic_offload_profile_context",
    "record_dynamic_offload_profile",
    "DynamicOffloadProfileSession",
    "profile_capacity_run",
    "run_staged",
    "Stages",
    "flux_stages",
    "load_from_ddod",
    "DdoLoadedComponent",
]

_LAZY = {
    "AttachedComponent": "attached",
    "BindResult": "attached",
    "StreamingSession": "streaming",
    "detect_quantized_backend_modules": "quantized",
    "ResolvedSettings": "resolved_settings",
    "DDO_PRESETS": "presets",
    "get_dynamic_offload_presets": "presets",
    "resolve_dynamic_offload_preset": "presets",
    "format_dynamic_offload_presets": "presets",
    "is_wsl_environment": "presets",
    "get_available_system_ram_gb": "presets",
    "enable_offload": "offload_api",
    "enable_pipeline_offload": "offload_api",
    "enable_dynamic_offload": "offload_api",
    "enable_diffusers_group_offload": "offload_api",
    "remove_dynamic_offload": "offload_api",
    "DynamicOffloadApplyResult": "offload_api",
    "DiffusersGroupOffloadResult": "offload_api",
    "get_dynamic_offload_state": "offload_api",
    "DynamicOffloadConfig": "offload_settings",
    "DynamicOffloadSettings": "offload_settings",
    "load_dynamic_offload_settings_from_env": "offload_settings",
    "build_dynamic_offload_event_payload": "event_payload",
    "dynamic_offload_env_value": "presets",
    "dynamic_offload_preset_env_value": "presets",
    "from_pretrained_with_dynamic_offload": "loading",
    "DynamicOffloadLoadResult": "loading",
    "clear_dynamic_offload_pinned_tensor_cache": "offload_api",
    "enter_phase": "phases",
    "PHASES": "phases",
    "purge_windows_standby_cache": "phases",
    "purge_windows_standby_cache_event": "phases",
    "maybe_purge_windows_standby_cache": "phases",
    "DYNAMIC_OFFLOAD_PROFILE_SCHEMA_VERSION": "profiles",
    "dynamic_offload_profile_key": "profiles",
    "dynamic_offload_profile_path": "profiles",
    "get_dynamic_offload_profile_capacity": "profiles",
    "get_dynamic_offload_profile_dir": "profiles",
    "get_dynamic_offload_profile_recommendation": "profiles",
    "load_dynamic_offload_profile": "profiles",
    "normalize_dynamic_offload_profile_context": "profiles",
    "record_dynamic_offload_profile": "profiles",
    "DynamicOffloadProfileSession": "profiles",
    "profile_capacity_run": "profiles",
    "run_staged": "staged",
    "Stages": "staged",
    "flux_stages": "staged",
    "load_from_ddod": "loading",
    "DdoLoadedComponent": "loading",
}


def __getattr__(name: str) -> Any:
    """Loads the torch-dependent names on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
