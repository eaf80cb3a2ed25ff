"""Event time on the collector's topic: which slots a partition has passed, when a slot closes,
and the release records (docs/ldp-reports.md, "The collector on Kafka").

Time moves only by the signed watermark records (:mod:`streams.job.partitions.watermarks`)
written into each partition of ``<prefix>.ldp-reports``: by the live collector when a slot's
end, plus the lateness, has passed on its clock, by ``pwevent replay`` after the last slot.
A report's own timestamp moves nothing. So:

- a report behind its partition's watermark for its slot is ``late``, whatever the other
  partitions hold;
- a slot closes once every partition's watermark has passed its end (the smallest of them).

Both follow from each partition's records in offset order alone, never from the order in which
a consumer interleaves the partitions: a replay of the topic, after a crash or by another
instance, keeps and refuses the same reports and releases the same bytes.

A two-round stream (lbd, lba) also writes a decision record per slot, and a report answering a
round that is not decided yet, on a partition that has passed the slot that decides it, waits
there: its partition is read on once the decision is taken (:meth:`PartitionedCollector.advance`),
so what is kept still follows from each partition's order alone.

    stream = PartitionedCollector(collector, partitions=4, secret=b"...", stream="s")
    refused = stream.take(partition, [(key, value, offset), ...])  # [(offset, reason, ...)]
    out = stream.advance()  # the release and decision records of the slots that closed
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import orjson

from mechanisms.local.rounds import Decision, encode_decision
from streams.job.partitions.key_hashing import key_partitions
from streams.job.partitions.watermarks import WATERMARK_PREFIX, watermark_of
from streams.ldp_collector.collector import MAX_BATCH, LdpCollector
from streams.records.field_parsing import RecordError

#: The version of the release records' layout (:func:`release_record`).
RELEASE_SCHEMA = "pwevent-ldp-release/2"
#: A partition without a watermark yet has passed no slot.
NO_MARK = -(1 << 62)


class Refused(NamedTuple):
    """A record the collector did not count: its offset, why and a detail for people."""

    offset: int
    reason: str
    detail: str


class Waited(NamedTuple):
    """A record refused once it had waited for a decision: its partition, the refusal, its key
    and value."""

    partition: int
    refused: Refused
    key: bytes | None
    value: bytes | None


class Advanced(NamedTuple):
    """What :meth:`PartitionedCollector.advance` closed: release records and decision records
    (key, value) in slot order, and the refusals among the records that had waited."""

    releases: list[tuple[bytes, bytes]]
    decisions: list[tuple[bytes, bytes]]
    refused: list[Waited]


class PartitionedCollector:
    """An :class:`LdpCollector` fed the partitions of its topic one batch at a time, with the
    rule of this module: per-partition watermarks, slots closed at the smallest."""

    def __init__(self, collector: LdpCollector, partitions: int, secret: bytes,
                 stream: str) -> None:
        """Collect the ``partitions`` of one topic into ``collector``; watermark records must
        carry ``secret``'s signature for ``stream``."""
        if partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {partitions}")
        self.collector = collector
        self.partitions, self.secret, self.stream = partitions, secret, stream
        #: per partition, the largest watermark its records carried (NO_MARK: none)
        self.marks = np.full(partitions, NO_MARK, dtype=np.int64)
        #: per partition, the records waiting for a decision (keys, values, offsets)
        self.waiting: list[tuple[list, list, list]] = [([], [], []) for _ in range(partitions)]

    def passed(self, partition: int) -> int:
        """The first slot ``partition`` has not passed."""
        mark = int(self.marks[partition])
        return self.collector.clock.last_closed(mark) + 1 if mark != NO_MARK else -1

    def holding(self) -> tuple[int, int]:
        """The partition holding the stream back (the smallest watermark) and that watermark
        (NO_MARK when it has none)."""
        p = int(np.argmin(self.marks))
        return p, int(self.marks[p])

    def take(self, partition: int,
             records: Sequence[tuple[bytes | None, bytes | None, int]]) -> list[Refused]:
        """Read ``records`` of ``partition`` ((key, value, offset), in offset order, following
        the ones taken before): the refused ones, in order. Watermark records move the
        partition's watermark; one whose signature does not verify is refused
        (``unauthenticated_control``), as is a report on another partition than its key's
        (``wrong_partition``: one user's reports must meet in one partition, in order)."""
        return self.take_columns(partition, [r[0] for r in records], [r[1] for r in records],
                                 [r[2] for r in records])

    def take_columns(self, partition: int, keys: Sequence[bytes | None],
                     values: Sequence[bytes | None], offsets: Sequence[int]) -> list[Refused]:
        """:meth:`take` of records given as columns: their keys, values and offsets."""
        if not 0 <= partition < self.partitions:
            raise ValueError(f"partition {partition} is not in [0, {self.partitions})")
        queue = self.waiting[partition]
        if queue[0]:  # the partition waits for a decision: these records wait behind
            for column, more in zip(queue, (keys, values, offsets), strict=True):
                column.extend(more)
            return []
        refused: list[Refused] = []
        for start in range(0, len(keys), MAX_BATCH):
            end = start + MAX_BATCH
            got, held = self._take_chunk(partition, keys[start:end], values[start:end],
                                         offsets[start:end])
            refused += got
            if held is not None:
                rest = start + held
                for column, more in zip(queue, (keys, values, offsets), strict=True):
                    column.extend(more[rest:])
                break
        return refused

    def _take_chunk(self, partition: int, keys: Sequence[bytes | None],
                    values: Sequence[bytes | None], offsets: Sequence[int]
                    ) -> tuple[list[Refused], int | None]:
        """Read one chunk: its refusals, and where it stopped to wait (None: read whole)."""
        refused: list[Refused] = []
        n = len(keys)
        controls = [i for i in [i for i, k in enumerate(keys) if k is None]
                    if isinstance(values[i], bytes) and values[i].startswith(WATERMARK_PREFIX)]
        passed = np.full(n, self.passed(partition), dtype=np.int64)
        is_report = np.ones(n, dtype=bool)
        before, moved = int(self.marks[partition]), []
        for i in controls:
            try:
                mark = watermark_of((None, values[i], partition), self.secret, self.stream)
            except RecordError as exc:
                is_report[i] = False
                refused.append(Refused(offsets[i], "unauthenticated_control", exc.detail))
                continue
            if mark is None:
                continue  # not a control record after all: a report, refused as malformed
            is_report[i] = False
            if mark > self.marks[partition]:
                self.marks[partition] = mark
                moved.append((i, mark))
                passed[i + 1:] = self.passed(partition)
        if all(type(k) is bytes for k in keys):
            keyed = np.flatnonzero(is_report)
        else:
            keyed = np.flatnonzero(is_report & np.fromiter(
                (type(k) is bytes for k in keys), dtype=bool, count=n))
        if keyed.size:
            home = key_partitions(keys if keyed.size == n else [keys[i] for i in keyed.tolist()],
                                  self.partitions)
            for i in keyed[home != partition].tolist():
                is_report[i] = False
                refused.append(Refused(offsets[i], "wrong_partition",
                                       f"the key's partition is not {partition}"))
        if is_report.all():
            rows: list[int] | range = range(n)
            batch_keys, batch_values = list(keys), list(values)
        else:
            rows = np.flatnonzero(is_report).tolist()
            batch_keys, batch_values = [keys[i] for i in rows], [values[i] for i in rows]
        got, held = self.collector.read_until_held(batch_keys, batch_values,
                                                   passed[np.asarray(rows, dtype=int)])
        for i, reason in got:
            refused.append(Refused(offsets[rows[i]], reason, REASON_DETAILS[reason]))
        stop = None
        if held is not None:  # the records from there on wait, watermarks among them
            stop = rows[held]
            refused = [r for r in refused if r.offset < offsets[stop]]
            self.marks[partition] = max([before] + [m for i, m in moved if i < stop])
        refused.sort()
        return refused, stop

    def advance(self) -> Advanced:
        """Close every round and slot whose end every partition's watermark has passed, read
        on the partitions that waited for the decisions taken, and again while anything
        moves: the release and decision records in slot order, and the refusals among the
        records that had waited."""
        collector = self.collector
        origin, length = collector.clock.origin, collector.clock.length
        releases, decisions, refused = [], [], []
        while True:
            low = int(self.marks.min())
            closed = [] if low == NO_MARK else collector.close_until(low)
            for out in closed:
                if "decision" in out:
                    decisions.append(decision_record(self.stream, collector.stream.protocol,
                                                     out))
                else:
                    releases.append(release_record(self.stream, origin, length, out))
            moved = False
            for p, (keys, values, offsets) in enumerate(self.waiting):
                if keys and closed:
                    self.waiting[p] = ([], [], [])
                    at = {offset: i for i, offset in enumerate(offsets)}
                    refused += [Waited(p, r, keys[at[r.offset]], values[at[r.offset]])
                                for r in self.take_columns(p, keys, values, offsets)]
                    moved |= len(self.waiting[p][0]) < len(keys)
            if not closed and not moved:
                return Advanced(releases, decisions, refused)

    def first_waiting(self, partition: int) -> int | None:
        """The offset of ``partition``'s first record waiting for a decision (None: none)."""
        offsets = self.waiting[partition][2]
        return offsets[0] if offsets else None

    def ready(self) -> list[tuple[bytes, bytes]]:
        """:meth:`advance`'s release records, for a one-round stream (which never waits and
        takes no decisions)."""
        if self.collector.rounds:
            raise ValueError("a two-round stream writes decisions too: use advance()")
        return self.advance().releases


#: What each refusal of the collector means, for a dead letter's detail.
REASON_DETAILS = {
    "malformed": "not a report in the format of docs/ldp-reports.md",
    "wrong_key": "the key is not the report's user id",
    "wrong_protocol": "another protocol than the stream's",
    "wrong_domain": "another number of cells than the stream's",
    "wrong_requirement": "another E or w than the stream's",
    "wrong_oracle": "another oracle than the protocol uses",
    "schedule": "a slot the protocol does not have this user report at",
    "late": "its slot was passed on its partition",
    "duplicate_in_slot": "the user has a report kept for this slot",
    "not_after_last": "before the user's last kept report",
    "over_budget": "the user's window would spend over its budget",
    "unasked_round": "a round its stream's decisions did not ask, or at another budget",
}


def release_record(stream: str, origin_ms: int, slot_ms: int,
                   release: dict) -> tuple[bytes, bytes]:
    """The record of one slot's release on ``<prefix>.ldp-releases``: key ``<stream>/<slot>``,
    value ``{"schema", "stream", "slot", "start", "end", "protocol", "reporters", "counts",
    "std", "no_value", "no_value_std"}`` (the collector's release with the slot's span in epoch
    ms)."""
    slot = int(release["slot"])
    start = origin_ms + slot * slot_ms
    doc = {"schema": RELEASE_SCHEMA, "stream": stream, "slot": slot, "start": start,
           "end": start + slot_ms, **{k: v for k, v in release.items() if k != "slot"}}
    return f"{stream}/{slot}".encode(), orjson.dumps(doc)


def decision_record(stream: str, protocol: str, outcome: dict) -> tuple[bytes, bytes]:
    """The record of one slot's decision on ``<prefix>.ldp-decisions``: key ``<stream>/<slot>``,
    value :func:`~mechanisms.local.rounds.encode_decision`'s bytes."""
    slot = int(outcome["decision"])
    decision = Decision(stream, protocol, slot, outcome["eps"], outcome["next"],
                        outcome.get("from", 0), outcome.get("size", 0),
                        tuple(outcome.get("starts", ())))
    return f"{stream}/{slot}".encode(), encode_decision(decision)
