"""Names for what an edited weight holds, taken from how it was made.

A fused LoRA switch edits every attention and feed-forward weight twice: ``unfuse_lora``
subtracts one delta, ``fuse_lora`` adds another. Computing that on gigabytes of host memory and
storing the result in ddod costs seconds, while a runner that switches between LoRAs mostly goes
back to weights it had before. So every guarded weight carries a :class:`Lineage`, a *state*
that names its bytes:

- bound from ddod, the state is the name of ddod's copy (``<root key>/<tensor>`` for the base);
- an in-place ``+=``, ``-=``, ``*=``, ``/=`` or ``copy_`` on the whole weight moves it to a state
  named from the old state, the operation and a fingerprint of the operand
  (:func:`fingerprint`), so the same edit of the same bytes always gets the same name;
- any other write gives it a new state of its own (its bytes are then known only by value).

Two rules use the names (:mod:`.shared_weights` applies them, :mod:`.edit_versions` knows which
states ddod holds):

- **Undo.** Subtracting exactly the operand an addition added (``unfuse_lora`` after
  ``fuse_lora``, even with forwards and syncs between them), or adding back what was
  subtracted, returns to the state before that addition. When its bytes are at hand, the weight is bound to them again, bit for bit, as ComfyUI restores its
  backup on unpatch. (PEFT on an all-GPU model computes ``(w + d) - d`` and keeps that rounding:
  within one unit in the last place of the weight's dtype.)
- **Reuse.** When ddod holds bytes under the new state's name (a version this session stored
  before), the weight is bound to them and nothing is computed.

A fingerprint is three 64-bit sums of the operand's 32-bit words, two of them weighted by fixed
pseudo-random odd factors below 2**31 (exact products, summed modulo 2**64), computed where the
operand is (a LoRA delta on the GPU costs a few passes over its memory there): not a proof
against someone crafting operands, but the runner only ever reuses its own results. Two
operands that differ in one word give different weighted sums (an odd factor times a nonzero
difference below 2**32 is never 0 modulo 2**64); operands that differ in several words match
in both weighted sums by accident about once in 2**60.
"""

from __future__ import annotations

import hashlib
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

import torch

__all__ = ["Edit", "Lineage", "fingerprint", "recognize", "root_state"]

#: Larger copies from host memory are not named (see :func:`recognize`).
CPU_FINGERPRINT_BYTES = 2 << 20
# Words per chunk (each chunk's weighted sums are scaled by its own step), and chunks per
# batch: bounds the temporary products (24 bytes per word of a batch: 384 MiB).
_CHUNK_WORDS = 1 << 22
_BATCH_CHUNKS = 4
# Pseudo-random factors of the weighted sums, per device.
_FACTORS: Dict[str, torch.Tensor] = {}
_SEEDS = (0x5EED_0001, 0x5EED_0002)

#: In-place operations whose result follows from the weight and the operand alone, by name
#: (methods and operators), with their kind.
_KINDS = {
    "add_": "add", "__iadd__": "add", "sub_": "sub", "__isub__": "sub",
    "mul_": "mul", "__imul__": "mul", "div_": "div", "__itruediv__": "div",
    "copy_": "copy",
}
#: Which kind undoes which: only addition and subtraction undo each other (``(w * s) / s``
#: rounds, and the rounding is not what the state before held).
_UNDONE_BY = {"add": "sub", "sub": "add"}


def root_state(cache_key: str, name: str) -> str:
    """The state of tensor ``name`` as the component ``cache_key`` stores it."""
    return f"{cache_key}/{name}"


@dataclass(frozen=True)
class Edit:
    """One recognized in-place edit: its ``kind`` (``add``, ``sub``, ``mul``, ``div``,
    ``copy``) and ``key``, which names the kind, the operand's fingerprint and any option."""

    kind: str
    key: str

    @property
    def undo_key(self) -> Optional[str]:
        """The key of the edit that undoes this one exactly, if there is one."""
        inverse = _UNDONE_BY.get(self.kind)
        return None if inverse is None else inverse + self.key[len(self.kind):]


def recognize(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Optional[Edit]:
    """The edit ``name(weight, *args[1:], **kwargs)`` makes, when its result depends only on
    the weight and the operand; None for anything else (a slice assignment, ``clamp_``, ...)
    and for copies from host memory larger than :data:`CPU_FINGERPRINT_BYTES`
    (``load_state_dict`` of a fine-tune: passes over gigabytes for a name that saves nothing
    on a first load; a LoRA delta, on the GPU or not, is named: undoing it saves a pass)."""
    kind = _KINDS.get(name)
    if kind is None or len(args) != 2:
        return None
    options = dict(kwargs)
    options.pop("non_blocking", None)  # how, not what
    if kind in ("add", "sub"):
        alpha = options.pop("alpha", 1)
        extra = "" if alpha == 1 else f":alpha={alpha!r}"
    elif kind == "div":
        mode = options.pop("rounding_mode", None)
        extra = "" if mode is None else f":rounding={mode}"
    else:
        extra = ""
    if options:
        return None
    operand = args[1]
    if not isinstance(operand, (torch.Tensor, int, float, bool)):
        return None
    if kind == "copy" and not isinstance(operand, torch.Tensor):
        return None
    if (kind == "copy" and operand.device.type == "cpu"
            and operand.numel() * operand.element_size() > CPU_FINGERPRINT_BYTES):
        return None  # a fingerprint would cost host passes over it: known by value only
    return Edit(kind, f"{kind}:{fingerprint(operand)}{extra}")


def fingerprint(operand: Any) -> str:
    """A name for ``operand``'s value: for a tensor, its dtype, shape and three sums of its
    bytes, computed on its device; for a Python number, its type and ``repr``."""
    if not isinstance(operand, torch.Tensor):
        return f"{type(operand).__name__}:{operand!r}"
    with torch.no_grad():
        words = _words(operand.detach())
        device = words.device
        factors = _factors(device)
        # Per chunk c (step 2c + 1, so that chunks in another order give other sums): the
        # products of its words and the factors, exact in int64, summed modulo 2**64. Whole
        # chunks go a batch at a time (a few kernels per tensor, not per chunk).
        weighted = torch.zeros(2, dtype=torch.int64, device=device)
        whole = words.numel() // _CHUNK_WORDS
        for first in range(0, whole, _BATCH_CHUNKS):
            count = min(_BATCH_CHUNKS, whole - first)
            batch = words[first * _CHUNK_WORDS:(first + count) * _CHUNK_WORDS]
            words64 = batch.view(count, 1, _CHUNK_WORDS).to(torch.int64)
            per_chunk = (words64 * factors).sum(dim=2)
            steps = torch.arange(2 * first + 1, 2 * (first + count), 2, dtype=torch.int64,
                                 device=device)
            weighted += (per_chunk * steps.unsqueeze(1)).sum(dim=0)
        tail = words[whole * _CHUNK_WORDS:]
        if tail.numel():
            tail64 = tail.to(torch.int64).unsqueeze(0)
            weighted += (tail64 * factors[:, : tail.numel()]).sum(dim=1) * (2 * whole + 1)
        sums = [value & 0xFFFFFFFFFFFFFFFF
                for value in torch.cat([words.sum().reshape(1), weighted]).tolist()]
    shape = "x".join(str(size) for size in operand.shape)
    return f"{str(operand.dtype)[6:]}[{shape}]:" + ":".join(f"{value:016x}" for value in sums)


def _words(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as 32-bit words (zero-padded to a whole word)."""
    data = tensor.reshape(-1)
    if not data.is_contiguous():
        data = data.contiguous()
    raw = data.view(torch.uint8) if data.element_size() > 0 else data
    if raw.numel() % 4 or raw.data_ptr() % 4:
        padding = torch.zeros((-raw.numel()) % 4, dtype=torch.uint8, device=raw.device)
        raw = torch.cat([raw, padding])
    return raw.view(torch.int32)


def _factors(device: torch.device) -> torch.Tensor:
    """The two rows of pseudo-random factors (odd, below 2**31) of the weighted sums, on
    ``device``."""
    key = str(device)
    factors = _FACTORS.get(key)
    if factors is None:
        rows = [torch.randint(0, 1 << 30, (_CHUNK_WORDS,), dtype=torch.int64,
                              generator=torch.Generator().manual_seed(seed)) * 2 + 1
                for seed in _SEEDS]
        factors = torch.stack(rows).to(device)
        _FACTORS[key] = factors
    return factors


class Lineage:
    """The state of one guarded weight."""

    __slots__ = ("state",)

    def __init__(self, state: str) -> None:
        self.state = state

    def undone_state(self, edit: Edit) -> Optional[str]:
        """The state before the edit that led here, when ``edit`` undoes it exactly (it may
        have been made before the weight was last stored and bound anew); else None."""
        return _UNDO.get((self.state, edit.key))

    def named(self, edit: Edit) -> str:
        """The state ``edit`` computes from this one (a copy forgets what was there)."""
        parent = "" if edit.kind == "copy" else self.state
        digest = hashlib.blake2b(f"{parent}|{edit.key}".encode(), digest_size=16).hexdigest()
        return f"edit:{digest}"

    def moved(self, edit: Edit, state: str) -> None:
        """The weight now holds ``state``, reached by ``edit`` (bound to the bytes of
        :meth:`undone_state` or of :meth:`named`, or computed)."""
        undo = edit.undo_key
        if undo is not None and state != _UNDO.get((self.state, edit.key)):
            _UNDO[(state, undo)] = self.state
            _UNDO.move_to_end((state, undo))
            while len(_UNDO) > _UNDO_ENTRIES:
                _UNDO.popitem(last=False)
        self.state = state

    def unknown(self) -> None:
        """The weight was written in a way no name describes: a state of its own."""
        self.state = f"edit:{uuid.uuid4().hex}"


# (state, key of the edit that undoes what led to it) -> the state before, for every
# addition and subtraction this process made, the latest last (a fused LoRA on a FLUX
# transformer adds 418 entries).
_UNDO: "OrderedDict[Tuple[str, str], str]" = OrderedDict()
_UNDO_ENTRIES = 1 << 16
