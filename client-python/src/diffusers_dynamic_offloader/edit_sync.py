"""Edited weights of a streamed module, stored in ddod as a derived version of its component.

When a runner edits weights of a module on the DDO route (a fused LoRA, ``load_state_dict`` of a
fine-tune, an in-place op), the edited tensors live in the runner's private memory
(:mod:`.shared_weights`). Before the next forward the session hands them to
:func:`store_edits`:

1. Tensors whose bytes equal the component's after all (``mul_(1.0)``, a state dict of the same
   weights) are not edits: the session binds them to ddod's copy again.
2. The others go to ddod as a *derived version* of the component (RegisterComponent with a
   ``base_cache_key``): only they are stored anew; every other tensor shares the base's bytes.
   Its key is the base's key, ``+edit-`` and a hash of the changed names and bytes, so a second
   runner that makes the same edit to the same base finds it warm and uploads nothing.
3. The session then streams the derived version (other runners of the base are not affected).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Dict, List, Mapping, Sequence

import torch

from .hashing import content_hash, require_xxhash, tensor_bytes
from .rpc_channel import RpcChannel
from .shared_weights import plain
from .store import register_derived

if TYPE_CHECKING:
    from ._proto import components_pb2

__all__ = ["EditSync", "derived_cache_key", "same_bytes", "store_edits"]

#: Between a base's key and the hash that names one of its derived versions.
DERIVED_MARK = "+edit-"


@dataclass(frozen=True)
class EditSync:
    """What one sync stored: ``changed_tensors`` edited tensors; ``uploaded_bytes`` written into
    ddod (0 on a warm hit); ``warm_hit``: ddod had this derived version already;
    ``cache_key``: the derived version's key (the component's own when nothing changed);
    ``parts``: seconds by step (``compare``: edited against ddod's bytes, ``hash``, ``register``,
    ``write``, ``commit``: ddod verifies and pins, ``reattach``: the session moved to the new
    version, split into ``reattach_detach``, ``reattach_attach`` (ddod opens the new session)
    and ``reattach_bind``)."""

    changed_tensors: int
    uploaded_bytes: int
    warm_hit: bool
    seconds: float
    cache_key: str
    parts: Dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> Dict[str, object]:
        return {"changed_tensors": self.changed_tensors, "uploaded_bytes": self.uploaded_bytes,
                "warm_hit": self.warm_hit, "seconds": self.seconds, "cache_key": self.cache_key,
                "parts": {name: round(value, 4) for name, value in self.parts.items()}}


def same_bytes(edited: torch.Tensor, original: torch.Tensor) -> bool:
    """Whether ``edited`` holds exactly the bytes of ``original`` (a host view)."""
    edited = plain(edited).detach()
    if edited.shape != original.shape or edited.dtype != original.dtype:
        return False
    if edited.device != original.device:
        edited = edited.to(original.device)
    return torch.equal(_as_bytes(edited), _as_bytes(plain(original)))


def _as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().reshape(-1).view(torch.uint8)


def derived_cache_key(base_key: str, names: Sequence[str], hash_of_changed: str) -> str:
    """The key of the version of ``base_key`` whose tensors ``names`` hold the bytes hashed as
    ``hash_of_changed``: the root key (the base's, without any edit mark) and a hash."""
    xxhash = require_xxhash()
    digest = xxhash.xxh3_64("\0".join([base_key, *names, hash_of_changed]).encode(), seed=0)
    root = base_key.split(DERIVED_MARK, 1)[0]
    return f"{root}{DERIVED_MARK}{digest.hexdigest()}"


def store_edits(
    rpc: RpcChannel,
    base_key: str,
    table: Sequence["components_pb2.TensorSpec"],
    changed: Mapping[str, torch.Tensor],
) -> EditSync:
    """Stores ``changed`` (name -> edited tensor, any device) as a derived version of the
    component ``base_key`` whose tensor table is ``table``, through ``rpc`` (the session's
    client's channel); returns what it did.

    Raises:
        DaemonError: ddod refused (RESOURCE_EXHAUSTED: the pool cannot hold the changed bytes).
    """
    started = time.perf_counter()
    order: List["components_pb2.TensorSpec"] = [spec for spec in table if spec.name in changed]
    # Host bytes once: hashed, then written.
    host = {spec.name: tensor_bytes(plain(changed[spec.name])) for spec in order}
    names = [spec.name for spec in order]
    digest = content_hash([host[name] for name in names])
    hashed = time.perf_counter()
    key = derived_cache_key(base_key, names, digest)
    steps: Dict[str, float] = {}
    component = register_derived(rpc, key, base_key, order, [host[name] for name in names],
                                 digest, seconds=steps)
    stored = time.perf_counter()
    uploaded = 0 if component.warm_hit else sum(spec.byte_size for spec in order)
    return EditSync(len(order), uploaded, component.warm_hit, stored - started, key,
                    {"hash": hashed - started, **steps})
