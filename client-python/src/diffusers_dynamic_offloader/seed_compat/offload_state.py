"""The seed's ``DynamicOffloadState`` and ``DynamicOffloadPlanEntry`` (docs/seed.md,
"the data classes") for a module on the DDO route: what ddod placed where, what setting up
cost, and the planner's decisions, built from the streaming session (or, in plan mode, from
ddod's plan explanation without a session).

Placements keep the seed's names: ``streamed_large`` (streamed through the ring),
``resident_module`` (a streamable weight kept resident by the planner: a resident block or an
always-resident module) and ``resident_small`` (every other resident tensor: small weights,
biases, norms, embeddings).
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from torch import nn

PLACEMENTS = ("resident_module", "resident_small", "streamed_large")
_GIB = float(2**30)


@dataclass(frozen=True)
class DynamicOffloadPlanEntry:
    module_name: str
    module_type: str
    tensor_name: str
    shape: Tuple[int, ...]
    dtype: str
    device: str
    bytes: int
    placement: str


@dataclass
class DynamicOffloadState:
    """The seed's state, for a DDO session. The runner copies no weights itself (ddod does),
    so the copy counters count the units it acquired and the seconds it waited for them."""

    entries: List[DynamicOffloadPlanEntry] = field(default_factory=list)
    module_count: int = 0
    total_bytes: int = 0
    bytes_by_placement: Dict[str, int] = field(default_factory=dict)
    setup_seconds_by_action: Dict[str, float] = field(default_factory=dict)
    setup_bytes_by_action: Dict[str, int] = field(default_factory=dict)
    copy_seconds_by_name: Dict[str, float] = field(default_factory=dict)
    copy_bytes_by_name: Dict[str, int] = field(default_factory=dict)
    copy_calls_by_name: Dict[str, int] = field(default_factory=dict)
    patched_module_count: int = 0
    selected_resident_modules: List[str] = field(default_factory=list)
    selected_resident_linear_weights: List[str] = field(default_factory=list)
    selected_pinned_linear_weights: List[str] = field(default_factory=list)
    resolved_resident_module_patterns: List[str] = field(default_factory=list)
    sdnq_pinned_parameter_bytes: int = 0
    sdnq_pinned_parameter_count: int = 0
    sdnq_unpinned_parameter_bytes: int = 0
    sdnq_unpinned_parameter_count: int = 0
    planner_decisions: Dict[str, Any] = field(default_factory=dict)
    #: The streaming session (None in plan mode); its counters feed the copy statistics.
    session: Any = field(default=None, repr=False, compare=False)

    def add_setup(self, action: str, seconds: float, num_bytes: int = 0) -> None:
        self.setup_seconds_by_action[action] = self.setup_seconds_by_action.get(action, 0.0) + seconds
        self.setup_bytes_by_action[action] = self.setup_bytes_by_action.get(action, 0) + num_bytes

    def add_copy(self, name: str, seconds: float, num_bytes: int = 0) -> None:
        self.copy_seconds_by_name[name] = self.copy_seconds_by_name.get(name, 0.0) + seconds
        self.copy_bytes_by_name[name] = self.copy_bytes_by_name.get(name, 0) + num_bytes
        self.copy_calls_by_name[name] = self.copy_calls_by_name.get(name, 0) + 1

    def refresh(self) -> None:
        """Takes the session's counters: units acquired from the ring and seconds waited."""
        if self.session is None or self.session.closed:
            return
        stats = self.session.stats()
        for name, calls in (("streamed", stats["streamed_uses"]), ("out_of_schedule", stats["sync_uses"])):
            self.copy_calls_by_name[name] = int(calls)
            self.copy_bytes_by_name.setdefault(name, 0)
        self.copy_seconds_by_name["streamed"] = float(stats["wait_seconds"])

    def clone_for_runtime(self) -> "DynamicOffloadState":
        """The structure and plan, without timings or counters."""
        clone = copy.copy(self)
        clone.entries = list(self.entries)
        clone.bytes_by_placement = dict(self.bytes_by_placement)
        clone.selected_resident_modules = list(self.selected_resident_modules)
        clone.selected_resident_linear_weights = list(self.selected_resident_linear_weights)
        clone.selected_pinned_linear_weights = list(self.selected_pinned_linear_weights)
        clone.resolved_resident_module_patterns = list(self.resolved_resident_module_patterns)
        clone.planner_decisions = dict(self.planner_decisions)
        for name in ("setup_seconds_by_action", "setup_bytes_by_action", "copy_seconds_by_name",
                     "copy_bytes_by_name", "copy_calls_by_name"):
            setattr(clone, name, {})
        clone.session = None
        return clone

    def as_dict(self) -> Dict[str, Any]:
        """The seed's summary: sizes in GB (4 decimals), setup and copy runtimes per name."""
        self.refresh()
        return {
            "module_count": self.module_count,
            "total_gb": _gb(self.total_bytes),
            "bytes_by_placement": {name: _gb(value) for name, value in self.bytes_by_placement.items()},
            "patched_module_count": self.patched_module_count,
            "setup_runtime": {
                action: {"seconds": round(seconds, 4),
                         "gb": _gb(self.setup_bytes_by_action.get(action, 0))}
                for action, seconds in self.setup_seconds_by_action.items()},
            "copy_runtime": {
                name: {"calls": self.copy_calls_by_name.get(name, 0),
                       "seconds": round(self.copy_seconds_by_name.get(name, 0.0), 4),
                       "gb": _gb(self.copy_bytes_by_name.get(name, 0))}
                for name in sorted(set(self.copy_calls_by_name) | set(self.copy_seconds_by_name))},
            "selected_resident_modules": list(self.selected_resident_modules),
            "selected_resident_linear_weights": list(self.selected_resident_linear_weights),
            "selected_pinned_linear_weights": list(self.selected_pinned_linear_weights),
            "resolved_resident_module_patterns": list(self.resolved_resident_module_patterns),
            "sdnq_parameter_pinning": {
                "pinned_count": self.sdnq_pinned_parameter_count,
                "pinned_gb": _gb(self.sdnq_pinned_parameter_bytes),
                "unpinned_count": self.sdnq_unpinned_parameter_count,
                "unpinned_gb": _gb(self.sdnq_unpinned_parameter_bytes)},
            "planner_decisions": dict(self.planner_decisions),
            "entries": [entry.__dict__.copy() for entry in self.entries],
        }


def _gb(value: int) -> float:
    return round(value / _GIB, 4)


def build_state(module: nn.Module, *, streamed: Iterable[str], streamable: Iterable[str],
                decisions: Mapping[str, str], device: str, pinned: bool,
                session: Any = None) -> DynamicOffloadState:
    """The state of ``module`` given which tensors stream (``streamed``) and which the runner
    could stream (``streamable``: the others of them were kept resident by the planner)."""
    streamed = set(streamed)
    streamable = set(streamable)
    state = DynamicOffloadState(session=session, planner_decisions=seed_decisions(decisions))
    tensors = list(module.named_parameters()) + list(module.named_buffers())
    modules = dict(module.named_modules())
    for name, tensor in tensors:
        owner = name.rsplit(".", 1)[0] if "." in name else ""
        if name in streamed:
            placement = "streamed_large"
        elif name in streamable:
            placement = "resident_module"
        else:
            placement = "resident_small"
        size = tensor.numel() * tensor.element_size()
        state.entries.append(DynamicOffloadPlanEntry(
            module_name=owner, module_type=type(modules.get(owner, module)).__name__,
            tensor_name=name, shape=tuple(tensor.shape), dtype=str(tensor.dtype).replace("torch.", ""),
            device=device if placement != "streamed_large" else "cpu", bytes=size,
            placement=placement))
        state.total_bytes += size
        state.bytes_by_placement[placement] = state.bytes_by_placement.get(placement, 0) + size
    state.module_count = len({entry.module_name for entry in state.entries})
    state.patched_module_count = len({n.rsplit(".", 1)[0] for n in streamed})
    resident_weights = [e.tensor_name for e in state.entries if e.placement == "resident_module"]
    state.selected_resident_linear_weights = resident_weights
    state.selected_resident_modules = sorted({name.rsplit(".", 1)[0] for name in resident_weights})
    state.selected_pinned_linear_weights = sorted(streamed) if pinned else []
    # ddod names the patterns it chose resident modules by; else they are inferred here.
    # (its other answers, "every repeated block" or "none (...)", are no patterns).
    chosen = decisions.get("resident_module_patterns", "")
    if chosen and not chosen.startswith(("every repeated block", "none")):
        state.resolved_resident_module_patterns = chosen.split(",")
    else:
        state.resolved_resident_module_patterns = _block_patterns(state.selected_resident_modules)
    # The seed's count of nn.Linear modules it could not patch (their weight is no plain 2-D
    # (out_features, in_features) floating tensor): they run their own forward.
    state.planner_decisions.setdefault(
        "unsupported_linear_module_count", _unsupported_linear_count(module))
    return state


_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$")
_SIZE = re.compile(r"^(\d+(?:\.\d+)?) (B|KiB|MiB|GiB|TiB)$")
_UNITS = {"B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def seed_decisions(decisions: Mapping[str, str]) -> Dict[str, Any]:
    """ddod's decisions (text) with the seed's value types: numbers as numbers (``'4.0000'``
    is 4.0, ``'2'`` is 2), ``true``/``false`` as booleans, and a bare size (``'12.0 MiB'``) as
    its bytes (an int). Explanations with words (``'2 (2.0 MiB)'``) stay text."""
    converted: Dict[str, Any] = {}
    for key, text in decisions.items():
        value: Any = text
        if isinstance(text, str):
            stripped = text.strip()
            size = _SIZE.match(stripped)
            if _NUMBER.match(stripped):
                value = float(stripped) if any(c in stripped for c in ".eE") else int(stripped)
            elif size:
                value = int(round(float(size.group(1)) * _UNITS[size.group(2)]))
            elif stripped in ("true", "false"):
                value = stripped == "true"
        converted[key] = value
    return converted


def _unsupported_linear_count(module: nn.Module) -> int:
    """Linears (subclasses too, as the seed's ``isinstance``) whose weight is not a plain 2-D
    floating ``(out_features, in_features)`` tensor: a subclass without ``in_features`` /
    ``out_features`` counts, and runs its own forward."""
    from ..quantized import dense_linear_weight

    return sum(1 for submodule in module.modules()
               if isinstance(submodule, nn.Linear) and dense_linear_weight(submodule) is None)


def _block_patterns(module_names: Iterable[str]) -> List[str]:
    """``^<prefix>\\.\\d+$`` for each repeated-block prefix among ``module_names``."""
    patterns = set()
    for name in module_names:
        match = re.match(r"^(.*?)\.(\d+)(\.|$)", name)
        if match:
            patterns.add(rf"^{re.escape(match.group(1))}\.\d+$")
    return sorted(patterns)
