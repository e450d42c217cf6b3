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
from typing import Callable, Dict, Iterator, List, Mapping, NamedTuple, Optional, Tuple

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
    bind_group(
        group,
        lambda parameter: nn.Parameter(view, requires_grad=requires_grad) if parameter else view,
    )


def bind_group(
    group: List[ModuleTensor], make: Callable[[bool], torch.Tensor]
) -> Optional[torch.Tensor]:
    """Puts a tensor under every name of ``group`` (one tensor's aliases) into its owner's
    ``_parameters`` or ``_buffers``: ``make(True)`` for the parameters and ``make(False)`` for
    the buffers, each made once, when the first name of its kind comes, so tied names stay
    tied. Every way this package rebinds a module (an attached component's ``bind``, a
    streaming session binding and giving back its module) goes through here.

    Returns:
        The parameter made, else the buffer (None for an empty group).
    """
    made: Dict[bool, torch.Tensor] = {}
    for entry in group:
        parameter = not entry.is_buffer
        tensor = made.get(parameter)
        if tensor is None:
            tensor = made[parameter] = make(parameter)
        slots = entry.owner._parameters if parameter else entry.owner._buffers
        slots[entry.attribute] = tensor
    return made.get(True, made.get(False))


class ModuleMatch(NamedTuple):
    """How a module's tensors correspond to a component's (:func:`match_module`)."""

    #: ``(component name, aliases)`` of every tensor that matches, in module order.
    groups: List[Tuple[str, List[ModuleTensor]]]
    #: Names the module has and the component lacks.
    missing: List[str]
    #: Names the component has and the module lacks.
    unexpected: List[str]
    #: ``"name: component <dtype> <shape>, module <dtype> <shape>"`` of every mismatch.
    mismatched: List[str]


def match_module(module: nn.Module, tensors: Mapping[str, torch.Tensor]) -> ModuleMatch:
    """Matches every tensor of ``module`` (:func:`module_tensors`) with the component tensor
    ``tensors`` holds under one of its names: the first name that has one. A tensor whose
    shape or dtype differs does not match (a view cannot convert); the caller decides what
    else is fatal."""
    groups = []
    missing: List[str] = []
    mismatched: List[str] = []
    known = set()
    for group in alias_groups(module_tensors(module)):
        known.update(entry.name for entry in group)
        source = next((entry.name for entry in group if entry.name in tensors), None)
        if source is None:
            missing.extend(entry.name for entry in group)
            continue
        view, current = tensors[source], group[0].tensor
        if view.shape != current.shape or view.dtype != current.dtype:
            mismatched.append(
                f"{source}: component {describe_tensor(view)}, module {describe_tensor(current)}"
            )
            continue
        groups.append((source, group))
    unexpected = [name for name in tensors if name not in known]
    return ModuleMatch(groups, missing, unexpected, mismatched)


def describe_tensor(tensor: torch.Tensor) -> str:
    """``"float16 [4, 8]"``: a tensor's dtype and shape, for messages."""
    return f"{str(tensor.dtype).replace('torch.', '')} {list(tensor.shape)}"
