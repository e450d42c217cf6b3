"""The tensors of a torch module as ddod stores them: parameters and persistent buffers.

The names are the module's ``state_dict()`` names. Non-persistent buffers (those registered with
``persistent=False``, e.g. precomputed position ids) are not part of a component: every instance
of the module computes them itself, and they are absent from safetensors files.

A tensor shared by several names (tied weights) appears once per name here; :func:`unique`
keeps the first name of each, as ``named_parameters()`` does.

Adapter layers (PEFT's LoRA and its kin) wrap the layer they adapt: ``to_q`` becomes a wrapper
whose ``base_layer`` is the original Linear and whose other children (``lora_A``, ``lora_B``,
``lora_dropout``, ``lora_magnitude_vector``...) hold the adapters. The component is the base
model: its names are those of the unwrapped model (``to_q.weight``, not
``to_q.base_layer.weight``), and the adapters' tensors are not part of it. They belong to the
runner (:func:`runner_owned_tensors`): small, switched at will, and kept on the execution device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Iterator, List, Tuple

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


#: The attribute by which an adapter wrapper holds the layer it adapts (PEFT's BaseTunerLayer).
BASE_LAYER = "base_layer"


def module_tensors(module: nn.Module) -> List[ModuleTensor]:
    """Every parameter and persistent buffer of the base model in ``module`` under every name
    it has, in ``state_dict()`` order, named as in the unwrapped model; adapter tensors are
    left out (see the module documentation)."""
    found: List[ModuleTensor] = []
    for path, owner in _base_modules(module):
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


def runner_owned_tensors(module: nn.Module) -> List[ModuleTensor]:
    """The tensors of ``module`` that are not part of its component: the adapters of every
    adapter wrapper (parameters and every buffer), under their full ``state_dict()`` names."""
    found: List[ModuleTensor] = []
    for path, owner in module.named_modules(remove_duplicate=False):
        if not _is_adapter_wrapper(owner):
            continue
        prefix = f"{path}." if path else ""
        for child_name, child in owner._modules.items():
            if child_name == BASE_LAYER or child is None:
                continue
            for inner_path, inner in child.named_modules(remove_duplicate=False):
                inner_prefix = f"{prefix}{child_name}." + (f"{inner_path}." if inner_path else "")
                found.extend(_own_tensors(inner, inner_prefix, inner_prefix[:-1]))
        # Adapter tensors held directly by the wrapper (a ParameterDict is a child module).
        found.extend(_own_tensors(owner, prefix, path))
    return found


def _own_tensors(owner: nn.Module, prefix: str, path: str) -> List[ModuleTensor]:
    """The parameters and every buffer (persistent or not) held by ``owner`` itself."""
    class_name = type(owner).__name__
    found = [
        ModuleTensor(prefix + attribute, path, class_name, owner, attribute, tensor, False)
        for attribute, tensor in owner._parameters.items() if tensor is not None
    ]
    found.extend(
        ModuleTensor(prefix + attribute, path, class_name, owner, attribute, tensor, True)
        for attribute, tensor in owner._buffers.items() if tensor is not None
    )
    return found


def _is_adapter_wrapper(owner: nn.Module) -> bool:
    return isinstance(owner._modules.get(BASE_LAYER), nn.Module)


def _base_modules(module: nn.Module) -> Iterator[Tuple[str, nn.Module]]:
    """``named_modules(remove_duplicate=False)`` of the base model: an adapter wrapper is
    replaced by its base layer, under the wrapper's path; adapter children are skipped."""

    def walk(path: str, owner: nn.Module) -> Iterator[Tuple[str, nn.Module]]:
        while _is_adapter_wrapper(owner):
            owner = owner._modules[BASE_LAYER]
        yield path, owner
        for name, child in owner._modules.items():
            if child is not None:
                yield from walk(f"{path}.{name}" if path else name, child)

    yield from walk("", module)


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


def assign(group: List[ModuleTensor], view: torch.Tensor, requires_grad: bool = False) -> None:
    """Binds every name of ``group`` (one tensor's aliases) to ``view``: buffers directly,
    parameters through one shared ``nn.Parameter``."""
    parameter = None
    for entry in group:
        if entry.is_buffer:
            entry.owner._buffers[entry.attribute] = view
        else:
            if parameter is None:
                parameter = nn.Parameter(view, requires_grad=requires_grad)
            entry.owner._parameters[entry.attribute] = parameter
