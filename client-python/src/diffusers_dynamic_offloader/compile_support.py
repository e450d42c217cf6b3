"""How a module on the DDO route meets ``torch.compile`` and CUDA graphs.

A streamed Linear takes its weight from the session's ring at every call: it waits on the
control block, records CUDA events and tells ddod which slot it is done with. None of that can
be traced by TorchDynamo or replayed from a CUDA graph (a graph would replay the weights of
the pass it captured).

- ``torch.compile``: the streamed forwards and the root module's hooks run eagerly
  (:func:`eager_only`, a graph break around each); everything between them compiles as usual.
  An eager call of a streamed forward pays one :data:`compiling` call for it (the disabled
  twin is called only under tracing), and each unit switch on a CUDA session one
  ``torch.cuda.is_current_stream_capturing()``: well under a microsecond each.
- CUDA graphs: a capture that reaches a streamed module (``torch.cuda.graph`` around its
  forward, or around a part of it that switches units): :func:`refuse_capture` raises
  :class:`GraphCaptureError` before anything of the ring is captured, so the runner can fall
  back to eager calls. ``torch.compile(mode="reduce-overhead")`` captures only the compiled
  regions between graph breaks, which hold no streamed weight (not tested on the device yet).
"""

from __future__ import annotations

from typing import Callable, Optional, TypeVar

import torch

from .errors import GraphCaptureError

__all__ = ["compiling", "eager_only", "refuse_capture"]

_Function = TypeVar("_Function", bound=Callable)


def _dynamo_disable() -> Optional[Callable[[_Function], _Function]]:
    """torch.compiler.disable (torch 2.1 on), torch._dynamo.disable (torch 2.0), or None
    (torch 1.x has no compiler: everything runs eagerly anyway)."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    if disable is None:
        try:
            import torch._dynamo as dynamo  # noqa: PLC0415 - only torch 2.0 lands here
        except ImportError:
            return None
        disable = getattr(dynamo, "disable", None)
    return disable


def eager_only(function: _Function) -> _Function:
    """``function``, excluded from TorchDynamo's tracing (a graph break around it)."""
    disable = _DISABLE
    return disable(function) if disable is not None else function


def _never() -> bool:
    return False


_DISABLE = _dynamo_disable()

#: True while TorchDynamo traces the caller (a constant in its trace, a cheap call in eager
#: runs): the hot path branches to an :func:`eager_only` twin only then.
compiling: Callable[[], bool] = (
    getattr(getattr(torch, "compiler", None), "is_compiling", None)
    or getattr(getattr(torch, "_dynamo", None), "is_compiling", None) or _never)


def refuse_capture(where: str) -> None:
    """Raises GraphCaptureError when the current CUDA stream is capturing a graph (call it
    only where CUDA is in use)."""
    if torch.cuda.is_current_stream_capturing():
        raise GraphCaptureError(
            f"{where}: a CUDA graph capture reached a module on the DDO route. Its weights "
            f"stream from ddod's ring, refilled while the forward runs, which a replayed graph "
            f"cannot follow (it would replay the weights of the captured pass). Run the module "
            f"eagerly, or compile it without CUDA graphs (torch.compile with mode='default' or "
            f"'max-autotune-no-cudagraphs': the streamed Linears become graph breaks), or give "
            f"the component the 'none' route when all its weights fit on the GPU.")
