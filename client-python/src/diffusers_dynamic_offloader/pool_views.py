"""A component's host pool mapped into this process: its segments copy-on-write, and a
zero-copy tensor over each entry of its table.

A component's segments are shared-memory segments of the pool, or (ddod's file tier) its
backing files, mapped read-only (``MAP_PRIVATE``, ``PROT_READ``) with each tensor at its offset
in the file.

Both ways a process reads a component from ddod's pool start here: an attached component
(:mod:`.store`, :mod:`.attached`) and a streaming session, whose module is bound to these views
wherever ddod does not place a weight on the device (:mod:`.streaming`).
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import torch

from . import dtypes
from ._proto import components_pb2
from .errors import DdoError
from .shm import SegmentMapping, SegmentOpener

__all__ = ["map_component", "component_views"]


def map_component(
    info: components_pb2.ComponentInfo, opener: SegmentOpener
) -> Tuple[List[SegmentMapping], Dict[str, torch.Tensor]]:
    """Maps every segment of ``info`` (shared-memory segments copy-on-write, backing files
    read-only) and returns the mappings (the caller closes them) and a view per entry, in table
    order; on failure nothing stays mapped.

    Raises:
        DdoError: a segment cannot be mapped, is of a kind this client does not know, or ddod's
            layout is inconsistent.
    """
    mappings: List[SegmentMapping] = []
    try:
        for segment in info.segments:
            mappings.append(_map_segment(segment, opener))
        return mappings, component_views(info, mappings)
    except BaseException:
        for mapping in mappings:
            mapping.close()
        raise


def _map_segment(segment: components_pb2.SharedSegment, opener: SegmentOpener) -> SegmentMapping:
    """One segment of a component, mapped as its kind says."""
    if segment.kind == components_pb2.SEGMENT_KIND_SHM:
        return SegmentMapping(segment.shm_name, segment.size_bytes, writable=False, opener=opener)
    if segment.kind == components_pb2.SEGMENT_KIND_FILE:
        return SegmentMapping(
            segment.shm_name,
            segment.size_bytes,
            writable=False,
            opener=opener,
            what="backing file",
            backing_file=True,
        )
    raise DdoError(
        f"ddod sent segment {segment.shm_name!r} of kind {segment.kind}, which this client does "
        f"not know: upgrade diffusers_dynamic_offloader"
    )


def component_views(
    info: components_pb2.ComponentInfo, mappings: Sequence[SegmentMapping]
) -> Dict[str, torch.Tensor]:
    """A zero-copy tensor per entry of the table, in table order."""
    placements = {placement.name: placement for placement in info.placements}
    tensors: Dict[str, torch.Tensor] = {}
    for spec in info.tensors:
        placement = placements.get(spec.name)
        if placement is None or placement.segment >= len(mappings):
            raise DdoError(
                f"ddod gave no usable placement for {spec.name!r} of {info.ref.cache_key!r}"
            )
        if placement.byte_size != spec.byte_size:
            raise DdoError(
                f"ddod placed {placement.byte_size} bytes for {spec.name!r}, whose spec says "
                f"{spec.byte_size}"
            )
        dtype = dtypes.to_torch(spec.dtype, tensor_name=spec.name)
        tensors[spec.name] = mappings[placement.segment].tensor(
            placement.offset, placement.byte_size, dtype, list(spec.shape)
        )
    return tensors
