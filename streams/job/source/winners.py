"""Which mapped reports can still win their (user, slot), seen from the source stage.

A partition counts, per user and slot, the report with the smallest (event time, source topic
index, source partition, source offset) (:mod:`streams.job.partitions.ordering`), so a report
that comes after one the stage forwarded already never will. Telemetry sends many events per
device and slot: :class:`Forwarded` keeps the position of the report forwarded so far per slot
and user, and the stage (:mod:`streams.job.source.rekey`) forwards only the reports that can
still win; the others are counted, not forwarded, and not dead-lettered (they are no bad input).

The check runs over a whole batch in numpy: users get a small integer code (one dictionary
look-up a report), each slot keeps the forwarded positions as four columns indexed by code, and
a batch's best report per (user, slot) is compared with them at once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from streams.job.slot_clock import SlotClock
from streams.job.source.mapping import MappedBatch

Position = tuple[int, int, int, int]  # event time, source topic index, partition, offset

#: The event time of a user with nothing forwarded in a slot (no event time reaches it).
_NONE = np.iinfo(np.int64).max

#: Codes kept for users forwarded in no open slot before the table is rebuilt, at least.
_SPARE = 1 << 16


class _Slot:
    """The positions forwarded in one slot, one row per user code (``t`` = ``_NONE``: none)."""

    def __init__(self, size: int) -> None:
        self.cols = np.empty((4, size), dtype=np.int64)
        self.cols[0] = _NONE

    def grow(self, size: int) -> None:
        if size > self.cols.shape[1]:
            more = np.empty((4, max(size, 2 * self.cols.shape[1]) - self.cols.shape[1]),
                            dtype=np.int64)
            more[0] = _NONE
            self.cols = np.concatenate([self.cols, more], axis=1)


def _before(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per column, whether position ``a[:, k]`` comes strictly before ``b[:, k]`` (rows: event
    time, topic index, partition, offset)."""
    out = a[3] < b[3]
    for row in (2, 1, 0):
        out = (a[row] < b[row]) | ((a[row] == b[row]) & out)
    return out


class Forwarded:
    """Per slot, per user: the position of the report forwarded so far."""

    def __init__(self, clock: SlotClock) -> None:
        self.clock = clock
        self.codes: dict[str, int] = {}
        self.names: list[str] = []
        self.slots: dict[int, _Slot] = {}

    def _code(self, users: list[str]) -> np.ndarray:
        """Each user's code, new users given the next ones."""
        codes = self.codes
        found = list(map(codes.get, users))
        if None in found:
            for j, code in enumerate(found):
                if code is None:
                    user = users[j]
                    code = codes.get(user)
                    if code is None:
                        code = codes[user] = len(self.names)
                        self.names.append(user)
                    found[j] = code
        return np.asarray(found, dtype=np.int64)

    def can_win(self, batch: MappedBatch, ti: int, p: int,
                offsets: Sequence[int] | np.ndarray) -> tuple[MappedBatch, int]:
        """The reports of ``batch`` (read from topic index ``ti``, partition ``p``, at
        ``offsets``) that can still win their (user, slot), taken as forwarded, and how many
        cannot: per (user, slot) the batch's first report by position, when it comes before
        what was forwarded."""
        n = len(batch.users)
        if n == 0:
            return batch, 0
        codes = self._code(batch.users)
        slots = self.clock.slot_of(batch.times)
        times = np.asarray(batch.times, dtype=np.int64)
        offs = np.asarray(offsets, dtype=np.int64)
        order = np.lexsort((offs, times, slots, codes))
        c, s = codes[order], slots[order]
        first = np.ones(n, dtype=bool)
        first[1:] = (c[1:] != c[:-1]) | (s[1:] != s[:-1])
        best = order[first]  # the batch's first report per (user, slot), by position
        keep = np.zeros(n, dtype=bool)
        size = len(self.names)
        best_slots = slots[best]
        for slot in np.unique(best_slots).tolist():
            here = best[best_slots == slot]
            state = self.slots.get(slot)
            if state is None:
                state = self.slots[slot] = _Slot(size)
            state.grow(size)
            rows = codes[here]
            mine = np.empty((4, here.shape[0]), dtype=np.int64)
            mine[0], mine[1], mine[2], mine[3] = times[here], ti, p, offs[here]
            wins = _before(mine, state.cols[:, rows])
            state.cols[:, rows[wins]] = mine[:, wins]
            keep[here[wins]] = True
        dropped = n - int(keep.sum())
        if dropped == 0:
            return batch, 0
        where = np.flatnonzero(keep)
        kept = where.tolist()
        return dataclasses.replace(
            batch, index=batch.index[where], users=[batch.users[j] for j in kept],
            times=batch.times[where], values=[batch.values[j] for j in kept],
            cells=batch.cells[where], extras=[batch.extras[j] for j in kept] if batch.extras
            else batch.extras), dropped

    def position(self, user: str, slot: int) -> Position | None:
        """The position forwarded for ``user`` in ``slot``, if any."""
        code, state = self.codes.get(user), self.slots.get(slot)
        if code is None or state is None or code >= state.cols.shape[1] \
                or state.cols[0, code] == _NONE:
            return None
        t, ti, p, off = state.cols[:, code].tolist()
        return (t, ti, p, off)

    def forget_before(self, slot: int) -> None:
        """Forget the slots before ``slot``."""
        gone = [s for s in self.slots if s < slot]
        for s in gone:
            del self.slots[s]
        if gone and len(self.names) > _SPARE:
            self._compact()

    def forget(self, ti: int | None, partition: int) -> None:
        """Forget the reports forwarded from topic index ``ti``'s ``partition`` (read again
        elsewhere, or here when it comes back)."""
        if ti is None:
            return
        for state in self.slots.values():
            cols = state.cols
            cols[0, (cols[1] == ti) & (cols[2] == partition) & (cols[0] != _NONE)] = _NONE

    def _compact(self) -> None:
        """Renumber the users forwarded in an open slot when the others hold most codes."""
        size = len(self.names)
        alive = np.zeros(size, dtype=bool)
        for state in self.slots.values():
            width = min(size, state.cols.shape[1])
            alive[:width] |= state.cols[0, :width] != _NONE
        count = int(alive.sum())
        if size - count < max(_SPARE, count):
            return
        old = np.flatnonzero(alive)
        self.names = [self.names[c] for c in old.tolist()]
        self.codes = {user: c for c, user in enumerate(self.names)}
        for state in self.slots.values():
            fresh = _Slot(count)
            here = old < state.cols.shape[1]  # a slot's columns reach the codes it has seen
            fresh.cols[:, np.flatnonzero(here)] = state.cols[:, old[here]]
            state.cols = fresh.cols
