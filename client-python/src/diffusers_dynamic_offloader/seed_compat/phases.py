"""Pipeline phases and the seed's Windows standby purge (docs/seed.md, "Phases").

A staged runner moves through phases (``before_run``, ``prompt``, ``denoise``, ``decode``,
``after_run``). :func:`enter_phase` is the cleanup the seed's users wrote by hand between
passes, in the order that matters: release the DDO results the coming phase does not need
(their streaming sessions close), then ``gc.collect()`` and ``torch.cuda.empty_cache()``, then
tell ddod, which frees the device memory it keeps for components no coming phase needs and
fills the resident slabs of the next phase's components while this one runs (``prefetch``).

The seed's purge functions keep their API. The standby list is Windows's, and ddod is not
built for Windows yet: off Windows they answer as the seed's did (``non_windows``); on Windows
a purge raises, and :func:`maybe_purge_windows_standby_cache` reports the error.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from typing import Any, Callable, Dict, Iterable, Mapping, Optional, Union

from .._proto import sessions_pb2
from ..rpc_channel import MODEL_SIZED_TIMEOUT_S

PHASES = ("before_run", "prompt", "denoise", "decode", "after_run")

_KINDS = {
    "before_run": sessions_pb2.PHASE_KIND_BEFORE_RUN,
    "prompt": sessions_pb2.PHASE_KIND_PROMPT,
    "denoise": sessions_pb2.PHASE_KIND_DENOISE,
    "decode": sessions_pb2.PHASE_KIND_DECODE,
    "after_run": sessions_pb2.PHASE_KIND_AFTER_RUN,
}
EventCallback = Callable[..., Any]


def enter_phase(
    phase: str,
    *,
    needed: Iterable[str] = (),
    prefetch: Iterable[str] = (),
    release: Iterable[Any] = (),
    purge_standby: bool = False,
    move_pool_bytes: bool = True,
    client=None,
    record_event: Optional[EventCallback] = None,
) -> Dict[str, Any]:
    """Begins ``phase``.

    Args:
        needed: Cache keys of the components this phase runs.
        prefetch: Cache keys of the components the next phase runs (ddod warms their slabs).
        release: DynamicOffloadApplyResults or modules this phase no longer needs: their
            streaming sessions close before the memory is collected.
        purge_standby: Ask for the Windows standby purge (reported, see the module notes).
        move_pool_bytes: Let ddod move host-pool bytes for the phase (the default): for each
            ``needed`` or ``prefetch`` component kept in its files, the caller's unused
            components outside
            ``needed`` and ``prefetch`` go to their files while the pool lacks room, and the
            prefetched ones are read back into the pool in the background, the ``needed``
            ones before the call returns (their sessions find them there). Modules in
            ``release`` that ``load_from_ddod`` built give their weights back for this
            (meta tensors; bound again when routed or called). False leaves the pool as it
            is.
        record_event: Called as ``record_event("phase_<phase>", seconds, **result)``.

    Returns:
        ``phase``, ``released_bytes``, ``prefetched_bytes``, ``demoted_bytes``,
        ``promoted_bytes`` (needed components read back into the pool before the answer) and
        ``promoting_bytes`` (prefetched ones being read back) (ddod's), ``purged``,
        ``purge_reason``, ``notes`` (what ddod did, one line each), ``seconds``.

    Raises:
        ValueError: an unknown phase.
    """
    if phase not in _KINDS:
        raise ValueError(f"Invalid phase {phase!r}. Valid values: {', '.join(PHASES)}")
    from .offload_api import _client, remove_dynamic_offload

    from ..loaded_binding import unbind

    started = time.perf_counter()
    for item in release:
        remove_dynamic_offload(item)
        if move_pool_bytes:
            # A module loaded from ddod gives its weights back, so that ddod can move them.
            unbind(getattr(item, "module", item))
    gc.collect()
    _empty_cuda_cache()
    client = _client(client)
    answer = client.rpc.unary("Phase", sessions_pb2.PhaseRequest(
        lease_id=client.lease_id, phase=_KINDS[phase], needed=list(needed),
        prefetch=list(prefetch), purge_standby=purge_standby,
        keep_pool_bytes=not move_pool_bytes), timeout=MODEL_SIZED_TIMEOUT_S)
    result = {
        "phase": phase,
        "released_bytes": int(answer.released_bytes),
        "prefetched_bytes": int(answer.prefetched_bytes),
        "demoted_bytes": int(answer.demoted_bytes),
        "promoting_bytes": int(answer.promoting_bytes),
        "promoted_bytes": int(answer.promoted_bytes),
        "purged": bool(answer.purged),
        "purge_reason": answer.purge_reason,
        "notes": list(answer.notes),
        "seconds": time.perf_counter() - started,
    }
    if record_event is not None:
        payload = {key: value for key, value in result.items() if key != "seconds"}
        record_event(f"phase_{phase}", result["seconds"], **payload)
    return result


def standby_purge_requested(seed_phases: Iterable[str], *, settings: Any = None,
                            preset: str = "auto", environ: Optional[Mapping[str, str]] = None,
                            client=None) -> bool:
    """Whether any of the seed's ``DDO_PURGE_WINDOWS_STANDBY_<PHASE>`` switches of
    ``seed_phases`` is on (the environment, then the settings' or ``preset``'s value): what a
    staged run asks ddod for when it enters the matching phase."""
    return any(_purge_switch(phase, settings=settings, preset=preset, default="0",
                             environ=environ, client=client) for phase in seed_phases)


def _purge_switch(phase: str, *, settings: Any, preset: str, default: str,
                  environ: Optional[Mapping[str, str]], client,
                  running_on_wsl: Optional[bool] = None) -> bool:
    """``DDO_PURGE_WINDOWS_STANDBY_<PHASE>``: the environment, then the settings' preset (or
    ``preset``), then ``default``."""
    variable = f"DDO_PURGE_WINDOWS_STANDBY_{phase.strip().upper()}"
    source = os.environ if environ is None else environ
    if variable in source:
        switch = source[variable]
    elif settings is not None and getattr(settings, "effective_preset", None) is not None:
        switch = settings.preset_value(variable, default, environ=source)
    else:
        from .presets import dynamic_offload_preset_env_value

        switch = dynamic_offload_preset_env_value(variable, default, requested_preset=preset,
                                                  running_on_wsl=running_on_wsl, environ=source,
                                                  client=client)
    return str(switch).strip().lower() in ("1", "true", "yes", "on")


def _empty_cuda_cache() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _on_windows() -> bool:
    return os.name == "nt"


def purge_windows_standby_cache() -> Dict[str, Any]:
    """The seed's purge of the Windows standby list.

    Raises:
        RuntimeError: not on Windows (as the seed), or on Windows, where ddod, which would hold
            the privilege and do it, is not built yet.
    """
    if not _on_windows():
        raise RuntimeError("purge_windows_standby_cache works on Windows only")
    raise RuntimeError("the standby purge is done by ddod on Windows, and ddod is not built for "
                       "Windows yet")


def purge_windows_standby_cache_event(record_event: Optional[EventCallback], event_name: str, *,
                                      print_message: bool = True) -> Dict[str, Any]:
    """Purges (see :func:`purge_windows_standby_cache`, which may raise), times it, records
    ``record_event(event_name, seconds, **result)`` and prints the seed's line."""
    started = time.perf_counter()
    result = purge_windows_standby_cache()
    if record_event is not None:
        record_event(event_name, time.perf_counter() - started, **result)
    if print_message:
        print(f"  [windows-memory] {event_name}: standby cache purge requested")
    return result


def maybe_purge_windows_standby_cache(
    settings_or_phase: Union[None, str, Any] = None,
    phase: Optional[str] = None,
    *,
    settings: Any = None,
    preset: str = "auto",
    execution_device: str = "cuda:0",
    offload_device: str = "cpu",
    running_on_wsl: Optional[bool] = None,
    record_event: Optional[EventCallback] = None,
    event_name: Optional[str] = None,
    default: str = "0",
    print_message: bool = True,
    ignore_errors: bool = True,
    environ: Optional[Mapping[str, str]] = None,
    client=None,
) -> Dict[str, Any]:
    """The seed's switchable purge: ``DDO_PURGE_WINDOWS_STANDBY_<PHASE>`` (the environment,
    then the preset) decides; ``(settings, "phase")`` or ``("phase", preset=...)``.

    Returns:
        ``{"purged": False, "reason": "disabled" | "non_windows" | <error class>, "phase"}``,
        or the purge's result with ``purged: True``.

    Raises:
        TypeError: no phase given.
    """
    del execution_device, offload_device  # accepted for the seed's signature
    if isinstance(settings_or_phase, str):
        phase = settings_or_phase
    elif settings_or_phase is not None:
        settings = settings_or_phase
    if not phase:
        raise TypeError("maybe_purge_windows_standby_cache() needs a phase, e.g. "
                        "maybe_purge_windows_standby_cache(settings, 'before_transformer')")
    if not _purge_switch(phase, settings=settings, preset=preset, default=default,
                         environ=environ, client=client, running_on_wsl=running_on_wsl):
        return {"purged": False, "reason": "disabled", "phase": phase}
    if not _on_windows():
        return {"purged": False, "reason": "non_windows", "phase": phase}
    name = event_name or f"purge_windows_standby_{phase.strip().lower()}"
    try:
        result = purge_windows_standby_cache_event(record_event, name, print_message=print_message)
    except Exception as error:  # noqa: BLE001 - the seed reports and goes on
        if not ignore_errors:
            raise
        if record_event is not None:
            record_event(name, 0.0, purged=False, reason=type(error).__name__, error=str(error))
        if print_message:
            print(f"  [windows-memory] {name}: standby cache purge skipped ({error})")
        return {"purged": False, "reason": type(error).__name__, "phase": phase, "error": str(error)}
    return {**result, "purged": True, "phase": phase}
