"""What the runner is told, through Python logging (logger ``diffusers_dynamic_offloader``).

- Every component set up by ``enable_offload`` gets one line at INFO: its route, where its
  bytes are (resident, streamed per pass, the ring), whether ddod had its weights warm, and the
  setup time (:func:`log_component_setup`), as ComfyUI's "loaded partially" line does.
- ``DDO_VERBOSE`` (``verbose=True``) adds, at INFO, what the seed printed when a component was
  set up on the DDO route: the mode, counts and placements, a warning that a partial pin budget
  can be slower than full pinning, and the balanced planner's ``auto plan`` line; and one line
  per finished forward pass of a streamed component (bytes streamed, achieved GB/s, time
  waited for ddod: :func:`log_pass`). When verbose output is asked for and the application
  configured no logging at all, a handler to stdout is added (the seed printed to stdout), so
  that the lines show without any setup. Without it, ``logging.basicConfig(level=logging.INFO)``
  shows the setup lines.

Thread-safety: logging is thread-safe; the handler is added under logging's own lock.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Mapping, Optional

LOGGER_NAME = "diffusers_dynamic_offloader"
logger = logging.getLogger(LOGGER_NAME)
_GIB = float(2**30)


def _ensure_visible() -> None:
    """A stdout handler at INFO when nothing would show INFO records of this logger."""
    if not logger.hasHandlers():
        handler = logging.StreamHandler(sys.stdout)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)


def log_dynamic_setup(component: str, state: Any, config: Any, seconds: float) -> None:
    """The seed's verbose setup summary of one component on the DDO route."""
    _ensure_visible()
    placed = state.bytes_by_placement
    session = state.session
    logger.info(
        "[ddo] %s: mode=%s, modules=%d, patched=%d, resident_module=%.4f GB, "
        "resident_small=%.4f GB, streamed_large=%.4f GB, setup %.3f s%s",
        component, config.execution_mode, state.module_count, state.patched_module_count,
        placed.get("resident_module", 0) / _GIB, placed.get("resident_small", 0) / _GIB,
        placed.get("streamed_large", 0) / _GIB, seconds,
        "" if session is not None else " (plan only: execution unchanged)")
    decisions: Mapping[str, Any] = state.planner_decisions
    if config.pin_weight_budget_gb > 0 or 0 < config.pin_weight_budget_ratio < 1:
        logger.warning("[ddo] %s: a partial pinned-memory budget can be slower than pinning "
                       "every streamed weight", component)
    if str(decisions.get("auto_pin_weight_decision", "")).startswith("full_pin"):
        logger.info("[ddo] auto plan: full pinned CPU weights with %.4f GiB of resident modules "
                    "(weights=%s GB, usable_ram=%s GB, model_to_vram=%sx)",
                    float(decisions.get("auto_resident_module_budget_gb", 0) or 0),
                    decisions.get("candidate_weight_gb"), decisions.get("auto_usable_system_ram_gb"),
                    decisions.get("auto_model_to_vram_ratio"))
    elif decisions.get("auto_budget_policy") == "balanced":
        logger.info("[ddo] auto plan: pin=%s, resident_budget=%s GB, pin_budget=%s GB",
                    decisions.get("auto_pin_weight_decision", "n/a"),
                    decisions.get("auto_resident_module_budget_gb", 0),
                    decisions.get("auto_pin_weight_budget_gb", 0))


def _gib(byte_count: float) -> str:
    """A size as people read it: GiB from 1 GiB on, else MiB."""
    if byte_count >= _GIB:
        return f"{byte_count / _GIB:.2f} GiB"
    return f"{byte_count / 2**20:.1f} MiB"


def log_component_setup(component: str, route: str, where: str, seconds: float, *,
                        verbose: bool, session: Any = None,
                        warm_hit: Optional[bool] = None, reason: Optional[str] = None) -> None:
    """One line for a component ``enable_offload`` set up: ``route`` on ``where``, and why
    (``reason``, when given); for the DDO route, the session's placement
    (:meth:`StreamingSession.stats`) and whether ddod had the weights (``warm_hit``)."""
    if verbose:
        _ensure_visible()
    if not logger.isEnabledFor(logging.INFO):
        return
    parts = [f"{route} on {where}"]
    if reason:
        parts.append(reason)
    if session is not None:
        stats = session.stats()
        if stats["units"]:
            streamed = sum(unit.byte_size for unit in session.resources.units)
            parts.append(f"{_gib(stats['resident_bytes'])} resident, {_gib(streamed)} streamed "
                         f"in {stats['units']} units through a {stats['ring_slots']}-slot ring "
                         f"({_gib(stats['ring_arena_bytes'] + stats['ring_slot_bytes'])})")
        else:
            parts.append(f"all {_gib(stats['resident_bytes'])} resident, nothing streams")
    if warm_hit is not None:
        parts.append("weights warm in ddod" if warm_hit else "weights uploaded to ddod")
    logger.info("[ddo] %s: %s; set up in %.2f s", component, ", ".join(parts), seconds)


def log_pass(component: str, number: int, byte_count: int, seconds: float, waited: float,
             out_of_schedule: int) -> None:
    """One finished forward pass of a streamed component (verbose runs)."""
    rate = byte_count / seconds / 1e9 if seconds > 0 else 0.0
    extra = f", {out_of_schedule} units out of schedule" if out_of_schedule else ""
    logger.info("[ddo] %s: pass %d streamed %s in %.3f s (%.1f GB/s), waited %.3f s for "
                "ddod%s", component, number, _gib(byte_count), seconds, rate, waited, extra)
