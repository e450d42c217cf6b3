"""The seed's plan helpers: ``build_dynamic_offload_plan`` (the structural plan of a module, by
the seed's placement rules), ``get_cuda_total_vram_gb``, and the process-wide plan cache that
``DDO_CACHE_PLAN`` switches (``clear_dynamic_offload_plan_cache`` empties it).

Thread-safety: the plan cache is guarded by a lock; the functions are otherwise pure.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Dict, Hashable, Mapping, Optional, Tuple

import torch
from torch import nn

from .offload_state import DynamicOffloadPlanEntry, DynamicOffloadState


def get_cuda_total_vram_gb(device: Any = "cuda:0") -> float:
    """Total memory of a CUDA device in GiB; 0.0 without CUDA or when the call fails."""
    try:
        if not torch.cuda.is_available():
            return 0.0
        return torch.cuda.get_device_properties(torch.device(device)).total_memory / 2**30
    except Exception:  # noqa: BLE001 - the seed's contract: 0.0 on any failure
        return 0.0


def build_dynamic_offload_plan(module: nn.Module, config: Any = None) -> DynamicOffloadState:
    """The seed's plan: every local tensor of each non-root module that is an instance of
    ``config.target_module_classes`` and matches no ``skip_modules_pattern``, placed
    ``resident_module`` (module matches an always-resident pattern), ``resident_small`` (at most
    ``small_tensor_threshold_bytes``) or ``streamed_large``. Nothing is moved; ddod's session
    plan (resident blocks, ring) is ``get_dynamic_offload_state`` after ``enable_offload``."""
    from .offload_settings import DynamicOffloadConfig

    config = config if config is not None else DynamicOffloadConfig()
    skip = [re.compile(p) for p in config.skip_modules_pattern]
    always = [re.compile(p) for p in config.always_resident_modules_pattern]
    state = DynamicOffloadState()
    modules = set()
    for name, submodule in module.named_modules():
        if not name or any(p.search(name) for p in skip):
            continue
        if not isinstance(submodule, tuple(config.target_module_classes)):
            continue
        modules.add(name)
        tensors = list(submodule.named_parameters(recurse=False)) + list(
            submodule.named_buffers(recurse=False))
        for tensor_name, tensor in tensors:
            size = tensor.numel() * tensor.element_size()
            if any(p.search(name) for p in always):
                placement = "resident_module"
            elif size <= config.small_tensor_threshold_bytes:
                placement = "resident_small"
            else:
                placement = "streamed_large"
            state.entries.append(DynamicOffloadPlanEntry(
                module_name=name, module_type=type(submodule).__name__, tensor_name=tensor_name,
                shape=tuple(tensor.shape), dtype=str(tensor.dtype).replace("torch.", ""),
                device=str(tensor.device), bytes=size, placement=placement))
            state.total_bytes += size
            state.bytes_by_placement[placement] = state.bytes_by_placement.get(placement, 0) + size
    state.module_count = len(modules)
    return state


def _structure(module: nn.Module) -> Tuple[Hashable, ...]:
    """The seed's structure signature: each module's name and class, and each local tensor's
    name, shape, dtype, device and element size."""
    signature = []
    for name, submodule in module.named_modules():
        tensors = list(submodule.named_parameters(recurse=False)) + list(
            submodule.named_buffers(recurse=False))
        signature.append((name, type(submodule).__qualname__, tuple(
            (t_name, tuple(t.shape), str(t.dtype), str(t.device), t.element_size())
            for t_name, t in tensors)))
    return tuple(signature)


def plan_cache_key(module: nn.Module, config: Any, device: str,
                   session_settings: Mapping[str, str], streaming: bool) -> Hashable:
    """What a plan depends on: the module's class and structure, the config's module
    selection, the device and the session's settings."""
    return (type(module).__module__, type(module).__qualname__, streaming, device,
            tuple(cls.__qualname__ for cls in config.target_module_classes),
            tuple(config.skip_modules_pattern), tuple(sorted(session_settings.items())),
            _structure(module))


class PlanCache:
    """Plans by key, for the life of the process (the seed's plan cache)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._plans: Dict[Hashable, Any] = {}

    def get(self, key: Hashable) -> Optional[Any]:
        with self._lock:
            return self._plans.get(key)

    def put(self, key: Hashable, plan: Any) -> None:
        with self._lock:
            self._plans[key] = plan

    def clear(self) -> None:
        with self._lock:
            self._plans.clear()


PLAN_CACHE = PlanCache()
