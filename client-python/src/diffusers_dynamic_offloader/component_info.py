"""Component: what ddod reports about one component of its store (no torch needed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ._proto import components_pb2


@dataclass(frozen=True)
class Component:
    """A component in ddod's store, as a register, load, get or list call reported it.

    Attributes:
        cache_key: The client's name for it.
        component_id: ddod's id (16 hex digits).
        structure_hash: ``"xxh3-64:..."`` of the tensor table.
        content_hash: ``"xxh3-64:..."`` of the bytes when one was given, else ``""``.
        total_bytes: The tensors' bytes.
        state: ``"READY"`` or ``"UPLOADING"``.
        tensor_count: Tensors in the table.
        unit_count: Streaming units.
        sessions: Sessions attached now.
        pinned: Whether its pages are page-locked for the GPU.
        pinned_bytes: Bytes page-locked.
        last_used_unix_ms: Last register, load or attach, in ms since the epoch.
        warm_hit: For register and load results: True when nothing had to be transferred.
        seconds: For register and load results: how long the call took.
        info: ddod's ``ComponentInfo`` message itself.
        base_cache_key: For a derived version (a streamed module's edited weights): the key of
            the component it derives from; ``""`` otherwise.
        changed_tensors: For a derived version: the tensors it stores anew.
        own_bytes: The pool bytes this component holds itself (a derived version shares the
            rest with its base).
        tier: Where its bytes are: ``"POOL"`` (ddod's host pool), ``"FILE"`` (the
            safetensors files it was loaded from, which ddod reads as it streams: the file tier)
            or ``"SPLIT"`` (some units in the pool, the rest read from the files).
        pool_bytes: Bytes of its tensors in the host pool.
        file_bytes: Bytes of its tensors read from its files.
    """

    cache_key: str
    component_id: str
    structure_hash: str
    content_hash: str
    total_bytes: int
    state: str
    tensor_count: int
    unit_count: int
    sessions: int
    pinned: bool
    pinned_bytes: int
    last_used_unix_ms: int
    warm_hit: bool = False
    seconds: float = 0.0
    base_cache_key: str = ""
    changed_tensors: int = 0
    own_bytes: int = 0
    tier: str = "POOL"
    pool_bytes: int = 0
    file_bytes: int = 0
    info: components_pb2.ComponentInfo = field(
        default_factory=components_pb2.ComponentInfo, repr=False, compare=False
    )

    @classmethod
    def from_proto(
        cls, info: components_pb2.ComponentInfo, *, warm_hit: bool = False, seconds: float = 0.0
    ) -> "Component":
        """Wraps a ``ComponentInfo``."""
        state = components_pb2.ComponentState.Name(info.state).replace("COMPONENT_STATE_", "")
        return cls(
            cache_key=info.ref.cache_key,
            component_id=info.ref.component_id,
            structure_hash=info.ref.structure_hash,
            content_hash=info.ref.content_hash,
            total_bytes=info.ref.total_bytes,
            state=state,
            tensor_count=info.tensor_count,
            unit_count=info.unit_count,
            sessions=info.sessions,
            pinned=info.pinned,
            pinned_bytes=info.pinned_bytes,
            last_used_unix_ms=info.last_used_unix_ms,
            warm_hit=warm_hit,
            seconds=seconds,
            base_cache_key=getattr(info, "base_cache_key", ""),
            changed_tensors=getattr(info, "changed_tensors", 0),
            own_bytes=getattr(info, "own_bytes", 0) or info.ref.total_bytes,
            tier=components_pb2.ComponentTier.Name(info.tier).replace("COMPONENT_TIER_", ""),
            pool_bytes=info.pool_bytes,
            file_bytes=info.file_bytes,
            info=info,
        )

    @property
    def ready(self) -> bool:
        """True when the component is complete and can be attached."""
        return self.state == "READY"
