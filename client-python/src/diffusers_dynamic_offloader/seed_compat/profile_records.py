"""Capacity profile records, in the seed's file format (docs/seed.md, "Profiles"): keys,
validation, merging, and ddod's store of them.

A profile is a JSON record keyed by a hash of its context (what was run: model, GPU, settings,
workload family) that remembers which sizes of a capacity metric (tokens, frames, pixels)
succeeded and failed, and optionally a recommendation (a resident budget). ddod keeps the files
(``ListProfiles``/``GetProfile``/``PutProfile``/``DeleteProfile``, ``ddoctl profiles``) in
``DDO_PROFILE_DIR`` or ``~/.ddo/profiles``; this module computes keys, validates records and
merges observations, exactly as the seed did. The seed's module of these names is
:mod:`.profiles`.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import math
import os
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

import grpc

from .._proto import profiles_pb2
from ..default_client import client_or_default
from ..errors import DaemonError

DYNAMIC_OFFLOAD_PROFILE_SCHEMA_VERSION = 1
#: Observations a record keeps (the newest).
MAX_OBSERVATIONS = 20
_FILE_PREFIX = "ddo-capacity-v1-"


def normalize_dynamic_offload_profile_context(context: Any) -> Dict[str, Any]:
    """A canonical copy of a non-empty mapping of JSON-safe values (None, bool, int, float,
    str, lists or tuples, mappings with string keys; keys sorted).

    Raises:
        ValueError: an empty or non-mapping context.
        TypeError: a value of another type, or a non-string key.
    """
    if not isinstance(context, Mapping) or not context:
        raise ValueError("a profile context must be a non-empty mapping")
    return _normalize(context, "context")


def _normalize(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise TypeError(f"{where}: {value!r} is not a finite number")
        return value
    if isinstance(value, (list, tuple)):
        return [_normalize(item, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, Mapping):
        out = {}
        for key in sorted(value, key=lambda k: (not isinstance(k, str), str(k))):
            if not isinstance(key, str):
                raise TypeError(f"{where}: key {key!r} is not a string")
            out[key] = _normalize(value[key], f"{where}.{key}")
        return out
    raise TypeError(f"{where}: {type(value).__name__} is not JSON-safe")


def dynamic_offload_profile_key(context: Any) -> str:
    """The first 24 hex digits of the SHA-256 of the normalized context (sorted keys, compact
    separators, ASCII)."""
    text = json.dumps(normalize_dynamic_offload_profile_context(context), sort_keys=True,
                      separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()[:24]


def get_dynamic_offload_profile_dir(profile_dir: Optional[os.PathLike] = None) -> Path:
    """``profile_dir``, else DDO_PROFILE_DIR, else ``~/.ddo/profiles`` (``~`` expanded)."""
    # Read in the runner's environment, as the seed did, with no daemon at hand: the result is
    # the directory named in ddod's profile requests (ddod's catalog has the same default).
    chosen = profile_dir if profile_dir is not None else os.environ.get("DDO_PROFILE_DIR") or "~/.ddo/profiles"
    return Path(os.path.expanduser(str(chosen)))


def dynamic_offload_profile_path(context: Any, profile_dir: Optional[os.PathLike] = None) -> Path:
    """Where the profile of ``context`` lives; creates nothing."""
    key = dynamic_offload_profile_key(context)
    return get_dynamic_offload_profile_dir(profile_dir) / f"{_FILE_PREFIX}{key}.json"


def _profile_dir_request(client: Any, directory: Path) -> str:
    """The directory to name in a profile request: ddod honours one only for its own user, so a
    shared ddod running as another user keeps this user's profiles in its per-user store."""
    info = client.daemon_info
    if info is not None and info.uid != os.geteuid():
        return ""
    return str(directory)


def load_dynamic_offload_profile(context: Any, profile_dir: Optional[os.PathLike] = None,
                                 client=None) -> Optional[Dict[str, Any]]:
    """The validated record of ``context``, or None: when there is none, or when the file is
    unreadable, not JSON, not a record, or of another schema, key or context (a corrupt file
    is ignored with a warning)."""
    normalized = normalize_dynamic_offload_profile_context(context)
    key = dynamic_offload_profile_key(normalized)
    directory = get_dynamic_offload_profile_dir(profile_dir)
    try:
        ddo = client_or_default(client)
        answer = ddo.rpc.unary("GetProfile", profiles_pb2.GetProfileRequest(
            ref=profiles_pb2.ProfileRef(key=key), profile_dir=_profile_dir_request(ddo, directory)))
    except DaemonError as error:
        if error.code == grpc.StatusCode.NOT_FOUND:
            return None
        warnings.warn(f"ignoring the DDO profile {key} in {directory}: {error.details}",
                      RuntimeWarning, stacklevel=2)
        return None
    try:
        record = json.loads(answer.json)
    except ValueError as error:
        warnings.warn(f"ignoring the DDO profile {key}: {error}", RuntimeWarning, stacklevel=2)
        return None
    if (not isinstance(record, dict)
            or record.get("schema_version") != DYNAMIC_OFFLOAD_PROFILE_SCHEMA_VERSION
            or record.get("profile_key") != key or record.get("context") != normalized):
        warnings.warn(f"ignoring the DDO profile {key} in {directory}: not a version "
                      f"{DYNAMIC_OFFLOAD_PROFILE_SCHEMA_VERSION} record of this context",
                      RuntimeWarning, stacklevel=2)
        return None
    return record


def _merge_limits(limits: Dict[str, Dict[str, float]], observation: Mapping[str, Any]) -> None:
    capacity = observation.get("capacity")
    if not isinstance(capacity, Mapping):
        return
    metric, value = capacity.get("metric"), capacity.get("value")
    if not isinstance(metric, str) or isinstance(value, bool) or not isinstance(value, (int, float)):
        return
    entry = limits.setdefault(metric, {})
    if observation.get("status") == "success":
        entry["max_success"] = max(float(value), entry.get("max_success", float(value)))
    elif observation.get("status") == "failure":
        entry["min_failure"] = min(float(value), entry.get("min_failure", float(value)))


def record_dynamic_offload_profile(context: Any, observation: Mapping[str, Any],
                                   profile_dir: Optional[os.PathLike] = None,
                                   recommendation: Optional[Mapping[str, Any]] = None,
                                   client=None) -> Path:
    """Appends ``observation`` (the newest 20 are kept), merges the capacity limits (a
    ``success`` raises ``max_success``, a ``failure`` lowers ``min_failure``), replaces the
    recommendation when one is given (else keeps it), and has ddod write the record."""
    normalized = normalize_dynamic_offload_profile_context(context)
    key = dynamic_offload_profile_key(normalized)
    directory = get_dynamic_offload_profile_dir(profile_dir)
    previous = load_dynamic_offload_profile(normalized, directory, client) or {}
    observations: List[Any] = list(previous.get("observations", []))
    observations.append(_normalize(dict(observation), "observation"))
    limits = copy.deepcopy(previous.get("capacity_limits", {}))
    for item in observations[-1:]:
        _merge_limits(limits, item)
    record = {
        "schema_version": DYNAMIC_OFFLOAD_PROFILE_SCHEMA_VERSION,
        "profile_key": key,
        "updated_at": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "context": normalized,
        "capacity_limits": limits,
        "observations": observations[-MAX_OBSERVATIONS:],
    }
    if recommendation is not None:
        record["recommendation"] = _normalize(dict(recommendation), "recommendation")
    elif "recommendation" in previous:
        record["recommendation"] = previous["recommendation"]
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    ddo = client_or_default(client)
    ddo.rpc.unary("PutProfile", profiles_pb2.PutProfileRequest(
        profile=profiles_pb2.Profile(ref=profiles_pb2.ProfileRef(key=key), json=text),
        profile_dir=_profile_dir_request(ddo, directory)))
    return directory / f"{_FILE_PREFIX}{key}.json"


def get_dynamic_offload_profile_capacity(profile: Optional[Mapping[str, Any]],
                                         metric: str) -> Optional[Dict[str, float]]:
    """``{"max_success", "min_failure"}`` of ``metric`` (either may be absent), or None."""
    if not profile:
        return None
    limits = profile.get("capacity_limits", {}).get(metric)
    if not isinstance(limits, Mapping) or not limits:
        return None
    return {name: float(value) for name, value in limits.items()
            if name in ("max_success", "min_failure")}


def get_dynamic_offload_profile_recommendation(
        profile: Optional[Mapping[str, Any]]) -> Optional[Dict[str, Any]]:
    """A copy of the stored recommendation, or None."""
    if not profile or not isinstance(profile.get("recommendation"), Mapping):
        return None
    return copy.deepcopy(dict(profile["recommendation"]))


def recommend_resident_budget(total_vram_gb: float, peak_vram_gb: float,
                              headroom_gb: float) -> float:
    """What a calibration run with nothing resident leaves for resident weights:
    ``total - peak - headroom`` (never below 0), rounded to 4 decimals, as the seed did."""
    return round(max(0.0, total_vram_gb - peak_vram_gb - headroom_gb), 4)
