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

from collections.abc import Iterable
from itertools import islice
from typing import NamedTuple

import numpy as np

from mechanisms.local import ClientLedger, LedgerRefusal, ParsedReport
from mechanisms.local.collector import SlotEstimate
from mechanisms.local.population import (
    POPULATION_PROTOCOLS,
    PopulationPlanner,
    Positions,
    interval_mask,
    round1_mask,
)
from mechanisms.local.rounds import (
    ROUND_PROTOCOLS,
    Outcome,
    RoundPlanner,
    dissimilarity_budget,
)
from mechanisms.local.tree import TREE_PROTOCOL, tree_levels
from mechanisms.local.tree_planner import TreePlanner, TreeReports
from streams.job.slot_clock import SlotClock
from streams.ldp_collector.checks import Refusal, Stream, read_record
from streams.ldp_collector.keeping import ledger_regime, previous_max
from streams.ldp_collector.ledgers import APART, NEW, LedgerTable
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
        #: two rounds a slot (lbd, lba): slots are virtual, 2 slot + round - 1, the decisions
        #: taken so far by slot (:mod:`mechanisms.local.rounds`)
        self.rounds = protocol in ROUND_PROTOCOLS
        #: lpd, lpa: the population divided by the users' public positions
        self.population = protocol in POPULATION_PROTOCOLS
        #: mtsp: two rounds over a tree (:mod:`mechanisms.local.tree`)
        self.tree = protocol == TREE_PROTOCOL
        cells = self.stream.cells
        self.planner: RoundPlanner | PopulationPlanner | TreePlanner | None = None
        if self.tree:
            self.planner = TreePlanner(w, E, cells, start)  # type: ignore[arg-type]
        elif self.rounds:
            planner = PopulationPlanner if self.population else RoundPlanner
            self.planner = planner(protocol, w, E, cells, start)  # type: ignore[arg-type]
        #: each user's public position (lpd, lpa, mtsp), computed once
        self.positions: dict[str, int] = {}
        self._hasher: Positions | None = None
        self.decisions: dict[int, Outcome] = {}
        self.round_reporters = 0  # the last asked dissimilarity round's
        self.next_slot = 2 * start if self.rounds else start
        self.watermark: int | None = None
        #: every user's ledger (:mod:`.ledgers`)
        self.ledgers = LedgerTable()
        #: plbu users whose ledger holds spends of an earlier requirement
        self.mixed: set[str] = set()
        self.open: dict[int, OpenSlot] = {}

    @property
    def next_release(self) -> int:
        """The slot whose release comes next."""
        return self.next_slot // 2 if self.rounds else self.next_slot

    @property
    def passed_slot(self) -> int:
        """The last slot whose end the collector has closed (a two-round stream's round 1)."""
        return (self.next_slot + 1) // 2 - 1 if self.rounds else self.next_slot - 1

    def offer(self, key: bytes | None, value: bytes | None,
              timestamp_ms: int | None = None) -> DeadLetter | None:
        """Read one record (key = the user id's UTF-8 bytes, value = the report's bytes): None
        if it is counted, else its :class:`DeadLetter`. The timestamp only moves
        :attr:`watermark` (the latest seen), which :meth:`close_until` may be given."""
        if timestamp_ms is not None and (self.watermark is None or timestamp_ms > self.watermark):
            self.watermark = int(timestamp_ms)
        if self.rounds:  # rounds are checked against the decisions on the batch path
            dead = self.offer_batch([key], [value])
            return dead[0] if dead else None
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
        size = max(1, min(MAX_BATCH, self.batch_cells // self.stream.cells))
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
        """:meth:`offer_batch`'s refusals as (position in the batch, reason), in order. A
        two-round stream may not read the whole batch (:meth:`read_until_held`): ValueError
        then."""
        refused, held = self.read_until_held(keys, values, passed)
        if held is not None:
            raise ValueError(f"record {held} answers a round not decided yet: read the batch "
                             "with read_until_held")
        return refused

    def read_until_held(self, keys: list, values: list, passed: np.ndarray | None = None
                        ) -> tuple[list[tuple[int, str]], int | None]:
        """Read the batch up to its first report that answers a round not decided yet (a
        two-round stream's publication round of a slot whose dissimilarity round has not
        closed, or a dissimilarity round the previous slot's decision has not named yet): the
        refusals before it as (position, reason), in order, and its position (None: the whole
        batch was read). The records from there on are read again once the round is decided."""
        reports, refused = read_batch(self.stream, keys, values)
        held, first = None, None
        if passed is not None:
            first = np.asarray(passed, dtype=np.int64)[reports.index]
            # a partition past slot P has passed round 1 of P - 1 (virtual slot 2P - 2)
            behind = reports.slot < (np.where(first >= 0, 2 * first - 1, first) if self.rounds
                                     else first)
            refused += [(i, "late") for i in reports.index[behind].tolist()]
            reports, first = reports.keep(~behind), first[~behind]
        if self.rounds:
            closed = reports.slot < self.next_slot
            refused += [(i, "late") for i in reports.index[closed].tolist()]
            reports = reports.keep(~closed)
            first = None if first is None else first[~closed]
            reports, unasked, held = self._asked(reports, first)
            refused += unasked
            if held is not None:
                refused = [r for r in refused if r[0] < held]
        refused += self._keep_batch(reports)
        refused.sort()
        return refused, held

    def _asked(self, reports: Reports, passed: np.ndarray | None
               ) -> tuple[Reports, list[tuple[int, str]], int | None]:
        """A two-round stream's reports that answer a round its decisions asked (the rest:
        ``unasked_round``), up to the first whose round is not decided yet but whose
        partition has passed the slot that decides it (its position: it waits there). A
        report whose deciding slot its partition has not passed (``passed``, per report: the
        first slot it has not; None: no partitions) cannot answer a decision: unasked."""
        start = self.stream.start
        decided = self.planner.slot  # type: ignore[union-attr] - the first slot not decided
        slot, round2 = reports.slot // 2, reports.slot % 2 == 1
        # round 1 of t answers decision t - 1 (none at the first slot), round 2 decision t
        deciding = np.where(round2, slot, slot - 1)
        waiting = (deciding >= decided) & (round2 | (slot > start))
        possible = waiting & (deciding < passed) if passed is not None \
            else np.zeros_like(waiting)
        held = None
        if possible.any():
            cut = int(np.argmax(possible))
            held = int(reports.index[cut])
            reports = reports.take(np.arange(cut))
            slot, round2, deciding, waiting = (slot[:cut], round2[:cut], deciding[:cut],
                                               waiting[:cut])
        opening = (self.stream.E if self.population  # type: ignore[arg-type]
                   else dissimilarity_budget(self.stream.w, self.stream.E))  # type: ignore[arg-type]
        asked = np.empty(slot.size)
        named = np.ones(slot.size, dtype=bool)  # lpd, lpa: the user is one the round asks
        at_user = self._positions(reports.users) if self.population or self.tree else None
        if self.tree:  # round 1 over the user's level, round 2 over the decision's intervals
            planner: TreePlanner = self.planner  # type: ignore[assignment]
            widths = np.array([real for _, _, real in planner.levels], dtype=np.int64)
            level = tree_levels(at_user, planner.h)  # type: ignore[arg-type]
            named = round2 | (reports.width == widths[level - 1])
        elif at_user is not None:
            named = round1_mask(at_user, slot, start, self.stream.w)  # type: ignore[arg-type]
        for t in set(deciding.tolist()):
            outcome = self.decisions.get(t)
            at = deciding == t
            asked[at & round2] = 0.0 if outcome is None else outcome.eps
            asked[at & ~round2] = (opening if t == start - 1
                                   else 0.0 if outcome is None else outcome.next)
            if self.tree and outcome is not None:
                two = at & round2
                named[two] = reports.width[two] == len(outcome.starts)
            elif at_user is not None and outcome is not None:
                two = at & round2
                named[two] = interval_mask(at_user[two], outcome.lo, outcome.size)
        ok = (asked > 0) & (reports.eps == asked) & named & ~waiting
        unasked = [(i, "unasked_round") for i in reports.index[~ok].tolist()]
        return reports.keep(ok), unasked, held

    def _positions(self, users: list[str]) -> np.ndarray:
        """The users' public positions (lpd, lpa, mtsp), from the cache."""
        cache, hasher = self.positions, self._hasher
        if hasher is None:
            hasher = self._hasher = Positions(self.stream.lpu_key)
        get = cache.get
        out = [get(user) for user in users]
        if None in out:
            missing = [i for i, at in enumerate(out) if at is None]
            new = [users[i] for i in missing]
            found = hasher.many(new)
            cache.update(zip(new, found, strict=True))
            for i, at in zip(missing, found, strict=True):
                out[i] = at
        return np.array(out, dtype=np.int64)

    def _keep_batch(self, reports: Reports) -> list[tuple[int, str]]:
        """Keep what :meth:`_keep` would of ``reports``, taken in order; the refused ones'
        (position, reason). Users are independent: those whose ledger is ``free`` or
        ``spaced`` (:mod:`.keeping`) are decided at once, the others report by report."""
        late = reports.slot < self.next_slot
        refused = [(i, "late") for i in reports.index[late].tolist()]
        r = reports.keep(~late)
        if not r.users:
            return refused
        ids: dict[str, int] = {}
        code = np.fromiter((ids.setdefault(u, len(ids)) for u in r.users), dtype=np.int64,
                           count=len(r.users))
        first = np.unique(code, return_index=True)[1]
        windows, totals, budgets = r.w[first], r.E[first], r.eps[first]
        users = list(ids)
        table = self.ledgers
        rows_of = table.lookup(users)
        simple = rows_of == NEW
        last = np.full(len(users), -1, dtype=np.int64)
        cols = np.flatnonzero(rows_of >= 0)
        at = rows_of[cols]
        simple[cols] = (table.w[at] == windows[cols]) & (table.E[at] == totals[cols])
        last[cols] = table.last[at]
        for k in np.flatnonzero(rows_of == APART).tolist():  # users once read one by one
            ledger = table.apart[users[k]]
            simple[k] = (ledger.w == windows[k] and totals[k] == ledger.E
                         and bool(ledger.spends) and users[k] not in self.mixed)
            last[k] = ledger.spends[-1][0] if ledger.spends else -1
        simple[code[(windows[code] != r.w) | (totals[code] != r.E)]] = False
        # a two-round stream's users answer only the rounds its ledger asked, and those fit a
        # user who answers every round (mechanisms.local.rounds): no ledger can refuse them
        if self.rounds:
            regime = np.full(len(users), "free")
        else:
            requirements, which = np.unique(np.stack([windows, totals, budgets], axis=1),
                                            axis=0, return_inverse=True)
            regime = np.array([ledger_regime(int(w), E, eps) or ""
                               for w, E, eps in requirements.tolist()])[which.reshape(-1)]
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
        self._commit(r.take(rows[kept]), code[rows[kept]], users, rows_of, windows, totals)
        for row in rows[~kept].tolist():
            slot = self.open.get(int(r.slot[row]))
            duplicate = slot is not None and r.users[row] in slot.users
            refused.append((int(r.index[row]), "duplicate_in_slot" if duplicate
                            else "not_after_last"))
        return refused

    def _commit(self, kept: Reports, code: np.ndarray, users: list[str], rows: np.ndarray,
                windows: np.ndarray, totals: np.ndarray) -> None:
        """Record ``kept`` (sorted by user ``code``, each user's in slot order) in the users'
        ledgers, as :meth:`ClientLedger.commit` would one by one, and in their slots; user
        ``k`` is ``users[k]``, its row in the ledgers ``rows[k]`` (:mod:`.ledgers`), its
        requirement (``windows[k]``, ``totals[k]``), each report spending its own budget.
        Users in the columns are recorded at once; those taken apart one by one."""
        if not kept.users:
            return
        apart = rows[code] == APART
        if apart.any():
            self._commit_apart(kept.take(np.flatnonzero(apart)), code[apart], users)
        together = np.flatnonzero(~apart)
        if together.size:
            owners, owner = np.unique(code[together], return_inverse=True)
            self.ledgers.commit([users[k] for k in owners.tolist()], rows[owners],
                                windows[owners], totals[owners], owner.reshape(-1),
                                kept.slot[together], kept.eps[together])
        add_reports(self._open, kept)

    def _commit_apart(self, kept: Reports, code: np.ndarray, users: list[str]) -> None:
        """:meth:`_commit` of users taken apart: each one's :class:`ClientLedger`, trimmed in
        place (a report pushes out one or two spends at most)."""
        slots, spent = kept.slot.tolist(), kept.eps.tolist()
        bounds = (np.flatnonzero(np.diff(code)) + 1).tolist()
        starts = [0, *bounds]
        for a, b, k in zip(starts, [*bounds, len(slots)], code[starts].tolist(), strict=True):
            ledger = self.ledgers.apart[users[k]]
            w = ledger.w
            cut = slots[b - 1] - w  # the spends a window ending at the last slot reaches
            spends = ledger.spends
            drop = 0
            while drop < len(spends) and spends[drop][0] <= cut:
                drop += 1
            if drop:
                del spends[:drop]
            if b - a == 1:
                spends.append((slots[a], spent[a]))
            else:
                first = max(a, b - w)
                spends += [(s, e) for s, e in zip(slots[first:b], spent[first:b], strict=True)
                           if s > cut]

    def _open(self, slot: int) -> OpenSlot:
        """The open slot ``slot``, made if it has nothing yet."""
        kept = self.open.get(slot)
        if kept is None:
            kept = self.open[slot] = OpenSlot(self.stream.cells, self.tree)
        return kept

    def _keep(self, report: ParsedReport) -> None:
        """Keep ``report`` in its slot, or :class:`Refusal` (late, duplicate, ledger)."""
        slot = report.slot
        if slot < self.next_slot:
            raise Refusal("late", f"slot {slot} is closed")
        kept = self.open.get(slot)
        if kept is not None and report.user in kept.users:
            raise Refusal("duplicate_in_slot", f"{report.user!r} has a report at slot {slot}")
        ledger, changed = self.ledgers.take(report.user), False
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
        self.ledgers.keep(report.user, ledger)
        if changed:
            self.mixed.add(report.user)
        self._open(slot).add(report)

    def estimate(self, slot: int) -> SlotEstimate:
        """The estimate of a slot from the reports kept so far (the slot stays open)."""
        kept = self.open.get(slot)
        return (kept or OpenSlot(self.stream.cells)).estimate()

    def close(self, slot: int) -> dict:
        """Close ``slot`` (it must be :attr:`next_slot`: slots close in order) and return its
        release: ``slot``, ``protocol``, ``reporters``, ``counts`` (the estimated count per value
        cell: frequency times reporters), ``std`` (per cell, the counts' standard deviation;
        None when the slot carries no information: no reports, or budgets too small to tell
        cells apart), ``no_value`` and ``no_value_std`` (the same for the reporters without a
        value). Later reports for it are ``late``."""
        if self.rounds:
            raise ValueError("a two-round stream closes its rounds with close_round")
        if slot != self.next_slot:
            raise ValueError(f"slots close in order: the next is {self.next_slot}, not {slot}")
        estimate = self.estimate(slot)
        self.open.pop(slot, None)
        self.next_slot = slot + 1
        std = estimate.count_std
        informative = estimate.reporters > 0 and bool(np.isfinite(std).all())
        return {"slot": slot, "protocol": self.stream.protocol, "reporters": estimate.reporters,
                **self._cells(estimate.counts, std, informative)}

    def _cells(self, counts: np.ndarray, std: np.ndarray, informative: bool) -> dict:
        """A release's ``counts``, ``std``, ``no_value`` and ``no_value_std`` from the counts and
        their deviations over every cell, "no value" last."""
        d = self.stream.d
        return {"counts": [float(x) for x in counts[:d]],
                "std": [float(x) for x in std[:d]] if informative else None,
                "no_value": float(counts[d]),
                "no_value_std": float(std[d]) if informative else None}

    def close_round(self, virtual: int) -> dict:
        """Close round ``virtual % 2 + 1`` of slot ``virtual // 2`` of a two-round stream (it
        must be :attr:`next_slot`). Round 1 gives the slot's decision, ``{"decision": slot,
        "eps", "next"}`` (:class:`~mechanisms.local.rounds.Outcome`'s budgets); round 2 the
        slot's release, :meth:`close`'s fields and ``published`` (a fresh estimate), with
        ``estimated_at`` (the slot the released frequencies were estimated at, None before
        the first). Its ``reporters`` are the slot's dissimilarity round's (the last asked
        one's where the slot asked none), the counts the last estimate's frequencies times
        them."""
        if not self.rounds:
            raise ValueError("a one-round stream closes its slots with close")
        if virtual != self.next_slot:
            raise ValueError(f"rounds close in order: the next is {self.next_slot}, not "
                             f"{virtual}")
        planner = self.planner
        assert planner is not None
        if self.tree:
            return self._close_tree_round(virtual)
        estimate = self.estimate(virtual)
        self.open.pop(virtual, None)
        self.next_slot = virtual + 1
        slot = virtual // 2
        if virtual % 2 == 0:
            if planner.asked > 0:
                self.round_reporters = estimate.reporters
            outcome = self.decisions[slot] = planner.decide(estimate)  # type: ignore[arg-type]
            self.decisions.pop(slot - 2, None)
            decided = {"decision": slot, "eps": outcome.eps, "next": outcome.next}
            if self.population:
                decided |= {"from": outcome.lo, "size": outcome.size}
            return decided
        published = self.decisions[slot].eps > 0 and estimate.reporters > 0
        if published:
            planner.publish(slot, estimate)  # type: ignore[call-arg]
        return self._round_release(slot, published)

    def _round_release(self, slot: int, published: bool) -> dict:
        """A two-round stream's release of ``slot`` from its planner's last estimate."""
        planner = self.planner
        assert planner is not None
        n = self.round_reporters
        std = n * np.sqrt(planner.last_variance)
        informative = planner.estimated_at is not None and n > 0 and bool(np.isfinite(std).all())
        return {
            "slot": slot,
            "protocol": self.stream.protocol,
            "reporters": n,
            **self._cells(planner.last * n, std, informative),
            "published": published,
            "estimated_at": planner.estimated_at,
        }

    def _close_tree_round(self, virtual: int) -> dict:
        """:meth:`close_round` of an mtsp stream: round 1 counted per level of the tree, round
        2 per interval of the decision's partition. The release adds ``intervals``: the last
        publication's intervals (``starts``, their first cells), their ``counts`` and ``std``
        (None before the first publication); a cell's own ``std`` is None where its interval
        holds several cells (its share is spread, not estimated), and so ``no_value_std``."""
        planner = self.planner
        assert isinstance(planner, TreePlanner)
        kept = self.open.pop(virtual, None) or OpenSlot(self.stream.cells, True)
        self.next_slot = virtual + 1
        slot = virtual // 2
        if virtual % 2 == 0:
            groups = np.zeros(planner.h, dtype=np.int64)
            ones = np.zeros(2 ** (planner.h + 1) - 1, dtype=np.int64)
            for level, (_, first, width) in enumerate(planner.levels):  # a width is a level's
                reports, counts = kept.widths.get(width, (0, None))
                groups[level] = reports
                if reports:
                    ones[first : first + width] = counts[:width]
            self.round_reporters = int(groups.sum())
            outcome = self.decisions[slot] = planner.decide(TreeReports(groups, ones))
            self.decisions.pop(slot - 2, None)
            return {"decision": slot, "eps": outcome.eps, "next": outcome.next,
                    "starts": list(outcome.starts)}
        starts = self.decisions[slot].starts
        reports, counts = kept.widths.get(len(starts), (0, None)) if starts else (0, None)
        published = reports > 0
        planner.publish(slot, reports, counts[: len(starts)] if published else np.zeros(0))
        release = self._round_release(slot, published)
        n, last = self.round_reporters, planner.intervals
        if release["std"] is not None and last is not None:  # spread cells: no bars
            alone = np.diff([*last.starts, self.stream.cells]) == 1
            owner = np.searchsorted(last.starts, np.arange(self.stream.cells), side="right") - 1
            release["std"] = [s if alone[k] else None
                              for s, k in zip(release["std"], owner.tolist(), strict=False)]
            if not alone[owner[-1]]:
                release["no_value_std"] = None
        release["intervals"] = None if last is None or n == 0 else {
            "starts": list(last.starts),
            "counts": [float(x) for x in last.frequency * n],
            "std": [float(x) for x in n * np.sqrt(last.variance)]}
        return release

    def close_until(self, time_ms: int) -> list[dict]:
        """Close, in order, every open slot that ends at or before ``time_ms`` (a watermark):
        their releases; a two-round stream's rounds, round 1 of slot t when t ends and round 2
        when t + 1 does (:meth:`close_round`: decisions and releases, in that order)."""
        last = self.clock.last_closed(int(time_ms))
        if self.rounds:
            return [self.close_round(v) for v in range(self.next_slot, 2 * last + 1)]
        return [self.close(s) for s in range(self.next_slot, last + 1)]
