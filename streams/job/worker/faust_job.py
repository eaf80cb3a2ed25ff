"""The Faust job: one worker's app, its topics and RocksDB-backed tables, and what runs on them.

Data path (docs/design.md): ``requirements`` -> the ``users`` table and each partition's registry;
``reports`` -> a :class:`~streams.job.partitions.partition.Partition` per partition, built when
it is assigned (batched ingest), whose accumulator sends the messages of
:mod:`streams.job.slot_protocol` to ``slot-partials`` whenever slots close; the
:class:`~streams.job.coordination.coordinator.Coordinator` reads
``slot-partials`` (batched ingest as well, each record once by offset) and releases each slot once
to ``releases`` (with its ``decisions``). Where the budget ledger lives
(:mod:`streams.job.partitions.placement`) decides what the messages hold and in which order a
partition checkpoints and sends. :class:`Job` wires the app: the partitions' side runs in
:class:`~streams.job.worker.partition_runner.PartitionRunner`, the coordinator's in
:class:`~streams.job.worker.coordinator_runner.CoordinatorRunner`.

Durability. A partition's accumulator is checkpointed into the ``checkpoints`` table (RocksDB,
with a changelog) whenever it has messages for the coordinator (under the coordinator's ledger
right after the partial of a slot close is sent), and only the records that the checkpoint
covers are acknowledged; after a crash the partition resumes from its checkpoint and
re-reads the rest, which reproduces the same partials. The coordinator's state (ledger, pending
counts, recorded releases) is written to the ``coordinator`` table for every partial before any
release it caused is emitted; a restarted coordinator re-emits recorded releases that it had not
confirmed and never recomputes a released slot. Dead letters are delivered at least once,
but for those the broker refuses (logged and counted; their batch is acknowledged all the same).

Under the partitions' ledgers (dynamic mechanisms, DPBD, DPBA) each partition keeps its users'
ledger in its checkpoint and converses with the coordinator slot by slot
(:class:`~streams.job.partitions.ledger.PartitionLedger`): every worker reads the whole
``decisions`` topic with a consumer of its own and hands each record to its partitions. Their
state is checkpointed before the messages it implies are sent, and those messages are sent
again when a partition resumes.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import faust
from faust.types import TP, EventT

from streams.job.config import JobConfig
from streams.job.coordination.coordinator import Coordinator
from streams.job.operations.observe import METRICS_HOST, Observer
from streams.job.operations.worker_metrics import WorkerMetrics
from streams.job.partitions.registry_store import key_partition_of
from streams.job.roles import placement_type
from streams.job.source.history_start import HistoryStart
from streams.job.source.rekey import Rekeyer, SourceSettings
from streams.job.worker.coordinator_runner import CoordinatorRunner
from streams.job.worker.ingest import BatchIngest, ingest_settings, run_when_started
from streams.job.worker.membership import default_instance_id, leave_group
from streams.job.worker.partition_runner import PartitionRunner
from streams.job.worker.preflight import TABLE_PARTITIONS
from streams.job.worker.read_stalls import READ_STALL_S, ReadStalls
from streams.job.worker.recovery_watch import RecoveryWatch
from streams.job.worker.tables import TrackedTable
from streams.kafka.offsets import committed_offsets, holds_records
from streams.kafka.producer import RawProducer, key_partition
from streams.kafka.settings import current as current_settings
from streams.kafka.settings import faust_options
from streams.kafka.topics import Topics, min_insync_replicas

log = logging.getLogger("pwevent.job")

#: RocksDB options of the ``users`` table's store (per partition). Faust's defaults (64 MB
#: memtables, up to three, a 2 GB block cache) suit a table of many small entries; this one
#: holds each partition's registry as a few compressed blocks, rewritten as snapshots, so a
#: 64 MB memtable kept every snapshot written since the start in memory. Smaller memtables
#: only flush sooner; the registry is read from the store at a restart, once.
USERS_ROCKSDB = {"write_buffer_size": 8 * 2**20, "max_write_buffer_number": 2,
                 "block_cache_size": 8 * 2**20, "block_cache_compressed_size": 8 * 2**20}

#: How old the worker's consumer lets its metadata of the topics grow (ms) before asking again:
#: a partition added to a source topic is seen, and read, within about this long.
METADATA_MAX_AGE_MS = 5_000


class UsersTable(TrackedTable):
    """The ``users`` table: each partition's registry in bulk
    (:mod:`streams.job.partitions.registry_store`), under keys that name the partition, and, as
    stored before that form, one entry per user, under the user's key. A record belongs to the
    partition its key names, or its user's key maps to, which is the partition of its
    requirements (a requirement on another one is dead-lettered, never written): restoring the
    table from its changelog takes a record only from that partition, so that no worker
    registers a user from a record of another partition."""

    def apply_changelog_batch(self, batch: Iterable[EventT]) -> None:
        events = list(batch)
        own = [e for e in events if isinstance(e.message.key, bytes)
               and owner_partition(e.message.key, self.partitions) == e.message.partition]
        if len(own) < len(events):
            log.warning("users table: %d changelog records on a partition their user does not "
                        "belong to were not restored", len(events) - len(own))
        super().apply_changelog_batch(own)


def owner_partition(key: bytes, partitions: int) -> int:
    """The partition a ``users`` table record belongs to."""
    named = key_partition_of(key)
    return key_partition(key, partitions) if named is None else named


class Worker(faust.Worker):
    """``faust.Worker`` for a :class:`Job`: it logs its identity in the consumer group at start
    (what ``pwevent group remove`` takes), and once the app has stopped (its consumer closed,
    its offsets committed, its tables and producer flushed) it leaves the group, so that a
    worker stopped by SIGTERM or Ctrl-C hands its partitions over at once. It runs the job's
    :meth:`Job.services` beside the app (started before it, stopped after it).

    It shows no terminal spinner. ``faust.Worker`` keeps one at log levels of warning and above,
    and sets the root logger to debug so that every record turns it. Every library's debug call
    then builds a record that only the spinner reads: aiokafka's, a few for each fetch. An idle
    worker at ``--loglevel warning`` took 0.095 CPU s a second with it, 0.074 without
    (docs/performance.md, "Idle consumers on the embedded broker")."""

    def __init__(self, job: Job, **kwargs: Any) -> None:
        super().__init__(job.app, *job.services(), **kwargs)
        self.spinner = None
        self.job = job

    async def on_first_start(self) -> None:
        await super().on_first_start()  # sets up logging
        job = self.job
        log.info("joining group %s as instance %s", job.group_id, job.instance_id)

    async def on_shutdown(self) -> None:
        await super().on_shutdown()
        job = self.job
        await job.close_reports_out()
        error = await leave_group(job.broker, job.group_id, job.instance_id)
        if error is None:
            log.info("left group %s (instance %s)", job.group_id, job.instance_id)
        else:
            log.warning("could not leave group %s (instance %s): %s", job.group_id,
                        job.instance_id, error)


class Job:
    """One worker of the job; every worker of a deployment runs the same code and settings."""

    def __init__(
        self, config: JobConfig, broker: str, data_dir: Path, instance_id: str | None = None,
        metrics_host: str = METRICS_HOST, metrics_port: int = 0,
        source: SourceSettings | None = None, history: Sequence[HistoryStart] = (),
    ) -> None:
        self.config = config
        self.broker = broker
        self.topics = Topics(prefix=config.prefix, partitions=config.partitions)
        self.group_id = config.app_id()  # Faust's consumer group is the app's id
        self.instance_id = instance_id or default_instance_id(data_dir)
        self.app = faust.App(
            self.group_id,
            **ingest_settings(
                broker=f"kafka://{broker}",
                store="rocksdb://",
                datadir=str(data_dir),
                web_enabled=False,
                consumer_auto_offset_reset="earliest",
                topic_partitions=config.partitions,
                **faust_options(),  # credentials, replication factor of created topics
                producer_acks=-1,
                broker_commit_interval=1.0,
                key_serializer="raw",
                value_serializer="raw",
                # no standby replicas of the tables: with standbys, Faust's sticky assignor
                # lets every member keep up to ceil(partitions / members) partitions, so a
                # worker added to two on 4 partitions gets none; without them it first trims
                # every member to floor(partitions / members). A worker that takes a partition
                # over restores its tables from their (compacted) changelogs instead.
                table_standby_replicas=0,
                # a worker that died is noticed after this long, and its partitions move on
                broker_session_timeout=10.0,
                broker_heartbeat_interval=1.0,
                # static membership: a worker restarted after a crash takes its old place in
                # the group at once; a worker that stops cleanly leaves the group
                # (:class:`Worker`), so its partitions move to the others
                consumer_group_instance_id=self.instance_id,
                # a partition added to a source topic is seen within seconds, not Faust's five
                # minutes: it holds the stream's event time back from then on
                # (_follow_source_partitions), and the group rebalances to read it
                consumer_metadata_max_age_ms=METADATA_MAX_AGE_MS,
            ),
        )
        table = {"key_type": bytes, "value_type": bytes,  # stored and logged as raw bytes
                 # acknowledged changelog writes survive the loss of one node (acks=all)
                 "extra_topic_configs": {"min.insync.replicas": str(min_insync_replicas(
                     current_settings().replication_factor))}}
        parts = {name: n or config.partitions for name, n in TABLE_PARTITIONS.items()}

        def add(kind: type[TrackedTable], name: str, **extra: Any) -> TrackedTable:
            return self.app.tables.add(kind(self.app, name=name, beacon=self.app.tables.beacon,
                                            partitions=parts[name], **table, **extra))

        # options: a copy, as Faust's store pops from it
        self.users = add(UsersTable, "users", options=dict(USERS_ROCKSDB))
        self.checkpoints = add(TrackedTable, "checkpoints")
        self.state = add(TrackedTable, "coordinator")
        self.counters: Counter[str] = Counter()
        # operating the worker: metrics (streams/job/operations/worker_metrics.py), updated where
        # ``counters`` are, and /metrics, /healthz, /readyz (streams/job/operations/observe.py)
        self.metrics = WorkerMetrics(self.topics.reports)
        for start in history:  # a new live stream's source records before its start, not read
            if start.skipped:
                self.counters["source_history_not_read"] += start.skipped
                self.metrics.history_not_read(start.topic, start.skipped)
        self.partitions = PartitionRunner(self.app, config, broker, self.topics, self.users,
                                          self.checkpoints, self.counters, self.metrics)
        self.coordination = CoordinatorRunner(self.app, config, broker, self.topics, self.state,
                                              self.counters, self.metrics)
        BatchIngest(self.app, self.topics.requirements, self.partitions.on_requirements)
        BatchIngest(self.app, self.topics.reports, self.partitions.on_reports)
        # the coordinator takes slot-partials as raw batches with their offsets, like the
        # reports: a record the consumer skipped is noticed and read again (ContinuityGuard)
        BatchIngest(self.app, self.topics.slot_partials, self.coordination.on_partials)
        # source topics: mapped and re-keyed by user onto reports (streams/job/source/rekey.py)
        self.rekeyer: Rekeyer | None = None
        self._reports_out: RawProducer | None = None
        if source is not None:
            self.rekeyer = Rekeyer(config, source, self.topics, self._send,
                                   self.partitions.dead_letters, self.counters, self.metrics,
                                   on_produced=self.partitions.took_source,
                                   acknowledge=self._acknowledge,
                                   send_reports=self._send_reports)
            for topic in source.topics:
                BatchIngest(self.app, topic, self.rekeyer.handler(topic), timestamps=True)
            run_when_started(self.app, self._follow_registrations)
            run_when_started(self.app, self._say_idle, every=0.25)
            self.source_stalls = ReadStalls()
            self._holding: set[tuple[TP, int, int]] = set()
            run_when_started(self.app, self._check_source_reads, every=1.0)
            run_when_started(self.app, self._follow_source_partitions, every=1.0)
        run_when_started(self.app, self.partitions.on_tick, every=0.25)
        run_when_started(self.app, self.partitions.check_reads, every=1.0)
        run_when_started(self.app, self.on_status, every=10.0)
        self.recovery = RecoveryWatch(self.app)
        run_when_started(self.app, self.recovery.check, every=1.0)
        self.converses = placement_type(config).converses
        if self.converses:  # partitions keep ledgers: they hear decisions
            run_when_started(self.app, self.partitions.read_decisions)
        self.app.on_rebalance_complete.connect(self.on_rebalance_complete)
        self.app.on_partitions_revoked.connect(self.on_revoked)
        # the endpoints on ``metrics_port`` (0: no server)
        self.observer = Observer(self, metrics_host, metrics_port) if metrics_port else None

    async def _send(self, topic: str, key: bytes, value: bytes, partition: int) -> Any:
        return await self.app.producer.send(topic, key, value, partition, None, None)

    async def _send_reports(self, records: list[tuple[bytes, bytes]], partitions: list[int],
                            ) -> asyncio.Future[Any]:
        """Enqueue re-keyed reports for ``reports`` in record batches, each on its key's
        partition (``partitions``: murmur2 of the keys, as the stage hashed them); returns a
        future resolved once the broker has them all (Faust's producer takes about 50 us a
        record, a quarter of the source stage's budget). Raises if they cannot be enqueued."""
        if self._reports_out is None:
            out = RawProducer(self.broker, self.topics.reports, self.config.partitions)
            await out.start()
            self._reports_out = out
        submitted = await self._reports_out.submit(records, partitions=partitions)
        for _recs, outcome in submitted:
            if isinstance(outcome, BaseException):
                raise outcome
        return asyncio.gather(*(outcome for _recs, outcome in submitted))

    async def close_reports_out(self) -> None:
        """Flush and close the re-keyed reports' producer, if it was started."""
        if self._reports_out is not None:
            await self._reports_out.stop(timeout=10)
            self._reports_out = None

    def _acknowledge(self, topic: str, partition: int, stop: int) -> None:
        self.app.consumer.acknowledge(TP(topic, partition), stop)

    async def _say_idle(self) -> None:
        """Source partitions this worker holds that are read to their end and quiet stop
        holding the stream's event time back (:meth:`Rekeyer.say_idle`)."""
        rekeyer = self.rekeyer
        assert rekeyer is not None
        consumer = self.app.consumer
        if not consumer.flow_active:
            return
        sources = set(rekeyer.settings.topics)
        assigned = sorted((tp.topic, tp.partition) for tp in consumer.assignment()
                          if tp.topic in sources)

        async def caught_up(topic: str, partition: int) -> bool:
            tp = TP(topic, partition)

            async def start() -> int | None:
                try:
                    committed = await committed_offsets(self.broker, self.group_id, topic,
                                                        retry_for=2.0)
                    if partition in committed:
                        return committed[partition]
                    earliest = await asyncio.wait_for(consumer.earliest_offsets(tp), 2.0)
                except Exception:  # noqa: BLE001 - a rebalance or a node loss: ask again later
                    return None
                return earliest.get(tp)

            async def holds(first: int, stop: int) -> bool:
                return await self._holds_records(tp, first, stop)

            return await rekeyer.read_to_end((topic, partition), consumer.highwater(tp), start,
                                             holds)

        await rekeyer.say_idle(assigned, caught_up)

    async def _check_source_reads(self) -> None:
        """Read a source partition again from the offset after the last record handed to the
        stage when the consumer stands past it and nothing arrived for ``READ_STALL_S`` seconds
        (:mod:`streams.job.worker.read_stalls`): records fetched and dropped would otherwise
        never be forwarded, and the partition would hold the stream's event time back."""
        rekeyer = self.rekeyer
        assert rekeyer is not None
        consumer = self.app.consumer
        if not consumer.flow_active or self.app.tables.recovery.in_recovery:
            self.source_stalls.clear()
            return
        sources = set(rekeyer.settings.topics)
        expected = {tp: rekeyer.handed[where] for tp in consumer.assignment()
                    if tp.topic in sources and (where := (tp.topic, tp.partition)) in rekeyer.handed
                    and where not in rekeyer.in_batch}

        async def dropped(tp: TP, offset: int, position: int) -> bool:
            if await self._holds_records(tp, offset, position):
                return True
            rekeyer.count_past((tp.topic, tp.partition), position)  # markers, aborted records only
            return False

        for tp, position, offset in await self.source_stalls.read_again(consumer, expected,
                                                                        dropped):
            log.warning("source partition %s[%d] handed nothing to the stage for %g s with the "
                        "consumer at offset %d, past %d: records were fetched but never handed "
                        "over; reading them again", tp.topic, tp.partition, READ_STALL_S,
                        position, offset)
            self.counters["source_reads_resumed"] += 1

    async def _follow_source_partitions(self) -> None:
        """Follow partitions added to a source topic while the job runs, as the consumer's
        metadata shows them: from then on every partition of ``reports`` this worker holds, or
        takes later, waits for their progress too (``PartitionRunner.grow_sources``). Every
        worker does the same from its own metadata, refreshed every
        :data:`METADATA_MAX_AGE_MS`; records written to a new partition before then whose slot
        another partition's progress closed meanwhile are ``late``."""
        rekeyer = self.rekeyer
        assert rekeyer is not None
        consumer = self.app.consumer
        known = self.partitions.config.source_partitions
        seen = tuple(max(n, consumer.topic_partitions(topic) or 0)
                     for topic, n in zip(rekeyer.settings.topics, known, strict=True))
        if seen == known:
            return
        for topic, before, now in zip(rekeyer.settings.topics, known, seen, strict=True):
            if now > before:
                log.warning("source topic %s grew from %d to %d partitions: the stream's event "
                            "time now waits for the new ones too", topic, before, now)
                self.counters["source_partitions_added"] += now - before
        self.partitions.grow_sources(seen)

    async def _holds_records(self, tp: TP, first: int, stop: int) -> bool:
        """Whether source partition ``tp`` holds a record to hand over at an offset in
        [``first``, ``stop``) (:func:`streams.kafka.offsets.holds_records`; ``True`` when the
        broker does not say). A range found to hold one is remembered: records stay."""
        if (tp, first, stop) in self._holding:
            return True
        try:
            found = await holds_records(self.broker, tp.topic, tp.partition, first, stop)
        except Exception as exc:  # noqa: BLE001 - not known: as if it did
            log.info("records of %s[%d] %d-%d unknown: %r", tp.topic, tp.partition, first, stop,
                     exc)
            return True
        if found:
            if len(self._holding) >= 10_000:
                self._holding.clear()
            self._holding.add((tp, first, stop))
        return found

    async def _follow_registrations(self) -> None:
        assert self.rekeyer is not None
        await self.rekeyer.follow(self.broker, self.group_id)

    @property
    def coordinator(self) -> Coordinator | None:
        """The job's coordinator, while this worker holds it (what :class:`Observer` reads)."""
        return self.coordination.coordinator

    def services(self) -> list[Observer]:
        """Services a worker runs beside the app: the metrics server, when it has a port."""
        return [] if self.observer is None else [self.observer]

    async def on_revoked(self, sender: Any, revoked: Any, **_: Any) -> None:
        """Forget the state of partitions another worker takes over: if one comes back, it
        resumes from its checkpoint and the ``users`` table, which the other worker kept. The
        same holds for the coordinator: another worker may release slots while it is away, so
        it is restored from the ``coordinator`` table when it comes back."""
        for tp in revoked:
            if tp.topic in (self.topics.reports, self.topics.requirements):
                self.partitions.forget(tp.partition)
            elif tp.topic == self.topics.slot_partials:
                self.coordination.forget()
            elif self.rekeyer is not None:
                self.rekeyer.forget(tp.topic, tp.partition)

    async def on_rebalance_complete(self, sender: Any, **_: Any) -> None:
        """Once the tables are recovered after a rebalance, before records flow: live, close
        what ``--max-hold-ms`` allows no longer to wait (:meth:`PartitionRunner.hold_assigned`);
        the source partitions this worker now holds hold the stream's event time until read
        (:meth:`Rekeyer.say_busy`);
        under the partitions' ledgers, resume the partitions this worker holds that have not
        resumed (one kept across the rebalance with nothing left to read would otherwise never
        plan another slot)."""
        await self.partitions.hold_assigned()
        if self.rekeyer is not None:
            sources = set(self.rekeyer.settings.topics)
            await self.rekeyer.say_busy(sorted(
                (tp.topic, tp.partition) for tp in self.app.consumer.assignment()
                if tp.topic in sources))
        if self.converses:
            await self.partitions.resume_assigned()

    def event_time_status(self) -> tuple[float, tuple[str, int, int] | None]:
        """:meth:`PartitionRunner.event_time_status`, the source topic named."""
        wait, holding = self.partitions.event_time_status()
        if holding is None or self.rekeyer is None:
            return wait, None
        topics = self.rekeyer.settings.topics
        name = topics[holding[0]] if holding[0] < len(topics) else str(holding[0])
        return wait, (name, holding[1], holding[2])

    async def on_status(self) -> None:
        """Log counters now and then, and that the job is catching up while a live slot is
        held open past its end (a backlog being read, a lagging input partition)."""
        if self.counters:
            log.info("counters %s", dict(sorted(self.counters.items())))
        wait, holding = self.event_time_status()
        expected = (self.config.lateness_ms + self.config.idle_close_ms) / 1000 + 5
        if wait > expected:
            waits_for = (f"; the stream waits for source partition {holding[0]}[{holding[1]}], "
                         f"{holding[2]} ms of event time behind" if holding else "")
            log.warning("catching up: the oldest open slot ended %.0f s ago and closes once every "
                        "input partition is read past it, or --max-hold-ms (%d ms) after its "
                        "end%s", wait, self.config.max_hold_ms, waits_for)
