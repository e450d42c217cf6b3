"""The forward of a Linear whose weight streams: the weight comes from the session's ring.

A streaming session replaces the ``forward`` of every streamed ``nn.Linear`` (an instance
attribute) with :func:`streamed_forward`. The weight is the ring's view of the unit that holds
it, acquired through the session's consumer at each call, with the LoRA adapters fused into the
Linear added to it (:mod:`.fused_on_arrival`); weight and bias are cast to the input's dtype
when they differ. A backward pass through it raises (see
:class:`_NoBackwardThroughStream`). Under ``torch.compile`` it is a graph break
(:mod:`.compile_support`).

With the C++ consumer (:mod:`.cpp_consumer`), :func:`cpp_streamed_forward` runs the whole
forward of a Linear without fused adapters in C++ (acquire, view, cast, ``F.linear``, and a
backward that raises with the same words).

A Linear that keeps a forward of its own (a subclass: an fp8 Linear with its scale, ...; or one
carrying Diffusers' layerwise-casting hook, :mod:`.casting_hooks`) gets
:func:`own_streamed_forward`: its forward runs as it is, with its ``weight`` parameter being,
for the call only, the ring's view in the stored dtype (the hook or the module casts it).
"""

from __future__ import annotations

from typing import Callable, Optional

import torch
import torch.nn.functional as F

from torch import nn

from .byte_cast import cast
from .casting_hooks import plain_tensors_for_call, put_back
from .compile_support import compiling, eager_only
from .fused_on_arrival import ArrivalDeltas
from .ring_consumer import UnitViews
from .shared_weights import plain

__all__ = ["cpp_streamed_forward", "own_streamed_forward", "streamed_forward"]


def streamed_forward(
    tensors: Callable[[int], UnitViews], unit: int, index: int, bias: Optional[torch.Tensor],
    module_path: str, fused: Optional[ArrivalDeltas] = None,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The forward of a streamed Linear: its weight from the ring, plus the adapters in
    ``fused`` (when any), cast (like its bias) to the input's dtype when they differ. The bias
    is read through a plain alias (no guard on the hot path): an edit of it is stored, and the
    forward rebuilt, before the next forward."""
    linear = F.linear
    bias = plain(bias) if bias is not None else None

    def run(input: torch.Tensor) -> torch.Tensor:
        weight = tensors(unit)[index]
        if fused:
            weight = fused.fused(weight)
        dtype = input.dtype
        if weight.dtype != dtype:
            weight = cast(weight, dtype)  # an fp8 weight: DDO's kernel (byte_cast.py)
        used_bias = bias.to(dtype) if bias is not None and bias.dtype != dtype else bias
        if input.requires_grad and torch.is_grad_enabled():
            return _NoBackwardThroughStream.apply(input, weight, used_bias, module_path)
        return linear(input, weight, used_bias)

    # Under torch.compile, ``run`` is a graph break (TorchDynamo calls it eagerly). ``run``
    # does not refer to ``forward``: no reference cycle keeps the session's ring alive after
    # the forward is dropped.
    traced = eager_only(run)
    is_compiling = compiling

    def forward(input: torch.Tensor) -> torch.Tensor:
        return traced(input) if is_compiling() else run(input)

    return forward


def cpp_streamed_forward(
    consumer, unit: int, index: int, bias: Optional[torch.Tensor], module_path: str,
    fused: Optional[ArrivalDeltas] = None,
) -> Callable[[torch.Tensor], torch.Tensor]:
    """The forward of a streamed Linear served by the C++ consumer: one call into it per
    forward (the Linear is registered once as a tap, with a plain alias of its bias). While
    adapters are fused into the Linear (``fused``, which can gain them later), the forward of
    :func:`streamed_forward` over the consumer's views adds them."""
    tap = consumer.add_linear(unit, index, plain(bias) if bias is not None else None,
                              module_path)
    linear = consumer.linear
    with_adapters = (streamed_forward(consumer.tensors, unit, index, bias, module_path, fused)
                     if fused is not None else None)

    def run(input: torch.Tensor) -> torch.Tensor:
        if fused:
            return with_adapters(input)
        return linear(tap, input)

    traced = eager_only(run)
    is_compiling = compiling

    def forward(input: torch.Tensor) -> torch.Tensor:
        return traced(input) if is_compiling() else run(input)

    return forward


def own_streamed_forward(
    tensors: Callable[[int], UnitViews], unit: int, index: int, module: nn.Module,
    own: Callable[..., object], module_path: str, hooked: bool,
    fused: Optional[ArrivalDeltas] = None,
) -> Callable[..., object]:
    """The forward of a streamed Linear that keeps its own: ``own`` (its class's forward, or
    the Diffusers casting-hook chain when ``hooked``) runs with ``module.weight`` the ring's
    view of its unit (plus the adapters in ``fused``), in the stored dtype. With ``hooked``,
    the module's other bound tensors are plain aliases for the call too (the hook's ``.to``
    replaces their data, not the bound views). A backward pass through the output raises."""

    def run(*args, **kwargs):
        weight = tensors(unit)[index]
        if fused:
            weight = fused.fused(weight)
        if hooked:
            replaced = plain_tensors_for_call(module, weight)
        else:
            parameters = module._parameters
            replaced = [(parameters, "weight", parameters["weight"])]
            parameters["weight"] = nn.Parameter(weight, requires_grad=False)
        try:
            output = own(*args, **kwargs)
        finally:
            put_back(replaced)
        if (isinstance(output, torch.Tensor) and output.requires_grad
                and torch.is_grad_enabled()):
            return _NoBackwardThroughOutput.apply(output, module_path)
        return output

    traced = eager_only(run)
    is_compiling = compiling

    def forward(*args, **kwargs):
        return traced(*args, **kwargs) if is_compiling() else run(*args, **kwargs)

    return forward


class _NoBackwardThroughOutput(torch.autograd.Function):
    """The output of a streamed Linear's own forward in grad mode: the identity, whose
    backward raises like :class:`_NoBackwardThroughStream`'s."""

    @staticmethod
    def forward(ctx, output, module_path):  # noqa: D401 - autograd signature
        ctx.module_path = module_path
        return output.view_as(output)

    @staticmethod
    def backward(ctx, grad_output):
        _NoBackwardThroughStream.backward(ctx, grad_output)


class _NoBackwardThroughStream(torch.autograd.Function):
    """A streamed Linear's forward in grad mode: the ring slot holding its weight is reused
    long before a backward pass, so a backward through it would compute with another unit's
    bytes. It raises instead."""

    @staticmethod
    def forward(ctx, input, weight, bias, module_path):  # noqa: D401 - autograd signature
        ctx.module_path = module_path
        return F.linear(input, weight, bias)

    @staticmethod
    def backward(ctx, grad_output):
        raise RuntimeError(
            f"{ctx.module_path}: cannot backpropagate through a Linear whose weight DDO streams "
            f"(its device copy sits in a ring slot that is reused long before the backward "
            f"pass). Training through streamed weights is not supported: run inference under "
            f"torch.no_grad() / torch.inference_mode(), or call remove_dynamic_offload() first "
            f"to train on the module's own copy.")
