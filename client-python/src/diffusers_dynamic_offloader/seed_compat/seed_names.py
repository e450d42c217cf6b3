"""The seed's private module names that have no equivalent here, each with what replaced it.

A runner written for the seed may import a private name from the seed's modules
(``diffusers_dynamic_offloader.dynamic_offload``, ``.profiles``): its plan cache, its preset
table, its SDNQ probe constants. The names DDO still has resolve to DDO's objects; these raise
an ImportError that says what to use instead, rather than Python's bare "cannot import name".
An ImportError, not an AttributeError: ``from m import name`` replaces an AttributeError from a
module's ``__getattr__`` with its own message.
"""

from __future__ import annotations

from typing import Dict, NoReturn

_SDNQ = ("there is no SDNQ probe: a quantized (SDNQ) component goes to Diffusers group "
         "offload, which has no resident budget to probe")

#: Seed module (as the seed named it) -> private name -> what replaced it.
REPLACED: Dict[str, Dict[str, str]] = {
    "dynamic_offload": {
        "_DYNAMIC_OFFLOAD_PRESET_VALUES": "use DDO_PRESETS or get_dynamic_offload_presets() "
                                          "(ddod's preset table)",
        "_DYNAMIC_OFFLOAD_PLAN_CACHE": "use clear_dynamic_offload_plan_cache() (the cache is "
                                       "seed_compat.plan_tools.PLAN_CACHE)",
        "_DYNAMIC_OFFLOAD_PLAN_CACHE_LOCK": "use clear_dynamic_offload_plan_cache()",
        "_DYNAMIC_OFFLOAD_PINNED_TENSOR_CACHE": "use clear_dynamic_offload_pinned_tensor_cache() "
                                                "(pinned weights live in ddod's pool)",
        "_DYNAMIC_OFFLOAD_PINNED_TENSOR_CACHE_LOCK":
            "use clear_dynamic_offload_pinned_tensor_cache()",
        "_DEFAULT_TARGET_MODULE_CLASSES": "use DynamicOffloadConfig().target_module_classes",
        "_DEFAULT_ALWAYS_RESIDENT_MODULE_PATTERNS":
            "use load_dynamic_offload_settings_from_env().config.always_resident_modules_pattern "
            "(ddod's default of DDO_ALWAYS_RESIDENT_MODULE_PATTERNS)",
        "_DYNAMIC_OFFLOAD_HOOK": "use get_dynamic_offload_state(module) and "
                                 "remove_dynamic_offload(module) (no HookRegistry entry is made)",
        "_DDO_ENV_PREFIX":
            "use diffusers_dynamic_offloader.resolved_settings.environment_settings()",
        "_PIN_MEMORY_ERRORS":
            "there is none: ddod pins its pool, the runner calls no pin_memory()",
        "_AUTO_BUDGET_DISABLED": "use the DDO_AUTO_BUDGET_POLICY value 'off'",
        "_AUTO_BUDGET_BALANCED": "use the DDO_AUTO_BUDGET_POLICY value 'balanced'",
        "_component_preset_value": "use DynamicOffloadSettings.components[component] "
                                   "(ddod's per-component values)",
        "_component_preset_bool": "use DynamicOffloadSettings.components[component] "
                                  "(ddod's per-component values)",
    },
    "profiles": {
        "_json_value": "use normalize_dynamic_offload_profile_context()",
        "_merge_capacity_limits": "use record_dynamic_offload_profile() (it merges the limits)",
        "_PROFILE_PREFIX": "use dynamic_offload_profile_path(context)",
        "_SDNQ_DEFAULT_RESIDENT_CEILING_GB": _SDNQ,
        "_SDNQ_PROBE_MIN_SAFE_BUDGET_GB": _SDNQ,
    },
}


def missing_seed_name(seed_module: str, name: str) -> NoReturn:
    """Raises for ``name`` looked up on the seed's module ``seed_module`` and not found: an
    ImportError naming the replacement for a seed name DDO replaced, else AttributeError."""
    replacement = REPLACED.get(seed_module, {}).get(name)
    qualified = f"diffusers_dynamic_offloader.{seed_module}.{name}"
    if replacement is None:
        raise AttributeError(f"module 'diffusers_dynamic_offloader.{seed_module}' has no "
                             f"attribute {name!r}")
    raise ImportError(f"{qualified} was the seed's own and has no counterpart in DDO: "
                      f"{replacement}", name=f"diffusers_dynamic_offloader.{seed_module}")
