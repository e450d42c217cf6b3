"""A small LoRA implementation with PEFT's module shape and code paths, for the CPU tests
(PEFT itself is not a Debian package; the device tests use the real one).

What of PEFT (``peft.tuners.lora``, 0.1x-0.2x) it mirrors, so that DDO meets what PEFT does:

- :class:`LoraLinear` is ``peft.tuners.lora.layer.Linear``'s shape: ``base_layer`` (the
  original ``nn.Linear``, kept as it was: its forward, its parameters), ``lora_A`` and
  ``lora_B`` (``nn.ModuleDict`` of bias-free ``nn.Linear`` by adapter name), ``scaling``
  (``lora_alpha / r`` per adapter), ``active_adapters``, the ``disable_adapters`` flag and
  ``merged_adapters``.
- ``forward`` is PEFT's unmerged path: ``result = self.base_layer(x)``, then for every active
  adapter ``result = result + lora_B(lora_A(x)) * scaling`` with ``x`` cast to the adapter's
  dtype, and ``result`` cast back to the base result's dtype. Disabled adapters unmerge first.
- ``merge`` / ``unmerge`` write the base weight exactly as PEFT does:
  ``base_layer.weight.data += delta_weight`` (``safe_merge``: into a copy checked for NaN/inf)
  and ``-= delta_weight``, with
  ``delta_weight = (lora_B.weight @ lora_A.weight) * scaling`` computed on the adapters' device.
- ``set_adapter``, ``set_scale`` (``scale * lora_alpha / r``, as diffusers' ``set_adapters``
  with weights calls it), ``delete_adapter``.
- :func:`inject_lora` replaces the targets the way PEFT's ``_replace_module`` does:
  ``setattr(parent, name, new_module)``, then ``module.to(base_weight.device)`` for every new
  ``lora_`` submodule. A target that is already a :class:`LoraLinear` gets one more adapter
  (PEFT's ``update_layer``).

Unlike PEFT, both A and B start random and non-zero (PEFT starts B at zero, which would make an
adapter that DDO ignored look right), drawn from a generator seeded per adapter, so that the
same call on two copies of a model gives the same adapters. No dropout, DoRA, rsLoRA or
fan_in_fan_out.
"""

from __future__ import annotations

import re
from typing import Dict, Iterable, List, Optional

import torch
from torch import nn


class LoraLinear(nn.Module):
    """An ``nn.Linear`` with LoRA adapters beside it (PEFT's ``lora.Linear``)."""

    def __init__(self, base_layer: nn.Linear) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.lora_A = nn.ModuleDict()
        self.lora_B = nn.ModuleDict()
        self.r: Dict[str, int] = {}
        self.lora_alpha: Dict[str, float] = {}
        self.scaling: Dict[str, float] = {}
        self.active_adapters: List[str] = []
        self.merged_adapters: List[str] = []
        self.disable_adapters = False
        self.in_features = base_layer.in_features
        self.out_features = base_layer.out_features

    # Adapters.

    def update_layer(self, adapter_name: str, rank: int, lora_alpha: float,
                     generator: torch.Generator) -> None:
        """Adds an adapter (PEFT's ``update_layer``): random A and B, scaling alpha / r; the
        new adapter becomes active beside the others, as PEFT's injection leaves it."""
        weight = self.base_layer.weight
        self.lora_A[adapter_name] = nn.Linear(self.in_features, rank, bias=False)
        self.lora_B[adapter_name] = nn.Linear(rank, self.out_features, bias=False)
        with torch.no_grad():
            # Drawn on the CPU in float32 (the same numbers for every copy of the model),
            # then converted to the base weight's dtype as PEFT's adapters follow it.
            for linear, std in ((self.lora_A[adapter_name], 1.0 / self.in_features ** 0.5),
                                (self.lora_B[adapter_name], 1.0 / rank ** 0.5)):
                values = torch.randn(linear.weight.shape, generator=generator) * std
                linear.weight = nn.Parameter(values.to(weight.dtype))
        self.r[adapter_name] = rank
        self.lora_alpha[adapter_name] = lora_alpha
        self.scaling[adapter_name] = lora_alpha / rank
        if adapter_name not in self.active_adapters:
            self.active_adapters.append(adapter_name)

    def set_adapter(self, adapter_names) -> None:
        """Makes ``adapter_names`` (a name or a list) the active adapters."""
        names = [adapter_names] if isinstance(adapter_names, str) else list(adapter_names)
        for name in names:
            if name not in self.lora_A:
                raise ValueError(f"no adapter {name!r} in this layer")
        self.active_adapters = names

    def set_scale(self, adapter: str, scale: float) -> None:
        """PEFT's ``set_scale``: scaling = scale * lora_alpha / r."""
        if adapter in self.scaling:
            self.scaling[adapter] = scale * self.lora_alpha[adapter] / self.r[adapter]

    def enable_adapters(self, enabled: bool) -> None:
        self.disable_adapters = not enabled

    def delete_adapter(self, adapter_name: str) -> None:
        """Removes an adapter (PEFT's ``delete_adapter``); the remaining ones stay active. As in
        PEFT, a merged adapter may be deleted: its delta stays in the weight, and a later
        unmerge pops its name without subtracting anything."""
        for table in (self.lora_A, self.lora_B):
            del table[adapter_name]
        for table in (self.r, self.lora_alpha, self.scaling):
            table.pop(adapter_name, None)
        self.active_adapters = [name for name in self.active_adapters if name != adapter_name]

    # Merging (PEFT's exact writes into the base weight).

    def get_delta_weight(self, adapter: str) -> torch.Tensor:
        weight_a = self.lora_A[adapter].weight
        weight_b = self.lora_B[adapter].weight
        return (weight_b @ weight_a) * self.scaling[adapter]

    def merge(self, safe_merge: bool = False,
              adapter_names: Optional[Iterable[str]] = None) -> None:
        names = list(self.active_adapters if adapter_names is None else adapter_names)
        for adapter in names:
            if adapter in self.lora_A and adapter not in self.merged_adapters:
                base_layer = self.base_layer
                delta_weight = self.get_delta_weight(adapter)
                if safe_merge:  # PEFT's: in a copy, checked for NaN/inf first
                    merged = base_layer.weight.data.clone()
                    merged += delta_weight.to(merged.dtype)
                    if not torch.isfinite(merged).all():
                        raise ValueError(f"NaNs detected in the merged weights. The adapter "
                                         f"{adapter} seems to be broken")
                    base_layer.weight.data = merged
                else:
                    base_layer.weight.data += delta_weight
                self.merged_adapters.append(adapter)

    def unmerge(self) -> None:
        while self.merged_adapters:
            adapter = self.merged_adapters.pop()
            if adapter in self.lora_A:
                weight = self.base_layer.weight
                delta_weight = self.get_delta_weight(adapter)
                weight.data -= delta_weight

    @property
    def merged(self) -> bool:
        return bool(self.merged_adapters)

    # Forward (PEFT's lora.Linear.forward, without dropout).

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.disable_adapters:
            if self.merged:
                self.unmerge()
            return self.base_layer(x)
        if self.merged:
            return self.base_layer(x)
        result = self.base_layer(x)
        torch_result_dtype = result.dtype
        for active_adapter in self.active_adapters:
            if active_adapter not in self.lora_A:
                continue
            lora_a = self.lora_A[active_adapter]
            lora_b = self.lora_B[active_adapter]
            scaling = self.scaling[active_adapter]
            x = x.to(lora_a.weight.dtype)
            result = result + lora_b(lora_a(x)) * scaling
        return result.to(torch_result_dtype)


def inject_lora(model: nn.Module, target_names_regex: str, adapter_name: str, rank: int,
                seed: int, lora_alpha: Optional[float] = None) -> List[str]:
    """Adds adapter ``adapter_name`` to every ``nn.Linear`` whose module path matches
    ``target_names_regex`` (``re.fullmatch``), wrapping it in a :class:`LoraLinear` the first
    time as PEFT's ``_replace_module`` does. Returns the wrapped paths, in model order.

    The adapters' values depend on ``seed``, the adapter name's position and the target's
    order only: the same call on a deepcopy of the model gives the same adapters.
    """
    pattern = re.compile(target_names_regex)
    targets = [(path, module) for path, module in model.named_modules()
               if path and pattern.fullmatch(path)
               and (type(module) is nn.Linear or isinstance(module, LoraLinear))]
    if not targets:
        raise ValueError(f"no nn.Linear matches {target_names_regex!r}")
    generator = torch.Generator().manual_seed(seed)
    alpha = float(rank if lora_alpha is None else lora_alpha)
    wrapped = []
    for path, module in targets:
        parent_path, _, child_name = path.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        if isinstance(module, LoraLinear):
            new_module = module
        else:
            new_module = LoraLinear(module)
            setattr(parent, child_name, new_module)  # PEFT's _replace_module
        new_module.update_layer(adapter_name, rank, alpha, generator)
        base_weight = new_module.base_layer.weight
        for name, submodule in new_module.named_modules():
            if "lora_" in name:
                submodule.to(base_weight.device)  # as PEFT's _replace_module moves them
        wrapped.append(path)
    return wrapped


def lora_layers(model: nn.Module) -> List[LoraLinear]:
    return [module for module in model.modules() if isinstance(module, LoraLinear)]


def set_adapters(model: nn.Module, names, weights=None) -> None:
    """diffusers' ``set_adapters`` on a PEFT model: activate ``names`` with their weights
    (``set_scale``), in every LoRA layer."""
    names = [names] if isinstance(names, str) else list(names)
    weights = [1.0] * len(names) if weights is None else list(weights)
    for layer in lora_layers(model):
        present = [name for name in names if name in layer.lora_A]
        layer.set_adapter(present)
        for name, weight in zip(names, weights):
            layer.set_scale(name, weight)


def enable_lora(model: nn.Module, enabled: bool) -> None:
    for layer in lora_layers(model):
        layer.enable_adapters(enabled)


def delete_adapter(model: nn.Module, name: str) -> None:
    for layer in lora_layers(model):
        if name in layer.lora_A:
            layer.delete_adapter(name)


def merge_all(model: nn.Module, adapter_names: Optional[Iterable[str]] = None) -> None:
    """PEFT's ``merge_adapter`` / diffusers' ``fuse_lora``: merge into every base weight."""
    for layer in lora_layers(model):
        layer.merge(adapter_names=adapter_names)


def unmerge_all(model: nn.Module) -> None:
    for layer in lora_layers(model):
        layer.unmerge()
