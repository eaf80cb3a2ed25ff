"""The local-DP collector, in process: it reads the reports of one stream, keeps what the
protocol allows and releases each slot's debiased counts with their error bars
(docs/ldp-reports.md, "How the collector reads the reports").

    collector = LdpCollector("lbu", d=8, origin_ms=0, slot_ms=60_000, start=0, E=1.0, w=10)
    dead = collector.offer(key, value, timestamp_ms)  # None, or a DeadLetter(reason, value)
    release = collector.close(collector.next_slot)

The estimates are :mod:`mechanisms.local.collector`'s; the checks :mod:`.checks`'.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from mechanisms.local import ClientLedger, LedgerRefusal, ParsedReport
from mechanisms.local.collector import SlotEstimate, estimate_slot
from streams.job.slot_clock import SlotClock
from streams.ldp_collector.checks import Refusal, Stream, read_record


class DeadLetter(NamedTuple):
    """A record the collector did not count: why (one of :data:`.checks.REASONS`) and its raw
    value."""

    reason: str
    value: bytes | None


@dataclass
class _Slot:
    """One open slot's kept reports, by user, and their arrays' rows."""

    users: set[str] = field(default_factory=set)
    oue_eps: list[float] = field(default_factory=list)
    oue_bits: list[np.ndarray] = field(default_factory=list)
    grr_eps: list[float] = field(default_factory=list)
    grr_cells: list[int] = field(default_factory=list)

    def add(self, report: ParsedReport) -> None:
        """Keep ``report`` (its user has none here yet)."""
        self.users.add(report.user)
        if report.oracle == "oue":
            self.oue_eps.append(report.eps)
            self.oue_bits.append(np.asarray(report.bits, dtype=bool))
        else:
            self.grr_eps.append(report.eps)
            self.grr_cells.append(int(report.cell))  # type: ignore[arg-type]

    def estimate(self, d: int) -> SlotEstimate:
        """The slot's estimate from every kept report at once."""
        bits = np.stack(self.oue_bits) if self.oue_bits else np.zeros((0, d), dtype=bool)
        return estimate_slot(d, oue_eps=np.asarray(self.oue_eps, dtype=np.float64),
                             oue_bits=bits, grr_eps=np.asarray(self.grr_eps, dtype=np.float64),
                             grr_cells=np.asarray(self.grr_cells, dtype=np.int64))


class LdpCollector:
    """The collector of one stream's local reports: :meth:`offer` each record, :meth:`close`
    each slot in order.

    A record is counted when it parses, belongs to the stream (protocol, d, for lbu/lsp/lpu the
    stream's E and w, the oracle the protocol uses), lies on the protocol's schedule, its slot is
    still open, its user has no report kept at that slot yet (the first is kept), and the
    user's ledger (the clients' rule: :class:`~mechanisms.local.ClientLedger`, over the
    reports kept) allows it. Anything else is a :class:`DeadLetter`; no record raises.
    """

    def __init__(self, protocol: str, d: int, *, origin_ms: int, slot_ms: int, start: int,
                 E: float | None = None, w: int | None = None,  # noqa: N803 - the papers' name
                 lpu_key: str = "", lpu_rotate: int = 0) -> None:
        """A collector for the stream: slot s covers [origin_ms + s slot_ms, origin_ms +
        (s + 1) slot_ms), ``start`` is its first slot; ``E`` and ``w`` are the stream's (lbu,
        lsp, lpu; None for plbu), ``lpu_key`` and ``lpu_rotate`` LPU's public key and rotation.
        ValueError for a wrong parameter."""
        self.stream = Stream(protocol, d, start, E, w, lpu_key, lpu_rotate)
        self.clock = SlotClock(int(slot_ms), int(origin_ms))
        self.next_slot = start
        self.watermark: int | None = None
        self.ledgers: dict[str, ClientLedger] = {}
        self.open: dict[int, _Slot] = {}

    def offer(self, key: bytes | None, value: bytes | None,
              timestamp_ms: int | None = None) -> DeadLetter | None:
        """Read one record (key = the user id's UTF-8 bytes, value = the report's bytes): None
        if it is counted, else its :class:`DeadLetter`. The timestamp only moves
        :attr:`watermark` (the latest seen), which :meth:`close_until` may be given."""
        if timestamp_ms is not None and (self.watermark is None or timestamp_ms > self.watermark):
            self.watermark = int(timestamp_ms)
        try:
            self._keep(read_record(self.stream, key, value))
        except Refusal as refusal:
            return DeadLetter(refusal.reason, value)
        return None

    def offer_all(self, records: Iterable[tuple[bytes | None, bytes | None, int | None]]
                  ) -> list[DeadLetter]:
        """:meth:`offer` every (key, value, timestamp_ms); the dead letters, in order."""
        dead = (self.offer(key, value, ts) for key, value, ts in records)
        return [d for d in dead if d is not None]

    def _keep(self, report: ParsedReport) -> None:
        """Keep ``report`` in its slot, or :class:`Refusal` (late, duplicate, ledger)."""
        slot = report.slot
        if slot < self.next_slot:
            raise Refusal("late", f"slot {slot} is closed")
        kept = self.open.get(slot)
        if kept is not None and report.user in kept.users:
            raise Refusal("duplicate_in_slot", f"{report.user!r} has a report at slot {slot}")
        ledger = self.ledgers.get(report.user)
        if ledger is None or (ledger.w, ledger.E) != (report.w, report.E):
            # a plbu user whose requirement changed: its history under the new one, as a client
            # loads its kept state into a client of the new requirement
            fresh = ClientLedger(report.w, report.E)
            if ledger is not None:
                fresh.load(ledger.dump())
            ledger = fresh
        try:
            ledger.commit(slot, report.eps)
        except LedgerRefusal as refusal:
            raise Refusal(refusal.code, str(refusal)) from None
        self.ledgers[report.user] = ledger
        if kept is None:
            kept = self.open[slot] = _Slot()
        kept.add(report)

    def estimate(self, slot: int) -> SlotEstimate:
        """The estimate of a slot from the reports kept so far (the slot stays open)."""
        kept = self.open.get(slot)
        return (kept or _Slot()).estimate(self.stream.d)

    def close(self, slot: int) -> dict:
        """Close ``slot`` (it must be :attr:`next_slot`: slots close in order) and return its
        release: ``slot``, ``protocol``, ``reporters``, ``counts`` (the estimated count per cell:
        frequency times reporters) and ``std`` (per cell, the counts' standard deviation; None
        when the slot carries no information: no reports, or budgets too small to tell cells
        apart). Later reports for it are ``late``."""
        if slot != self.next_slot:
            raise ValueError(f"slots close in order: the next is {self.next_slot}, not {slot}")
        estimate = self.estimate(slot)
        self.open.pop(slot, None)
        self.next_slot = slot + 1
        std = estimate.count_std
        informative = estimate.reporters > 0 and bool(np.isfinite(std).all())
        return {
            "slot": slot,
            "protocol": self.stream.protocol,
            "reporters": estimate.reporters,
            "counts": [float(x) for x in estimate.counts],
            "std": [float(x) for x in std] if informative else None,
        }

    def close_until(self, time_ms: int) -> list[dict]:
        """Close, in order, every open slot that ends at or before ``time_ms`` (a watermark)."""
        last = self.clock.last_closed(int(time_ms))
        return [self.close(s) for s in range(self.next_slot, last + 1)]
