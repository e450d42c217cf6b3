"""A module's component layout without its bytes: what ddod plans from (ExplainPlan,
``ddoctl plan --explain LAYOUT.json``).

The layout names every parameter and persistent buffer with its dtype (safetensors' names),
shape, owning module and class, as the component store would register it::

    from diffusers_dynamic_offloader.layout import write_layout
    write_layout(transformer, "flux.json", component="transformer")
    # then: ddoctl plan --explain flux.json DDO_VRAM_BUDGET_GB=12
"""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional

from torch import nn

from . import dtypes
from ._proto import components_pb2, sessions_pb2
from .module_tensors import module_tensors, unique


def module_layout(
    module: nn.Module,
    *,
    component: str = "",
    device: str = "",
    settings: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    """The layout of ``module`` as the JSON object ``ddoctl plan --explain`` reads.

    Meta-device modules work: no tensor data is read.
    """
    tensors = []
    for entry in unique(module_tensors(module)):
        code = dtypes.to_proto(entry.tensor.dtype, tensor_name=entry.name)
        tensors.append({
            "name": entry.name,
            "dtype": dtypes.safetensors_name(code),
            "shape": list(entry.tensor.shape),
            "module_path": entry.module_path,
            "module_class": entry.module_class,
        })
    layout: Dict[str, Any] = {"tensors": tensors}
    if component:
        layout["component"] = component
    if device:
        layout["device"] = device
    if settings:
        layout["settings"] = {str(name): str(value) for name, value in settings.items()}
    return layout


def write_layout(module: nn.Module, path: str, **kwargs: Any) -> None:
    """Writes :func:`module_layout` to ``path`` as JSON."""
    with open(path, "w", encoding="utf-8") as file:
        json.dump(module_layout(module, **kwargs), file, indent=1)


def explain_request(
    module: nn.Module,
    *,
    component: str = "",
    device: str = "",
    settings: Optional[Mapping[str, str]] = None,
) -> sessions_pb2.ExplainPlanRequest:
    """The ExplainPlanRequest for ``module``."""
    request = sessions_pb2.ExplainPlanRequest(component=component, device_uuid=device)
    for name, value in (settings or {}).items():
        request.settings[str(name)] = str(value)
    for entry in unique(module_tensors(module)):
        code = dtypes.to_proto(entry.tensor.dtype, tensor_name=entry.name)
        request.tensors.append(components_pb2.TensorSpec(
            name=entry.name,
            dtype=code,
            shape=list(entry.tensor.shape),
            byte_size=entry.tensor.numel() * dtypes.itemsize(code),
            module_path=entry.module_path,
            module_class=entry.module_class,
        ))
    return request
