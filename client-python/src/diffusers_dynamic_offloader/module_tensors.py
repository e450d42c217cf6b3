"""The tensors of a torch module as ddod stores them: parameters and persistent buffers.

The names are the module's ``state_dict()`` names. Non-persistent buffers (those registered with
``persistent=False``, e.g. precomputed position ids) are not part of a component: every instance
of the module computes them itself, and they are absent from safetensors files.

A tensor shared by several names (tied weights) appears once per name here; :func:`unique`
keeps the first name of each, as ``named_parameters()`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List

import torch
from torch import nn


@dataclass(frozen=True)
class ModuleTensor:
    """One parameter or persistent buffer of a module, under one of its names.

    Attributes:
        name: The full name (``"blocks.0.attn.to_q.weight"``).
        module_path: The owning module's path (``"blocks.0.attn.to_q"``; ``""`` for the root).
        module_class: The owning module's class name (``"Linear"``).
        owner: The owning module.
        attribute: The name inside the owner (``"weight"``).
        tensor: The parameter or buffer.
        is_buffer: True for buffers.
    """

    name: str
    module_path: str
    module_class: str
    owner: nn.Module
    attribute: str
    tensor: torch.Tensor
    is_buffer: bool


def module_tensors(module: nn.Module) -> List[ModuleTensor]:
    """Every parameter and persistent buffer of ``module`` under every name it has, in
    ``state_dict()`` order."""
    found: List[ModuleTensor] = []
    for path, owner in module.named_modules(remove_duplicate=False):
        prefix = f"{path}." if path else ""
        class_name = type(owner).__name__
        for attribute, parameter in owner._parameters.items():
            if parameter is not None:
                found.append(
                    ModuleTensor(
                        prefix + attribute, path, class_name, owner, attribute, parameter, False
                    )
                )
        transient = getattr(owner, "_non_persistent_buffers_set", set())
        for attribute, buffer in owner._buffers.items():
            if buffer is not None and attribute not in transient:
                found.append(
                    ModuleTensor(
                        prefix + attribute, path, class_name, owner, attribute, buffer, True
                    )
                )
    return found


def alias_groups(entries: List[ModuleTensor]) -> List[List[ModuleTensor]]:
    """``entries`` grouped by the tensor object they name (tied weights share a group), in
    order of first appearance."""
    groups: Dict[int, List[ModuleTensor]] = {}
    for entry in entries:
        groups.setdefault(id(entry.tensor), []).append(entry)
    return list(groups.values())


def unique(entries: List[ModuleTensor]) -> List[ModuleTensor]:
    """The first name of every distinct tensor."""
    return [group[0] for group in alias_groups(entries)]


def assign(group: List[ModuleTensor], view: torch.Tensor) -> None:
    """Binds every name of ``group`` (one tensor's aliases) to ``view``: buffers directly,
    parameters through one shared ``nn.Parameter`` that does not require grad."""
    parameter = None
    for entry in group:
        if entry.is_buffer:
            entry.owner._buffers[entry.attribute] = view
        else:
            if parameter is None:
                parameter = nn.Parameter(view, requires_grad=False)
            entry.owner._parameters[entry.attribute] = parameter
