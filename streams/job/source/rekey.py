"""The re-keying stage: source topics in, the job's ``reports`` topic out, keyed by user.

Each worker reads its share of the source topics' partitions through the batched ingest (the same
consumer group as the rest of the job; :mod:`streams.job.worker.ingest`), maps every batch
(:mod:`streams.job.source.mapping`), dead-letters what it cannot map (with the source topic,
partition and offset) and produces the mapped reports to ``reports`` keyed by user, on the
partition Kafka's default partitioner gives that key (murmur2): ``reports`` becomes the job's
repartition topic, so one identity per user and one report per user and slot hold whatever the
source's keys and partition count. Source topics are only read, never written.

Delivery is at least once: a batch's source offsets are acknowledged (and then committed) only
once the broker acknowledged every report produced from it. A batch read again after a crash
produces its reports again, with the same source position (``"source": [topic index, partition,
offset]``), and the partition keeps one report per (user, slot): the one with the smallest
(event time, source topic index, source partition, source offset), so a repeat or a report of
the same user from another source partition changes nothing whatever the order they arrive in
(:mod:`streams.job.partitions.ordering`).

Default requirements (:mod:`streams.job.source.defaults`). The stage follows the whole
``requirements`` topic (which users declared anything, an opt-out tombstone included). At a
user's first mapped report, when the user has no record on ``requirements``, it writes the
default requirement there, keyed by the user, and holds that user's reports until the job's
consumer group has committed that ``requirements`` partition past the default's offset (a
partition commits a requirement only after applying it): a report never reaches its partition
before its user's default is applied. The committed offsets are one number per partition,
whatever the number of users. Held reports keep their source offsets unacknowledged; other
users' reports go on meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from streams.job.batch_handling import RawRecord
from streams.job.config import JobConfig
from streams.job.isolation import isolated
from streams.job.partitions.accumulator import DeadLetter
from streams.job.partitions.key_hashing import key_partitions
from streams.job.source.defaults import DefaultRequirements
from streams.job.source.mapping import MappedBatch, MappingWatch, SourceMapping
from streams.job.source.report_values import remapped, report_value, report_values
from streams.job.source.winners import Forwarded
from streams.job.source_progress import Progress, progress_record
from streams.kafka.consumer_stop import stop_consumer
from streams.kafka.settings import consumer_options
from streams.kafka.topics import Topics

log = logging.getLogger("pwevent.source")

__all__ = ["Rekeyer", "SourceSettings", "report_value", "report_values"]

#: Seconds a user's reports wait for its default requirement to be registered before they are
#: produced all the same (and counted, or dead-lettered as unregistered_user, by the partition).
REGISTRATION_WAIT_S = 30.0

#: Seconds between two look-ups of the group's commits on ``requirements`` while defaults wait.
COMMIT_LOOK_S = 0.25

#: Batches of one source partition whose reports may be on their way to the broker at once.
IN_FLIGHT = 4


def _offsets(records: Sequence[Any], index: np.ndarray) -> np.ndarray:
    """The source offsets of the records at positions ``index`` of one partition's batch
    (offsets grow along a batch: when they have no gap, the first plus the position)."""
    if not records:
        return np.zeros(0, dtype=np.int64)
    first = int(records[0][3])
    if int(records[-1][3]) - first == len(records) - 1:
        return index + first
    return np.fromiter((r[3] for r in records), dtype=np.int64, count=len(records))[index]


@dataclass(frozen=True)
class SourceSettings:
    """The source side of a job: its topics, mapping and default requirements."""

    topics: tuple[str, ...]
    mapping: SourceMapping
    defaults: tuple[str, ...] = ()
    source_format: str = "json"  # or "avro" (streams/job/source/avro.py)
    schema_registry: str | None = None  # the registry's URL, for avro


@dataclass
class _Held:
    """The reports of one source batch not yet acknowledged by the broker: waiting for their
    users' default requirements (``waiting``), then on their way (``sending``)."""

    first_offset: int
    end_offset: int  # the offset after the batch's last record
    records: list[tuple[bytes, bytes]]  # key, value
    partitions: list[int]  # each record's partition of reports
    waiting: dict[int, int]  # requirements partition -> offset its commit must pass
    since: float = field(default_factory=time.monotonic)
    sending: asyncio.Future[Any] | None = None  # resolved when the broker has them all
    marks: int = 0  # progress records at the end of ``records``


class Rekeyer:
    """The re-keying stage of one worker (module doc). ``send(topic, key, value, partition)``
    is the producer's send, returning an awaitable of the broker's acknowledgement (for default
    requirements); ``send_reports(records, partitions)`` enqueues a batch of re-keyed reports
    for ``reports`` in order and returns an awaitable resolved once the broker has them all.

    A batch's reports are enqueued while the next batch is fetched and mapped, and its source
    offsets acknowledged once the broker has them (in source order: an earlier batch still on
    its way holds the later ones back). At most :data:`IN_FLIGHT` batches per source partition
    are on their way; a send that fails is raised at the stage's next batch, which stops the
    fetch loop as a failing handler always did."""

    def __init__(self, config: JobConfig, settings: SourceSettings, topics: Topics,
                 send: Callable[..., Any], dead_letters: Any, counters: Counter[str],
                 metrics: Any = None, on_produced: Callable[[], None] | None = None,
                 acknowledge: Callable[[str, int, int], None] | None = None,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000), *,
                 send_reports: Callable[[list[tuple[bytes, bytes]], list[int]], Awaitable[Any]],
                 ) -> None:
        self.config, self.settings, self.topics = config, settings, topics
        self.send, self.dead_letters = send, dead_letters
        self.send_reports = send_reports
        self.counters, self.metrics = counters, metrics
        self.on_produced = on_produced or (lambda: None)
        self.acknowledge = acknowledge or (lambda topic, partition, stop: None)
        self.clock_ms = clock_ms
        self.mapping = settings.mapping
        self.defaults = DefaultRequirements(settings.defaults, config)
        self.index = {t: i for i, t in enumerate(settings.topics)}
        self.watch = MappingWatch(self._problem)
        self.avro = self._avro_source() if settings.source_format == "avro" else None
        self.declared: set[str] = set()  # users with a record on requirements
        # users this stage wrote a default for: (requirements partition, offset), or the send's
        # future until the broker answers; dropped once the group's commit passed it
        self.defaulted: dict[str, Any] = {}
        self.applied: dict[int, int] = {}  # the group's committed offsets on requirements
        # per source partition: the largest event time read, when records last came, and
        # whether its idle progress was written (streams/job/source_progress.py)
        self.reached: dict[tuple[str, int], int] = {}
        self.last_read: dict[tuple[str, int], float] = {}
        self.idle_said: set[tuple[str, int]] = set()
        self.in_batch: set[tuple[str, int]] = set()
        # per source partition held: the offset after the last record handed to the stage
        self.handed: dict[tuple[str, int], int] = {}
        self.forwarded = Forwarded(config.clock)  # the reports that can still win
        self.secret = config.secret_bytes()
        self.held: dict[tuple[str, int], deque[_Held]] = {}
        self.failed: BaseException | None = None  # a send of reports the broker refused
        self._enqueue = asyncio.Lock()  # batches are enqueued one after the other, in order
        self.ready = asyncio.Event()
        if not self.defaults:
            self.ready.set()

    # -- the batches -----------------------------------------------------------------------

    def handler(self, topic: str) -> Callable[[list[RawRecord]], Any]:
        """The batch handler of ``topic``'s records (with their timestamps)."""
        async def handle(records: list[Any]) -> int | None:
            return await self.on_batch(topic, records)
        return handle

    async def on_batch(self, topic: str, records: Sequence[Any]) -> int | None:
        """Map and produce one batch; returns the first source offset not to acknowledge yet
        (``None``: all of them)."""
        await self.ready.wait()
        self.on_produced()  # the stage is busy: the stream is not idle
        p = records[0][2]
        self.last_read[(topic, p)] = time.monotonic()
        self.in_batch.add((topic, p))
        self.handed[(topic, p)] = max(self.handed.get((topic, p), 0), int(records[-1][3]) + 1)
        try:
            return await self._on_batch(topic, p, records)
        finally:
            self.in_batch.discard((topic, p))

    async def _on_batch(self, topic: str, p: int, records: Sequence[Any]) -> int | None:
        ti = self.index[topic]
        if self.avro is None:
            batch = remapped(*isolated(records,
                                       lambda sub: self.mapping.map(sub, self.defaults.paths),
                                       lambda i: (topic, p, records[i][3])))
        else:
            batch = await self.avro.map(self.mapping, records, self.defaults.paths, topic)
        self.watch.take(topic, batch, self._mapped_count(records, batch), self.clock_ms())
        dead = [DeadLetter(topic, p, records[r.index][3], records[r.index][0],
                           records[r.index][1], r.reason.value, r.detail)
                for r in batch.rejected]
        self.counters["source_records"] += len(records)
        self.counters["source_rejected"] += len(dead)
        futures = await self.dead_letters.send(dead, wait=False)
        batch = self._can_win(batch, ti, p, _offsets(records, batch.index))
        users = batch.users
        keys = [user.encode() for user in users]
        parts = key_partitions(keys, self.config.partitions).tolist() if keys else []
        offsets = _offsets(records, batch.index).tolist()
        out = list(zip(keys, report_values(users, batch.times.tolist(), batch.values, ti, p,
                                           offsets), strict=True))
        marks = self._progress((topic, p), batch.times)
        parts += [q for q, _mark in marks]
        out += [(None, mark) for _q, mark in marks]
        sent: list[tuple[str, Any]] = []
        if self.defaults:
            fresh = set(users).difference(self.declared, self.defaulted)
            for j, user in enumerate(users) if fresh else ():
                if user not in fresh:
                    continue
                rule = self.defaults.choose(batch.extras[j] if batch.extras else ())
                if rule is not None:  # else a later report of the user may match a rule
                    fresh.discard(user)
                    fut = await self.send(self.topics.requirements, keys[j],
                                          rule.requirement(user), parts[j])
                    self.defaulted[user] = fut  # its offset, once the broker acknowledged it
                    sent.append((user, fut))
                    self.counters["default_requirements"] += 1
        for user, meta in zip([u for u, _f in sent],
                              await asyncio.gather(*(f for _u, f in sent)), strict=True):
            self.defaulted[user] = (meta.partition, meta.offset)
        waiting: dict[int, int] = {}
        if self.defaulted:
            for user in set(batch.users) & self.defaulted.keys():
                where = self.defaulted[user]
                if not isinstance(where, tuple):  # sent by a batch still waiting for it
                    meta = await where
                    where = (meta.partition, meta.offset)
                part, offset = where
                if self.applied.get(part, 0) <= offset:
                    waiting[part] = max(waiting.get(part, 0), offset)
        self.held.setdefault((topic, p), deque()).append(
            _Held(int(records[0][3]), int(records[-1][3]) + 1, out, parts, waiting,
                  marks=len(marks)))
        if futures:
            await asyncio.gather(*futures)
        await self._advance((topic, p))
        queue = self.held.get((topic, p))
        return queue[0].first_offset if queue else None

    def _can_win(self, batch: MappedBatch, ti: int, p: int, offsets: np.ndarray
                 ) -> MappedBatch:
        """The mapped reports that can still win their (user, slot) (:mod:`.winners`; the
        others are ``source_superseded``); slots well behind the stage's sources are forgotten
        (a report for them from here would be late)."""
        if not batch.users:
            return batch
        kept, dropped = self.forwarded.can_win(batch, ti, p, offsets)
        if dropped:
            self.counters["source_superseded"] += dropped
            if self.metrics is not None:
                self.metrics.superseded(dropped)
        reached = [self.reached[w] for w in self.reached if w[0] in self.index]
        if reached:
            self.forwarded.forget_before(
                int(self.config.clock.slot_of(min(reached) - self.config.lateness_ms)) - 2)
        return kept

    def _progress(self, where: tuple[str, int], times: np.ndarray) -> list[tuple[int, bytes]]:
        """The progress records of a source partition after a batch with these mapped event
        times, one per partition of ``reports`` (none when its progress did not change and it
        was not idle). Live, a time beyond the clock plus the allowed skew is no progress (its
        report is ``future``)."""
        self.last_read[where] = time.monotonic()
        if self.config.event_time == "live" and times.size:
            times = times[times <= self.clock_ms() + self.config.max_skew_ms]
        before = self.reached.get(where, -1)
        now = max(before, int(times.max())) if times.size else before
        if now == before and where not in self.idle_said:
            return []
        self.reached[where] = now
        self.idle_said.discard(where)
        return self._marks(where, now, idle=False)

    def _marks(self, where: tuple[str, int], ms: int, idle: bool) -> list[tuple[int, bytes]]:
        progress = Progress(self.index[where[0]], where[1], ms, idle)
        return [(q, progress_record(progress, self.secret, self.config.stream, q))
                for q in range(self.config.partitions)]

    async def say_busy(self, assigned: Sequence[tuple[str, int]]) -> None:
        """After a rebalance, before records flow: every ``assigned`` source partition holds
        the stream's event time at its last progress again until it is read (a partition said
        idle before may have records now: another's progress must not close their slots
        first). One that is still quiet and read to its end is said idle again
        (:meth:`say_idle`)."""
        if not assigned:
            return
        async with self._enqueue:
            marks = [m for where in assigned
                     for m in self._marks(where, self.reached.get(where, -1), idle=False)]
            for where in assigned:
                self.idle_said.discard(where)
                self.last_read.pop(where, None)
            sending = await self._produce([(None, m) for _q, m in marks],
                                          [q for q, _m in marks])
        await sending

    async def read_to_end(self, where: tuple[str, int], highwater: int | None,
                          start: Callable[[], Awaitable[int | None]],
                          holds: Callable[[int, int], Awaitable[bool]]) -> bool:
        """Whether every record of source partition ``where`` below its ``highwater`` was
        handed to the stage since this worker holds it: counted from the offset after the last
        record handed, or, before any, from the offset its reading began at (``start()``: the
        group's commit, or the log's start without one; ``None`` when unknown). Offsets left
        between that and the high watermark are read to their end when they hold no record the
        consumer hands over (``holds(first, stop)`` is ``False``: transaction markers, which a
        transactional producer's topic ends in, and records of aborted transactions, which no
        consumer of the job reads); the stage then counts past them.

        Not the consumer's position: that moves when records are fetched, before the stage has
        them (a fetch of several partitions hands them over one after the other), and a
        partition said idle then would let the others close slots its records belong to."""
        if highwater is None:
            return False
        handed = self.handed.get(where)
        if handed is None:
            begun = await start()
            if begun is None:
                return False
            handed = self.handed.setdefault(where, begun)
        if handed >= highwater:
            return True
        return not await holds(handed, highwater) and self.count_past(where, highwater)

    def count_past(self, where: tuple[str, int], stop: int) -> bool:
        """Count source partition ``where`` as handed up to ``stop``, its offsets between
        found to hold no record to hand over (transaction markers, aborted records); ``False``
        when this worker no longer holds it."""
        if where not in self.handed:
            return False
        self.handed[where] = max(self.handed[where], stop)
        return True

    async def say_idle(self, assigned: Sequence[tuple[str, int]],
                       caught_up: Callable[[str, int], Awaitable[bool]]) -> None:
        """Write idle progress for the ``assigned`` source partitions that are read to their end
        (``caught_up``, :meth:`read_to_end`), took no record for ``--idle-close-ms`` and have
        nothing on its way to ``reports``: they stop holding the stream's event time back."""
        quiet = self.config.idle_close_ms / 1000.0
        now = time.monotonic()
        for where in assigned:
            if where in self.idle_said or self.held.get(where) or where in self.in_batch:
                continue
            last = self.last_read.setdefault(where, now)  # (an empty partition: since now)
            if now - last < quiet or not await caught_up(*where):
                continue
            async with self._enqueue:
                if (self.held.get(where) or where in self.idle_said or where in self.in_batch
                        or where not in self.handed):  # (forgotten: another worker holds it)
                    continue
                marks = self._marks(where, self.reached.get(where, -1), idle=True)
                sending = await self._produce([(None, m) for _q, m in marks],
                                              [q for q, _m in marks])
                # noted with the marks, in their order: a rebalance's busy marks, enqueued
                # after these while they are on their way, take it back (say_busy)
                self.idle_said.add(where)
            await sending

    def _mapped_count(self, records: Sequence[Any], batch: Any) -> int:
        """How many of the batch's records reached the mapping: an Avro record that did not
        decode (a registry outage, say) tells nothing about the mapping's fields."""
        if self.avro is None:
            return len(records)
        from streams.job.source.avro import UNDECODED

        return len(records) - sum(r.reason in UNDECODED for r in batch.rejected)

    async def _advance(self, where: tuple[str, int]) -> None:
        """Send the batches of a source partition whose users are registered now (or waited
        too long), oldest first, while fewer than :data:`IN_FLIGHT` are on their way; then
        acknowledge those the broker has."""
        self._raise_failure()
        async with self._enqueue:
            while True:
                queue = self.held.get(where)
                entry = next((e for e in queue or () if e.sending is None), None)
                if entry is None:
                    break
                entry.waiting = {part: offset for part, offset in entry.waiting.items()
                                 if self.applied.get(part, 0) <= offset}
                if entry.waiting and time.monotonic() - entry.since < REGISTRATION_WAIT_S:
                    break
                if entry.waiting:
                    log.error("default requirements on %d requirements partitions were not "
                              "applied within %g s; the reports waiting for them go on as they "
                              "are", len(entry.waiting), REGISTRATION_WAIT_S)
                    entry.waiting = {}
                busy = [e.sending for e in queue if e.sending is not None  # type: ignore[union-attr]
                        and not e.sending.done()]
                if len(busy) >= IN_FLIGHT:
                    await asyncio.wait(busy[:1 + len(busy) - IN_FLIGHT])
                    continue  # the queue may have changed meanwhile
                entry.sending = await self._produce(entry.records, entry.partitions)
                entry.sending.add_done_callback(lambda _f, where=where: self._settle(where))
        self._settle(where)
        self._raise_failure()

    def _settle(self, where: tuple[str, int]) -> None:
        """Take off a source partition's queue the batches the broker has, oldest first, and
        acknowledge their source offsets."""
        queue = self.held.get(where)
        while queue and queue[0].sending is not None and queue[0].sending.done():
            head = queue[0]
            if head.sending.cancelled() or head.sending.exception() is not None:
                if self.failed is None:
                    self.failed = (head.sending.exception() if not head.sending.cancelled()
                                   else RuntimeError("a send of re-keyed reports was cancelled"))
                    log.error("re-keyed reports of %s[%d] from offset %d were not acknowledged "
                              "by the broker: %r", where[0], where[1], head.first_offset,
                              self.failed)
                return
            queue.popleft()
            self.counters["source_produced"] += len(head.records) - head.marks
            self.on_produced()
            # its source offsets may be committed now (the ingest held them back)
            self.acknowledge(where[0], where[1],
                             queue[0].first_offset if queue else head.end_offset)
        if queue is not None and not queue:
            del self.held[where]

    def _raise_failure(self) -> None:
        if self.failed is not None:
            raise self.failed

    async def _produce(self, records: list[tuple[bytes, bytes]], partitions: list[int]
                       ) -> asyncio.Future[Any]:
        """Enqueue mapped reports for ``reports`` (each on its user's partition) in record
        batches; the future resolves once the broker has them all."""
        if not records:
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            done.set_result(0)
            return done
        return asyncio.ensure_future(await self.send_reports(
            records, partitions))

    async def release_held(self) -> None:
        """Send what waited for default requirements once they are registered (or waited too
        long), oldest first per source partition."""
        for where in list(self.held):
            await self._advance(where)

    async def drain(self) -> None:
        """Wait until every batch on its way is acknowledged by the broker (or failed)."""
        busy = [e.sending for queue in list(self.held.values()) for e in queue
                if e.sending is not None and not e.sending.done()]
        if busy:
            await asyncio.wait(busy)
        for where in list(self.held):
            self._settle(where)

    def forget(self, topic: str, partition: int) -> None:
        """A source partition went to another worker: what it held is read again there (or
        here, when it comes back). What its dropped batches would have sent is forgotten with
        them: the reports they made winners of their (user, slot), which would otherwise
        supersede the same reports read again, and the event time they reached, which a busy
        or idle progress record would otherwise claim before those reports are sent."""
        where = (topic, partition)
        self.held.pop(where, None)
        self.last_read.pop(where, None)
        self.idle_said.discard(where)
        self.reached.pop(where, None)
        self.handed.pop(where, None)
        self.forwarded.forget(self.index.get(topic), partition)

    def held_offset(self, topic: str, partition: int) -> int | None:
        """The first source offset of ``topic``'s ``partition`` still held, if any."""
        queue = self.held.get((topic, partition))
        return queue[0].first_offset if queue else None

    def _avro_source(self) -> Any:
        """The decoder of Avro source records, its registry reporting an outage once and each
        refused schema once."""
        from streams.job.source.avro import AvroSource
        from streams.job.source.schema_registry import SchemaRegistry

        assert self.settings.schema_registry is not None
        return AvroSource(SchemaRegistry(
            self.settings.schema_registry,
            report=lambda message: self._problem("", "schema_registry_unreachable", message),
            refuse=lambda message: self._problem("", "unsupported_schema", message)))

    def _problem(self, topic: str, problem: str, message: str) -> None:
        log.error(message)
        self.counters[f"source_problem:{problem}"] += 1
        if self.metrics is not None:
            self.metrics.source_problem(problem)

    # -- following requirements and registrations --------------------------------------------

    def take_commits(self, committed: dict[int, int]) -> None:
        """The job's group committed ``requirements`` up to these offsets: defaults below them
        are applied."""
        self.applied.update(committed)
        done = [u for u, where in self.defaulted.items()
                if isinstance(where, tuple) and self.applied.get(where[0], 0) > where[1]]
        for user in done:
            del self.defaulted[user]
            self.declared.add(user)

    def take_requirements(self, partition: int, records: Sequence[Any]) -> None:
        """Records read from ``requirements``: a user whose record the group has committed is
        declared; one whose record it has not committed yet (a default written before a
        restart, or a declaration just made) waits like a default this stage wrote."""
        applied = self.applied.get(partition, 0)
        for rec in records:
            if rec.key is None:
                continue
            user = rec.key.decode(errors="replace")
            if rec.offset < applied:
                self.declared.add(user)
            elif user not in self.declared:
                self.defaulted[user] = (partition, rec.offset)

    async def follow(self, broker: str, group: str) -> None:
        """Follow ``requirements`` from its beginning (a consumer of this worker's own), and
        the commits ``group`` makes on it while records wait to be applied; :attr:`ready` once
        the topic was read to the end it had at start."""
        from aiokafka import AIOKafkaConsumer, TopicPartition

        from streams.kafka.offsets import committed_offsets

        if not self.defaults:
            return
        consumer = AIOKafkaConsumer(bootstrap_servers=broker, **consumer_options(),
                                    enable_auto_commit=False, group_id=None,
                                    auto_offset_reset="earliest")
        await consumer.start()
        try:
            tps = [TopicPartition(self.topics.requirements, p)
                   for p in range(self.config.partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            self.take_commits(await committed_offsets(broker, group, self.topics.requirements))
            next_look = 0.0
            while True:
                batches = await consumer.getmany(timeout_ms=100, max_records=10_000)
                for tp, recs in batches.items():
                    self.take_requirements(tp.partition, recs)
                if not self.ready.is_set():
                    positions = {tp: await consumer.position(tp) for tp in tps}
                    if all(positions[tp] >= ends[tp] for tp in tps):
                        log.info("source stage: %d users declared", len(self.declared))
                        self.ready.set()
                if (self.held or self.defaulted) and time.monotonic() >= next_look:
                    next_look = time.monotonic() + COMMIT_LOOK_S
                    self.take_commits(await committed_offsets(broker, group,
                                                              self.topics.requirements))
                if self.held:
                    self.on_produced()  # held reports: the stream is not idle
                    await self.release_held()
        finally:
            await stop_consumer(consumer)
