"""Quantized and packed weights: what the dense-Linear streaming path must never touch.

A module whose weights are not plain dense tensors keeps its own forward: DDO does not patch
it, and a component holding such modules is routed to Diffusers group offload (leaf_level by
default), which moves modules whole. This module recognises the backends by their classes,
without importing them:

- SDNQ: a submodule with ``sdnq_dequantizer`` (the seed's rule);
- bitsandbytes: ``Linear4bit``, ``Linear8bitLt`` (and their FP4/NF4 variants), or parameters
  of class ``Params4bit`` / ``Int8Params``;
- optimum-quanto: ``QLinear`` and other ``Q*`` modules of ``optimum.quanto``, or ``QTensor``
  subclasses;
- TorchAO: parameters whose data is a ``torchao`` tensor subclass;
- GGUF (diffusers): parameters of class ``GGUFParameter``;
- any other tensor subclass, and ``nn.Linear`` weights that are not 2-D floating
  ``(out_features, in_features)`` (packed layouts).
"""

from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Tuple

import torch
from torch import nn

from .shared_weights import is_guarded

_BNB_MODULES = {"Linear4bit", "Linear8bitLt", "LinearFP4", "LinearNF4"}
_BNB_PARAMETERS = {"Params4bit", "Int8Params"}
_PLAIN = (torch.Tensor, nn.Parameter)


def is_plain_tensor(tensor: torch.Tensor) -> bool:
    """True for a plain dense tensor or parameter whose data is a plain tensor, and for a
    guarded view of ddod's memory (always made from one)."""
    if is_guarded(tensor):
        return True
    if type(tensor) not in _PLAIN:
        return False
    data = tensor.data if isinstance(tensor, nn.Parameter) else tensor
    return type(data) is torch.Tensor and data.layout == torch.strided and not data.is_quantized


def linear_shape(module: nn.Module) -> Optional[Tuple[int, int]]:
    """``(out_features, in_features)`` of a Linear, or None when it does not say (a subclass
    that skipped ``Linear.__init__``)."""
    out_features = getattr(module, "out_features", None)
    in_features = getattr(module, "in_features", None)
    if isinstance(out_features, int) and isinstance(in_features, int):
        return out_features, in_features
    return None


def dense_linear_weight(module: nn.Module) -> Optional[torch.Tensor]:
    """The weight of an ``nn.Linear`` (subclasses too) that is a plain dense floating tensor
    (float8 included) of shape ``(out_features, in_features)``, owned by the module itself:
    the seed's rule for a Linear it can patch. None for anything else (a packed or quantized
    weight, a subclass without ``in_features``/``out_features``, an SDNQ layer)."""
    if not isinstance(module, nn.Linear) or hasattr(module, "sdnq_dequantizer"):
        return None
    weight = module._parameters.get("weight")
    shape = linear_shape(module)
    if (weight is None or shape is None or not is_plain_tensor(weight) or weight.dim() != 2
            or not weight.is_floating_point() or tuple(weight.shape) != shape):
        return None
    return weight


def _module_of(kind: type) -> str:
    return getattr(kind, "__module__", "") or ""


def quantized_backend_of(module: nn.Module) -> Tuple[str, str]:
    """``(backend, reason)`` for a module whose own weights are not plain dense tensors;
    ``("", "")`` otherwise. Only the module's own parameters and buffers count."""
    cls = type(module)
    if hasattr(module, "sdnq_dequantizer"):
        return "sdnq", "has sdnq_dequantizer"
    if cls.__name__ in _BNB_MODULES or _module_of(cls).startswith("bitsandbytes"):
        return "bitsandbytes", f"module class {cls.__name__}"
    if _module_of(cls).startswith("optimum.quanto") or (
            cls.__name__.startswith("Q") and "quanto" in _module_of(cls)):
        return "quanto", f"module class {cls.__name__}"
    tensors = list(module._parameters.items()) + list(module._buffers.items())
    for name, tensor in tensors:
        if tensor is None:
            continue
        kind = type(tensor)
        data_kind = type(tensor.data) if isinstance(tensor, nn.Parameter) else kind
        if kind.__name__ in _BNB_PARAMETERS:
            return "bitsandbytes", f"{name} is a {kind.__name__}"
        if kind.__name__ == "GGUFParameter":
            return "gguf", f"{name} is a GGUFParameter"
        for candidate in (kind, data_kind):
            origin = _module_of(candidate)
            if origin.startswith("torchao"):
                return "torchao", f"{name} is a {candidate.__name__}"
            if origin.startswith("optimum.quanto") or "QTensor" in candidate.__name__:
                return "quanto", f"{name} is a {candidate.__name__}"
        if not is_plain_tensor(tensor):
            return "tensor_subclass", f"{name} is a {data_kind.__name__}"
    if isinstance(module, nn.Linear):
        # Packed and quantized subclasses often skip Linear.__init__: no in_features or
        # out_features, sometimes no weight. Only what is there is judged.
        weight = getattr(module, "weight", None)
        shape = linear_shape(module)
        if isinstance(weight, torch.Tensor) and (
                weight.dim() != 2 or not weight.is_floating_point()
                or (shape is not None and tuple(weight.shape) != shape)):
            expected = f"{shape}" if shape is not None else "2-D"
            return "packed", (f"weight {tuple(weight.shape)} {weight.dtype} is not "
                              f"{expected} floating")
    return "", ""


def quantized_modules(module: nn.Module) -> List[Tuple[str, str, str]]:
    """``(module path, backend, reason)`` of every submodule :func:`quantized_backend_of`
    recognises, in ``named_modules`` order."""
    found = []
    for path, child in module.named_modules():
        backend, reason = quantized_backend_of(child)
        if backend:
            found.append((path, backend, reason))
    return found


def detect_quantized_backend_modules(module: nn.Module) -> Dict[str, object]:
    """The seed's detection payload, extended to every backend above.

    ``{}`` when nothing is quantized. Otherwise, per backend found, ``<backend>_module_count``
    and ``<backend>_status`` (``"detected_forward_preserved"``: those modules keep their own
    forward), and ``quantized_backends`` (sorted) and ``quantized_modules`` (path -> backend).
    For SDNQ this is exactly the seed's ``sdnq_module_count`` / ``sdnq_status``.
    """
    found = quantized_modules(module)
    if not found:
        return {}
    payload: Dict[str, object] = {}
    counts: Dict[str, int] = {}
    for _, backend, _ in found:
        counts[backend] = counts.get(backend, 0) + 1
    for backend, count in sorted(counts.items()):
        payload[f"{backend}_module_count"] = count
        payload[f"{backend}_status"] = "detected_forward_preserved"
    payload["quantized_backends"] = sorted(counts)
    payload["quantized_modules"] = {path: backend for path, backend, _ in found}
    return payload


#: Why each backend cannot stream yet: ddod streams plain 2-D floating Linear weights (fp8
#: included), and the module's own forward runs on views of them.
_WHY_NOT_STREAMED = {
    "sdnq": "SDNQ's integer weights and dequantizer state",
    "bitsandbytes": "bitsandbytes' quantization state lives on its Params4bit/Int8Params objects",
    "quanto": "quanto's weights are QTensor subclasses",
    "torchao": "TorchAO's weights are tensor subclasses",
    "gguf": "GGUF's packed blocks are GGUFParameter objects",
    "tensor_subclass": "weights that are tensor subclasses",
    "packed": "packed weights that are not 2-D floating (out_features, in_features) tensors",
}


def route_reason(report: Mapping[str, object]) -> str:
    """Why a component with quantized modules (``report``: what
    :func:`detect_quantized_backend_modules` returned) stays off the DDO route: each backend
    found, how many modules, the first of them, and why DDO cannot stream it yet."""
    modules = report.get("quantized_modules") or {}
    parts = []
    for backend in report.get("quantized_backends") or ():
        paths = [path for path, found in modules.items() if found == backend]
        first = f" (first: {paths[0] or '<root>'})" if paths else ""
        why = _WHY_NOT_STREAMED.get(backend, "weights ddod does not store")
        parts.append(f"{len(paths)} {backend} module{'s' if len(paths) != 1 else ''}{first}: "
                     f"{why}")
    return ("quantized weights DDO cannot stream yet, moved whole by Diffusers group offload: "
            + "; ".join(parts))
