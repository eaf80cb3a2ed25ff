"""The partitions of a Faust worker: step 1 of the path of one report (docs/design.md).

:class:`PartitionRunner` builds each partition it is assigned once the tables are recovered
(a :class:`~streams.job.partitions.partition.Partition`: registry and accumulator restored from
the ``users`` and ``checkpoints`` tables), hands it the batches of ``requirements`` and
``reports`` that the batched ingest (:mod:`streams.job.worker.ingest`) delivers, and sends what
it says: its messages to ``slot-partials`` (declarations to ``decisions``), its dead letters to
``dead-letters``; it stores its checkpoint in the ``checkpoints`` table and acknowledges only the
records the checkpoint covers. Under the partitions' ledgers it reads the whole ``decisions``
topic and hands each record to its partitions. It holds no logic of its own about slots or
budgets.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, MutableMapping
from typing import Any

import faust
import orjson
from faust.types import TP

from streams.job.batch_handling import ContinuityGuard, RawRecord, Rewind
from streams.job.config import JobConfig
from streams.job.operations.worker_metrics import WorkerMetrics, accepted_since
from streams.job.partitions.accumulator import PartitionAccumulator, watermark_record
from streams.job.partitions.checkpoint_store import write_chunked
from streams.job.partitions.partition import Partition, Said
from streams.job.roles import make_partition
from streams.job.slot_protocol import Control, control, declaration_key, encode, kind, partials_key
from streams.job.worker.dead_letters import DeadLetterSender
from streams.job.worker.ingest import partition_context
from streams.job.worker.read_stalls import READ_STALL_S, ReadStalls
from streams.job.worker.tables import changelog_written
from streams.kafka.consumer_stop import stop_consumer
from streams.kafka.settings import consumer_options
from streams.kafka.topics import Topics

log = logging.getLogger("pwevent.job")


class Assigned(dict[int, Partition]):
    """The partitions a worker holds, by number. Each is built once the tables are recovered
    after the rebalance that assigned it (:meth:`PartitionRunner.open_assigned`); one looked up
    before (a handler ahead of that, as in tests) is built then, by ``build``."""

    def __init__(self, build: Callable[[int], Partition]) -> None:
        super().__init__()
        self.build = build

    def __missing__(self, p: int) -> Partition:
        part = self[p] = self.build(p)
        return part


class PartitionRunner:
    """The partitions of ``reports`` (and of ``requirements``, assigned alike) this worker holds:
    built from the ``users`` and ``checkpoints`` tables once they are recovered after the
    rebalance that assigned them (:meth:`open_assigned`), and forgotten when another worker
    takes them over."""

    def __init__(self, app: faust.App, config: JobConfig, broker: str, topics: Topics,
                 users: MutableMapping[bytes, bytes], checkpoints: MutableMapping[bytes, bytes],
                 counters: Counter[str], metrics: WorkerMetrics) -> None:
        self.app, self.config, self.broker, self.topics = app, config, broker, topics
        self.secret = config.secret_bytes()
        self.users, self.checkpoints = users, checkpoints
        self.counters, self.metrics = counters, metrics
        self.dead_letters = DeadLetterSender(app, topics.dead_letters, counters, metrics)
        self.partitions = Assigned(self.build)
        self.locks: dict[int, asyncio.Lock] = {}  # per partition number, across its generations
        self.continuity = ContinuityGuard(topics.reports)
        # the decisions topic as read so far (partitions keeping ledgers)
        self.start_record: Control | None = None
        self.decision_log: dict[int, bool] = {}
        self.revocations = 0  # partitions forgotten so far (a resume in progress stops at one)
        self.last_report = time.monotonic()
        self.last_tick: dict[int, int] = {}
        self.last_activity: dict[int, float] = {}
        self.last_batch: dict[int, float] = {}  # per partition, when its last batch was taken
        self.stalled_reads = ReadStalls()

    @property
    def accumulators(self) -> dict[int, PartitionAccumulator]:
        """The accumulators of the partitions built, by partition (a copy)."""
        return {p: part.accumulator for p, part in list(self.partitions.items())}

    @property
    def resumed(self) -> set[int]:
        """The partitions built that have resumed since."""
        return {p for p, part in self.partitions.items() if part.resumed}

    def lock(self, p: int) -> asyncio.Lock:
        """The lock partition ``p``'s handlers take turns on (the same for all its builds)."""
        lock = self.locks.get(p)
        if lock is None:
            lock = self.locks[p] = asyncio.Lock()
        return lock

    def grow_sources(self, counts: tuple[int, ...]) -> None:
        """Source topics gained partitions (``counts``, per ``--source-topic``): the partitions
        built and those built later wait for the new ones' progress too
        (:meth:`streams.job.source_progress.SourceProgress.grow`)."""
        self.config = dataclasses.replace(self.config, source_partitions=counts)
        for acc in self.accumulators.values():
            if acc.sources is not None:
                acc.sources.grow(counts)

    def build(self, p: int) -> Partition:
        """Partition ``p`` as the ``users`` and ``checkpoints`` tables hold it."""
        return make_partition(p, self.config, self.users, self.checkpoints, self.lock(p))

    def open_assigned(self) -> None:
        """Build every assigned partition (of ``reports`` or ``requirements``) not built yet."""
        topics = (self.topics.reports, self.topics.requirements)
        for p in sorted({tp.partition for tp in self.app.consumer.assignment()
                         if tp.topic in topics}):
            self.partitions[p]  # noqa: B018 - built on look-up

    def forget(self, p: int) -> None:
        """Forget partition ``p``, which another worker takes over: if it comes back, it is
        built again from its checkpoint and the ``users`` table, which the other worker kept."""
        self.partitions.pop(p, None)
        self.revocations += 1

    async def on_requirements(self, records: list[RawRecord]) -> None:
        """Register users (a batch at a time); reject invalid requirements to dead letters."""
        dead = self.partitions[records[0][2]].register(records, self.topics.requirements)
        self.counters["requirements"] += len(records) - len(dead)
        self.metrics.took_requirements(len(records) - len(dead))
        await self.dead_letters.send(dead)
        await changelog_written(self.users)

    async def on_reports(self, records: list[RawRecord]) -> int | Rewind:
        """Hand a batch of reports to its partition and send what it says (partials of closed
        slots, dead letters), with its checkpoint; answers the offset the checkpoints cover. A
        batch that does not continue where the partition's state left off is not counted: the
        partition is read again from there
        (:class:`~streams.job.batch_handling.ContinuityGuard`)."""
        part = self.partitions[records[0][2]]
        rewind = self.continuity.check(part.number, part.next_offset, records)
        if rewind is not None:
            self.counters["rewinds"] += 1
            self.metrics.rewound()
            return rewind
        async with part.lock:
            self.last_batch[part.number] = time.monotonic()
            said = part.take_reports(records, self.topics.reports, self.start_record,
                                     self.decision_log)
            if said.keyed:
                self.last_report = time.monotonic()
                self.last_activity[part.number] = self.last_report
            self.counters["reports"] += len(records)
            self.counters["rejected"] += len(said.dead)
            self.metrics.took_reports(accepted_since(said.opened, said.counted, said.closed),
                                      said.superseded)
            await self.say(part, said, await self.dead_letters.send(said.dead, wait=False))
            return part.acked

    async def say(self, part: Partition, said: Said, pending: list[Any]) -> None:
        """Send what ``part`` said to the coordinator and store its checkpoint, once
        ``pending`` sends are done. A placement that keeps its messages in the checkpoint has
        it stored first (docs/design.md, record before emitting: a plan that was sent is never
        replaced by a different one); otherwise the messages go first, as re-reading the records
        the checkpoint lacks reproduces them. Once all is sent, ``part`` has resumed."""
        out = self.partial_records(part.number, said.messages)
        futures = list(pending)
        if not said.checkpoint_first:
            futures += [await self.app.producer.send(*rec) for rec in out]
        if futures:
            await asyncio.gather(*futures)
        if said.checkpoint is not None:
            with partition_context(self.app, self.topics.reports, part.number):
                write_chunked(self.checkpoints, part.number, said.checkpoint)
            await changelog_written(self.checkpoints)
            part.acked = said.offset  # the records the checkpoint covers may be acknowledged
        if said.checkpoint_first and out:
            await asyncio.gather(*[await self.app.producer.send(*rec) for rec in out])
        part.resumed = True

    def partial_records(self, p: int, messages: list[dict]) -> list[tuple]:
        """Partition ``p``'s messages to the coordinator as records to send: declaration
        records to the decisions topic (for auditors), then the others to ``slot-partials``
        (topic, key, value, partition, timestamp, headers)."""
        out: list[tuple] = [(self.topics.decisions, declaration_key(m).encode(), encode(m), 0,
                             None, None) for m in messages if kind(m) == "declared"]
        key = partials_key(self.config.stream, p)
        out += [(self.topics.slot_partials, key, encode(m), 0, None, None)
                for m in messages if kind(m) != "declared"]
        return out

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
        for p in sorted(self.partitions):
            async with self.lock(p):
                part = self.partitions.get(p)
                if part is None:
                    continue  # revoked meanwhile
                await self.say(part, part.hear(doc, self.start_record, self.decision_log), [])

    async def resume_assigned(self) -> None:
        """Resume every assigned partition of ``reports`` that has not resumed since it was
        assigned: send its last messages again and what the decisions read so far imply.
        Called once the tables are recovered after a rebalance. A partition otherwise resumes
        at its first batch or decision; one that comes back with nothing left to read, while
        the coordinator waits for its next plan, gets neither, and every slot would wait for it
        for ever.

        The next rebalance may overtake it: it revokes the partitions (:meth:`forget`), then
        cancels this call once they are assigned again. It stops at the revocation, as the
        partitions it would go on to resume may no longer be this worker's; the call that
        follows the next recovery resumes them, and those it had not finished again."""
        revocations = self.revocations
        for tp in sorted(self.app.consumer.assignment()):
            if tp.topic != self.topics.reports:
                continue
            p = tp.partition
            async with self.lock(p):
                if self.revocations != revocations:
                    return
                part = self.partitions[p]
                if not part.resumed:
                    await self.say(part, part.resume(self.start_record, self.decision_log), [])

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
        expected = {tp: part.next_offset for tp in consumer.assignment()
                    if tp.topic == self.topics.reports
                    and (part := self.partitions.get(tp.partition)) is not None}
        for tp, position, offset in await self.stalled_reads.read_again(consumer, expected):
            log.warning("partition %d took nothing for %g s with the consumer at offset %d, past "
                        "its state's %d: records were fetched but never handed over; reading "
                        "them again", tp.partition, READ_STALL_S, position, offset)
            self.counters["reads_resumed"] += 1

    async def read_decisions(self) -> None:
        """Read the whole decisions topic (a consumer of this worker's own, not in the group)."""
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=self.broker, **consumer_options(),
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
            await stop_consumer(consumer)

    async def settle_tails(self, assigned: list[int], now: float, quiet: float) -> None:
        """Checkpoint and acknowledge what the assigned partitions took after their last
        acknowledgement, once no batch came for ``quiet`` seconds. Records that change no message
        (a watermark behind the partition's own, control records) leave no checkpoint when they
        arrive, and a checkpoint a decision caused is acknowledged by no batch: without this the
        group would not commit the end of a partition that ends with them, and its lag would
        never reach zero. A partition that goes on taking batches is checkpointed by the slots
        it closes, as before. Nothing is settled while a rebalance stops the flow."""
        if not self.app.consumer.flow_active:
            return
        for p in assigned:
            if now - self.last_batch.get(p, 0.0) < quiet:
                continue
            part = self.partitions.get(p)
            if part is None or not part.resumed:
                continue
            if part.next_offset > part.acked:
                async with self.lock(p):
                    if self.partitions.get(p) is not part or part.next_offset <= part.acked:
                        continue  # revoked, or checkpointed, meanwhile
                    await self.say(part, part.checkpointed(Said(), True), [])
                    self.counters["tails_checkpointed"] += 1
            self.app.consumer.acknowledge(TP(self.topics.reports, p), part.acked)

    def took_source(self) -> None:
        """The source stage produced reports: the stream is not idle (idle close waits)."""
        self.last_report = time.monotonic()

    async def hold_assigned(self) -> None:
        """Live, once the tables are recovered after a rebalance (a restart, a worker joining or
        leaving) and before records flow: every assigned partition of ``reports`` whose stream
        has begun gets a watermark record at :meth:`hold_bound` when it is behind it, so the
        slots that have waited longer than ``--max-hold-ms`` close before the backlog is read
        (what it holds for them is ``late``); the others stay open while it is read. Every
        assigned partition is built first (:meth:`open_assigned`), live or not. Like
        :meth:`resume_assigned`, it stops at a revocation: a partition is never built again
        from tables that the next rebalance's recovery has not brought up to date."""
        self.open_assigned()
        bound = self.hold_bound()
        if bound is None:
            return
        futures = []
        revocations = self.revocations
        for tp in sorted(self.app.consumer.assignment()):
            if tp.topic != self.topics.reports:
                continue
            p = tp.partition
            async with self.lock(p):
                part = self.partitions.get(p)
                if self.revocations != revocations or part is None:
                    break  # the next rebalance overtook this one: its recovery builds them
                acc = part.accumulator
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
            for acc in self.accumulators.values():
                first = acc.slotter.first_slot
                if first is None:
                    continue
                oldest = first if acc.closed_through is None else max(first,
                                                                      acc.closed_through + 1)
                wait = max(wait, (now - clock.end(oldest)) / 1000)
        holding = None
        for acc in self.accumulators.values():
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
        """Close slots of partitions that went quiet: watermark records through the data path.
        Then checkpoint and acknowledge the quiet partitions' tails (:meth:`settle_tails`)."""
        assigned = [tp.partition for tp in self.app.consumer.assignment()
                    if tp.topic == self.topics.reports]
        if not assigned:
            return
        now = time.monotonic()
        idle = self.config.idle_close_ms / 1000.0
        await self.settle_tails(assigned, now, idle)
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
            part = self.partitions.get(p)
            current = part.accumulator.slotter.watermark if part is not None else None
            quiet = now - self.last_activity.get(p, 0.0) >= idle
            # a quiet partition follows the others; any partition follows the live bound
            goal = max(target if quiet and target is not None else -1,
                       bound if bound is not None else -1)
            if goal >= 0 and (current is None or current < goal) \
                    and self.last_tick.get(p, -1) < goal:
                self.last_tick[p] = goal
                mark = watermark_record(goal, self.secret, self.config.stream, p)
                await self.app.producer.send(self.topics.reports, None, mark, p, None, None)
