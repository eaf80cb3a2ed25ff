"""The partitions of a Faust worker: step 1 of the path of one report (docs/design.md).

:class:`PartitionRunner` takes the batches of ``requirements`` and ``reports`` that the batched
ingest (:mod:`streams.job.worker.ingest`) hands it, gives each to its partition's
:class:`~streams.job.partitions.registries.UserRegistry` or
:class:`~streams.job.partitions.accumulator.PartitionAccumulator`, and sends what the accumulator
returns: its messages to ``slot-partials`` (declarations to ``decisions``), its dead letters to
``dead-letters``; it checkpoints the accumulator into the ``checkpoints`` table and acknowledges
only the records the checkpoint covers. Under the partitions' ledgers it reads the whole
``decisions`` topic and hands each record to its partitions. It holds no logic of its own about
slots or budgets.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import MutableMapping
from typing import Any

import faust
import numpy as np
import orjson

from streams.job.batch_handling import ContinuityGuard, RawRecord, Rewind
from streams.job.config import JobConfig
from streams.job.operations.worker_metrics import WorkerMetrics, accepted_since
from streams.job.partitions.accumulator import DeadLetter, PartitionAccumulator, watermark_record
from streams.job.partitions.checkpoint_store import read_chunked, write_chunked
from streams.job.partitions.registries import UserRegistry
from streams.job.partitions.registry_store import (
    append_segment,
    key_partition_of,
    read_blocks,
    wants_snapshot,
    write_snapshot,
)
from streams.job.roles import make_accumulator, make_registry
from streams.job.slot_protocol import Control, control, declaration_key, encode, kind, partials_key
from streams.job.worker.dead_letters import DeadLetterSender
from streams.job.worker.ingest import partition_context
from streams.kafka.producer import key_partition
from streams.kafka.settings import client_options
from streams.kafka.topics import Topics

log = logging.getLogger("pwevent.job")

#: Seconds a partition of ``reports`` may stand still while the consumer stands past the records
#: its state has taken, before it is read again from there (:meth:`PartitionRunner.check_reads`).
READ_STALL_S = 10.0


class PartitionRunner:
    """The partitions of ``reports`` (and of ``requirements``, assigned alike) this worker holds:
    their registries and accumulators, restored from the ``users`` and ``checkpoints`` tables
    when first used, and forgotten when another worker takes them over."""

    def __init__(self, app: faust.App, config: JobConfig, broker: str, topics: Topics,
                 users: MutableMapping[bytes, bytes], checkpoints: MutableMapping[bytes, bytes],
                 counters: Counter[str], metrics: WorkerMetrics) -> None:
        self.app, self.config, self.broker, self.topics = app, config, broker, topics
        self.secret = config.secret_bytes()
        self.users, self.checkpoints = users, checkpoints
        self.counters, self.metrics = counters, metrics
        self.dead_letters = DeadLetterSender(app, topics.dead_letters, counters, metrics)
        self.registries: dict[int, UserRegistry] = {}
        self.stored: set[int] = set()  # partitions whose registry the table holds in bulk
        self.accumulators: dict[int, PartitionAccumulator] = {}
        self.acked: dict[int, int] = {}
        self.continuity = ContinuityGuard(topics.reports)
        # the decisions topic as read so far (partitions keeping ledgers), a lock per partition
        self.start_record: Control | None = None
        self.decision_log: dict[int, bool] = {}
        self.locks: dict[int, asyncio.Lock] = {}
        self.resumed: set[int] = set()
        self.revocations = 0  # partitions forgotten so far (a resume in progress stops at one)
        self.last_report = time.monotonic()
        self.last_tick: dict[int, int] = {}
        self.last_activity: dict[int, float] = {}
        self.stalled_reads: dict[int, tuple[int, float]] = {}

    def forget(self, p: int) -> None:
        """Forget partition ``p``, which another worker takes over: if it comes back, it resumes
        from its checkpoint and the ``users`` table, which the other worker kept."""
        self.accumulators.pop(p, None)
        self.registries.pop(p, None)
        self.stored.discard(p)
        self.resumed.discard(p)
        self.revocations += 1

    def registry(self, p: int) -> UserRegistry:
        """Partition ``p``'s registered users, rebuilt from the ``users`` table when first used:
        from its bulk form (:mod:`streams.job.partitions.registry_store`), or, for a partition
        stored before that form, from its users' entries (written as a snapshot at its next
        registration)."""
        reg = self.registries.get(p)
        if reg is None:
            reg = self.registries[p] = make_registry(self.config, p)
            blocks = read_blocks(self.users, p)
            if blocks is not None:
                reg.load_blocks(blocks)
                self.stored.add(p)
            else:
                n = self.config.partitions
                reg.load([(key.decode(), value) for key, value in list(self.users.items())
                          if key_partition_of(key) is None and key_partition(key, n) == p
                          and value])
        return reg

    def store_registry(self, p: int, reg: UserRegistry, touched: np.ndarray) -> None:
        """Write what a batch changed of partition ``p``'s registry to the ``users`` table (in a
        handler of the partition): a segment of the users ``touched``, or the whole registry
        when it has no snapshot yet or its segments outgrew it."""
        if p not in self.stored:
            write_snapshot(self.users, p, reg.dump())
            self.stored.add(p)
            return
        manifest = append_segment(self.users, p, reg.dump(touched))
        if wants_snapshot(manifest):
            write_snapshot(self.users, p, reg.dump())

    def write_checkpoint(self, p: int, data: bytes) -> None:
        """Store partition ``p``'s snapshot in the ``checkpoints`` table (inside a handler of
        the partition, or a :func:`partition_context`)."""
        write_chunked(self.checkpoints, p, data)

    def read_checkpoint(self, p: int) -> bytes | None:
        """Partition ``p``'s last snapshot, or ``None``."""
        return read_chunked(self.checkpoints, p)

    def accumulator(self, p: int) -> PartitionAccumulator:
        """Partition ``p``'s accumulator, restored from its checkpoint when there is one."""
        acc = self.accumulators.get(p)
        if acc is None:
            acc = self.accumulators[p] = make_accumulator(p, self.config, self.registry(p))
            saved = self.read_checkpoint(p)
            if saved:
                acc.restore(saved)
                log.info("partition %d resumes at offset %d (closed through slot %s)",
                         p, acc.next_offset, acc.closed_through)
            self.acked[p] = acc.next_offset
        return acc

    async def on_requirements(self, records: list[RawRecord]) -> None:
        """Register users (a batch at a time); reject invalid requirements to dead letters."""
        p = records[0][2]
        reg = self.registry(p)
        outcome = reg.apply_batch([r[0] for r in records], [r[1] for r in records])
        dead = [DeadLetter(self.topics.requirements, records[i][2], records[i][3], records[i][0],
                           records[i][1], reason, detail)
                for i, (reason, detail) in sorted(outcome.rejected.items())]
        if outcome.touched.size or p not in self.stored:
            self.store_registry(p, reg, outcome.touched)
        self.counters["requirements"] += len(records) - len(dead)
        self.metrics.took_requirements(len(records) - len(dead))
        await self.dead_letters.send(dead)
        await self.app.producer.flush()

    async def on_reports(self, records: list[RawRecord]) -> int | Rewind:
        """Count a batch of reports; send partials of closed slots; checkpoint; hold the rest.
        A batch that does not continue where the partition's state left off is not counted: the
        partition is read again from there (:class:`~streams.job.batch_handling.ContinuityGuard`).
        """
        p = records[0][2]
        rewind = self.continuity.check(p, self.accumulator(p).next_offset, records)
        if rewind is not None:
            self.counters["rewinds"] += 1
            self.metrics.rewound()
            return rewind
        async with self._lock(p):
            acc, messages = self._resumed(p)
            before, superseded = acc.accepted.total(), acc.superseded
            more, dead = acc.process(records, self.topics.reports)
            self.metrics.took_reports(accepted_since(before, acc.accepted.total(), more),
                                      acc.superseded - superseded)
            messages += more
            futures = await self._took_reports(p, records, dead)
            await self._say(p, acc, messages, futures, checkpoint=acc.start_unsaved)
            return self.acked.get(p, 0)

    def _lock(self, p: int) -> asyncio.Lock:
        lock = self.locks.get(p)
        if lock is None:
            lock = self.locks[p] = asyncio.Lock()
        return lock

    def _resumed(self, p: int) -> tuple[PartitionAccumulator, list[dict]]:
        """Partition ``p``'s accumulator and, until it has resumed, what it must send: its last
        messages again and what the decisions read so far imply. It has resumed once
        :meth:`_say` has sent them; a resume interrupted before (cancelled by a rebalance) is
        done again, and sends them again (the coordinator drops repeats)."""
        acc = self.accumulator(p)
        if p in self.resumed:
            return acc, []
        return acc, acc.resume(self.start_record, self.decision_log)

    async def _say(self, p: int, acc: PartitionAccumulator, messages: list[dict],
                   pending: list[Any], checkpoint: bool) -> None:
        """Send ``messages`` to the coordinator and checkpoint the partition (when it said
        something, or ``checkpoint``), once ``pending`` sends are done. A placement that keeps
        its messages in the checkpoint has it written first (docs/design.md, record before
        emitting: a plan that was sent is never replaced by a different one); otherwise the
        messages go first, as re-reading the records the checkpoint lacks reproduces them.
        Once all is sent, ``p`` has resumed (:meth:`_resumed`), unless it was forgotten
        meanwhile."""
        first = acc.placement.checkpoint_first
        futures = list(pending)
        if not first:
            futures += await self._send_partials(p, messages)
        if futures:
            await asyncio.gather(*futures)
        if checkpoint or messages:
            with partition_context(self.app, self.topics.reports, p):
                self.write_checkpoint(p, acc.snapshot())
            await self.app.producer.flush()
            self.acked[p] = acc.next_offset
        if first:
            futures = await self._send_partials(p, messages)
            if futures:
                await asyncio.gather(*futures)
        if self.accumulators.get(p) is acc:
            self.resumed.add(p)

    async def on_control(self, record: object) -> None:
        """One record of the decisions topic: remember it, hand it to this worker's partitions."""
        doc = control(record, self.config.stream)
        if doc is None:
            return
        if "start" in doc:
            self.start_record = doc
        else:
            self.decision_log[int(doc["slot"])] = bool(doc["published"])
            self.counters["decisions"] += 1
        for p in sorted(self.accumulators):
            async with self._lock(p):
                if p not in self.accumulators:
                    continue  # revoked meanwhile
                acc, messages = self._resumed(p)
                messages += acc.on_control(doc)
                await self._say(p, acc, messages, [], checkpoint=False)

    async def resume_assigned(self) -> None:
        """Resume every assigned partition of ``reports`` that has not resumed since it was
        assigned: read its checkpoint, send its last messages again and what the decisions read
        so far imply. Called once the tables are recovered after a rebalance. A partition
        otherwise resumes at its first batch or decision; one that comes back with nothing left
        to read, while the coordinator waits for its next plan, gets neither, and every slot
        would wait for it for ever.

        The next rebalance may overtake it: it revokes the partitions (:meth:`forget`), then
        cancels this call once they are assigned again. It stops at the revocation, as the
        partitions it would go on to resume may no longer be this worker's; the call that
        follows the next recovery resumes them, and those it had not finished again."""
        revocations = self.revocations
        for tp in sorted(self.app.consumer.assignment()):
            if tp.topic != self.topics.reports:
                continue
            p = tp.partition
            async with self._lock(p):
                if self.revocations != revocations:
                    return
                if p in self.resumed:
                    continue
                acc, messages = self._resumed(p)
                await self._say(p, acc, messages, [], checkpoint=False)

    async def check_reads(self) -> None:
        """Read a partition of ``reports`` again from where its state stopped when the consumer
        stands past that offset and nothing arrived for :data:`READ_STALL_S` seconds.

        Records fetched but never handed over (a batch dropped while the partitions were paused
        or a rebalance stopped the flow, seen after a worker was killed and restarted) leave the
        consumer past them: the partition would read nothing more, and the slots it has not
        closed would never be released. Records read twice are not counted twice: the
        partition's state skips what it has taken."""
        consumer = self.app.consumer
        if not consumer.flow_active or self.app.tables.recovery.in_recovery:
            self.stalled_reads.clear()
            return
        now = time.monotonic()
        for tp in sorted(consumer.assignment()):
            acc = self.accumulators.get(tp.partition) if tp.topic == self.topics.reports else None
            if acc is None:
                continue
            p, expected = tp.partition, acc.next_offset
            try:
                position = await asyncio.wait_for(consumer.position(tp), 2.0)
            except Exception as exc:  # noqa: BLE001 - a rebalance may take the partition away
                log.info("position of %s[%d] unknown: %r", tp.topic, p, exc)
                continue
            seen = self.stalled_reads.get(p)
            if position is None or position <= expected or seen is None or seen[0] != expected:
                self.stalled_reads[p] = (expected, now)
                continue
            if now - seen[1] < READ_STALL_S:
                continue
            log.warning("partition %d took nothing for %g s with the consumer at offset %d, past "
                        "its state's %d: records were fetched but never handed over; reading "
                        "them again", p, READ_STALL_S, position, expected)
            self.counters["reads_resumed"] += 1
            await consumer.seek(tp, expected)
            self.stalled_reads[p] = (expected, now)

    async def read_decisions(self) -> None:
        """Read the whole decisions topic (a consumer of this worker's own, not in the group)."""
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=self.broker, **client_options(),
                                    enable_auto_commit=False,
                                    group_id=None, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = TopicPartition(self.topics.decisions, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            while True:
                batches = await consumer.getmany(tp, timeout_ms=200, max_records=1000)
                for records in batches.values():
                    for rec in records:
                        try:
                            doc = orjson.loads(rec.value)
                        except orjson.JSONDecodeError:
                            log.error("unreadable decision record at offset %d", rec.offset)
                            continue
                        await self.on_control(doc)
        finally:
            await consumer.stop()

    async def _took_reports(self, p: int, records: list[RawRecord],
                            dead: list[DeadLetter]) -> list[Any]:
        """Note a processed batch (activity, counters); send its dead letters, unawaited."""
        if any(r[0] is not None for r in records):
            self.last_report = time.monotonic()
            self.last_activity[p] = self.last_report
        self.counters["reports"] += len(records)
        self.counters["rejected"] += len(dead)
        return await self.dead_letters.send(dead, wait=False)

    async def _send_partials(self, p: int, messages: list[dict]) -> list[Any]:
        """Send partition ``p``'s messages to the coordinator (declaration records to the
        decisions topic, for auditors); returns their futures."""
        futures = []
        notes = [m for m in messages if kind(m) == "declared"]
        for note in notes:
            key = declaration_key(note).encode()
            futures.append(await self.app.producer.send(self.topics.decisions, key,
                                                        encode(note), 0, None, None))
        key = partials_key(self.config.stream, p)
        for msg in (m for m in messages if kind(m) != "declared"):
            futures.append(await self.app.producer.send(self.topics.slot_partials, key,
                                                        encode(msg), 0, None, None))
        return futures

    def took_source(self) -> None:
        """The source stage produced reports: the stream is not idle (idle close waits)."""
        self.last_report = time.monotonic()

    async def hold_assigned(self) -> None:
        """Live, once the tables are recovered after a rebalance (a restart, a worker joining or
        leaving) and before records flow: every assigned partition of ``reports`` whose stream
        has begun gets a watermark record at :meth:`hold_bound` when it is behind it, so the
        slots that have waited longer than ``--max-hold-ms`` close before the backlog is read
        (what it holds for them is ``late``); the others stay open while it is read."""
        bound = self.hold_bound()
        if bound is None:
            return
        futures = []
        for tp in sorted(self.app.consumer.assignment()):
            if tp.topic != self.topics.reports:
                continue
            p = tp.partition
            async with self._lock(p):
                acc = self.accumulator(p)
                current = acc.slotter.watermark
                if acc.slotter.first_slot is None or (current is not None and current >= bound):
                    continue
                self.last_tick[p] = bound
                mark = watermark_record(bound, self.secret, self.config.stream, p)
                futures.append(await self.app.producer.send(self.topics.reports, None, mark, p,
                                                            None, None))
        if futures:
            await asyncio.gather(*futures)
            log.info("slots ending before %d waited longer than --max-hold-ms: closed on %d "
                     "partitions before reading on", bound, len(futures))

    def event_time_status(self) -> tuple[float, tuple[int, int, int] | None]:
        """Live, how many seconds past its end the oldest slot this worker's partitions hold
        open is (0 when none is late, and replaying history); and, with source topics, the
        source partition the stream waits for: (topic index, partition, ms of event time behind
        the most advanced one), or ``None``."""
        wait = 0.0
        if self.config.event_time == "live":
            clock, now = self.config.clock, time.time() * 1000
            for acc in list(self.accumulators.values()):
                first = acc.slotter.first_slot
                if first is None:
                    continue
                oldest = first if acc.closed_through is None else max(first,
                                                                      acc.closed_through + 1)
                wait = max(wait, (now - clock.end(oldest)) / 1000)
        holding = None
        for acc in list(self.accumulators.values()):
            if acc.sources is not None:
                found = acc.sources.holding_back()
                if found is not None and (holding is None or found[1] > holding[2]):
                    holding = (found[0][0], found[0][1], found[1])
        return wait, holding

    def hold_bound(self) -> int | None:
        """Live: the watermark every partition has reached at the latest, whatever an input
        partition that lags still holds: the worker's clock less ``--max-hold-ms``, at a slot's
        end (what comes later for the slots it closes is ``late``). ``None`` replaying history."""
        if self.config.event_time != "live":
            return None
        clock = self.config.clock
        limit = int(time.time() * 1000) - self.config.max_hold_ms
        return clock.start(int(clock.slot_of(limit)))

    async def on_tick(self) -> None:
        """Close slots of partitions that went quiet: watermark records through the data path."""
        assigned = [tp.partition for tp in self.app.consumer.assignment()
                    if tp.topic == self.topics.reports]
        if not assigned:
            return
        now = time.monotonic()
        idle = self.config.idle_close_ms / 1000.0
        marks = [a.slotter.watermark for a in self.accumulators.values()
                 if a.slotter.watermark is not None]
        # with source topics every partition hears every source partition's progress (its
        # idle ones included), so none is moved by the others (streams/job/source_progress.py)
        sourced = bool(self.config.source_partitions)
        target = None if sourced else max(marks, default=None)
        if now - self.last_report >= idle and not sourced:
            ends = [a.idle_watermark() for a in self.accumulators.values()]
            ends = [e for e in ends if e is not None]
            if ends:
                target = max(max(ends), target or 0)
        bound = self.hold_bound()
        if bound is not None and not any(a.slotter.first_slot is not None
                                         for a in self.accumulators.values()):
            bound = None  # the stream has not begun here: nothing to close
        if target is None and bound is None:
            return
        for p in assigned:
            acc = self.accumulators.get(p)
            current = acc.slotter.watermark if acc is not None else None
            quiet = now - self.last_activity.get(p, 0.0) >= idle
            # a quiet partition follows the others; any partition follows the live bound
            goal = max(target if quiet and target is not None else -1,
                       bound if bound is not None else -1)
            if goal >= 0 and (current is None or current < goal) \
                    and self.last_tick.get(p, -1) < goal:
                self.last_tick[p] = goal
                mark = watermark_record(goal, self.secret, self.config.stream, p)
                await self.app.producer.send(self.topics.reports, None, mark, p, None, None)
