"""The seed's preset functions, answered by ddod (its preset table is the one truth).

``DDO_PRESETS`` is the seed's plain dict of preset name -> {DDO_* variable: value}; it is
read from ddod on first access. The functions take an optional ``client``; without one they use
the process's shared connection (:mod:`diffusers_dynamic_offloader.default_client`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Dict, Optional

from .._proto import settings_pb2

if TYPE_CHECKING:
    from ..client import DdoClient


def _listing(client: Optional["DdoClient"]) -> settings_pb2.ListPresetsResponse:
    from ..default_client import client_or_default

    return client_or_default(client).presets()


def get_dynamic_offload_presets(client: Optional["DdoClient"] = None) -> Dict[str, Dict[str, str]]:
    """A fresh copy of every preset: name -> {DDO_* variable: value}."""
    listing = _listing(client)
    return {preset.name: dict(preset.values) for preset in listing.presets}


def _load_ddo_presets() -> Dict[str, Dict[str, str]]:
    """``DDO_PRESETS`` as the seed had it: a plain dict (``copy()``, ``json.dumps``), read
    from the process's daemon."""
    return get_dynamic_offload_presets()


def __getattr__(name: str) -> Any:
    # DDO_PRESETS is read from ddod on first access (PEP 562), then kept: a plain dict, as the
    # seed's module constant. Changing it changes nothing in ddod (the seed's table was its
    # own; ddod's is every client's).
    if name == "DDO_PRESETS":
        presets = _load_ddo_presets()
        globals()["DDO_PRESETS"] = presets
        return presets
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def resolve_dynamic_offload_preset(
    requested: Optional[str], *, running_on_wsl: Optional[bool] = None,
    client: Optional["DdoClient"] = None,
) -> str:
    """The effective preset name: stripped and lowercased, ``auto`` -> ``one_shot_fast`` on
    every platform (``running_on_wsl`` is accepted and ignored, as in the seed), ``""`` stays
    ``""`` (no preset).

    Raises:
        ValueError: ``Invalid DDO_PRESET='x'. Valid values: auto, <sorted presets>``.
    """
    del running_on_wsl  # the seed ignores it too
    name = (requested or "").strip().lower()
    if not name:
        return ""
    listing = _listing(client)
    aliases = dict(listing.aliases)
    names = {preset.name for preset in listing.presets}
    name = aliases.get(name, name)
    if name not in names:
        valid = ", ".join(sorted(aliases) + sorted(names))
        raise ValueError(f"Invalid DDO_PRESET={requested!r}. Valid values: {valid}")
    return name


def format_dynamic_offload_presets(
    *, default_preset: str = "auto", running_on_wsl: Optional[bool] = None,
    client: Optional["DdoClient"] = None,
) -> str:
    """The seed's text listing: ``DDO presets``, the aliases (``  auto -> one_shot_fast``), then
    every preset in sorted order with its sorted ``KEY=VALUE`` lines (or ``<no preset
    values>``). The preset ``default_preset`` resolves to is marked ``(default)``."""
    listing = _listing(client)
    default = resolve_dynamic_offload_preset(default_preset, running_on_wsl=running_on_wsl,
                                             client=client) if default_preset else ""
    lines = ["DDO presets"]
    for alias, target in sorted(listing.aliases.items()):
        lines.append(f"  {alias} -> {target}")
    for preset in sorted(listing.presets, key=lambda p: p.name):
        marker = " (default)" if preset.name == default else ""
        lines.append(f"  {preset.name}{marker}: {preset.description}")
        if preset.values:
            lines.extend(f"    {key}={value}" for key, value in sorted(preset.values.items()))
        else:
            lines.append("    <no preset values>")
    return "\n".join(lines) + "\n"


def dynamic_offload_env_value(name: str, default: str = "",
                              environ: Optional[Mapping[str, str]] = None) -> str:
    """``environ[name]`` (default ``os.environ``), or ``default`` when it is not set."""
    source = os.environ if environ is None else environ
    return source.get(name, default)


def dynamic_offload_preset_env_value(
    name: str, default: str = "", *, requested_preset: str = "",
    effective_preset: Optional[str] = None, running_on_wsl: Optional[bool] = None,
    environ: Optional[Mapping[str, str]] = None, client: Optional["DdoClient"] = None,
) -> str:
    """The environment's value when the variable exists (even empty); otherwise the preset's
    (``effective_preset``, or ``requested_preset`` resolved; DDO_PRESET in the environment
    wins over ``requested_preset``), otherwise ``default``. Seed runners read their
    ``DDO_RUNNER_*`` values this way.

    Raises:
        ValueError: an unknown preset.
    """
    source = os.environ if environ is None else environ
    if name in source:
        return source[name]
    if effective_preset is None:
        requested = source.get("DDO_PRESET", requested_preset)
        effective_preset = resolve_dynamic_offload_preset(requested, running_on_wsl=running_on_wsl,
                                                          client=client)
    if not effective_preset:
        return default
    return get_dynamic_offload_presets(client).get(effective_preset, {}).get(name, default)


def is_wsl_environment() -> bool:
    """True under WSL: ``microsoft`` or ``wsl`` in the kernel release (lowercased), else in
    ``/proc/version``; False on Windows and on any read error (the seed's rule)."""
    if os.name == "nt":
        return False
    try:
        release = os.uname().release.lower()
    except (AttributeError, OSError):
        release = ""
    if "microsoft" in release or "wsl" in release:
        return True
    try:
        with open("/proc/version", encoding="utf-8", errors="replace") as file:
            version = file.read().lower()
    except OSError:
        return False
    return "microsoft" in version or "wsl" in version


def get_available_system_ram_gb() -> float:
    """Available RAM in GiB, rounded to 4 decimals: psutil's ``available`` when psutil is
    installed, else Linux's MemAvailable, else free pages (``sysconf``); 0.0 when unknown."""
    try:
        import psutil  # type: ignore

        return round(psutil.virtual_memory().available / 2**30, 4)
    except Exception:  # noqa: BLE001 - psutil missing or failing: next method
        pass
    try:
        with open("/proc/meminfo", encoding="utf-8") as file:
            for line in file:
                if line.startswith("MemAvailable:"):
                    return round(int(line.split()[1]) * 1024 / 2**30, 4)
    except (OSError, ValueError, IndexError):
        pass
    try:
        return round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES") / 2**30, 4)
    except (ValueError, OSError, AttributeError):
        return 0.0
