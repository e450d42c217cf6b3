"""Changes to a streamed module that write no tensor: a weight replaced by another object, a
submodule swapped, adapters added.

A write into a bound weight is seen by its guard (:mod:`.shared_weights`). Other edits replace
what the module holds: ``module.weight = nn.Parameter(t)``, ``load_state_dict(assign=True)``,
a layer swapped for a new one, PEFT wrapping a Linear in a LoRA layer and adding its adapters.
Before every forward the session asks its :class:`WeightWatch` what changed:

- a component tensor now held by another object of the same dtype and shape is an edit (its
  new value is stored in ddod like any other edit); of another dtype or shape, or missing, it
  is refused with :class:`WeightEditError`;
- tensors that are not part of the component (adapters: see
  :func:`~.module_tensors.runner_owned_tensors`) belong to the runner and are moved to the
  execution device.

The cheap check (is every bound tensor still the object that was bound?) runs every forward. The
full walk of the module runs when the module's structure may have changed: torch 2 announces
every registration of a parameter, buffer or submodule through global hooks; with an older
torch, the walk runs every forward.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import torch
from torch import nn

from .errors import WeightEditError, describe_names
from .module_tensors import ModuleTensor, alias_groups, module_tensors, runner_owned_tensors

__all__ = ["ADAPTER_METHODS", "WeightWatch", "move_runner_owned", "place_adapters_around",
           "structure_version"]

#: The adapter API of Diffusers' and PEFT's models (``pipe.load_lora_weights`` and
#: ``pipe.fuse_lora`` call the transformer's), with when the adapters are placed: after a load,
#: before a fuse or unfuse (see :func:`place_adapters_around`). ``set_adapters`` and the like
#: compute nothing: the next forward places what they changed.
ADAPTER_METHODS = {"load_lora_adapter": "after", "add_adapter": "after", "load_adapter": "after",
                   "fuse_lora": "before", "unfuse_lora": "before"}

_version = [0]
_hooks_installed: List[bool] = []


def _bump(*_args) -> None:
    _version[0] += 1


def _install_registration_hooks() -> bool:
    """Installs torch's global registration hooks once; False when this torch has none."""
    if not _hooks_installed:
        module = torch.nn.modules.module
        names = ("register_module_parameter_registration_hook",
                 "register_module_buffer_registration_hook",
                 "register_module_module_registration_hook")
        installers = [getattr(module, name, None) for name in names]
        if all(installers):
            for install in installers:
                install(_bump)
            _hooks_installed.append(True)
        else:
            _hooks_installed.append(False)
    return _hooks_installed[0]


def structure_version() -> Optional[int]:
    """A number that changes whenever any module registers a parameter, buffer or submodule;
    None when this torch cannot tell."""
    return _version[0] if _install_registration_hooks() else None


class WeightWatch:
    """What a streamed module holds, as bound, to compare with what it holds now.

    Not thread-safe: used by the session, one forward at a time.
    """

    def __init__(
        self,
        module: nn.Module,
        bound: Mapping[str, torch.Tensor],
        specs: Mapping[str, Tuple[torch.dtype, Tuple[int, ...]]],
        device: torch.device,
    ) -> None:
        """``bound``: component name -> the tensor object the session bound; ``specs``: the
        component's dtype and shape by name; ``device``: where runner-owned tensors go."""
        self._module = module
        self._specs = dict(specs)
        self._device = device
        self._entries: List[Tuple[ModuleTensor, torch.Tensor]] = []
        for group in alias_groups(module_tensors(module)):
            source = next((entry.name for entry in group if entry.name in bound), None)
            if source is not None:
                self._entries.extend((entry, bound[source]) for entry in group)
        self._version = structure_version()
        self.place_runner_owned()

    def check(self) -> Dict[str, torch.Tensor]:
        """The component tensors replaced since they were bound (name -> the new tensor), after
        moving new runner-owned tensors to the device.

        Raises:
            WeightEditError: a component tensor is missing, or was replaced by one of another
                dtype or shape; the module has tensors the component lacks.
        """
        version = structure_version()
        if version is not None and version == self._version and self._unchanged():
            return {}
        self._version = version
        replaced = self._replaced()
        self.place_runner_owned()
        return replaced

    def place_runner_owned(self) -> None:
        """Moves every runner-owned tensor that is not on the device there."""
        move_runner_owned(self._module, self._device)

    def _unchanged(self) -> bool:
        for entry, bound in self._entries:
            table = entry.owner._buffers if entry.is_buffer else entry.owner._parameters
            if table.get(entry.attribute) is not bound:
                return False
        return True

    def _replaced(self) -> Dict[str, torch.Tensor]:
        bound = {entry.name: tensor for entry, tensor in self._entries}
        found: Dict[str, torch.Tensor] = {}
        covered = set()
        extra: List[str] = []
        for group in alias_groups(module_tensors(self._module)):
            source = next((entry.name for entry in group if entry.name in self._specs), None)
            if source is None:
                extra.extend(entry.name for entry in group)
                continue
            covered.add(source)
            tensor = group[0].tensor
            if any(bound.get(entry.name) is tensor for entry in group):
                continue
            dtype, shape = self._specs[source]
            if tensor.dtype != dtype or tuple(tensor.shape) != shape:
                raise WeightEditError(
                    f"{group[0].name} was replaced by a tensor of {_describe(tensor)}; the "
                    f"component's is {_describe_spec(dtype, shape)}. DDO streams the "
                    f"component's dtypes and shapes: call remove_dynamic_offload() / "
                    f"result.release() before changing them, then enable_offload again",
                    module_tensor=group[0].name)
            if tensor.is_meta:
                raise WeightEditError(
                    f"{group[0].name} was replaced by a tensor on the meta device (no data)",
                    module_tensor=group[0].name)
            found[source] = tensor
        missing = sorted(set(self._specs) - covered)
        if missing or extra:
            parts = []
            if missing:
                parts.append(f"missing now: {describe_names(missing)}")
            if extra:
                parts.append(f"new, not in the component: {describe_names(extra)}")
            raise WeightEditError(
                "the module's structure changed while it streams (" + "; ".join(parts) + "); "
                "call remove_dynamic_offload() / result.release() before changing the "
                "architecture, then enable_offload again")
        return found


def place_adapters_around(module: nn.Module, place: Callable[[], None]) -> List[str]:
    """Makes ``module``'s adapter methods (:data:`ADAPTER_METHODS`, where it has them) call
    ``place`` after a load and before a fuse or unfuse; returns the names wrapped (instance
    attributes: pop them from ``module.__dict__`` to unwrap).

    PEFT creates adapters beside their base layer's weight, which for a streamed Linear is a
    host view of ddod's copy, and the forward moves them to the execution device only later.
    A ``fuse_lora`` before any forward would then compute every delta on the CPU (in float32:
    slow), and an ``unfuse_lora`` after a forward on the GPU: a delta of other rounding, which
    no longer undoes the first exactly (:mod:`.edit_lineage`). Placing them as they are loaded
    and before each fuse keeps every delta on the execution device.
    """
    wrapped = []
    for name, when in ADAPTER_METHODS.items():
        method = getattr(module, name, None)
        if not callable(method) or name in module.__dict__:
            continue

        def placing(*args: Any, _method: Callable[..., Any] = method,
                    _after: bool = when == "after", **kwargs: Any) -> Any:
            if not _after:
                place()
            result = _method(*args, **kwargs)
            if _after:
                place()
            return result

        functools.update_wrapper(placing, method)
        module.__dict__[name] = placing
        wrapped.append(name)
    return wrapped


def move_runner_owned(module: nn.Module, device: torch.device, strict: bool = True) -> None:
    """Moves the runner-owned tensors of ``module`` (adapters) that are elsewhere to ``device``.

    Raises:
        WeightEditError: one is on the meta device (it has no data to move); with
            ``strict=False`` it stays there instead.
    """
    for entry in runner_owned_tensors(module):
        tensor = entry.tensor
        if tensor.device == device or (tensor.is_meta and not strict):
            continue
        if tensor.is_meta:
            raise WeightEditError(
                f"{entry.name} is on the meta device (no data): load the adapter's weights "
                f"before running the module", module_tensor=entry.name)
        with torch.no_grad():
            if entry.is_buffer:
                entry.owner._buffers[entry.attribute] = tensor.to(device)
            else:
                tensor.data = tensor.data.to(device)


def _describe(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).replace('torch.', '')} {list(tensor.shape)}"


def _describe_spec(dtype: torch.dtype, shape: Tuple[int, ...]) -> str:
    return f"{str(dtype).replace('torch.', '')} {list(shape)}"
