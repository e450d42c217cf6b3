"""The cache key ``enable_offload`` stores a component under when the caller names none.

The seed had no daemon and no keys: any number of live models of one class could be offloaded
in one process. Here every component lives in ddod under a key, so the default key must tell
apart what the caller did not name, and still be the same for the same model in the next
process (the warm start ddod exists for). It is made of

- the module's class and the component name (readable in ``ddoctl components``);
- the caller's uid: a shared ddod lets only a component's owner replace it, and an upload is
  shared with nobody, so two users uploading the same model need two keys;
- a digest of the tensor table (every name, dtype and shape) and of the content hash of every
  tensor's bytes: two models of one class with other weights (two ``nn.Sequential``, a Wan 2.2
  pipeline's ``transformer`` and ``transformer_2`` offloaded without names) or another
  structure get other keys.

The content hash is the one ``enable_offload`` sends ddod with the upload anyway (ddod checks
the bytes against it), so naming a component costs no extra pass over its bytes.
"""

from __future__ import annotations

import os
from typing import List, NamedTuple

import torch
from torch import nn

from ..hashing import content_hash, require_xxhash
from ..module_tensors import ModuleTensor, module_tensors, unique

__all__ = ["DefaultKey", "default_cache_key", "default_key", "key_prefix"]


class DefaultKey(NamedTuple):
    """A default cache key and the content hash of the bytes it names (``"xxh3-64:..."``)."""

    cache_key: str
    content_hash: str


def default_key(module: nn.Module, component: str) -> DefaultKey:
    """The default key of ``module`` as ``component``, with its content hash (one pass over the
    module's bytes, in the order the upload sends them).

    Raises:
        MissingDependencyError: xxhash is not installed (it says how to install it).
    """
    tensors = unique(module_tensors(module))
    digest_of_content = content_hash([found.tensor for found in tensors])
    table = _table_text(tensors)
    digest = require_xxhash().xxh3_64_hexdigest(f"{table}\n{digest_of_content}".encode("utf-8"))
    return DefaultKey(key_prefix(module, component) + digest, digest_of_content)


def key_prefix(module: nn.Module, component: str) -> str:
    """What every default key of ``module``'s class as ``component`` for this user starts
    with (no hashing): ``"<module>.<class>/<component>/uid-<uid>/"``."""
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}/{component}/uid-{os.geteuid()}/"


def default_cache_key(module: nn.Module, component: str) -> str:
    """The key ``enable_offload(module, component=component)`` stores the module under when
    no ``cache_key`` is given (:func:`default_key`)."""
    return default_key(module, component).cache_key


def _table_text(tensors: List[ModuleTensor]) -> str:
    """Every tensor's name, dtype and shape, one a line: what ddod's structure hash covers."""
    return "\n".join(f"{found.name}\t{_dtype_name(found.tensor.dtype)}\t"
                     f"{tuple(found.tensor.shape)}\t{int(found.is_buffer)}" for found in tensors)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")
