"""The seed's ``diffusers_dynamic_offloader.profiles``: capacity profiles and their sessions
(docs/seed.md, "Profiles"), and the names of its named-profile machinery.

The records themselves (keys, validation, merging, ddod's store) are :mod:`.profile_records`;
named workload profiles are :mod:`.named_profiles`. This module gives them under the seed's
names, with the seed's ``_NamedProfile(module, config)`` and ``_CudaPeakSampler`` that its
tests and runners import; the seed's other private names raise an ImportError naming what
replaced them (:mod:`.seed_names`).

Beyond the seed: :func:`profile_capacity_run` warns when a run's metric exceeds the largest
validated value and records a failure observation when the run ends in CUDA out-of-memory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

from .named_profiles import DriverPeakSampler, NamedProfile
from .profile_records import (
    DYNAMIC_OFFLOAD_PROFILE_SCHEMA_VERSION,
    MAX_OBSERVATIONS,
    dynamic_offload_profile_key,
    dynamic_offload_profile_path,
    get_dynamic_offload_profile_capacity,
    get_dynamic_offload_profile_dir,
    get_dynamic_offload_profile_recommendation,
    load_dynamic_offload_profile,
    normalize_dynamic_offload_profile_context,
    record_dynamic_offload_profile,
    recommend_resident_budget,
)
from .seed_names import missing_seed_name

__all__ = [
    "DYNAMIC_OFFLOAD_PROFILE_SCHEMA_VERSION", "MAX_OBSERVATIONS", "DynamicOffloadProfileSession",
    "dynamic_offload_profile_key", "dynamic_offload_profile_path",
    "get_dynamic_offload_profile_capacity", "get_dynamic_offload_profile_dir",
    "get_dynamic_offload_profile_recommendation", "load_dynamic_offload_profile",
    "normalize_dynamic_offload_profile_context", "profile_capacity_run",
    "record_dynamic_offload_profile",
]


class DynamicOffloadProfileSession:
    """The seed's pair of profiles for a run: the execution profile (its recommendation) and
    the capacity profile (its limits), both loaded on creation."""

    def __init__(self, execution_context: Any, capacity_context: Any,
                 profile_dir: Optional[os.PathLike] = None, client=None) -> None:
        self.execution_context = normalize_dynamic_offload_profile_context(execution_context)
        self.capacity_context = normalize_dynamic_offload_profile_context(capacity_context)
        self.profile_dir = get_dynamic_offload_profile_dir(profile_dir)
        self._client = client
        self._load()

    def _load(self) -> None:
        self.execution_profile = load_dynamic_offload_profile(
            self.execution_context, self.profile_dir, self._client)
        self.capacity_profile = load_dynamic_offload_profile(
            self.capacity_context, self.profile_dir, self._client)

    def apply_settings(self, settings: Any, *,
                       allow_recommendation: bool = True) -> Tuple[Any, Optional[Dict[str, Any]]]:
        """Applies the execution profile's resident budget to ``settings.config``
        (``profile_resident_module_budget_gb``) unless recommendations are off, there is none,
        or a manual ``resident_module_budget_gb`` is set (it always wins)."""
        recommendation = get_dynamic_offload_profile_recommendation(self.execution_profile)
        if not allow_recommendation or recommendation is None:
            return settings, recommendation
        if settings.config.resident_module_budget_gb > 0:
            return settings, None
        value = recommendation.get("profile_resident_module_budget_gb",
                                   recommendation.get("auto_full_pin_resident_budget_gb"))
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return settings, recommendation
        config = dataclasses.replace(settings.config,
                                     profile_resident_module_budget_gb=max(0.0, float(value)))
        return dataclasses.replace(settings, config=config), recommendation

    recommend_resident_budget = staticmethod(recommend_resident_budget)

    def record_success(self, observation: Mapping[str, Any],
                       recommendation: Optional[Mapping[str, Any]] = None) -> Tuple[Path, Path]:
        execution = record_dynamic_offload_profile(
            self.execution_context, {**observation, "status": "success"}, self.profile_dir,
            recommendation, self._client)
        capacity = record_dynamic_offload_profile(
            self.capacity_context, {**observation, "status": "success"}, self.profile_dir,
            None, self._client)
        self._load()
        return execution, capacity


def _is_out_of_memory(error: BaseException) -> bool:
    kind = type(error).__name__
    return kind == "OutOfMemoryError" or (isinstance(error, RuntimeError)
                                          and "out of memory" in str(error).lower())


@contextlib.contextmanager
def profile_capacity_run(context: Any, metric: str, value: float, *,
                         profile_dir: Optional[os.PathLike] = None, client=None,
                         record_success: bool = True) -> Iterator[Optional[Dict[str, Any]]]:
    """Runs a workload of ``value`` in ``metric`` under the capacity profile of ``context``:
    warns (RuntimeWarning) when ``value`` exceeds the largest validated one, or reaches a
    recorded failure; records a ``failure`` observation when the block ends in CUDA
    out-of-memory (and re-raises), and a ``success`` when it ends normally (unless
    ``record_success`` is False). Yields the loaded profile (or None)."""
    profile = load_dynamic_offload_profile(context, profile_dir, client)
    limits = get_dynamic_offload_profile_capacity(profile, metric) or {}
    if "min_failure" in limits and value >= limits["min_failure"]:
        warnings.warn(f"{metric}={value:g} reaches {limits['min_failure']:g}, where this workload "
                      f"ran out of memory before", RuntimeWarning, stacklevel=3)
    elif "max_success" in limits and value > limits["max_success"]:
        warnings.warn(f"{metric}={value:g} exceeds the largest validated value "
                      f"({limits['max_success']:g}); it may run out of memory", RuntimeWarning,
                      stacklevel=3)
    try:
        yield profile
    except BaseException as error:
        if _is_out_of_memory(error):
            record_dynamic_offload_profile(
                context, {"status": "failure", "capacity": {"metric": metric, "value": value},
                          "error": type(error).__name__}, profile_dir, None, client)
        raise
    if record_success:
        record_dynamic_offload_profile(
            context, {"status": "success", "capacity": {"metric": metric, "value": value}},
            profile_dir, None, client)


class _NamedProfile(NamedProfile):
    """The seed's ``_NamedProfile(module, config)`` (a DynamicOffloadConfig): ``prepare()``
    returns the config for the run (calibrating: nothing resident; else the stored budget,
    unless a manual one is set), ``measure()`` calibrates (``result.profile_run()``)."""

    def __init__(self, module: Any, config: Any) -> None:
        super().__init__(config.profile_name, module, build=bool(config.build_profile))
        self.config = config

    def prepare(self) -> Any:  # type: ignore[override]  # the seed's signature
        """Raises:
            ValueError: what NamedProfile.prepare refuses (an empty name with build_profile,
                a non-CUDA device, a mode that runs nothing, a bad headroom).
        """
        config = self.config
        if not config.profile_name and not config.build_profile:
            return config
        budgets = {name: getattr(config, name) for name in (
            "resident_module_budget_gb", "profile_resident_module_budget_gb",
            "_profile_budget_applied")}
        prepared = super().prepare(
            budgets, execution_device=str(config.execution_device),
            execution_mode=config.execution_mode, policy=config.auto_budget_policy,
            headroom_gb=float(config.profile_vram_headroom_gb),
            max_resident_gb=float(config.max_resident_module_budget_gb))
        self.config = dataclasses.replace(config, **prepared)
        return self.config


class _CudaPeakSampler(DriverPeakSampler):
    """The seed's sampler of the device memory the driver reports used: ``start()``, then
    ``stop()`` returns the peak in bytes."""

    def __init__(self, device: Any, interval_seconds: float = 0.05) -> None:
        super().__init__(device, interval_seconds)

    def start(self) -> None:
        self.__enter__()

    def stop(self) -> int:
        if self._thread.is_alive():
            self.__exit__(None, None, None)
        return self.peak_bytes


def __getattr__(name: str) -> Any:
    missing_seed_name("profiles", name)
