"""Slotting by event time, the watermark, and the one-report-per-(user, slot) rule.

* Slot ``s`` covers event times ``[origin + s * length, origin + (s + 1) * length)`` (ms).
* The watermark is the largest event time seen minus the allowed lateness. Only reports that are
  accepted (neither late nor future) advance it, so a single report with a bogus far-future time
  cannot close every open slot.
* A slot is closed once the watermark has reached its end (``watermark >= end``); a report for a
  closed slot is ``late``.
* A report more than ``horizon`` ms beyond the current watermark is ``future``. Before the first
  report the watermark is undefined (unless ``initial_watermark`` is given); the first report
  defines it and is never ``future``.
* At most one report per (user, slot) counts: the **first one wins** (in partition order, which is
  the order the broker assigned, not event-time order); later ones are ``duplicate_in_slot``. The
  set of users seen is kept for open slots only and dropped when a slot closes.

Reports are classified exactly as if they were processed one by one in input order, whatever the
batch boundaries: the watermark a report sees includes every accepted report before it in the
same batch. The work is vectorised with numpy; only reports that could be ``future`` against the
batch-start watermark are looked at one by one (normally none).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

import numpy as np

from streams.job.slot_clock import SlotClock

__all__ = [
    "DUPLICATE",
    "FUTURE",
    "LATE",
    "OK",
    "SUPERSEDED",
    "SlotAssignment",
    "SlotClock",
    "Slotter",
]

OK: Final = 0
LATE: Final = 1
FUTURE: Final = 2
DUPLICATE: Final = 3
#: A report with a source position that loses to one of the same user and slot coming first (in
#: (event time, source position)): counted, not dead-lettered (telemetry sends many events per
#: device and slot; :mod:`streams.job.partitions.ordering`).
SUPERSEDED: Final = 4

#: Status code -> dead-letter reason.
STATUS_REASON: Final = {LATE: "late", FUTURE: "future", DUPLICATE: "duplicate_in_slot"}

_NEG: Final = np.iinfo(np.int64).min


@dataclass(frozen=True, slots=True)
class SlotAssignment:
    """Result of :meth:`Slotter.assign` for one batch.

    ``status`` is ``OK``, ``LATE``, ``FUTURE`` or ``DUPLICATE`` per report; ``slots`` the slot of
    each report; ``closed`` the slots that closed during this batch (ascending; only slots at or
    after the first slot ever opened are listed). Accepted reports of a slot always precede its
    closing, so apply them first, then close the slots.
    """

    slots: np.ndarray
    status: np.ndarray
    watermark: int | None
    closed: list[int]

    @property
    def ok(self) -> np.ndarray:
        """Boolean mask of the counted reports."""
        return self.status == OK


@dataclass
class Slotter:
    """Stateful classifier of report batches (one per partition worker)."""

    clock: SlotClock
    allowed_lateness: int = 0
    horizon: int = 3_600_000
    initial_watermark: int | None = None
    #: False leaves the one-report-per-(user, slot) rule to the caller (statuses never DUPLICATE)
    dedupe: bool = True
    #: False: reports never move the watermark; only :meth:`restore` does (a stream whose event
    #: time comes from its source partitions' progress, :mod:`streams.job.source_progress`)
    advance: bool = True
    watermark: int | None = field(init=False, default=None)
    first_slot: int | None = field(init=False, default=None)
    _seen: dict[int, set[str]] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.allowed_lateness < 0 or self.horizon < 0:
            raise ValueError("allowed lateness and horizon must be non-negative")
        self.watermark = self.initial_watermark

    # -- state ---------------------------------------------------------------------------------

    def open_slots(self) -> list[int]:
        """Slots with at least one counted report that have not closed yet."""
        return sorted(self._seen)

    def seen(self, slot: int) -> frozenset[str]:
        """Users counted so far in an open slot."""
        return frozenset(self._seen.get(slot, ()))

    def restore(
        self,
        watermark: int | None,
        seen: dict[int, Iterable[str]],
        first_slot: int | None = None,
    ) -> None:
        """Reinstate state saved elsewhere (for example in a table) after a restart."""
        self.watermark = watermark
        self._seen = {int(s): set(users) for s, users in seen.items()}
        self.first_slot = first_slot

    def is_closed(self, slot: int) -> bool:
        """True once the watermark has reached the end of ``slot``."""
        return self.watermark is not None and self.watermark >= self.clock.end(slot)

    # -- classification ------------------------------------------------------------------------

    def assign(self, users: np.ndarray, times: np.ndarray) -> SlotAssignment:
        """Classify a batch of reports (in input order) and advance the watermark."""
        times = np.asarray(times, dtype=np.int64)
        n = times.shape[0]
        slots = self.clock.slot_of(times)
        status = np.zeros(n, dtype=np.int8)
        if n == 0:
            return SlotAssignment(slots, status, self.watermark, [])
        lateness, horizon = self.allowed_lateness, self.horizon
        before = self.watermark
        w0 = _NEG if before is None else before
        cand = times - lateness  # what each report would push the watermark to

        # Reports that may be future against the batch-start watermark; with no watermark yet,
        # the first report defines it, so everything after it is a candidate.
        if not self.advance:
            maybe_future = np.zeros(n, dtype=bool) if before is None else times > w0 + horizon
            cand = np.full(n, _NEG, dtype=np.int64)
        elif before is None:
            maybe_future = np.ones(n, dtype=bool)
            maybe_future[0] = False
        else:
            maybe_future = times > w0 + horizon
        future = np.zeros(n, dtype=bool)
        if not self.advance:
            future = maybe_future
            contrib = cand
        elif maybe_future.any():
            # watermark contributions of the certain non-future reports (late ones contribute
            # less than the watermark already is, so they never matter)
            base = np.where(maybe_future, _NEG, cand)
            running = np.maximum.accumulate(np.maximum(base, w0))
            extra = _NEG  # max contribution of candidates accepted so far
            for i in np.flatnonzero(maybe_future).tolist():
                wm = max(int(running[i - 1]) if i > 0 else w0, extra)
                if wm != _NEG and times[i] > wm + horizon:
                    future[i] = True
                else:
                    extra = max(extra, int(cand[i]))
            accepted_cand = np.where(maybe_future & ~future, cand, _NEG)
            contrib = np.maximum(base, accepted_cand)
        else:
            contrib = cand
        # watermark seen *before* each report
        after = np.maximum.accumulate(np.maximum(contrib, w0))
        seen_before = np.empty(n, dtype=np.int64)
        seen_before[0] = w0
        seen_before[1:] = after[:-1]
        ends = self.clock.origin + (slots + 1) * self.clock.length
        late = (seen_before != _NEG) & (seen_before >= ends) & ~future
        status[future] = FUTURE
        status[late] = LATE
        # late reports never raise the watermark (their candidate is below it), so ``after`` is
        # exact even though late reports were included in ``contrib``.
        new_wm = int(after[-1])
        self.watermark = None if new_wm == _NEG else new_wm

        if self.dedupe:
            self._dedupe(users, slots, status)
        else:
            ok = slots[status == OK]
            if ok.size and (self.first_slot is None or int(ok.min()) < self.first_slot):
                self.first_slot = int(ok.min())
        closed = self._close(before)
        return SlotAssignment(slots, status, self.watermark, closed)

    def _dedupe(self, users: np.ndarray, slots: np.ndarray, status: np.ndarray) -> None:
        """Mark second and later reports of a (user, slot) as duplicates; first wins."""
        idx = np.flatnonzero(status == OK)
        if idx.size == 0:
            return
        seen = self._seen
        slot_list = slots[idx].tolist()
        user_list = users[idx].tolist()
        dup: list[int] = []
        for i, s, u in zip(idx.tolist(), slot_list, user_list, strict=True):
            bucket = seen.get(s)
            if bucket is None:
                seen[s] = {u}
                if self.first_slot is None or s < self.first_slot:
                    self.first_slot = s
            elif u in bucket:
                dup.append(i)
            else:
                bucket.add(u)
        if dup:
            status[np.asarray(dup, dtype=np.int64)] = DUPLICATE

    def _close(self, before: int | None) -> list[int]:
        """Slots whose end the watermark passed during this batch; forget their users."""
        wm = self.watermark
        if wm is None or self.first_slot is None:
            return []
        last = self.clock.last_closed(wm)
        low = (
            self.first_slot
            if before is None
            else max(self.first_slot, self.clock.last_closed(before) + 1)
        )
        closed = list(range(low, last + 1)) if last >= low else []
        for s in [s for s in self._seen if s <= last]:
            del self._seen[s]
        return closed
