"""What each streamable Linear computes in the learning forward, reported to ddod.

ddod's planner chooses which weights stay resident. Without knowing what each Linear computes,
it keeps whole blocks spread evenly (the seed's rule). That is blind to where copies cannot
hide behind compute: a modulation Linear (``norm1.linear`` of a FLUX block) sees one row of
input, so its copy is pure cost, and a bf16 weight among fp8 ones costs twice the bytes for
the same work. On an H100 with the FLUX.1-dev-size transformer in fp8 storage at an 8 GiB
cap, the GPU waited 35 ms a step in the double-stream blocks until those Linears were kept
resident (``bench/probes/fp8_step_profile.py``, runs 51 and 52).

So the learning forward (the one that learns the schedule) also counts, for every streamable
Linear, the rows of its input (``input.numel() // in_features``, summed over its calls), with
a forward pre-hook that lives for that forward only. The counts go to ddod with the schedule
(``SetScheduleRequest.weight_rows``, by the weight's name in the component); ddod plans the
component's next sessions with them (docs/streaming.md §1, ``DDO_RESIDENT_MODULE_SELECTION``).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

from torch import nn

__all__ = ["RowCounter"]


class RowCounter:
    """Counts input rows per Linear weight name while installed (see the module docstring)."""

    def __init__(self, linears: Iterable[Tuple[str, nn.Module, int]]) -> None:
        """
        Args:
            linears: ``(weight name in the component, module, in_features)`` for each
                streamable Linear; a module named twice is counted under its first name.
        """
        self._rows: Dict[str, int] = {}
        self._handles: List = []
        seen = set()
        for name, module, in_features in linears:
            if id(module) in seen or in_features <= 0:
                continue
            seen.add(id(module))
            self._handles.append(module.register_forward_pre_hook(self._counter(name, in_features)))

    def _counter(self, name: str, in_features: int):
        rows = self._rows

        def count(_module: nn.Module, args: tuple) -> None:
            if args and hasattr(args[0], "numel"):
                rows[name] = rows.get(name, 0) + args[0].numel() // in_features

        return count

    def take(self) -> Dict[str, int]:
        """The counts so far; the hooks are removed (counting ends)."""
        self.remove()
        rows, self._rows = self._rows, {}
        return rows

    def remove(self) -> None:
        """Removes the hooks (idempotent)."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
