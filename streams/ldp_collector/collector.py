"""The local-DP collector, in process: it reads the reports of one stream, keeps what the
protocol allows and releases each slot's debiased counts with their error bars
(docs/ldp-reports.md, "How the collector reads the reports").

    collector = LdpCollector("lbu", d=8, origin_ms=0, slot_ms=60_000, start=0, E=1.0, w=10)
    dead = collector.offer(key, value, timestamp_ms)  # None, or a DeadLetter(reason, value)
    release = collector.close(collector.next_slot)

The estimates are :mod:`mechanisms.local.collector`'s; the checks :mod:`.checks`'.
``offer_all`` takes batches with the outcome of ``offer`` one by one (:mod:`.reading`,
:mod:`.keeping`, :mod:`.slots`).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable
from itertools import islice
from operator import itemgetter
from typing import NamedTuple

import numpy as np

from mechanisms.local import ClientLedger, LedgerRefusal, ParsedReport
from mechanisms.local.collector import SlotEstimate
from streams.job.slot_clock import SlotClock
from streams.ldp_collector.checks import Refusal, Stream, read_record
from streams.ldp_collector.keeping import ledger_regime, previous_max
from streams.ldp_collector.reading import Reports, read_batch, split_records
from streams.ldp_collector.slots import OpenSlot, add_reports

Record = tuple[bytes | None, bytes | None, int | None]
#: The most records :meth:`LdpCollector.offer_all` reads as one batch.
MAX_BATCH = 4096


class DeadLetter(NamedTuple):
    """A record the collector did not count: why (one of :data:`.checks.REASONS`) and its raw
    value."""

    reason: str
    value: bytes | None


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
        #: :meth:`offer_all` reads batches of up to this many cells (records times d)
        self.batch_cells = 1 << 24
        self.stream = Stream(protocol, d, start, E, w, lpu_key, lpu_rotate)
        self.clock = SlotClock(int(slot_ms), int(origin_ms))
        self.next_slot = start
        self.watermark: int | None = None
        self.ledgers: dict[str, ClientLedger] = {}
        #: plbu users whose ledger holds spends of an earlier requirement
        self.mixed: set[str] = set()
        self.open: dict[int, OpenSlot] = {}

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

    def offer_all(self, records: Iterable[Record]) -> list[DeadLetter]:
        """:meth:`offer` every (key, value, timestamp_ms); the dead letters, in order. Records
        are read in batches (:meth:`offer_batch`), with the same outcome as one by one; an
        exception that :meth:`offer` or the iteration would raise at a record is raised there,
        after the records before it are taken."""
        size = max(1, min(MAX_BATCH, self.batch_cells // self.stream.d))
        dead: list[DeadLetter] = []
        iterator = iter(records)
        while True:
            chunk: list = []
            try:
                for record in islice(iterator, size):
                    chunk.append(record)
            except Exception as error:  # noqa: BLE001 - raised once the records before are in
                stopped: Exception | None = error
            else:
                stopped = None
            keys, values, self.watermark, error = split_records(chunk, self.watermark)
            dead += self.offer_batch(keys, values)
            if error or stopped:
                raise error or stopped  # type: ignore[misc]
            if len(chunk) < size:
                return dead

    def offer_batch(self, keys: list, values: list,
                    passed: np.ndarray | None = None) -> list[DeadLetter]:
        """:meth:`offer` each (key, value) of one batch (the watermark left alone): the same
        outcome as one by one, the dead letters in order. The records in the clients' own form
        are read and kept with numpy (:mod:`.reading`, :mod:`.keeping`), the others one by
        one. ``passed[i]``, when given, is the first slot record i's partition has not passed:
        a report for an earlier slot is ``late`` even while the slot is still open (the rule of
        :mod:`.partitions`)."""
        return [DeadLetter(reason, values[i])
                for i, reason in self.refused_in_batch(keys, values, passed)]

    def refused_in_batch(self, keys: list, values: list,
                         passed: np.ndarray | None = None) -> list[tuple[int, str]]:
        """:meth:`offer_batch`'s refusals as (position in the batch, reason), in order."""
        reports, refused = read_batch(self.stream, keys, values)
        if passed is not None:
            behind = reports.slot < np.asarray(passed, dtype=np.int64)[reports.index]
            refused += [(i, "late") for i in reports.index[behind].tolist()]
            reports = reports.take(np.flatnonzero(~behind))
        refused += self._keep_batch(reports)
        refused.sort()
        return refused

    def _keep_batch(self, reports: Reports) -> list[tuple[int, str]]:
        """Keep what :meth:`_keep` would of ``reports``, taken in order; the refused ones'
        (position, reason). Users are independent: those whose ledger is ``free`` or
        ``spaced`` (:mod:`.keeping`) are decided at once, the others report by report."""
        late = reports.slot < self.next_slot
        refused = [(i, "late") for i in reports.index[late].tolist()]
        r = reports.take(np.flatnonzero(~late))
        if not r.users:
            return refused
        ids: dict[str, int] = {}
        code = np.fromiter((ids.setdefault(u, len(ids)) for u in r.users), dtype=np.int64,
                           count=len(r.users))
        first = np.unique(code, return_index=True)[1]
        windows, totals = r.w[first].tolist(), r.E[first].tolist()
        budgets = r.eps[first].tolist()
        users = list(ids)
        held = list(map(self.ledgers.get, users))
        simple = np.array([ledger is None or (ledger.w == w and ledger.E == E and bool(
            ledger.spends)) for ledger, w, E in zip(held, windows, totals, strict=True)])
        simple[code[(r.w[first][code] != r.w) | (r.E[first][code] != r.E)]] = False
        if self.mixed:
            simple &= np.array([user not in self.mixed for user in users], dtype=bool)
        last = np.array([ledger.spends[-1][0] if ledger is not None and ledger.spends else -1
                         for ledger in held], dtype=np.int64)
        requirements = list(zip(windows, totals, budgets, strict=True))
        regimes = {req: ledger_regime(*req) for req in set(requirements)}
        regime = np.array([regimes[req] or "" for req in requirements]) if len(regimes) > 1 \
            else np.full(len(users), next(iter(regimes.values())) or "")
        simple &= regime != ""
        spaced = regime == "spaced"
        rows = np.flatnonzero(simple[code])
        rows = rows[np.argsort(code[rows], kind="stable")]
        prev = previous_max(code[rows], r.slot[rows], last)
        kept = r.slot[rows] > prev
        crowded = kept & spaced[code[rows]] & (prev >= 0) & (r.slot[rows] - prev < r.w[rows])
        if crowded.any():  # a report the ledger refuses as over budget: that user one by one
            simple[code[rows[crowded]]] = False
            stay = simple[code[rows]]
            rows, kept = rows[stay], kept[stay]
        for row in np.flatnonzero(~simple[code]).tolist():
            try:
                self._keep(r.report(row, self.stream.protocol))
            except Refusal as refusal:
                refused.append((int(r.index[row]), refusal.reason))
        self._commit(r.take(rows[kept]), code[rows[kept]], users, held, windows, totals,
                     budgets)
        for row in rows[~kept].tolist():
            slot = self.open.get(int(r.slot[row]))
            duplicate = slot is not None and r.users[row] in slot.users
            refused.append((int(r.index[row]), "duplicate_in_slot" if duplicate
                            else "not_after_last"))
        return refused

    def _commit(self, kept: Reports, code: np.ndarray, users: list[str],
                held: list[ClientLedger | None], windows: list[int], totals: list[float],
                budgets: list[float]) -> None:
        """Record ``kept`` (sorted by user ``code``, each user's in slot order) in the users'
        ledgers, as :meth:`ClientLedger.commit` would one by one, and in their slots; user
        ``k`` is ``users[k]``, its ledger ``held[k]`` (None: none yet), its requirement
        (``windows[k]``, ``totals[k]``), each report spending ``budgets[k]``."""
        if not kept.users:
            return
        slots = kept.slot.tolist()
        bounds = (np.flatnonzero(np.diff(code)) + 1).tolist()
        starts = [0, *bounds]
        for a, b, k in zip(starts, [*bounds, len(slots)], code[starts].tolist(), strict=True):
            ledger, w, eps = held[k], windows[k], budgets[k]
            if ledger is None:
                ledger = self.ledgers[users[k]] = ClientLedger(w, totals[k])
            cut = slots[b - 1] - w  # the spends a window ending at the last slot reaches
            spends = ledger.spends[bisect_right(ledger.spends, cut, key=itemgetter(0)):]
            if b - a == 1:
                spends.append((slots[a], eps))
            else:
                spends += [(s, eps) for s in slots[max(a, b - w):b] if s > cut]
            ledger.spends = spends
        add_reports(self._open, kept)

    def _open(self, slot: int) -> OpenSlot:
        """The open slot ``slot``, made if it has nothing yet."""
        kept = self.open.get(slot)
        if kept is None:
            kept = self.open[slot] = OpenSlot(self.stream.d)
        return kept

    def _keep(self, report: ParsedReport) -> None:
        """Keep ``report`` in its slot, or :class:`Refusal` (late, duplicate, ledger)."""
        slot = report.slot
        if slot < self.next_slot:
            raise Refusal("late", f"slot {slot} is closed")
        kept = self.open.get(slot)
        if kept is not None and report.user in kept.users:
            raise Refusal("duplicate_in_slot", f"{report.user!r} has a report at slot {slot}")
        ledger, changed = self.ledgers.get(report.user), False
        if ledger is None or (ledger.w, ledger.E) != (report.w, report.E):
            # a plbu user whose requirement changed: its history under the new one, as a client
            # loads its kept state into a client of the new requirement
            fresh = ClientLedger(report.w, report.E)
            if ledger is not None:
                fresh.load(ledger.dump())
                changed = True
            ledger = fresh
        try:
            ledger.commit(slot, report.eps)
        except LedgerRefusal as refusal:
            raise Refusal(refusal.code, str(refusal)) from None
        self.ledgers[report.user] = ledger
        if changed:
            self.mixed.add(report.user)
        self._open(slot).add(report)

    def estimate(self, slot: int) -> SlotEstimate:
        """The estimate of a slot from the reports kept so far (the slot stays open)."""
        kept = self.open.get(slot)
        return (kept or OpenSlot(self.stream.d)).estimate()

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
