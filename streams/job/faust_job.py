"""The Faust job: partition workers, the per-slot coordinator, RocksDB-backed tables.

Data path (docs/design.md): ``requirements`` -> the ``users`` table and each partition's registry;
``reports`` -> :class:`~streams.job.partition.PartitionAccumulator` per partition (batched ingest),
which sends the messages of :mod:`streams.job.slot_protocol` to ``slot-partials`` whenever slots
close; the :class:`~streams.job.coordinator.Coordinator` reads ``slot-partials`` (batched ingest as
well, each record once by offset) and releases each slot once to ``releases`` (with its
``decisions``). Where the budget ledger lives (:mod:`streams.job.placement`) decides what the
messages hold and in which order a partition checkpoints and sends.

Durability. A partition's accumulator is checkpointed into the ``checkpoints`` table (RocksDB,
with a changelog) whenever it has messages for the coordinator (under the coordinator's ledger
right after the partial of a slot close is sent), and only the records that the checkpoint
covers are acknowledged; after a crash the partition resumes from its checkpoint and
re-reads the rest, which reproduces the same partials. The coordinator's state (ledger, pending
counts, recorded releases) is written to the ``coordinator`` table for every partial before any
release it caused is emitted; a restarted coordinator re-emits recorded releases that it had not
confirmed and never recomputes a released slot. Dead letters are delivered at least once.

Under the partitions' ledgers (dynamic mechanisms, DPBD, DPBA) each partition keeps its users'
ledger in its checkpoint and converses with the coordinator slot by slot
(:class:`~streams.job.partition_ledger.PartitionLedger`): every worker reads the whole
``decisions`` topic with a consumer of its own and hands each record to its partitions. Their
state is checkpointed before the messages it implies are sent, and those messages are sent
again when a partition resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import socket
import time
from collections import Counter
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import Any

import aiokafka.errors as kafka_errors
import faust
import orjson
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Int16, Int32, Schema, String

from streams.job.config import JobConfig
from streams.job.coordinator import Coordinator
from streams.job.ingest import (
    BatchIngest,
    ContinuityGuard,
    RawRecord,
    Rewind,
    ingest_settings,
    key_partition,
    partition_context,
)
from streams.job.observe import METRICS_HOST, Observer, WorkerMetrics, accepted_since
from streams.job.partition import DeadLetter, PartitionAccumulator, watermark_record
from streams.job.registries import UserRegistry
from streams.job.roles import make_accumulator, make_coordinator, make_registry, placement_type
from streams.job.slot_protocol import (
    Control,
    control,
    declaration_key,
    decode,
    encode,
    kind,
    partials_key,
)
from streams.kafka.settings import client_options, faust_options
from streams.kafka.topics import Topics
from streams.records.dead_letters import dead_letter
from streams.records.input_formats import DEAD_LETTER_PAYLOAD_BYTES

log = logging.getLogger("pwevent.job")

COORDINATOR_KEY = "state"
CHECKPOINT_CHUNK = 512 * 1024  # bytes per checkpoint record: well below Kafka's 1 MiB default
MANIFEST = "chunks|"
RECOVERY_STALL_S = 5.0  # a table recovery that applied nothing for this long is looked at


def _manifest(value: bytes | None) -> tuple[int, int] | None:
    """(generation, chunks) of a checkpoint manifest; ``None`` for anything else."""
    if not value or not value.startswith(MANIFEST.encode()):
        return None
    gen, count = value[len(MANIFEST):].decode().split("|")
    return int(gen), int(count)


def write_chunked(table: MutableMapping[bytes, bytes], p: int, data: bytes,
                  chunk: int = CHECKPOINT_CHUNK) -> None:
    """Store ``data`` under partition ``p`` of ``table``, cut into records of at most ``chunk``
    bytes: the chunks of a new generation first, then the manifest that names them, then the
    previous generation's chunks are deleted (a crash in between leaves a readable state)."""
    key = str(p).encode()
    old = _manifest(table.get(key))
    gen = old[0] + 1 if old else 1
    parts = [data[i:i + chunk] for i in range(0, len(data), chunk)] or [b""]
    for i, part in enumerate(parts):
        table[f"{p}/{gen}/{i}".encode()] = part
    table[key] = f"{MANIFEST}{gen}|{len(parts)}".encode()
    if old:
        for i in range(old[1]):
            table.pop(f"{p}/{old[0]}/{i}".encode(), None)


def read_chunked(table: Mapping[bytes, bytes], p: int) -> bytes | None:
    """What :func:`write_chunked` stored under partition ``p`` (a value stored whole is read as
    it is); ``None`` when nothing was."""
    value = table.get(str(p).encode())
    manifest = _manifest(value)
    if manifest is None:
        return value or None
    gen, count = manifest
    parts = [table.get(f"{p}/{gen}/{i}".encode()) for i in range(count)]
    if any(part is None for part in parts):
        raise RuntimeError(f"checkpoint of partition {p} lacks chunks of generation {gen}")
    return b"".join(parts)  # type: ignore[arg-type]


def default_instance_id(data_dir: Path) -> str:
    """A worker's stable identity in the consumer group: its host and its data directory."""
    digest = hashlib.sha1(str(data_dir.resolve()).encode()).hexdigest()[:12]
    return f"{socket.gethostname()}-{digest}"


class _LeaveGroupResponseV3(Response):
    API_KEY = 13
    API_VERSION = 3
    SCHEMA = Schema(("throttle_time_ms", Int32), ("error_code", Int16),
                    ("members", Array(("member_id", String("utf-8")),
                                      ("group_instance_id", String("utf-8")),
                                      ("error_code", Int16))))


class _LeaveGroupRequestV3(RequestStruct):
    API_KEY = 13
    API_VERSION = 3
    RESPONSE_TYPE = _LeaveGroupResponseV3
    SCHEMA = Schema(("group", String("utf-8")),
                    ("members", Array(("member_id", String("utf-8")),
                                      ("group_instance_id", String("utf-8")))))


class _RemoveStaticMember(Request[_LeaveGroupRequestV3]):
    """LeaveGroup v3 (KIP-345) naming a member by its group instance id and no member id: how
    Kafka's admin client removes a static member (aiokafka knows LeaveGroup v0 and v1 only)."""

    API_KEY = 13

    def __init__(self, group: str, instance_id: str) -> None:
        self.group, self.instance_id = group, instance_id

    def build(self, request_struct_class: type[_LeaveGroupRequestV3]) -> _LeaveGroupRequestV3:
        return request_struct_class(self.group, [("", self.instance_id)])


async def leave_group(bootstrap: str, group: str, instance_id: str,
                      timeout: float = 5.0) -> str | None:
    """Remove the static member ``instance_id`` from ``group``, so that the group rebalances and
    its partitions go to the other members now (a static member that merely stops keeps them
    until its session times out; the embedded broker never times one out). Returns ``None``
    when the broker removed it, else the error's name (``UnknownMemberIdError``: it was not a
    member); never raises."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap, **client_options(),
                            request_timeout_ms=int(timeout * 1000))

    async def go() -> str | None:
        await client.bootstrap()
        node = await client.coordinator_lookup(CoordinationType.GROUP, group)
        resp = await client.send(node, _RemoveStaticMember(group, instance_id))
        codes = [resp.error_code] + [m[2] for m in resp.members]
        code = next((c for c in codes if c), 0)
        return None if code == 0 else kafka_errors.for_code(code).__name__

    try:
        return await asyncio.wait_for(go(), timeout)
    except Exception as exc:  # noqa: BLE001 - reported, never fatal: the worker is stopping
        return repr(exc)
    finally:
        with contextlib.suppress(Exception):
            await client.close()


class Worker(faust.Worker):
    """``faust.Worker`` for a :class:`Job`: once the app has stopped (its consumer closed, its
    offsets committed, its tables and producer flushed), the worker leaves the consumer group,
    so that a worker stopped by SIGTERM or Ctrl-C hands its partitions over at once. It runs
    the job's :meth:`Job.services` beside the app (started before it, stopped after it)."""

    def __init__(self, job: Job, **kwargs: Any) -> None:
        super().__init__(job.app, *job.services(), **kwargs)
        self.job = job

    async def on_shutdown(self) -> None:
        await super().on_shutdown()
        job = self.job
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
    ) -> None:
        self.config = config
        self.secret = config.secret_bytes()
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
            ),
        )
        table = {"key_type": bytes, "value_type": bytes}  # stored and logged as raw bytes
        self.users = self.app.Table("users", partitions=config.partitions, **table)
        self.checkpoints = self.app.Table("checkpoints", partitions=config.partitions, **table)
        self.state = self.app.Table("coordinator", partitions=1, **table)
        self.registries: dict[int, UserRegistry] = {}
        self.accumulators: dict[int, PartitionAccumulator] = {}
        self.acked: dict[int, int] = {}
        self.continuity = ContinuityGuard(self.topics.reports)
        self.partials_continuity = ContinuityGuard(self.topics.slot_partials)
        self.coordinator: Coordinator | None = None
        # the decisions topic as read so far (partitions keeping ledgers), a lock per partition
        self.start_record: Control | None = None
        self.decision_log: dict[int, bool] = {}
        self.locks: dict[int, asyncio.Lock] = {}
        self.resumed: set[int] = set()
        self.counters: Counter[str] = Counter()
        self.last_report = time.monotonic()
        self.last_tick: dict[int, int] = {}
        self.last_activity: dict[int, float] = {}
        BatchIngest(self.app, self.topics.requirements, self.on_requirements)
        BatchIngest(self.app, self.topics.reports, self.on_reports)
        # the coordinator takes slot-partials as raw batches with their offsets, like the
        # reports: a record the consumer skipped is noticed and read again (ContinuityGuard)
        BatchIngest(self.app, self.topics.slot_partials, self.on_partials)
        self.app.timer(interval=0.25)(self.on_tick)
        self.app.timer(interval=10.0)(self.on_status)
        self.recovery_stall: dict[Any, tuple[int, float]] = {}
        self.app.timer(interval=1.0)(self.on_recovery_watch)
        if placement_type(config).converses:  # partitions keep ledgers: they hear decisions
            self.app.task(self.read_decisions)
        self.app.on_partitions_revoked.connect(self.on_revoked)
        # operating the worker (streams/job/observe.py): metrics, updated where ``counters`` are,
        # and /metrics, /healthz, /readyz on ``metrics_port`` (0: no server)
        self.metrics = WorkerMetrics(self.topics.reports)
        self.observer = Observer(self, metrics_host, metrics_port) if metrics_port else None

    def services(self) -> list[Observer]:
        """Services a worker runs beside the app: the metrics server, when it has a port."""
        return [] if self.observer is None else [self.observer]

    # -- partitions ------------------------------------------------------------------------

    def registry(self, p: int) -> UserRegistry:
        """Partition ``p``'s registered users, rebuilt from the ``users`` table when first used."""
        reg = self.registries.get(p)
        if reg is None:
            reg = self.registries[p] = make_registry(self.config, p)
            n = self.config.partitions
            reg.load([(key.decode(), value) for key, value in list(self.users.items())
                      if key_partition(key, n) == p and value])
        return reg

    async def on_revoked(self, sender: Any, revoked: Any, **_: Any) -> None:
        """Forget the state of partitions another worker takes over: if one comes back, it
        resumes from its checkpoint and the ``users`` table, which the other worker kept. The
        same holds for the coordinator: another worker may release slots while it is away, so
        it is restored from the ``coordinator`` table when it comes back."""
        for tp in revoked:
            if tp.topic in (self.topics.reports, self.topics.requirements):
                self.accumulators.pop(tp.partition, None)
                self.registries.pop(tp.partition, None)
                self.resumed.discard(tp.partition)
            elif tp.topic == self.topics.slot_partials:
                self.coordinator = None

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
        """Register users; reject invalid requirements to dead letters."""
        p = records[0][2]
        reg = self.registry(p)
        dead: list[DeadLetter] = []
        for key, value, part, offset in records:
            user, reason, detail = reg.apply(key, value)
            if reason:
                dead.append(DeadLetter(self.topics.requirements, part, offset, key, value,
                                       reason, detail))
            elif user is not None and user in reg.index_of:
                self.users[user.encode()] = reg.export(user)
        self.counters["requirements"] += len(records) - len(dead)
        self.metrics.took_requirements(len(records) - len(dead))
        await self._send_dead(dead)
        await self.app.producer.flush()

    async def on_reports(self, records: list[RawRecord]) -> int | Rewind:
        """Count a batch of reports; send partials of closed slots; checkpoint; hold the rest.
        A batch that does not continue where the partition's state left off is not counted:
        the partition is read again from there (:class:`~streams.job.ingest.ContinuityGuard`)."""
        p = records[0][2]
        rewind = self.continuity.check(p, self.accumulator(p).next_offset, records)
        if rewind is not None:
            self.counters["rewinds"] += 1
            self.metrics.rewound()
            return rewind
        async with self._lock(p):
            acc, messages = self._resumed(p)
            before = acc.accepted.total()
            more, dead = acc.process(records, self.topics.reports)
            self.metrics.took_reports(accepted_since(before, acc.accepted.total(), more))
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
        """Partition ``p``'s accumulator and, when it was just resumed, what it must send: its
        last messages again and what the decisions read so far imply."""
        acc = self.accumulator(p)
        if p in self.resumed:
            return acc, []
        self.resumed.add(p)
        return acc, acc.resume(self.start_record, self.decision_log)

    async def _say(self, p: int, acc: PartitionAccumulator, messages: list[dict],
                   pending: list[Any], checkpoint: bool) -> None:
        """Send ``messages`` to the coordinator and checkpoint the partition (when it said
        something, or ``checkpoint``), once ``pending`` sends are done. A placement that keeps
        its messages in the checkpoint has it written first (docs/design.md, record before
        emitting: a plan that was sent is never replaced by a different one); otherwise the
        messages go first, as re-reading the records the checkpoint lacks reproduces them."""
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
        return await self._send_dead(dead, wait=False)

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

    async def _send_dead(self, dead: list[DeadLetter], wait: bool = True) -> list[Any]:
        """Send dead letters (payloads capped, so any record fits); a dead letter the broker
        refuses is logged and counted, never allowed to stop the partition."""
        self.metrics.dead(dead)
        futures = []
        for d in dead:
            value = dead_letter(d.topic, d.partition, d.offset, d.key, d.value, d.reason,
                                d.detail)
            key = None if d.key is None else d.key[:DEAD_LETTER_PAYLOAD_BYTES]
            self.counters[f"dead:{d.reason}"] += 1
            try:
                sent = await self.app.producer.send(self.topics.dead_letters, key, value, None,
                                                    None, None)
            except Exception as exc:  # noqa: BLE001 - counted and logged, never fatal
                self._dead_letter_failed(d, exc)
                continue
            futures.append(asyncio.ensure_future(self._settle_dead(d, sent)))
        if wait and futures:
            await asyncio.gather(*futures)
            return []
        return futures

    async def _settle_dead(self, d: DeadLetter, sent: Any) -> None:
        try:
            await sent
        except Exception as exc:  # noqa: BLE001 - counted and logged, never fatal
            self._dead_letter_failed(d, exc)

    def _dead_letter_failed(self, d: DeadLetter, exc: BaseException) -> None:
        self.counters["dead_letters_failed"] += 1
        self.metrics.dead_letter_failed()
        log.error("dead letter of %s[%d]@%d (%s) could not be sent: %r", d.topic, d.partition,
                  d.offset, d.reason, exc)

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
        target = max(marks, default=None)
        if now - self.last_report >= idle:
            ends = [a.idle_watermark() for a in self.accumulators.values()]
            ends = [e for e in ends if e is not None]
            if ends:
                target = max(max(ends), target or 0)
        if target is None:
            return
        for p in assigned:
            acc = self.accumulators.get(p)
            current = acc.slotter.watermark if acc is not None else None
            quiet = now - self.last_activity.get(p, 0.0) >= idle
            if (current is None or current < target) and quiet \
                    and self.last_tick.get(p, -1) < target:
                self.last_tick[p] = target
                mark = watermark_record(target, self.secret, self.config.stream, p)
                await self.app.producer.send(self.topics.reports, None, mark, p, None, None)

    async def on_status(self) -> None:
        """Log counters now and then."""
        if self.counters:
            log.info("counters %s", dict(sorted(self.counters.items())))

    async def on_recovery_watch(self) -> None:
        """Resume a table recovery that no longer receives its changelog's records.

        A batch fetched while a rebalance stops the flow is dropped, and its partitions are
        rewound to their committed offsets (Faust's rule, which :mod:`streams.job.ingest` keeps). A
        changelog partition has no committed offset, so when such a batch holds the records of
        a changelog partition the worker has just been given, they are lost with it: the
        consumer stands past them and the table's recovery waits for them for ever (measured on
        the embedded broker in about 1 of 15 hand-overs after a worker left the group). When a
        partition's recovery has applied nothing for ``RECOVERY_STALL_S`` seconds while the
        consumer stands past what it applied, it is read again from there; records applied
        twice leave the table as it was, since they come again in order."""
        recovery = self.app.tables.recovery
        if not recovery.in_recovery:
            self.recovery_stall.clear()
            return
        now = time.monotonic()
        for tp in list(recovery.active_tps):
            applied = recovery.active_offsets.get(tp)
            highwater = recovery.active_highwaters.get(tp)
            if applied is None or highwater is None or applied >= highwater:
                self.recovery_stall.pop(tp, None)
                continue
            seen = self.recovery_stall.get(tp)
            if seen is None or seen[0] != applied:
                self.recovery_stall[tp] = (applied, now)
                continue
            if now - seen[1] < RECOVERY_STALL_S:
                continue
            try:
                position = await asyncio.wait_for(self.app.consumer.position(tp), 2.0)
                if position is None or position <= applied + 1:
                    continue
                log.warning("recovery of %s[%d] stalled at offset %d (highwater %d) with the "
                            "consumer at %d: records fetched during the rebalance were dropped; "
                            "reading them again", tp.topic, tp.partition, applied, highwater,
                            position)
                await self.app.consumer.seek(tp, applied + 1)
            except Exception as exc:  # noqa: BLE001 - a rebalance may take the partition away
                log.info("recovery of %s[%d] not resumed: %r", tp.topic, tp.partition, exc)
            self.recovery_stall[tp] = (applied, now)

    # -- coordinator -----------------------------------------------------------------------

    async def _coordinator(self) -> Coordinator:
        if self.coordinator is None:
            coord = make_coordinator(self.config)
            saved = self.state.get(COORDINATOR_KEY.encode())
            if saved:
                coord.restore(saved)
                log.info("coordinator resumes: next slot %s", coord.next_slot)
            await self._reconcile(coord)
            self.coordinator = coord
        return self.coordinator

    async def _reconcile(self, coord: Coordinator) -> None:
        """Take from the decisions and releases topics what the coordinator's state lacks.

        A coordinator without state whose stream already started (its state lost with the
        broker's last writes, or wiped) learns the nonce and every released slot; one whose
        state is older than the topics (the ``coordinator`` changelog lost writes that the
        releases topic kept, or local state was reset) takes the slots released after it.
        Either way no slot is ever released again, least of all with another value."""
        from streams.kafka.offsets import read_topic

        prefix = f"{self.config.stream}/".encode()
        decisions = await read_topic(self.broker, self.topics.decisions, idle=0.5, limit=120)
        start = next((orjson.loads(v) for k, v in decisions if k == prefix + b"start"), None)
        if start is None:
            return
        releases = await read_topic(self.broker, self.topics.releases, idle=0.5, limit=120)

        def by_slot(records: list[tuple[bytes | None, bytes]]) -> dict[int, bytes]:
            out: dict[int, bytes] = {}
            for key, value in records:
                rest = key[len(prefix):] if key and key.startswith(prefix) else b""
                if rest.isdigit():
                    out.setdefault(int(rest), value)  # the first, as analysts saw it
            return out

        fresh = coord.start is None
        if fresh:
            count = coord.recover(start, by_slot(decisions), by_slot(releases))
        else:
            count = coord.adopt(by_slot(decisions), by_slot(releases))
        if not count and not fresh:
            return
        self.state[COORDINATOR_KEY.encode()] = coord.snapshot()
        if fresh:
            log.warning("coordinator state was missing for stream %s, which started at slot "
                        "%s: recovered its nonce and %d released slots from the decisions and "
                        "releases topics", self.config.stream, start["start"], count)
        else:
            log.warning("coordinator state of stream %s was behind the releases topic: took "
                        "%d released slots from it, next slot %s", self.config.stream, count,
                        coord.next_slot)

    async def on_partials(self, records: list[RawRecord]) -> Rewind | None:
        """Release each slot once all partitions closed it; record before emitting. Takes the
        partitions' messages in offset order, each once: a batch that skips records the
        coordinator has not taken is not taken, and the topic is read again from there."""
        received = time.monotonic()  # pwevent_slot_release_seconds counts from here
        coord = await self._coordinator()
        if coord.input_offset is not None:
            rewind = self.partials_continuity.check(0, coord.input_offset, records)
            if rewind is not None:
                self.counters["rewinds"] += 1
                self.metrics.rewound()
                return rewind
        await self._emit(coord, coord.unemitted())
        for _key, value, _p, offset in records:
            if coord.input_offset is not None and offset < coord.input_offset:
                continue  # taken before a restart or a rewind
            coord.input_offset = offset + 1
            try:
                new = coord.receive(decode(value))
            except Exception as exc:  # noqa: BLE001 - no record may stop the releases
                log.error("bad partial message skipped: %r", exc)
                self.counters["bad_partials"] += 1
                new = []
            self.state[COORDINATOR_KEY.encode()] = coord.snapshot()
            await self.app.producer.flush()
            if new:
                await self._emit(coord, new)
                self.metrics.release_took(new, received)
                self.state[COORDINATOR_KEY.encode()] = coord.snapshot()
        return None

    async def _emit(self, coord: Coordinator,
                    releases: list[tuple[int, bytes | None, bytes]]) -> None:
        if not releases:
            return
        futures = []
        for slot, release, decision in releases:
            if release is None:  # a dynamic mechanism's start: on the decisions topic only
                key = f"{self.config.stream}/start".encode()
                futures.append(await self.app.producer.send(self.topics.decisions, key,
                                                            decision, 0, None, None))
                continue
            key = f"{self.config.stream}/{slot}".encode()
            # the record's timestamp is the slot's end in event time; Faust takes seconds and
            # truncates seconds * 1000 to ms, so half a millisecond more gives exactly ``end``
            end = self.config.clock.end(slot)
            timestamp = (end + 0.5) / 1000 if end >= 0 else None
            futures.append(await self.app.producer.send(self.topics.releases, key, release, 0,
                                                        timestamp, None))
            futures.append(await self.app.producer.send(self.topics.decisions, key, decision, 0,
                                                        None, None))
        await asyncio.gather(*futures)
        coord.mark_emitted(releases[-1][0])
        self.counters["releases"] += sum(r[1] is not None for r in releases)
        self.metrics.released(releases)
