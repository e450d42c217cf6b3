"""The seed's event payload of the DDO route (research/seed-ddo.md §1.5), from a streaming
session and the settings it was opened with."""

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


def build_dynamic_offload_event_payload(settings: Any, session: Any = None,
                                        setup_seconds: Optional[float] = None) -> Dict[str, Any]:
    """The payload keys of the seed: the plan summary (``module_count``, ``total_gb``,
    ``bytes_by_placement``), the config's fields, ``pin_cpu_memory`` (effective), and the
    state's (``patched_module_count``, ``resolved_resident_module_patterns``,
    ``planner_decisions``, ``setup_runtime``). ``settings`` is a DynamicOffloadSettings;
    ``session`` the StreamingSession (None in plan mode)."""
    config = settings.config
    payload: Dict[str, Any] = {key: getattr(config, key) for key in _CONFIG_KEYS}
    payload["pin_cpu_memory"] = settings.effective_pin_cpu_memory
    payload["resolved_resident_module_patterns"] = list(config.resident_module_patterns)
    if session is None:
        payload.update(module_count=0, total_gb=0.0, bytes_by_placement={},
                       patched_module_count=0, planner_decisions={}, setup_runtime={})
        return payload
    resources = session.resources
    streamed = sum(placement.byte_size for unit in resources.units for placement in unit.tensors)
    resident = sum(placement.byte_size for placement in resources.resident)
    patched = sum(len(unit.tensors) for unit in resources.units)
    payload.update(
        module_count=patched + len({p.name.rsplit(".", 1)[0] for p in resources.resident}),
        total_gb=round((streamed + resident) / 2**30, 4),
        bytes_by_placement={"resident": resident, "streamed": streamed},
        patched_module_count=patched,
        planner_decisions={d.key: d.value for d in session.plan.decisions},
        setup_runtime={} if setup_seconds is None else {"open_session": {"seconds": round(setup_seconds, 4)}},
        sdnq_parameter_pinning={"pinned_count": 0, "pinned_gb": 0.0, "unpinned_count": 0,
                                "unpinned_gb": 0.0},
    )
    return payload
