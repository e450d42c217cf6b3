"""What a streaming session reports: ``stats()``, the seed's ``print_profile_summary`` and
the verbose per-pass line.

The methods of :class:`SessionStats`, a part of :class:`.streaming.StreamingSession`; they read
the session and change nothing but the pass counters.

Thread-safety: as the session (one forward at a time).
"""

from __future__ import annotations

import time

from typing import Dict, Union

import torch

from .fused_on_arrival import arrival_deltas
from .runner_log import log_pass


class SessionStats:
    """The session's statistics (the module docstring). A mixin of StreamingSession: reads
    ``_response``, ``_consumer``, ``schedule``, ``session_id``, ``device``, ``module``,
    ``fused_lora``, ``consumer_kind``, ``state``, ``log_name``, ``_edit_syncs``, ``_uploaded_edit_bytes``;
    owns ``_passes`` and ``_pass_began`` (declared in ``StreamingSession.__init__``)."""

    def _log_pass(self) -> None:
        """Logs the pass that just ended (verbose runs), after the device finished it."""
        began, used, waited, sync_uses = self._pass_began
        self._pass_began = None
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        consumer = self._consumer
        self._passes += 1
        log_pass(self.log_name, self._passes, consumer.bytes_used - used,
                 time.perf_counter() - began, (consumer.wait_ns - waited) / 1e9,
                 consumer.sync_uses - sync_uses)

    def print_profile_summary(self, top_n: int = 8) -> None:
        """The seed's hook summary: where the bytes are, what setting up cost, how the ring
        served, and the ``top_n`` largest streamed units."""
        stats = self.stats()
        print(f"[ddo] {self.cache_key} on {self.device}: {stats['units']} streamed units, "
              f"{stats['resident_bytes'] / 2**30:.2f} GiB resident, "
              f"{stats['streamed_bytes_per_cycle'] / 2**30:.2f} GiB streamed per pass")
        print(f"[ddo] uses {stats['uses']} ({stats['streamed_uses']} from the ring, "
              f"{stats['sync_uses']} out of schedule, {stats['skipped_uses']} skipped), waited "
              f"{stats['wait_seconds']:.3f} s, {stats['overhead_us_per_unit']:.1f} us per unit")
        if self.state is not None:
            for action, seconds in self.state.setup_seconds_by_action.items():
                print(f"[ddo] setup {action}: {seconds:.3f} s")
        units = sorted(self._response.device.units, key=lambda unit: -unit.byte_size)
        for unit in units[:top_n]:
            print(f"[ddo]   {unit.name}: {unit.byte_size / 2**20:.1f} MiB")

    def stats(self) -> Dict[str, Union[int, float, bool, str]]:
        """The session's counters and sizes.

        ``uses``: units acquired (``streamed_uses`` from the schedule + ``sync_uses`` out of
        schedule); ``skipped_uses``: uses of the schedule passed over; ``bytes_used``: bytes
        of the units acquired; ``wait_seconds``: time
        blocked on ddod; ``overhead_us_per_unit``: mean CPU time of the acquire and release
        bookkeeping per acquired unit, waits excluded; ``units``; ``ring_slots`` (units in
        flight at most), ``ring_slot_bytes`` (the largest unit: the out-of-schedule slot),
        ``ring_arena_bytes`` (where the schedule's units pack); ``resident_bytes``;
        ``streamed_bytes_per_cycle``: the bytes of the units of one schedule cycle;
        ``schedule_length``; ``learning``: True until the schedule is known;
        ``edit_syncs`` and ``uploaded_edit_bytes``: edits stored in ddod; ``fused_lora``:
        DDO_FUSED_LORA; ``consumer``: ``"cpp"`` or ``"python"`` (which consumer serves the
        streamed Linears, DDO_CLIENT_CONSUMER), ``"none"`` when nothing streams;
        ``linears_fused_on_arrival``: Linears with fused adapters added on
        arrival (:mod:`.fused_on_arrival`).
        """
        resources = self._response.device
        schedule = self.schedule
        sizes = [layout.byte_size for layout in resources.units]
        if self._consumer is not None:
            counters = self._consumer.statistics()
            learning = self._consumer.learning
        else:
            counters = {"uses": 0, "streamed_uses": 0, "sync_uses": 0, "skipped_uses": 0,
                        "bytes_used": 0,
                        "wait_seconds": 0.0, "overhead_us_per_unit": 0.0}
            learning = False
        return dict(
            counters,
            session_id=self.session_id,
            device=str(self.device),
            units=len(resources.units),
            ring_slots=resources.ring_slots,
            ring_slot_bytes=resources.ring_slot_bytes,
            ring_arena_bytes=resources.ring_arena_bytes,
            resident_bytes=resources.resident_slab_bytes,
            streamed_bytes_per_cycle=sum(sizes[unit] for unit in schedule),
            schedule_length=len(schedule),
            learning=learning,
            edit_syncs=self._edit_syncs,
            uploaded_edit_bytes=self._uploaded_edit_bytes,
            fused_lora=self.fused_lora,
            consumer=self.consumer_kind,
            linears_fused_on_arrival=sum(
                1 for linear in self.module.modules() if arrival_deltas(linear)),
        )
