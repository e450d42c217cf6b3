"""Content hashes of tensor bytes, as ddod verifies them.

A content hash is ``"xxh3-64:<16 lowercase hex>"``: XXH3 64-bit (seed 0) of every tensor's bytes,
streamed one tensor after the other in the order of the component's tensor table. Bytes are the
tensor's contiguous CPU representation (little-endian; ``bool`` as one byte 0 or 1). Hashing
needs the ``xxhash`` package (``pip install xxhash`` or ``apt-get install python3-xxhash``);
nothing else in this package does.
"""

from __future__ import annotations

import ctypes
from types import ModuleType
from typing import Callable, Iterable, Optional

import torch

from .errors import MissingDependencyError

#: The prefix of every content and structure hash ddod uses.
HASH_PREFIX = "xxh3-64:"

# Bytes handed to xxhash per update: bounds the time between progress callbacks.
_CHUNK_BYTES = 64 << 20


def require_xxhash() -> ModuleType:
    """The ``xxhash`` module.

    Raises:
        MissingDependencyError: it is not installed; the message says how to install it.
    """
    try:
        import xxhash
    except ImportError as error:
        raise MissingDependencyError(
            "a content hash was requested, but the xxhash package is not installed: "
            "`pip install xxhash` (or `apt-get install python3-xxhash`), or register "
            "without content_hash"
        ) from error
    if not hasattr(xxhash, "xxh3_64"):
        raise MissingDependencyError(
            f"xxhash {getattr(xxhash, 'VERSION', '?')} has no xxh3_64: upgrade it to 2.0 or newer"
        )
    return xxhash


def format_hash(value: int) -> str:
    """``"xxh3-64:00000000000000ff"`` for 255."""
    return f"{HASH_PREFIX}{value & 0xFFFFFFFFFFFFFFFF:016x}"


def is_hash(text: str) -> bool:
    """True when ``text`` has the form ``"xxh3-64:<16 lowercase hex>"``."""
    digits = text[len(HASH_PREFIX) :]
    return (
        text.startswith(HASH_PREFIX)
        and len(digits) == 16
        and all(c in "0123456789abcdef" for c in digits)
    )


def tensor_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The bytes of ``tensor`` as a flat uint8 CPU tensor (a view when already contiguous on
    the CPU, a copy otherwise)."""
    return tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)


def content_hash(
    tensors: Iterable[torch.Tensor], *, on_bytes: Optional[Callable[[int], None]] = None
) -> str:
    """The content hash of ``tensors``, in the order given.

    Args:
        tensors: The component's tensors, in the order of its tensor table.
        on_bytes: Called with the number of bytes hashed after each chunk (for progress).

    Raises:
        MissingDependencyError: xxhash is not installed.
    """
    xxhash = require_xxhash()
    state = xxhash.xxh3_64(seed=0)
    for tensor in tensors:
        data = tensor_bytes(tensor)
        size = data.numel()
        address = data.data_ptr()
        for start in range(0, size, _CHUNK_BYTES):
            length = min(_CHUNK_BYTES, size - start)
            # A buffer over the tensor's memory: no copy; `data` keeps that memory alive.
            state.update((ctypes.c_char * length).from_address(address + start))
            if on_bytes is not None:
                on_bytes(length)
    return format_hash(state.intdigest())
