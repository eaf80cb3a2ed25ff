"""One partition's side of the job: registered users, slotting, and per-slot partial counts.

A :class:`PartitionAccumulator` turns batches of raw report records into dead letters (with
their reasons) and, whenever slots close, one partial message: per closed slot the counts per
(requirement level, cell), plus the partition's registered users per level. Its state is a
function of the records it was given, in offset order, so replaying from a checkpoint
reproduces the same partials byte for byte. All per-report work is vectorised, except the
one-report-per-(user, slot) check, which is a set look-up per report.
"""

from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from mechanisms.engine import level_key
from streams.config import JobConfig
from streams.records import (
    FixedRequirement,
    Reason,
    RecordError,
    RequirementRemoval,
    parse_reports,
    parse_requirement,
)
from streams.slotting import OK, STATUS_REASON, Slotter

RawRecord = tuple[bytes | None, bytes | None, int, int]  # key, value, partition, offset
WATERMARK_PREFIX = b'{"watermark":'


def watermark_record(ms: int) -> bytes:
    """The value of a control record that moves a partition's watermark to ``ms``."""
    return WATERMARK_PREFIX + str(int(ms)).encode() + b"}"


def watermark_of(rec: RawRecord) -> int | None:
    """The watermark a control record carries, or ``None`` for an ordinary record."""
    key, value = rec[0], rec[1]
    if key is not None or value is None or not value.startswith(WATERMARK_PREFIX):
        return None
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    mark = doc.get("watermark") if isinstance(doc, dict) else None
    return mark if type(mark) is int and len(doc) == 1 else None


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


class Registry:
    """Registered users of one partition and their requirement levels.

    Fixed requirements cannot change: a user re-declaring a different requirement (even after a
    removal) is rejected, since a fresh ledger could overspend the user's earlier windows.
    """

    def __init__(self) -> None:
        self.level_of: dict[str, str] = {}
        self.retired: dict[str, str] = {}
        self.sizes: Counter[str] = Counter()

    def apply(self, key: bytes | None, value: bytes | None) -> tuple[str | None, str, str]:
        """Apply one requirements record: (user, "", "") if accepted, else (user, reason, detail).

        A removal (tombstone) is accepted with the user unregistered; ``user`` is ``None`` when
        the record names no readable user.
        """
        try:
            req = parse_requirement(value, key)
        except RecordError as exc:
            return None, exc.reason.value, exc.detail
        if key is not None and key != req.user.encode():
            return req.user, Reason.BAD_TYPE.value, "record key differs from user"
        if isinstance(req, RequirementRemoval):
            old = self.level_of.pop(req.user, None)
            if old is not None:
                self.sizes[old] -= 1
                self.retired[req.user] = old
            return req.user, "", ""
        if not isinstance(req, FixedRequirement):
            return (req.user, Reason.INVALID_REQUIREMENT.value,
                    "this job runs a fixed-requirement mechanism; declare {user, w, E}")
        new = level_key(req.w, req.E)
        old = self.level_of.get(req.user) or self.retired.get(req.user)
        if old is not None and old != new:
            return (req.user, Reason.INVALID_REQUIREMENT.value,
                    f"user {req.user!r} already declared (w, E) = {old}; fixed requirements "
                    "cannot change")
        if req.user not in self.level_of:
            self.level_of[req.user] = new
            self.sizes[new] += 1
            self.retired.pop(req.user, None)
        return req.user, "", ""

    def users_per_level(self) -> dict[str, int]:
        """Registered users per level key (levels with nobody left out)."""
        return {k: n for k, n in sorted(self.sizes.items()) if n > 0}


class PartitionAccumulator:
    """Slotting and partial counts of one partition of the reports topic."""

    def __init__(self, partition: int, config: JobConfig, registry: Registry) -> None:
        self.partition, self.config, self.registry = partition, config, registry
        self.domain = config.make_domain()
        self.d = config.d
        self.slotter = Slotter(config.clock, config.lateness_ms, config.horizon_ms)
        self.counts: dict[int, dict[str, np.ndarray]] = {}
        self.accepted: Counter[int] = Counter()
        self.rejected = 0
        self.closed_through: int | None = None
        self.next_offset = 0
        self.max_event = -1

    # -- processing ------------------------------------------------------------------------

    def process(self, records: Sequence[RawRecord], topic: str = "reports") -> tuple[
        list[dict], list[DeadLetter]
    ]:
        """Take a batch of this partition's records in offset order.

        Returns the partial messages of the slots that closed, and the dead letters. A record
        with no key whose value is ``{"watermark": ms}`` is a control record: it moves the
        partition's watermark (the job sends them to idle partitions and at idle time).
        """
        fresh = [r for r in records if r[3] >= self.next_offset]
        if not fresh:
            return [], []
        self.next_offset = fresh[-1][3] + 1
        partials: list[dict] = []
        dead: list[DeadLetter] = []
        segment: list[RawRecord] = []
        for rec in fresh:
            mark = watermark_of(rec)
            if mark is None:
                segment.append(rec)
                continue
            self._take(segment, topic, partials, dead)
            segment = []
            msg = self.advance(mark)
            if msg is not None:
                partials.append(msg)
        self._take(segment, topic, partials, dead)
        return partials, dead

    def _take(
        self, recs: list[RawRecord], topic: str, partials: list[dict], out: list[DeadLetter]
    ) -> None:
        if not recs:
            return
        keys = [r[0] for r in recs]
        batch = parse_reports([r[1] for r in recs], self.domain, keys)
        dead = [self._dead(recs[r.index], topic, r.reason.value, r.detail)
                for r in batch.rejected]
        level_of = self.registry.level_of
        levels = [level_of.get(u) for u in batch.users.tolist()]
        registered = np.fromiter((lv is not None for lv in levels), dtype=bool,
                                 count=len(levels))
        for i in np.flatnonzero(~registered).tolist():
            dead.append(self._dead(recs[int(batch.index[i])], topic,
                                   Reason.UNREGISTERED_USER.value,
                                   f"user {batch.users[i]!r} has no accepted requirement"))
        idx = np.flatnonzero(registered)
        users, times, cells = batch.users[idx], batch.times[idx], batch.cells[idx]
        kept_levels = [levels[i] for i in idx.tolist()]
        assignment = self.slotter.assign(users, times)
        for i in np.flatnonzero(assignment.status != OK).tolist():
            status = int(assignment.status[i])
            slot = int(assignment.slots[i])
            dead.append(self._dead(recs[int(batch.index[idx[i]])], topic, STATUS_REASON[status],
                                   f"slot {slot}; watermark {assignment.watermark}"))
        ok = np.flatnonzero(assignment.status == OK)
        if ok.size:
            self._count(assignment.slots[ok], [kept_levels[i] for i in ok.tolist()], cells[ok])
            self.max_event = max(self.max_event, int(times[ok].max()))
        self.rejected += len(dead)
        dead.sort(key=lambda x: x.offset)
        out.extend(dead)
        msg = self._close()
        if msg is not None:
            partials.append(msg)

    def _count(self, slots: np.ndarray, levels: list[str], cells: np.ndarray) -> None:
        names = sorted(set(levels))
        index = {k: i for i, k in enumerate(names)}
        lv = np.fromiter((index[k] for k in levels), dtype=np.int64, count=len(levels))
        for slot in np.unique(slots).tolist():
            mask = slots == slot
            flat = np.bincount(lv[mask] * self.d + cells[mask], minlength=len(names) * self.d)
            per = flat.reshape(len(names), self.d)
            bucket = self.counts.setdefault(slot, {})
            for k, name in enumerate(names):
                if per[k].any():
                    bucket[name] = bucket.get(name, np.zeros(self.d, dtype=np.int64)) + per[k]
            self.accepted[slot] += int(mask.sum())

    def advance(self, watermark: int) -> dict | None:
        """Move the watermark forward (the worker's, or at idle time); may close slots."""
        if self.slotter.watermark is not None and watermark <= self.slotter.watermark:
            return None
        last = self.config.clock.last_closed(watermark)
        seen = {s: self.slotter.seen(s) for s in self.slotter.open_slots() if s > last}
        self.slotter.restore(watermark, seen, self.slotter.first_slot)
        return self._close()

    def idle_watermark(self) -> int | None:
        """The watermark that closes every slot up to the one of the largest event time seen."""
        if self.max_event < 0:
            return None
        clock = self.config.clock
        return clock.end(int(clock.slot_of(self.max_event)))

    def _close(self) -> dict | None:
        wm = self.slotter.watermark
        if wm is None:
            return None
        last = self.config.clock.last_closed(wm)
        if self.closed_through is not None and last <= self.closed_through:
            return None
        slots = sorted(s for s in self.counts if s <= last)
        message = {
            "partition": self.partition,
            "closed_through": last,
            "slots": {
                str(s): {
                    "counts": {k: v.tolist() for k, v in sorted(self.counts[s].items())},
                    "accepted": self.accepted[s],
                }
                for s in slots
            },
            "users": self.registry.users_per_level(),
            "rejected": self.rejected,
        }
        for s in slots:
            del self.counts[s]
            del self.accepted[s]
        self.closed_through = last
        self.rejected = 0
        return message

    def _dead(self, rec: RawRecord, topic: str, reason: str, detail: str) -> DeadLetter:
        return DeadLetter(topic, rec[2], rec[3], rec[0], rec[1], reason, detail)

    # -- checkpoints -----------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state, compressed; :meth:`restore` takes it back."""
        doc = {
            "next_offset": self.next_offset,
            "closed_through": self.closed_through,
            "rejected": self.rejected,
            "max_event": self.max_event,
            "watermark": self.slotter.watermark,
            "first_slot": self.slotter.first_slot,
            "seen": {str(s): sorted(self.slotter.seen(s)) for s in self.slotter.open_slots()},
            "counts": {str(s): {k: v.tolist() for k, v in c.items()}
                       for s, c in self.counts.items()},
            "accepted": {str(s): n for s, n in self.accepted.items()},
        }
        return zlib.compress(orjson.dumps(doc), 3)

    def restore(self, data: bytes) -> None:
        """Reinstate a :meth:`snapshot`."""
        doc = orjson.loads(zlib.decompress(data))
        self.next_offset = int(doc["next_offset"])
        self.closed_through = doc["closed_through"]
        self.rejected = int(doc["rejected"])
        self.max_event = int(doc["max_event"])
        self.slotter.restore(doc["watermark"], {int(s): u for s, u in doc["seen"].items()},
                             doc["first_slot"])
        self.counts = {int(s): {k: np.asarray(v, dtype=np.int64) for k, v in c.items()}
                       for s, c in doc["counts"].items()}
        self.accepted = Counter({int(s): int(n) for s, n in doc["accepted"].items()})
