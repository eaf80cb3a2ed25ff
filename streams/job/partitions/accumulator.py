"""The partition worker: one partition's admission, slotting and messages to the coordinator.

A :class:`PartitionAccumulator` turns batches of raw report records into dead letters (with
their reasons) and, whenever slots close, the messages of :mod:`streams.job.slot_protocol` for the
coordinator. What those messages hold depends on where the budget ledger lives, which its
placement strategy (:mod:`streams.job.partitions.placement`) decides: counts per (requirement
level, cell) when the coordinator keeps the ledger (fixed requirements), a closure and the plans of
the partition's own ledger otherwise (dynamic requirements). Its state is a function of the records
and control messages it was given, in order, so replaying from a checkpoint reproduces the same
messages byte for byte, but for the worker's clock reading in a closure's ``closed_at_ms``
(when the watermark passed the slots' end), which only the release-latency metric reads. All
per-report work is vectorised, except the one-report-per-(user, slot) check, which is a set
look-up per report.
"""

from __future__ import annotations

import base64
import zlib
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from streams.job.batch_handling import RawRecord
from streams.job.config import JobConfig
from streams.job.isolation import isolated
from streams.job.partitions.admission import check_placement
from streams.job.partitions.ordering import Replaced, SlotOrder
from streams.job.partitions.placement import Placement
from streams.job.partitions.registry_columns import UserRegistry
from streams.job.partitions.slotting import DUPLICATE, OK, STATUS_REASON, SUPERSEDED, Slotter
from streams.job.partitions.watermarks import wall_clock_ms, watermark_of
from streams.job.partitions.watermarks import watermark_record as watermark_record  # re-exported
from streams.job.slot_protocol import Control
from streams.job.source_progress import Progress, SourceProgress, progress_of
from streams.records.field_formats import Reason
from streams.records.field_parsing import RecordError
from streams.records.report_parsing import parse_reports

NO_HORIZON = 2**62  # the horizon when none is configured


@dataclass(frozen=True)
class DeadLetter:
    """A rejected record and why."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str
    detail: str


class PartitionAccumulator:
    """Slotting and the messages to the coordinator of one partition of the reports topic;
    ``placement`` decides what is counted and said (:mod:`streams.job.partitions.placement`)."""

    def __init__(self, partition: int, config: JobConfig, placement: Placement,
                 clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.partition, self.config, self.placement = partition, config, placement
        self.registry: UserRegistry = placement.registry
        self.clock_ms = clock_ms
        self.secret = config.secret_bytes()
        self.domain = config.make_domain()
        self.d = config.d
        horizon = NO_HORIZON if config.horizon_ms is None else config.horizon_ms
        # with source topics the stream's event time is their partitions' progress
        self.sources = (SourceProgress(config.source_partitions)
                        if config.source_partitions else None)
        self.slotter = Slotter(config.clock, config.lateness_ms, horizon, dedupe=False,
                               advance=self.sources is None)
        self.stream_start: int | None = None  # live: the earliest event time accepted
        self.start_unsaved = False  # the start was just recorded: checkpoint it
        self.seen: dict[int, np.ndarray] = {}  # open slot -> users counted (bool by index)
        # open slot -> the counted report per user, for reports with a source position
        self.order: dict[int, SlotOrder] = {}
        self.accepted: Counter[int] = Counter()
        self.rejected = 0
        #: reports with a source position that lost their (user, slot) to one coming first:
        #: counted here (and in the metrics), not dead-lettered
        self.superseded = 0
        # per source partition (topic index << 16 | partition): the largest source offset taken
        self.source_offsets: dict[int, int] = {}
        self.closed_through: int | None = None
        self.next_offset = 0
        self.max_event = -1
        placement.bind(self)

    # -- processing ------------------------------------------------------------------------

    def process(self, records: Sequence[RawRecord], topic: str = "reports") -> tuple[
        list[dict], list[DeadLetter]
    ]:
        """Take a batch of this partition's records in offset order.

        Returns the partial messages of the slots that closed, and the dead letters. A record
        with no key whose value is ``{"watermark": ms, "mac": ...}``, signed with the secret, is
        a control record: it moves the partition's watermark (the job sends them to idle
        partitions and at idle time; ``pwevent replay`` to close its last slot). In live
        operation neither a control record nor a report may lie more than the allowed clock
        skew ahead of the worker's clock.
        """
        fresh = [r for r in records if r[3] >= self.next_offset]
        if not fresh:
            return [], []
        self.next_offset = fresh[-1][3] + 1
        partials: list[dict] = []
        dead: list[DeadLetter] = []
        segment: list[RawRecord] = []
        for rec in fresh:
            try:
                mark = None if rec[0] is not None else watermark_of(
                    rec, self.secret, self.config.stream)
                progress = None if rec[0] is not None or rec[1] is None else progress_of(
                    rec[1], self.secret, self.config.stream, self.partition)
            except RecordError as exc:
                dead.append(self._dead(rec, topic, exc.reason.value, exc.detail))
                continue
            if progress is not None:
                self._take(segment, topic, partials, dead)
                segment = []
                partials.extend(self._progressed(progress))
                continue
            if mark is None:
                segment.append(rec)
                continue
            self._take(segment, topic, partials, dead)
            segment = []
            bound = self.clock_bound()
            if bound is not None and mark > bound:
                dead.append(self._dead(rec, topic, Reason.FUTURE.value,
                                       f"watermark {mark} is beyond the worker's clock plus "
                                       f"the allowed skew ({bound})"))
                continue
            partials.extend(self.advance_messages(mark))
        self._take(segment, topic, partials, dead)
        return partials, dead

    def _progressed(self, progress: Progress) -> list[dict]:
        """A source partition's progress: the watermark follows the stream's event time, the
        smallest any busy source partition has reached, less the allowed lateness (all idle:
        the end of the slot of the largest time seen; :mod:`streams.job.source_progress`)."""
        if self.sources is None:  # a job without source topics has no use for them
            return []
        self.sources.take(progress)
        reached = self.sources.event_time()
        if reached is None:
            return []
        if all(w in self.sources.idle for w in self.sources.expected()):
            clock = self.config.clock
            mark = clock.end(int(clock.slot_of(reached)))
        else:
            mark = reached - self.config.lateness_ms
        return self.advance_messages(mark)

    def start_bound(self) -> int:
        """The earliest event time accepted: replaying history, the origin; live, the stream's
        start, recorded when the partition first takes records as the worker's clock minus the
        allowed clock skew (or the lateness, when larger), so a stale first report cannot set the
        watermark back while reports made just before the worker read them still count."""
        if self.config.event_time != "live":
            return self.config.origin_ms
        if self.stream_start is None:
            behind = max(self.config.max_skew_ms, self.config.lateness_ms)
            self.stream_start = max(self.config.origin_ms, self.clock_ms() - behind)
            self.start_unsaved = True
        return self.stream_start

    def clock_bound(self) -> int | None:
        """The latest event time accepted now: the worker's clock plus the allowed skew in
        live operation; ``None`` when replaying history."""
        if self.config.event_time != "live":
            return None
        return self.clock_ms() + self.config.max_skew_ms

    def _take(
        self, recs: list[RawRecord], topic: str, partials: list[dict], out: list[DeadLetter]
    ) -> None:
        if not recs:
            return
        keep, batch, broken = isolated(
            recs, lambda sub: parse_reports([r[1] for r in sub], self.domain,
                                            [r[0] for r in sub]),
            lambda i: (topic, recs[i][2], recs[i][3]))
        dead = [self._dead(recs[r.index], topic, r.reason.value, r.detail) for r in broken]
        if broken:
            recs = [recs[i] for i in keep]
        dead += [self._dead(recs[r.index], topic, r.reason.value, r.detail)
                 for r in batch.rejected]
        if batch.sources is not None and len(batch) and int(batch.sources.max()) >= 0:
            repeat = self._repeats(batch.sources)
            wm = self.slotter.watermark  # only a copy for a closed slot needs telling apart
            clock = self.config.clock
            closed = (np.zeros_like(repeat) if wm is None
                      else clock.slot_of(batch.times) + 1 <= int(clock.slot_of(wm)))
            repeat &= closed
            if repeat.any():
                self.superseded += int(repeat.sum())
                batch = batch.select(~repeat)
        bound, start = self.clock_bound(), self.start_bound()
        if len(batch) and (int(batch.times.min()) < start
                           or (bound is not None and int(batch.times.max()) > bound)):
            early = batch.times < start
            ahead = batch.times > bound if bound is not None else np.zeros_like(early)
            for i in np.flatnonzero(early).tolist():
                dead.append(self._dead(recs[int(batch.index[i])], topic, Reason.LATE.value,
                                       f"time {int(batch.times[i])} is before the stream's "
                                       f"start ({start})"))
            for i in np.flatnonzero(ahead).tolist():
                dead.append(self._dead(recs[int(batch.index[i])], topic, Reason.FUTURE.value,
                                       f"time {int(batch.times[i])} is beyond the worker's "
                                       f"clock plus the allowed skew ({bound})"))
            batch = batch.select(~(early | ahead))
        uidx = self.registry.lookup(batch.users.tolist())
        levels = np.full(uidx.shape, -1, dtype=np.int64)
        known = uidx >= 0
        levels[known] = self.registry.level_of_index[uidx[known]]
        registered = levels >= 0
        for i in np.flatnonzero(~registered).tolist():
            rec = recs[int(batch.index[i])]
            try:  # a registered user's reports sit on its partition: only the others can't
                check_placement(rec[0], rec[2], self.config.partitions)
            except RecordError as exc:
                dead.append(self._dead(rec, topic, exc.reason.value, exc.detail))
                continue
            dead.append(self._dead(rec, topic, Reason.UNREGISTERED_USER.value,
                                   f"user {batch.users[i]!r} has no accepted requirement"))
        idx = np.flatnonzero(registered)
        assignment = self.slotter.assign(batch.users[idx], batch.times[idx])
        status = assignment.status.copy()
        ok = np.flatnonzero(status == OK)
        sources = batch.sources[idx] if batch.sources is not None else None
        sourced = np.zeros(ok.shape, dtype=bool) if sources is None else sources[ok] >= 0
        if ok.size:
            plain = ok[~sourced]
            if plain.size:
                self._dedupe(assignment.slots[plain], uidx[idx[plain]], status, plain)
        if sourced.any():
            assert sources is not None
            self._order(ok[sourced], assignment.slots, uidx[idx], batch.times[idx],
                        sources, batch.cells[idx], levels[idx],
                        np.fromiter((recs[int(i)][3] for i in batch.index[idx]), dtype=np.int64,
                                    count=idx.shape[0]), status)
        superseded = status == SUPERSEDED
        self.superseded += int(superseded.sum())
        for i in np.flatnonzero((status != OK) & ~superseded).tolist():
            slot = int(assignment.slots[i])
            dead.append(self._dead(recs[int(batch.index[idx[i]])], topic,
                                   STATUS_REASON[int(status[i])],
                                   f"slot {slot}; watermark {assignment.watermark}"))
        ok = np.flatnonzero(status == OK)
        if ok.size:
            sel = idx[ok]
            slots = assignment.slots[ok]
            self.placement.count(slots, uidx[sel], levels[sel], batch.cells[sel])
            counted, per_slot = np.unique(slots, return_counts=True)
            self.accepted.update(dict(zip(counted.tolist(), per_slot.tolist(), strict=True)))
            self.max_event = max(self.max_event, int(batch.times[sel].max()))
        self.rejected += len(dead)
        dead.sort(key=lambda x: x.offset)
        out.extend(dead)
        partials.extend(self._closed_messages())

    def _repeats(self, sources: np.ndarray) -> np.ndarray:
        """Which reports may repeat one taken before: the source stage writes a source
        partition's reports to this partition in source-offset order (one idempotent producer
        per worker, batches in order), so a report whose source offset is not beyond the largest
        taken from its source partition is a copy, sent again after the stage read its batch
        again (a crash, a rebalance). The caller uses it for reports of closed slots only: such
        a copy is counted as superseded, not dead-lettered as ``late`` (its first copy was
        taken while the slot was open); in an open slot the (event time, source position) rule
        already tells a copy apart."""
        repeat = np.zeros(sources.shape[0], dtype=bool)
        sourced = sources >= 0
        partitions = np.where(sourced, sources >> 40, -1)
        offsets = sources & ((1 << 40) - 1)
        for key in np.unique(partitions[sourced]).tolist():
            at = np.flatnonzero(partitions == key)
            mine = offsets[at]
            before = np.maximum.accumulate(np.concatenate(
                ([self.source_offsets.get(key, -1)], mine)))[:-1]
            repeat[at] = mine <= before
            self.source_offsets[key] = max(self.source_offsets.get(key, -1), int(mine.max()))
        return repeat

    def _dedupe(self, slots: np.ndarray, users: np.ndarray, status: np.ndarray,
                where: np.ndarray) -> None:
        """First report of a (user, slot) wins: earlier batches, then earlier in this one."""
        size = len(self.registry.users)
        for slot in np.unique(slots).tolist():
            mask = slots == slot
            pos = where[mask]
            u = users[mask]
            seen = self.seen.get(slot)
            if seen is None or seen.shape[0] < size:
                grown = np.zeros(max(size, 1), dtype=bool)
                if seen is not None:
                    grown[: seen.shape[0]] = seen
                seen = self.seen[slot] = grown
            _, first = np.unique(u, return_index=True)
            repeat = np.ones(u.shape[0], dtype=bool)
            repeat[first] = False
            repeat |= seen[u]
            status[pos[repeat]] = DUPLICATE
            seen[u] = True

    def _order(self, where: np.ndarray, slots: np.ndarray, users: np.ndarray,
               times: np.ndarray, sources: np.ndarray, cells: np.ndarray, levels: np.ndarray,
               offsets: np.ndarray, status: np.ndarray) -> None:
        """Reports with a source position (``where``, into the registered reports): per (user,
        slot) the smallest (event time, source position) counts
        (:mod:`streams.job.partitions.ordering`); a counted report it replaces is taken back from
        its placement. Those that lose to a sourced report are counted (``superseded``), not
        dead-lettered: telemetry sends many events per device and slot."""
        size = max(len(self.registry.users), 1)
        for slot in np.unique(slots[where]).tolist():
            pos = where[slots[where] == slot]
            seen = self.seen.get(slot)
            if seen is None or seen.shape[0] < size:
                grown = np.zeros(size, dtype=bool)
                if seen is not None:
                    grown[: seen.shape[0]] = seen
                seen = self.seen[slot] = grown
            order = self.order.setdefault(slot, SlotOrder(size))
            accept, replaced = order.decide(seen, users[pos], times[pos], sources[pos],
                                            cells[pos], levels[pos], offsets[pos])
            # losing to a sourced report: superseded; to a plain one: a duplicate
            behind_sourced = order.sources[users[pos]] >= 0
            status[pos[~accept & behind_sourced]] = SUPERSEDED
            status[pos[~accept & ~behind_sourced]] = DUPLICATE
            if replaced.users.size:
                self._replace(slot, replaced)

    def _replace(self, slot: int, replaced: Replaced) -> None:
        """Take back counted reports that a report with a smaller source position replaced
        (counted as superseded)."""
        n = int(replaced.users.size)
        self.placement.uncount(np.full(n, slot, dtype=np.int64), replaced.users,
                               replaced.levels, replaced.cells)
        self.accepted[slot] -= n
        self.superseded += n

    def advance_messages(self, watermark: int) -> list[dict]:
        """Move the watermark forward (the worker's, or at idle time); returns the messages
        due when that closes slots."""
        if self.slotter.watermark is not None and watermark <= self.slotter.watermark:
            return []
        self.slotter.restore(watermark, {}, self.slotter.first_slot)
        return self._closed_messages()

    def _closed_messages(self) -> list[dict]:
        """The messages due after the watermark moved: a closure when slots closed, and what
        the placement has to say besides."""
        return self._close() + self.placement.due()

    def idle_watermark(self) -> int | None:
        """The watermark that closes every slot up to the one of the largest event time seen."""
        if self.max_event < 0:
            return None
        clock = self.config.clock
        return clock.end(int(clock.slot_of(self.max_event)))

    def _newly_closed(self) -> int | None:
        """The last slot the watermark closes, when that is beyond what was closed before and
        the partition's stream has begun; ``None`` otherwise."""
        wm = self.slotter.watermark
        if wm is None:
            return None
        last = self.config.clock.last_closed(wm)
        if self.closed_through is not None and last <= self.closed_through:
            return None
        first = self.slotter.first_slot
        if first is not None and last < first:
            return None  # nothing of this partition's stream has closed yet
        return last

    def _close(self) -> list[dict]:
        last = self._newly_closed()
        if last is None:
            return []
        # the moment the watermark passed the end of slot ``last``: the start of
        # pwevent_slot_release_seconds (only that metric reads the clock here)
        message = self.placement.closure(last, self.clock_ms())
        for s in [s for s in self.seen if s <= last]:
            del self.seen[s]
        for s in [s for s in self.order if s <= last]:
            del self.order[s]
        self.closed_through = last
        self.rejected = 0
        return [message]

    # -- the conversation with the coordinator (a placement's) -----------------------------

    def on_control(self, doc: Control) -> list[dict]:
        """Act on one control message of the coordinator (a start or a decision)."""
        return self.placement.on_control(doc)

    def resend(self) -> list[dict]:
        """The messages to send again after a restart (the coordinator drops repeats)."""
        return self.placement.resend()

    def resume(self, start: Control | None, decisions: dict[int, bool]) -> list[dict]:
        """What this partition must send when it resumes: its last messages again and what
        the control messages read so far imply (``decisions``: published per slot)."""
        return self.placement.resume(start, decisions)

    def _dead(self, rec: RawRecord, topic: str, reason: str, detail: str) -> DeadLetter:
        return DeadLetter(topic, rec[2], rec[3], rec[0], rec[1], reason, detail)

    # -- checkpoints -----------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state, compressed; :meth:`restore` takes it back."""
        doc = self._state()
        doc.update(self.placement.state())
        return self.placement.pack(zlib.compress(orjson.dumps(doc), 3))

    def _state(self) -> dict:
        """The state as a JSON-able document."""
        self.start_unsaved = False
        return {
            "next_offset": self.next_offset,
            "closed_through": self.closed_through,
            "rejected": self.rejected,
            "max_event": self.max_event,
            "watermark": self.slotter.watermark,
            "stream_start": self.stream_start,
            "first_slot": self.slotter.first_slot,
            "seen": {str(s): [int(m.shape[0]), base64.b64encode(np.packbits(m)).decode()]
                     for s, m in self.seen.items()},
            "accepted": {str(s): n for s, n in self.accepted.items()},
            "order": {str(s): o.state() for s, o in self.order.items()},
            **({"sources": self.sources.state()} if self.sources is not None else {}),
            "source_offsets": [[k, v] for k, v in sorted(self.source_offsets.items())],
        }

    def restore(self, data: bytes) -> None:
        """Reinstate a :meth:`snapshot`."""
        doc = orjson.loads(zlib.decompress(self.placement.unpack(data)))
        self._load(doc)
        self.placement.load(doc)

    def _load(self, doc: dict) -> None:
        """Reinstate a :meth:`_state` document."""
        self.next_offset = int(doc["next_offset"])
        self.closed_through = doc["closed_through"]
        self.rejected = int(doc["rejected"])
        self.max_event = int(doc["max_event"])
        self.stream_start = doc.get("stream_start")
        self.slotter.restore(doc["watermark"], {}, doc["first_slot"])
        self.seen = {
            int(s): np.unpackbits(np.frombuffer(base64.b64decode(bits), dtype=np.uint8),
                                  count=n).astype(bool)
            for s, (n, bits) in doc["seen"].items()
        }
        self.accepted = Counter({int(s): int(n) for s, n in doc["accepted"].items()})
        self.order = {int(s): SlotOrder.from_state(o) for s, o in doc.get("order", {}).items()}
        if self.sources is not None:
            self.sources.load(doc.get("sources"))
        self.source_offsets = {int(k): int(v) for k, v in doc.get("source_offsets", [])}
