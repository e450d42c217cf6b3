"""The seed's settings objects: ``DynamicOffloadConfig`` and ``DynamicOffloadSettings``,
built from ddod's resolved settings (``ResolveSettings``) instead of a resolver of their own.

``DynamicOffloadSettings.from_env()`` (alias ``load_dynamic_offload_settings_from_env``) asks
ddod once; the objects are frozen and carry the :class:`ResolvedSettings` they came from, so
``enable_offload`` reuses the same resolution for every component of a pipeline.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Dict, Mapping, Optional, Tuple

from torch import nn

from ..errors import ConfigurationError
from .presets import get_available_system_ram_gb, is_wsl_environment
from ..resolved_settings import ResolvedSettings


@dataclass(frozen=True)
class DynamicOffloadConfig:
    """The seed's config, field for field (dataclass defaults are the seed's; the resolver's
    defaults come from ddod)."""

    execution_device: str = "cuda:0"
    offload_device: str = "cpu"
    target_module_classes: Tuple[type, ...] = (nn.Linear, nn.Embedding)
    skip_modules_pattern: Tuple[str, ...] = ()
    always_resident_modules_pattern: Tuple[str, ...] = ()
    small_tensor_threshold_bytes: int = 16 * 1024
    execution_mode: str = "plan"
    linear_runtime_strategy: str = "functional"
    pin_cpu_memory: bool = False
    allow_pin_memory_fallback: bool = True
    pin_cpu_workers: int = 1
    cache_plan: bool = True
    cache_pinned_weights: bool = False
    pinned_weight_cache_namespace: str = ""
    auto_budget_policy: str = "off"
    max_resident_module_budget_gb: float = 6.0
    auto_vram_headroom_gb: float = 0.0
    profile_vram_headroom_gb: float = 1.0
    profile_name: str = ""
    build_profile: bool = False
    auto_full_pin_min_model_to_vram_ratio: float = 4.0
    profile_resident_module_budget_gb: float = 0.0
    max_pin_weight_budget_gb: float = 0.0
    available_system_ram_gb: float = 0.0
    system_ram_headroom_gb: float = 6.0
    pin_weight_budget_gb: float = 0.0
    pin_weight_budget_ratio: float = 0.0
    pin_weight_selection: str = "spread"
    resident_module_budget_gb: float = 0.0
    resident_module_patterns: Tuple[str, ...] = ()
    resident_module_selection: str = "auto"
    load_safetensors_backend: str = ""
    verbose: bool = False
    show_profile: bool = True
    # Set by the seed's named profiles once a profile's budget was applied (issue 6 fills it).
    _profile_budget_applied: bool = False


def _number(values: Dict[str, str], name: str) -> float:
    text = values.get(name, "")
    return float(text) if text else 0.0


def _items(text: str) -> Tuple[str, ...]:
    return tuple(item for item in text.split(",") if item)


@dataclass(frozen=True)
class DynamicOffloadSettings:
    """The seed's settings: presets, enablement, pinning, platform, and the config."""

    requested_preset: str
    effective_preset: str
    enabled: bool
    plan: bool
    config: DynamicOffloadConfig
    requested_pin_cpu_memory: bool
    effective_pin_cpu_memory: bool
    disable_pin_on_wsl: bool
    running_on_wsl: bool
    component_policies: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    resolved: Optional[ResolvedSettings] = field(default=None, compare=False, repr=False)
    #: The config as ddod's values gave it: a caller's edits to ``config`` are what differs.
    resolved_config: Optional[DynamicOffloadConfig] = field(default=None, compare=False, repr=False)

    @property
    def execution_mode(self) -> str:
        return self.config.execution_mode

    @classmethod
    def from_resolved(
        cls,
        resolved: ResolvedSettings,
        *,
        execution_device: str = "cuda:0",
        offload_device: str = "cpu",
        target_module_classes: Tuple[type, ...] = (nn.Linear, nn.Embedding),
        skip_modules_pattern: Tuple[str, ...] = (),
        always_resident_modules_pattern: Optional[Tuple[str, ...]] = None,
        running_on_wsl: Optional[bool] = None,
        component_policies: Optional[Mapping[str, Mapping[str, Any]]] = None,
    ) -> "DynamicOffloadSettings":
        values = {name: value.value for name, value in resolved.values.items()}
        platform_rule = resolved.values["DDO_PIN_CPU_MEMORY"].source == "platform"
        requested_pin = values["DDO_PIN_CPU_MEMORY"] == "1" or platform_rule
        disable_pin_on_wsl = values["DDO_DISABLE_PIN_ON_WSL"] == "1"
        wsl = running_on_wsl if running_on_wsl is not None else (platform_rule or is_wsl_environment())
        effective_pin = requested_pin and not (wsl and disable_pin_on_wsl)
        plan = values["DDO_PLAN"] == "1"
        ram = _number(values, "DDO_AVAILABLE_SYSTEM_RAM_GB") or get_available_system_ram_gb()
        config = DynamicOffloadConfig(
            execution_device=str(execution_device),
            offload_device=str(offload_device),
            target_module_classes=tuple(target_module_classes),
            skip_modules_pattern=tuple(skip_modules_pattern),
            always_resident_modules_pattern=(
                tuple(always_resident_modules_pattern) if always_resident_modules_pattern is not None
                else _items(values["DDO_ALWAYS_RESIDENT_MODULE_PATTERNS"])),
            small_tensor_threshold_bytes=int(_number(values, "DDO_SMALL_TENSOR_THRESHOLD_KB") * 1024),
            execution_mode=values["DDO_EXECUTION_MODE"],
            linear_runtime_strategy=values["DDO_LINEAR_RUNTIME_STRATEGY"],
            pin_cpu_memory=effective_pin,
            allow_pin_memory_fallback=values["DDO_ALLOW_PIN_MEMORY_FALLBACK"] == "1",
            pin_cpu_workers=max(1, int(_number(values, "DDO_PIN_CPU_WORKERS"))),
            cache_plan=values["DDO_CACHE_PLAN"] == "1",
            cache_pinned_weights=values["DDO_CACHE_PINNED_WEIGHTS"] == "1",
            pinned_weight_cache_namespace=values["DDO_PINNED_WEIGHT_CACHE_NAMESPACE"],
            auto_budget_policy=values["DDO_AUTO_BUDGET_POLICY"],
            max_resident_module_budget_gb=_number(values, "DDO_MAX_RESIDENT_MODULE_BUDGET_GB"),
            auto_vram_headroom_gb=_number(values, "DDO_AUTO_VRAM_HEADROOM_GB"),
            profile_vram_headroom_gb=_number(values, "DDO_PROFILE_VRAM_HEADROOM_GB"),
            profile_resident_module_budget_gb=_number(values, "DDO_PROFILE_RESIDENT_MODULE_BUDGET_GB"),
            auto_full_pin_min_model_to_vram_ratio=_number(values, "DDO_AUTO_FULL_PIN_MIN_MODEL_TO_VRAM_RATIO"),
            max_pin_weight_budget_gb=_number(values, "DDO_MAX_PIN_WEIGHT_BUDGET_GB"),
            available_system_ram_gb=ram,
            system_ram_headroom_gb=_number(values, "DDO_SYSTEM_RAM_HEADROOM_GB"),
            pin_weight_budget_gb=_number(values, "DDO_PIN_WEIGHT_BUDGET_GB"),
            pin_weight_budget_ratio=min(1.0, max(0.0, _number(values, "DDO_PIN_WEIGHT_BUDGET_RATIO"))),
            pin_weight_selection=values["DDO_PIN_WEIGHT_SELECTION"],
            resident_module_budget_gb=_number(values, "DDO_RESIDENT_MODULE_BUDGET_GB"),
            resident_module_patterns=_items(values["DDO_RESIDENT_MODULE_PATTERNS"]),
            resident_module_selection=values["DDO_RESIDENT_MODULE_SELECTION"],
            load_safetensors_backend=(values["DDO_LOAD_SAFETENSORS_BACKEND"]
                                      or values["DDO_SAFETENSORS_BACKEND"]),
            verbose=values["DDO_VERBOSE"] == "1",
            show_profile=values["DDO_SHOW_PROFILE"] == "1",
        )
        return cls(
            requested_preset=resolved.requested_preset,
            effective_preset=resolved.effective_preset,
            enabled=plan or config.execution_mode != "plan",
            plan=plan,
            config=config,
            requested_pin_cpu_memory=requested_pin,
            effective_pin_cpu_memory=effective_pin,
            disable_pin_on_wsl=disable_pin_on_wsl,
            running_on_wsl=wsl,
            component_policies=dict(component_policies or {}),
            resolved=resolved,
            resolved_config=config,
        )

    def value(self, name: str) -> str:
        """ddod's resolved value of a library setting (KeyError for an unknown name)."""
        return self._resolved().value(name)

    @property
    def components(self) -> Dict[str, Any]:
        """ddod's resolved per-component values, by component name."""
        return self._resolved().components

    def _resolved(self):
        if self.resolved is None:
            raise ConfigurationError("these settings were not resolved by ddod "
                                     "(build them with DynamicOffloadSettings.from_env())")
        return self.resolved

    @classmethod
    def from_env(cls, **kwargs: Any) -> "DynamicOffloadSettings":
        return load_dynamic_offload_settings_from_env(**kwargs)

    def preset_value(self, name: str, default: str = "", environ: Optional[Mapping[str, str]] = None) -> str:
        """The environment's value when the variable exists (even empty), else the effective
        preset's, else ``default``."""
        source = os.environ if environ is None else environ
        if name in source:
            return source[name]
        if self.effective_preset:
            from .presets import get_dynamic_offload_presets
            from ..default_client import default_client

            preset = get_dynamic_offload_presets(default_client()).get(self.effective_preset, {})
            if name in preset:
                return preset[name]
        return default

    def preset_bool(self, name: str, default: str = "0", environ: Optional[Mapping[str, str]] = None) -> bool:
        return self.preset_value(name, default, environ).strip().lower() in ("1", "true", "yes", "on")

    def as_metrics(self) -> Dict[str, Any]:
        """Flat ``dynamic_offload_*`` keys: every config field (the small-tensor threshold in
        KB), the presets, the pin decision and the component policies."""
        metrics: Dict[str, Any] = {}
        for item in fields(self.config):
            value = getattr(self.config, item.name)
            if item.name == "small_tensor_threshold_bytes":
                metrics["dynamic_offload_small_tensor_threshold_kb"] = value // 1024
                continue
            if item.name == "target_module_classes":
                value = [cls.__name__ for cls in value]
            elif isinstance(value, tuple):
                value = list(value)
            metrics[f"dynamic_offload_{item.name}"] = value
        metrics.update({
            "dynamic_offload_requested_preset": self.requested_preset,
            "dynamic_offload_effective_preset": self.effective_preset,
            "dynamic_offload_enabled": self.enabled,
            "dynamic_offload_effective_pin_cpu_memory": self.effective_pin_cpu_memory,
            "dynamic_offload_disable_pin_on_wsl": self.disable_pin_on_wsl,
            "dynamic_offload_component_policies": {k: dict(v) for k, v in self.component_policies.items()},
        })
        return metrics


def load_dynamic_offload_settings_from_env(
    *,
    execution_device: str = "cuda:0",
    offload_device: str = "cpu",
    target_module_classes: Tuple[type, ...] = (nn.Linear, nn.Embedding),
    skip_modules_pattern: Tuple[str, ...] = (),
    always_resident_modules_pattern: Optional[Tuple[str, ...]] = None,
    running_on_wsl: Optional[bool] = None,
    environ: Optional[Mapping[str, str]] = None,
    default_preset: str = "",
    component_policies: Optional[Mapping[str, Mapping[str, Any]]] = None,
    components: Tuple[str, ...] = (),
    client=None,
) -> DynamicOffloadSettings:
    """The seed's resolver, asked of ddod: ``default_preset`` unless DDO_PRESET is set in
    ``environ`` (default ``os.environ``)."""
    from ..default_client import client_or_default

    client = client_or_default(client)
    resolved = client.resolve_settings(default_preset, environ=environ, components=list(components),
                                       component_policies=component_policies)
    return DynamicOffloadSettings.from_resolved(
        resolved, execution_device=execution_device, offload_device=offload_device,
        target_module_classes=target_module_classes, skip_modules_pattern=skip_modules_pattern,
        always_resident_modules_pattern=always_resident_modules_pattern,
        running_on_wsl=running_on_wsl, component_policies=component_policies)
