"""Named workload profiles (the seed's ``profile_name`` / ``build_profile``,
docs/seed.md, "Profiles"): a calibration run measures the peak VRAM of a run with nothing
resident and saves the resident budget that fits; later runs with the same name apply it.

Identity: ``{"name", "model_class", "identity_version": 2}``, stored as a capacity profile
(profile_records.py) through ddod. A manual ``resident_module_budget_gb`` always wins. On the
DDO route the measurement sees ddod's device memory too (the driver's free memory covers every
process), so the recommendation is what this run can keep resident beside everything else.
The seed's SDNQ probe runs do not apply: quantized weights go to Diffusers group offload.
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Any, Dict, Iterator, Optional

from .profile_records import (
    get_dynamic_offload_profile_recommendation,
    load_dynamic_offload_profile,
    record_dynamic_offload_profile,
    recommend_resident_budget,
)

_GIB = float(2**30)
_ACTIVE = threading.Lock()  # one measurement at a time, as in the seed


class NamedProfile:
    """One run's named profile: ``prepare`` adjusts the explicit config fields,
    ``measure`` (through ``result.profile_run()``) calibrates."""

    def __init__(self, name: str, module: Any, *, build: bool, profile_dir: Any = None,
                 client=None) -> None:
        self.name = name
        self.build = build
        self.context = {"name": name, "model_class": type(module).__qualname__,
                        "identity_version": 2}
        self.profile_dir = profile_dir
        self.client = client
        self.report: Dict[str, Any] = {"name": name, "status": "disabled"}
        self.headroom_gb = 1.0
        self.device: Any = None

    def prepare(self, explicit: Dict[str, Any], *, execution_device: str, execution_mode: str,
                policy: str, headroom_gb: float, max_resident_gb: float,
                manual_budget_gb: float = 0.0) -> Dict[str, Any]:
        """The explicit config fields for this run (calibration: nothing resident; otherwise
        the stored recommendation, unless a manual budget is set: ``manual_budget_gb`` is the
        resolved DDO_RESIDENT_MODULE_BUDGET_GB, from a keyword, the environment or a preset,
        as the seed read it from its config).

        Raises:
            ValueError: an empty name with build_profile, a non-CUDA device, a mode that does
                not run the model, a bad headroom.
        """
        import torch

        explicit = dict(explicit)
        if self.build:
            if not self.name:
                raise ValueError("build_profile requires a non-empty profile_name.")
            if torch.device(execution_device).type != "cuda":
                raise ValueError("Profile calibration requires a CUDA execution device.")
            if execution_mode not in ("linear_runtime", "sdnq_runtime"):
                raise ValueError("Profile calibration requires execution_mode linear_runtime "
                                 f"(not {execution_mode!r}): a plan-only run measures nothing.")
            if not math.isfinite(headroom_gb) or headroom_gb < 0:
                raise ValueError(f"profile_vram_headroom_gb={headroom_gb!r} must be a finite "
                                 f"number >= 0")
            self.headroom_gb = headroom_gb
            self.device = torch.device(execution_device)
            explicit["resident_module_budget_gb"] = 0.0
            explicit["profile_resident_module_budget_gb"] = 0.0
            self.report["status"] = "calibrating"
            print(f"[ddo] profile {self.name!r}: calibrating with nothing resident; run the "
                  f"workload inside result.profile_run()")
            return explicit
        if float(explicit.get("resident_module_budget_gb") or 0) > 0 or manual_budget_gb > 0:
            self.report["status"] = "manual_budget"
            return explicit
        profile = load_dynamic_offload_profile(self.context, self.profile_dir, self.client)
        budget = (get_dynamic_offload_profile_recommendation(profile) or {}).get(
            "profile_resident_module_budget_gb")
        if not isinstance(budget, (int, float)) or isinstance(budget, bool) or budget < 0:
            self.report["status"] = "missing"
            print(f"[ddo] profile {self.name!r}: no recommendation; calibrate with "
                  f"build_profile=True.")
            return explicit
        budget = float(budget)
        if max_resident_gb > 0:
            budget = min(budget, max_resident_gb)
        key = "resident_module_budget_gb" if policy == "off" else "profile_resident_module_budget_gb"
        explicit[key] = budget
        explicit["_profile_budget_applied"] = True
        self.report.update(status="applied", resident_budget_gb=budget)
        return explicit

    @contextlib.contextmanager
    def measure(self) -> Iterator[Dict[str, Any]]:
        """Calibration: measures the block's peak VRAM (the driver's view at start and end and
        sampled every 10 ms, and the allocator's peak beside what other processes hold) and saves
        ``total - peak - headroom`` as the resident budget. A no-op for other runs. Nothing is
        saved when the block raises.

        Raises:
            RuntimeError: another measurement is active.
        """
        if self.report["status"] != "calibrating":
            yield self.report
            return
        if not _ACTIVE.acquire(blocking=False):
            raise RuntimeError("another DDO profile measurement is active")
        try:
            import torch

            torch.cuda.synchronize(self.device)
            free, total = torch.cuda.mem_get_info(self.device)
            external = max(0, total - free - torch.cuda.memory_reserved(self.device))
            torch.cuda.reset_peak_memory_stats(self.device)
            used_start = total - free
            try:
                with DriverPeakSampler(self.device) as sampled:
                    yield self.report
            except BaseException:
                self.report["status"] = "failed"
                raise
            torch.cuda.synchronize(self.device)
            free_end, _ = torch.cuda.mem_get_info(self.device)
            peak = max(used_start, total - free_end, sampled.peak_bytes,
                       external + torch.cuda.max_memory_reserved(self.device)) / _GIB
            total_gb = total / _GIB
            budget = recommend_resident_budget(total_gb, peak, self.headroom_gb)
            path = record_dynamic_offload_profile(
                self.context,
                {"status": "success", "peak_vram_gb": round(peak, 4),
                 "total_vram_gb": round(total_gb, 4), "headroom_gb": self.headroom_gb,
                 "profile_measurement_kind": "baseline",
                 "measurement": "cuda_driver_peak_sampled_plus_allocator"},
                self.profile_dir, {"profile_resident_module_budget_gb": budget}, self.client)
            self.report.update(status="saved", path=str(path), resident_budget_gb=budget,
                               peak_vram_gb=round(peak, 4))
            print(f"[ddo] profile {self.name!r}: peak {peak:.2f} GiB of {total_gb:.2f} GiB; "
                  f"resident budget {budget:.2f} GiB saved to {path}")
        finally:
            _ACTIVE.release()


class DriverPeakSampler:
    """The device's used memory as the driver sees it (``total - free``: every process, ddod's
    slabs and rings included), sampled by a daemon thread while the block runs. The
    allocator's peak misses memory other processes take mid-run (a slab ddod prefetches, a
    second runner); the samples see it."""

    def __init__(self, device: Any, interval_s: float = 0.01) -> None:
        self.device = device
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, name="ddo-cuda-profile",
                                        daemon=True)

    def _used(self) -> int:
        import torch

        free, total = torch.cuda.mem_get_info(self.device)
        return total - free

    def _sample(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak_bytes = max(self.peak_bytes, self._used())

    def __enter__(self) -> "DriverPeakSampler":
        self.peak_bytes = self._used()
        self._thread.start()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak_bytes = max(self.peak_bytes, self._used())


def profile_run_of(profile: Optional[NamedProfile]) -> contextlib.AbstractContextManager:
    return profile.measure() if profile is not None else contextlib.nullcontext()
