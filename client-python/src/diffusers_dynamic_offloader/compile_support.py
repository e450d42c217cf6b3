"""How a module on the DDO route meets ``torch.compile`` and CUDA graphs.

A streamed Linear takes its weight from the session's ring at every call: it waits on the
control block, records CUDA events and tells ddod which slot it is done with. None of that can
be traced by TorchDynamo or replayed from a CUDA graph (a graph would replay the weights of
the pass it captured).

- ``torch.compile``: the streamed forwards and the root module's hooks run eagerly
  (:func:`eager_only`, a graph break around each); everything between them compiles as usual.
  An eager call of the streamed forward pays nothing for it (:data:`compiling` is checked
  first, and the disabled twin is called only under tracing).
- CUDA graphs (``torch.cuda.graph``, ``torch.compile(mode="reduce-overhead")`` where a capture
  would reach a streamed weight): :func:`refuse_capture` raises :class:`GraphCaptureError`
  before anything of the session is captured, so the runner can fall back to eager calls.
"""

from __future__ import annotations

from typing import Callable, TypeVar

import torch

from .errors import GraphCaptureError

__all__ = ["compiling", "eager_only", "refuse_capture"]

_Function = TypeVar("_Function", bound=Callable)


def eager_only(function: _Function) -> _Function:
    """``function``, excluded from TorchDynamo's tracing (torch 2.1 and later; older torch
    has no compiler and runs everything eagerly anyway)."""
    compiler = getattr(torch, "compiler", None)
    disable = getattr(compiler, "disable", None)
    return disable(function) if disable is not None else function


def _never() -> bool:
    return False


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
