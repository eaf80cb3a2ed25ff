"""The local-DP collector on Kafka: ``pwevent worker --mechanism
lbu|lsp|lpu|plbu|lbd|lba|lpd|lpa|mtsp``
(docs/ldp-reports.md, "The collector on Kafka").

It reads every partition of ``<prefix>.ldp-reports`` from its first offset, keeps what the
protocol allows (:class:`~streams.ldp_collector.collector.LdpCollector`), closes slots by the
watermark records in the topic (:mod:`.stream_time`) and writes each slot's release to
``<prefix>.ldp-releases`` and each refused record to ``<prefix>.dead-letters``. A two-round
stream's (lbd, lba) decisions go to ``<prefix>.ldp-decisions``, which its clients read. Live, it
writes the watermark records itself once a slot's end plus the lateness has passed on its
clock.

Its state is a function of the topic's records, partition by partition, so a restart (or a
second instance) rebuilds it by reading the topic again: it releases the same bytes, and sends
only the releases and decisions the topics lack and the dead letters past the offsets it
committed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from streams.job.partitions.watermarks import wall_clock_ms, watermark_record
from streams.kafka.consumer_stop import stop_consumer
from streams.kafka.offsets import read_topic, topic_partitions
from streams.kafka.settings import client_options, consumer_options
from streams.kafka.topics import Topics, TopicSpec, create_topics, min_insync_replicas
from streams.ldp_collector.collector import LdpCollector
from streams.ldp_collector.stream_time import PartitionedCollector, Refused
from streams.records.dead_letters import dead_letter
from streams.records.input_formats import DEAD_LETTER_PAYLOAD_BYTES

log = logging.getLogger("pwevent.ldp")

#: The protocols the collector runs on Kafka.
KAFKA_PROTOCOLS = ("lbu", "lsp", "lpu", "plbu", "lbd", "lba", "lpd", "lpa", "mtsp")
#: The most records one poll of the consumer returns.
POLL_RECORDS = 20_000


@dataclass(frozen=True)
class LdpJobSettings:
    """One collector's deployment: where its topics are, the stream it collects (what its
    clients are configured with) and how it keeps time."""

    broker: str
    prefix: str
    stream: str
    protocol: str
    d: int
    origin_ms: int
    slot_ms: int
    start: int
    E: float | None  # noqa: N815 - the papers' name
    w: int | None
    secret: bytes
    lpu_key: str = ""
    lpu_rotate: int = 0
    event_time: str = "live"
    lateness_ms: int = 0
    partitions: int = 4
    replication: int = 1
    #: seconds between commits of the offsets past the dead letters sent
    commit_every_s: float = 1.0

    def collector(self) -> LdpCollector:
        """A fresh collector of the stream (ValueError for a wrong parameter)."""
        return LdpCollector(self.protocol, self.d, origin_ms=self.origin_ms,
                            slot_ms=self.slot_ms, start=self.start, E=self.E, w=self.w,
                            lpu_key=self.lpu_key, lpu_rotate=self.lpu_rotate)

    @property
    def reports_topic(self) -> str:
        """The topic the clients write: ``<prefix>.ldp-reports``."""
        return f"{self.prefix}.ldp-reports"

    @property
    def releases_topic(self) -> str:
        """The topic of the releases: ``<prefix>.ldp-releases``."""
        return f"{self.prefix}.ldp-releases"

    @property
    def decisions_topic(self) -> str:
        """The topic of a two-round stream's decisions: ``<prefix>.ldp-decisions``."""
        return f"{self.prefix}.ldp-decisions"

    @property
    def dead_letters_topic(self) -> str:
        """The job's dead-letter topic: ``<prefix>.dead-letters``."""
        return Topics(prefix=self.prefix).dead_letters

    @property
    def group(self) -> str:
        """The consumer group whose offsets say which dead letters were sent."""
        return f"pwevent-{self.prefix}-{self.stream}-ldp"


def topic_specs(prefix: str, partitions: int, replication: int = 1) -> list[TopicSpec]:
    """The collector's topics: the reports (``partitions``; kept for good, since a restart
    reads them again), the releases and the decisions (one partition each, kept for good) and
    the dead letters."""
    durable = {"min.insync.replicas": str(min_insync_replicas(replication))}
    kept = {"cleanup.policy": "delete", "retention.ms": "-1", **durable}
    dead = Topics(prefix=prefix, replication=replication).spec("dead-letters")
    return [TopicSpec("ldp-reports", f"{prefix}.ldp-reports", partitions, replication, kept),
            TopicSpec("ldp-releases", f"{prefix}.ldp-releases", 1, replication, kept),
            TopicSpec("ldp-decisions", f"{prefix}.ldp-decisions", 1, replication, kept), dead]


def slots_by_stream(records: list[tuple[bytes | None, bytes]]) -> dict[str, set[int]]:
    """The slots each stream has a record of, from records keyed ``<stream>/<slot>`` (those of
    ``<prefix>.ldp-releases`` or ``<prefix>.ldp-decisions``); other keys are left out."""
    slots: dict[str, set[int]] = {}
    for key, _value in records:
        name, sep, slot = (key or b"").rpartition(b"/")
        if sep and slot.isdigit():
            slots.setdefault(name.decode("utf-8", "replace"), set()).add(int(slot))
    return slots


class StreamConflict(RuntimeError):
    """The prefix's topics carry another collector stream: its reports would be mixed in."""


class LdpJob:
    """One collector: :meth:`run` until ``stop`` is set; :attr:`counters` counts what it did
    (``reports``, ``released``, ``dead:<reason>``, ``watermarks``)."""

    def __init__(self, settings: LdpJobSettings,
                 clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        """A collector of ``settings``' stream; ``clock_ms`` is its clock, live."""
        self.settings = settings
        self.collector = settings.collector()
        self.clock_ms = clock_ms
        self.counters: Counter[str] = Counter()
        self.stream: PartitionedCollector | None = None
        #: set once the topic has been read to the end offsets it had at start
        self.caught_up = asyncio.Event()
        #: time.monotonic() of :meth:`run`'s start and of its first batch of records
        self.times: dict[str, float] = {}
        #: the partitions paused while their records wait for a decision (lbd, lba)
        self.paused: set[int] = set()

    async def run(self, stop: asyncio.Event) -> None:
        """Collect until ``stop`` is set; the topics are created if missing."""
        s = self.settings
        self.times["start"] = time.monotonic()
        consumer = AIOKafkaConsumer(bootstrap_servers=s.broker, group_id=s.group,
                                    enable_auto_commit=False, auto_offset_reset="earliest",
                                    max_poll_records=POLL_RECORDS, **consumer_options())
        producer = AIOKafkaProducer(bootstrap_servers=s.broker, acks="all",
                                    enable_idempotence=True, **client_options())
        try:
            await create_topics(s.broker, topic_specs(s.prefix, s.partitions, s.replication))
            history = slots_by_stream(await read_topic(s.broker, s.releases_topic))
            others = sorted(set(history) - {s.stream})
            if others:
                # every stream of a prefix reads the same ldp-reports
                raise StreamConflict(
                    f"{s.releases_topic} holds releases of stream {others[0]!r}: its reports, "
                    f"on the same {s.reports_topic}, would be counted in stream {s.stream!r} "
                    f"too; give stream {s.stream!r} topics of its own (--prefix)")
            released = history.get(s.stream, set())
            decided = slots_by_stream(await read_topic(s.broker, s.decisions_topic)).get(
                s.stream, set())
            await consumer.start()
            await producer.start()
            await self._collect(consumer, producer, released, decided, stop)
        finally:  # each closes its connections, started or not
            await producer.stop()
            await stop_consumer(consumer)

    async def _collect(self, consumer: AIOKafkaConsumer, producer: AIOKafkaProducer,
                       released: set[int], decided: set[int], stop: asyncio.Event) -> None:
        s = self.settings
        tps = await topic_partitions(consumer, s.reports_topic, wait=30)
        if not tps:
            raise RuntimeError(f"topic {s.reports_topic} has no partitions")
        self.stream = PartitionedCollector(self.collector, len(tps), s.secret, s.stream)
        committed = {tp.partition: (await consumer.committed(tp)) or 0 for tp in tps}
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = {tp.partition: end for tp, end in (await consumer.end_offsets(tps)).items()}
        log.info("collecting %s (%s, stream %s) from %d partitions: %d records to read again, "
                 "%d slots released before", s.reports_topic, s.protocol, s.stream, len(tps),
                 sum(ends.values()), len(released))
        position = {tp.partition: 0 for tp in tps}  # read up to here (dead letters decided)
        fetched = dict(position)  # fetched up to here
        # live, the slots that ended while no collector ran are marked at once
        marked = self.collector.passed_slot if s.event_time == "live" else None
        last_commit = time.monotonic()
        pending: list[asyncio.Future] = []
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=200)
            if batch and "first_batch" not in self.times:
                self.times["first_batch"] = time.monotonic()
            for tp, records in sorted(batch.items()):
                refused = self.stream.take_columns(
                    tp.partition, [r.key for r in records], [r.value for r in records],
                    [r.offset for r in records])
                self.counters["records"] += len(records)
                by_offset = {r.offset: r for r in records} if refused else {}
                for f in refused:
                    self.counters[f"dead:{f.reason}"] += 1
                    if f.offset >= committed[tp.partition]:
                        record = by_offset[f.offset]
                        pending.append(await self._dead_letter(producer, tp, record.key,
                                                               record.value, f))
                fetched[tp.partition] = records[-1].offset + 1
            out = self.stream.advance()
            for waited in out.refused:
                self.counters[f"dead:{waited.refused.reason}"] += 1
                if waited.refused.offset >= committed[waited.partition]:
                    pending.append(await self._dead_letter(
                        producer, TopicPartition(s.reports_topic, waited.partition),
                        waited.key, waited.value, waited.refused))
            for topic, records, sent, counter in (
                    (s.decisions_topic, out.decisions, decided, "decided"),
                    (s.releases_topic, out.releases, released, "released")):
                for key, value in records:
                    slot = int(key.rsplit(b"/", 1)[1])
                    if slot not in sent:
                        pending.append(await producer.send(topic, value, key=key))
                        sent.add(slot)
                        self.counters[counter] += 1
            self._hold(consumer, tps, fetched, position)
            if not self.caught_up.is_set() and all(position[p] >= ends[p] for p in ends):
                self.caught_up.set()
                log.info("read %s to the offsets it had at start in %.1f s; %d slots closed",
                         s.reports_topic, time.monotonic() - self.times["start"],
                         self.collector.next_release - s.start)
            if marked is not None:
                marked = await self._mark(producer, len(tps), marked, pending)
            if time.monotonic() - last_commit >= s.commit_every_s:
                await self._commit(consumer, tps, pending, position, committed)
                last_commit = time.monotonic()
        await self._commit(consumer, tps, pending, position, committed)

    def _hold(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition],
              fetched: dict[int, int], position: dict[int, int]) -> None:
        """Each partition counts as read up to what was fetched, or to its first record that
        waits for a decision; a partition with waiting records is paused (what was fetched of
        it waits in memory, no more), and resumed once they are read."""
        assert self.stream is not None
        for tp in tps:
            first = self.stream.first_waiting(tp.partition)
            position[tp.partition] = fetched[tp.partition] if first is None else first
            if first is not None:
                if tp.partition not in self.paused:
                    consumer.pause(tp)
                    self.paused.add(tp.partition)
            elif tp.partition in self.paused:
                consumer.resume(tp)
                self.paused.discard(tp.partition)

    @staticmethod
    async def _commit(consumer: AIOKafkaConsumer, tps: list[TopicPartition],
                      pending: list[asyncio.Future], position: dict[int, int],
                      committed: dict[int, int]) -> None:
        """Wait for the broker to take what was sent, then commit the offsets read: the dead
        letters before them are never sent again."""
        if pending:
            await asyncio.gather(*pending)
            pending.clear()
        ahead = {tp: position[tp.partition] for tp in tps
                 if position[tp.partition] > committed[tp.partition]}
        if not ahead:
            return
        try:
            await consumer.commit(ahead)
        except KafkaError as exc:  # the group's coordinator moving: committed next time
            log.warning("offsets not committed this time (%r); dead letters past the last "
                        "commit may be sent again after a restart", exc)
            return
        committed.update({tp.partition: offset for tp, offset in ahead.items()})

    async def _dead_letter(self, producer: AIOKafkaProducer, tp: TopicPartition,
                           key: bytes | None, value: bytes | None,
                           refused: Refused) -> asyncio.Future:
        letter = dead_letter(tp.topic, tp.partition, refused.offset, key, value,
                             refused.reason, refused.detail)
        key = key if key is None else key[:DEAD_LETTER_PAYLOAD_BYTES]
        return await producer.send(self.settings.dead_letters_topic, letter, key=key)

    async def _mark(self, producer: AIOKafkaProducer, partitions: int, marked: int,
                    pending: list[asyncio.Future]) -> int:
        """Live: once a slot's end plus the lateness has passed on the clock, a watermark
        record to every partition; the last slot so marked."""
        s = self.settings
        now = self.clock_ms() - s.lateness_ms
        due = self.collector.clock.last_closed(now)
        if due <= marked:
            return marked
        for p in range(partitions):
            pending.append(await producer.send(
                s.reports_topic, watermark_record(now, s.secret, s.stream, p), partition=p))
        self.counters["watermarks"] += partitions
        return due


def run_job(settings: LdpJobSettings, metrics_host: str = "127.0.0.1",
            metrics_port: int = 0) -> int:
    """Run a collector until SIGTERM or Ctrl-C, its metrics on ``metrics_host:metrics_port``
    (port 0: none); 0 when it stopped so."""
    import signal

    from streams.ldp_collector.metrics import MetricsServer

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        job = LdpJob(settings)
        server = MetricsServer(job, metrics_host, metrics_port)
        await server.start()
        try:
            await job.run(stop)
        finally:
            await server.stop()
        log.info("stopped: %s", dict(job.counters))

    asyncio.run(main())
    return 0


__all__ = ["KAFKA_PROTOCOLS", "LdpJob", "LdpJobSettings", "StreamConflict", "run_job",
           "topic_specs"]
