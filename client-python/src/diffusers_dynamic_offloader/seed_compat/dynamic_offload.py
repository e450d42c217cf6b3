"""The seed's ``diffusers_dynamic_offloader.dynamic_offload``: the one module the seed defined
its API in (docs/seed.md, "The module paths"), for runners that import from it. Every name is the
package's own object, from the module of this package that holds it. The names the seed's
profiles module (``_NamedProfile``, ``load_dynamic_offload_profile``, ...) resolve here
too; the seed's private names DDO replaced raise an ImportError naming the
replacement (:mod:`.seed_names`).
"""

from typing import Any

from ..quantized import detect_quantized_backend_modules
from .event_payload import build_dynamic_offload_event_payload
from .loading import DynamicOffloadLoadResult, from_pretrained_with_dynamic_offload
from .offload_api import (
    DiffusersGroupOffloadResult,
    DynamicOffloadApplyResult,
    apply_dynamic_offload,
    clear_dynamic_offload_pinned_tensor_cache,
    clear_dynamic_offload_plan_cache,
    enable_diffusers_group_offload,
    enable_dynamic_offload,
    enable_offload,
    enable_pipeline_offload,
    get_dynamic_offload_state,
    remove_dynamic_offload,
)
from .offload_hook import DynamicOffloadHook
from .offload_settings import (
    DynamicOffloadConfig,
    DynamicOffloadSettings,
    load_dynamic_offload_settings_from_env,
)
from .offload_state import DynamicOffloadPlanEntry, DynamicOffloadState
from .phases import (
    maybe_purge_windows_standby_cache,
    purge_windows_standby_cache,
    purge_windows_standby_cache_event,
)
from .plan_tools import build_dynamic_offload_plan, get_cuda_total_vram_gb
from .presets import (
    dynamic_offload_env_value,
    dynamic_offload_preset_env_value,
    format_dynamic_offload_presets,
    get_available_system_ram_gb,
    get_dynamic_offload_presets,
    is_wsl_environment,
    resolve_dynamic_offload_preset,
)
from .seed_names import missing_seed_name

__all__ = [
    "DDO_PRESETS", "DiffusersGroupOffloadResult", "DynamicOffloadApplyResult",
    "DynamicOffloadConfig", "DynamicOffloadHook", "DynamicOffloadLoadResult",
    "DynamicOffloadPlanEntry", "DynamicOffloadSettings", "DynamicOffloadState",
    "apply_dynamic_offload", "build_dynamic_offload_event_payload",
    "build_dynamic_offload_plan", "clear_dynamic_offload_pinned_tensor_cache",
    "clear_dynamic_offload_plan_cache", "detect_quantized_backend_modules",
    "dynamic_offload_env_value", "dynamic_offload_preset_env_value",
    "enable_diffusers_group_offload", "enable_dynamic_offload", "enable_offload",
    "enable_pipeline_offload", "format_dynamic_offload_presets",
    "from_pretrained_with_dynamic_offload", "get_available_system_ram_gb",
    "get_cuda_total_vram_gb", "get_dynamic_offload_presets", "get_dynamic_offload_state",
    "is_wsl_environment", "load_dynamic_offload_settings_from_env",
    "maybe_purge_windows_standby_cache", "purge_windows_standby_cache",
    "purge_windows_standby_cache_event", "remove_dynamic_offload",
    "resolve_dynamic_offload_preset",
]


#: The seed's profiles names (its dynamic_offload used ``_NamedProfile`` from there),
#: resolved here too for runners that import them from this module.
_FROM_PROFILES = ("_NamedProfile", "_CudaPeakSampler", "DynamicOffloadProfileSession",
                  "DYNAMIC_OFFLOAD_PROFILE_SCHEMA_VERSION", "dynamic_offload_profile_key",
                  "dynamic_offload_profile_path", "get_dynamic_offload_profile_capacity",
                  "get_dynamic_offload_profile_dir", "get_dynamic_offload_profile_recommendation",
                  "load_dynamic_offload_profile", "normalize_dynamic_offload_profile_context",
                  "record_dynamic_offload_profile")


def __getattr__(name: str) -> Any:
    # DDO_PRESETS is read from ddod on first access, by presets (PEP 562): the same dict.
    if name == "DDO_PRESETS":
        from . import presets

        return presets.DDO_PRESETS
    if name in _FROM_PROFILES:
        from . import profiles

        return getattr(profiles, name)
    missing_seed_name("dynamic_offload", name)
