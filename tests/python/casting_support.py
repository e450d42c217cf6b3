"""Diffusers' layerwise casting without Diffusers (not installed on the CPU test machines).

``HookRegistry`` and ``LayerwiseCastingHook`` below do what diffusers/hooks/hooks.py and
diffusers/hooks/layerwise_casting.py do (Diffusers 0.3x): the registry lives in the module's
``_diffusers_hook`` attribute and replaces ``module.forward`` on the instance with a
``functools.partial`` of a closure over the hook's function references; the casting hook casts
the module to its storage dtype once, to the compute dtype before every forward and back
after it. ``apply_layerwise_casting`` walks children as Diffusers' does, hooking Linear, Conv
and Embedding leaves whose path matches no skip pattern.
"""

from __future__ import annotations

import functools
import re
from typing import Sequence

import torch
from torch import nn

SUPPORTED_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                    nn.ConvTranspose3d, nn.Linear, nn.Embedding)


class ModelHook:
    def __init__(self) -> None:
        self.fn_ref = None

    def initialize_hook(self, module):
        return module

    def pre_forward(self, module, *args, **kwargs):
        return args, kwargs

    def post_forward(self, module, output):
        return output


class HookFunctionReference:
    def __init__(self) -> None:
        self.pre_forward = None
        self.post_forward = None
        self.forward = None
        self.original_forward = None


class HookRegistry:
    def __init__(self, module_ref: nn.Module) -> None:
        self.hooks = {}
        self._module_ref = module_ref
        self._hook_order = []
        self._fn_refs = []

    @classmethod
    def check_if_exists_or_initialize(cls, module: nn.Module) -> "HookRegistry":
        if not hasattr(module, "_diffusers_hook"):
            module._diffusers_hook = cls(module)
        return module._diffusers_hook

    def get_hook(self, name: str):
        return self.hooks.get(name)

    def register_hook(self, hook: ModelHook, name: str) -> None:
        self._module_ref = hook.initialize_hook(self._module_ref)

        def create_new_forward(function_reference):
            def new_forward(module, *args, **kwargs):
                args, kwargs = function_reference.pre_forward(module, *args, **kwargs)
                output = function_reference.forward(*args, **kwargs)
                return function_reference.post_forward(module, output)

            return new_forward

        forward = self._module_ref.forward
        fn_ref = HookFunctionReference()
        fn_ref.pre_forward = hook.pre_forward
        fn_ref.post_forward = hook.post_forward
        fn_ref.forward = forward
        rewritten_forward = create_new_forward(fn_ref)
        self._module_ref.forward = functools.update_wrapper(
            functools.partial(rewritten_forward, self._module_ref), forward)
        hook.fn_ref = fn_ref
        self.hooks[name] = hook
        self._hook_order.append(name)
        self._fn_refs.append(fn_ref)


class LayerwiseCastingHook(ModelHook):
    #: Forwards run through the hook (all instances), to show the hook did the casting.
    calls = 0

    def __init__(self, storage_dtype: torch.dtype, compute_dtype: torch.dtype) -> None:
        super().__init__()
        self.storage_dtype = storage_dtype
        self.compute_dtype = compute_dtype

    def initialize_hook(self, module):
        module.to(dtype=self.storage_dtype)
        return module

    def pre_forward(self, module, *args, **kwargs):
        LayerwiseCastingHook.calls += 1
        module.to(dtype=self.compute_dtype)
        return args, kwargs

    def post_forward(self, module, output):
        module.to(dtype=self.storage_dtype)
        return output


def apply_layerwise_casting(module: nn.Module, storage_dtype: torch.dtype,
                            compute_dtype: torch.dtype,
                            skip_modules_pattern: Sequence[str] = ("norm",),
                            _prefix: str = "") -> None:
    if any(re.search(pattern, _prefix) for pattern in skip_modules_pattern):
        return
    if isinstance(module, SUPPORTED_LAYERS):
        registry = HookRegistry.check_if_exists_or_initialize(module)
        registry.register_hook(LayerwiseCastingHook(storage_dtype, compute_dtype),
                               "layerwise_casting")
        return
    for name, child in module.named_children():
        apply_layerwise_casting(child, storage_dtype, compute_dtype, skip_modules_pattern,
                                f"{_prefix}.{name}" if _prefix else name)


def register_other_hook(module: nn.Module, name: str) -> None:
    """A Diffusers hook that is not a casting one (e.g. group offloading's)."""
    HookRegistry.check_if_exists_or_initialize(module).register_hook(ModelHook(), name)
