"""The seed's event payload of the DDO route (docs/seed.md, "the event payload"), from the
settings and the module's DynamicOffloadState."""

from __future__ import annotations

from typing import Any, Dict, Optional

#: Config fields the seed's payload carries, by name.
_CONFIG_KEYS = (
    "execution_mode", "allow_pin_memory_fallback", "cache_plan", "cache_pinned_weights",
    "pinned_weight_cache_namespace", "load_safetensors_backend", "auto_budget_policy",
    "max_resident_module_budget_gb", "auto_full_pin_min_model_to_vram_ratio",
    "profile_resident_module_budget_gb", "max_pin_weight_budget_gb", "available_system_ram_gb",
    "system_ram_headroom_gb", "pin_weight_budget_gb", "pin_weight_budget_ratio",
    "pin_weight_selection",
)

#: The state's keys the payload carries.
_STATE_KEYS = ("module_count", "total_gb", "bytes_by_placement", "patched_module_count",
               "sdnq_parameter_pinning", "resolved_resident_module_patterns",
               "planner_decisions", "setup_runtime")


def build_dynamic_offload_event_payload(settings: Any, state: Any = None,
                                        config: Any = None) -> Dict[str, Any]:
    """The seed's keys: the plan summary (``module_count``, ``total_gb``,
    ``bytes_by_placement`` in GB by placement), the config's fields (``config``, else
    ``settings.config``), ``pin_cpu_memory`` (the settings' effective pin), and the state's
    ``patched_module_count``, ``sdnq_parameter_pinning``, ``resolved_resident_module_patterns``,
    ``planner_decisions`` and ``setup_runtime``. ``state`` is a DynamicOffloadState (or its
    ``as_dict()``); None gives an empty plan."""
    config = config if config is not None else settings.config
    payload: Dict[str, Any] = {key: getattr(config, key) for key in _CONFIG_KEYS}
    payload["pin_cpu_memory"] = settings.effective_pin_cpu_memory
    summary: Optional[Dict[str, Any]] = None
    if state is not None:
        summary = state if isinstance(state, dict) else state.as_dict()
    if summary is None:
        summary = {"module_count": 0, "total_gb": 0.0, "bytes_by_placement": {},
                   "patched_module_count": 0, "resolved_resident_module_patterns": [],
                   "sdnq_parameter_pinning": {"pinned_count": 0, "pinned_gb": 0.0,
                                              "unpinned_count": 0, "unpinned_gb": 0.0},
                   "planner_decisions": {}, "setup_runtime": {}}
    payload.update({key: summary[key] for key in _STATE_KEYS if key in summary})
    return payload
