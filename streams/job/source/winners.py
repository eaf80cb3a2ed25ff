"""Which mapped reports can still win their (user, slot), seen from the source stage.

A partition counts, per user and slot, the report with the smallest (event time, source topic
index, source partition, source offset) (:mod:`streams.job.partitions.ordering`), so a report
that comes after one the stage forwarded already never will. Telemetry sends many events per
device and slot: :class:`Forwarded` keeps the position of the report forwarded so far per slot
and user, and the stage (:mod:`streams.job.source.rekey`) forwards only the reports that can
still win; the others are counted, not forwarded, and not dead-lettered (they are no bad input).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from streams.job.slot_clock import SlotClock
from streams.job.source.mapping import MappedBatch

Position = tuple[int, int, int, int]  # event time, source topic index, partition, offset


class Forwarded:
    """Per slot, per user: the position of the report forwarded so far."""

    def __init__(self, clock: SlotClock) -> None:
        self.clock = clock
        self.slots: dict[int, dict[str, Position]] = {}

    def can_win(self, batch: MappedBatch, ti: int, p: int,
                offsets: list[int]) -> tuple[MappedBatch, int]:
        """The reports of ``batch`` (read from topic index ``ti``, partition ``p``, at
        ``offsets``) that can still win their (user, slot), taken as forwarded, and how many
        cannot (a later one of the batch replaces an earlier one that loses to it)."""
        slots = self.clock.slot_of(batch.times).tolist()
        keep = np.zeros(len(batch.users), dtype=bool)
        forwarded = self.slots
        here: dict[tuple[str, int], int] = {}
        for j, (user, slot, t, offset) in enumerate(zip(batch.users, slots,
                                                         batch.times.tolist(), offsets,
                                                         strict=True)):
            seen = forwarded.get(slot)
            if seen is None:
                seen = forwarded[slot] = {}
            position = (t, ti, p, offset)
            best = seen.get(user)
            if best is not None and best <= position:
                continue
            seen[user] = position
            before = here.get((user, slot))
            if before is not None:
                keep[before] = False
            here[(user, slot)] = j
            keep[j] = True
        dropped = len(keep) - int(keep.sum())
        if bool(keep.all()):
            return batch, dropped
        where = np.flatnonzero(keep)
        kept = where.tolist()
        return dataclasses.replace(
            batch, index=batch.index[where], users=[batch.users[j] for j in kept],
            times=batch.times[where], values=[batch.values[j] for j in kept],
            cells=batch.cells[where], extras=[batch.extras[j] for j in kept] if batch.extras
            else batch.extras), dropped

    def forget_before(self, slot: int) -> None:
        """Forget the slots before ``slot``."""
        for s in [s for s in self.slots if s < slot]:
            del self.slots[s]

    def forget(self, ti: int | None, partition: int) -> None:
        """Forget the reports forwarded from topic index ``ti``'s ``partition`` (read again
        elsewhere, or here when it comes back)."""
        for seen in self.slots.values():
            stale = [user for user, pos in seen.items() if pos[1] == ti and pos[2] == partition]
            for user in stale:
                del seen[user]
