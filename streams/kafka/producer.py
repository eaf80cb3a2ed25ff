"""Producing raw records to Kafka quickly: Kafka's default partitioner (:func:`key_partition`),
an idempotent producer of explicit record batches (:class:`RawProducer`) and a one-call
:func:`produce_raw`, for commands, tests and benchmarks that feed the job's topics."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Sequence
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import UnknownTopicOrPartitionError
from aiokafka.partitioner import murmur2

from streams.kafka.settings import client_options

__all__ = ["RawProducer", "key_partition", "produce_raw"]


def key_partition(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key`` (murmur2, positive, modulo)."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


class RawProducer:
    """A producer of raw ``(key, value)`` records in explicit batches, partitioned by key.

    Records are partitioned exactly as the default partitioner would, so a user's reports land
    in one partition whichever producer wrote them; a record may also name its partition.

    The producer is idempotent (``enable_idempotence=True``, ``acks=all``): the broker numbers
    each partition's batches by producer id and sequence, so while this producer lives a batch
    that its client retries after a lost connection or a timed-out request is written once; a
    batch it has sent once is retried on retriable errors until the broker answers (it does not
    expire). That holds as long as the broker keeps its producer state: one that comes back
    without it (a crash that lost its last writes) refuses the next batch with
    ``OutOfOrderSequenceNumber``. A *new* producer is not covered either: records sent again by
    another producer (another session) are new records to the broker. :meth:`submit` returns
    every batch's future, so that a caller surviving an outage knows which records the broker
    acknowledged and which it must send again (``pwevent replay`` does; see
    ``streams/cli/replay.py``).
    """

    #: One enqueued batch: its records and the future the broker's acknowledgement resolves, or
    #: records that were not enqueued and the exception that stopped them.
    Submitted = tuple[list[tuple[bytes | None, bytes]], "asyncio.Future[Any] | BaseException"]

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        *,
        linger_ms: int = 5,
        batch_bytes: int = 512 * 1024,
        request_timeout_ms: int = 40_000,
    ) -> None:
        self.topic, self.partitions = topic, partitions
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            **client_options(),
            linger_ms=linger_ms,
            max_batch_size=batch_bytes,
            enable_idempotence=True,
            acks="all",
            request_timeout_ms=request_timeout_ms,
        )
        self.sent = 0
        self.metadata_wait_s = request_timeout_ms / 1000
        self._known: frozenset[int] = frozenset()  # the topic's partitions in the metadata

    async def start(self) -> None:
        """Connect; on failure the client is closed again before the error is raised."""
        try:
            await self.producer.start()
        except BaseException:
            with contextlib.suppress(Exception):
                await self.producer.stop()
            raise

    async def stop(self, timeout: float | None = None) -> None:
        """Flush and disconnect. With ``timeout``, give up flushing after that many seconds
        (batches still unacknowledged are abandoned: their fate is unknown) and close the
        connections anyway."""
        if timeout is None:
            await self.producer.stop()
            return
        try:
            await asyncio.wait_for(self.producer.stop(), timeout)
        except Exception:  # noqa: BLE001 - timed out or failed: close whatever is left
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.producer.client.close(), timeout)

    async def _known_partition(self, part: int) -> None:
        """Wait until the client's metadata lists partition ``part`` of the topic: aiokafka's
        ``send_batch`` does not wait for metadata, and refuses a partition it does not know
        (seen when records were sent right after a topic gained partitions). The metadata is
        refreshed by requests for every topic, which never auto-create one (a request naming
        the topic would have a broker that auto-creates topics make it with one partition).
        Raises ``UnknownTopicOrPartitionError`` after :attr:`metadata_wait_s` seconds."""
        if part in self._known:
            return
        client = self.producer.client
        deadline = time.monotonic() + self.metadata_wait_s
        while True:
            self._known = frozenset(client.cluster.partitions_for_topic(self.topic) or ())
            if part in self._known:
                return
            if time.monotonic() >= deadline:
                raise UnknownTopicOrPartitionError(
                    f"{self.topic} has no partition {part} (partitions known: "
                    f"{sorted(self._known)})" if self._known else f"no topic {self.topic}")
            await client.force_metadata_update()
            await asyncio.sleep(0.1)

    def partition_of(self, key: bytes | None, partition: int | None = None) -> int:
        """The partition a record goes to: ``partition`` if given, else the key's (murmur2);
        keyless records go to partition 0."""
        if partition is not None:
            return partition
        return 0 if key is None else key_partition(key, self.partitions)

    async def submit(
        self,
        records: Iterable[tuple[bytes | None, bytes]],
        partition: int | None = None,
        *,
        into: list[RawProducer.Submitted] | None = None,
        partitions: Sequence[int] | None = None,
    ) -> list[RawProducer.Submitted]:
        """Enqueue records in per-partition batches without waiting for the broker.

        Returns (and appends to ``into`` as it goes, so a caller that cancels this keeps what
        was enqueued) one entry per batch: its records, in order, and the future resolved when
        the broker acknowledges the batch, or fails when the client gives it up. If a batch
        cannot be enqueued (metadata or buffer space not available in time, a closed or broken
        producer), nothing more is enqueued and the last entry holds every record not enqueued,
        in their original order within each partition, with that exception; those records were
        not sent. ``partitions``: each record's partition, computed by the caller (as
        :meth:`partition_of` would, or otherwise).
        """
        out: list[RawProducer.Submitted] = [] if into is None else into
        builders: dict[int, tuple[Any, list[tuple[bytes | None, bytes]]]] = {}
        items = iter(records)
        current: list[tuple[bytes | None, bytes]] = []  # a record taken but not yet batched
        try:
            for i, (key, value) in enumerate(items):
                current = [(key, value)]
                part = self.partition_of(key, partition) if partitions is None else partitions[i]
                entry = builders.get(part)
                if entry is None:
                    entry = builders[part] = (self.producer.create_batch(), [])
                if entry[0].append(key=key, value=value, timestamp=None) is None:
                    if not entry[1]:
                        raise ValueError("record larger than the batch size")
                    await self._known_partition(part)
                    future = await self.producer.send_batch(entry[0], self.topic, partition=part)
                    out.append((entry[1], future))
                    entry = builders[part] = (self.producer.create_batch(), [])
                    if entry[0].append(key=key, value=value, timestamp=None) is None:
                        raise ValueError("record larger than the batch size")
                entry[1].append((key, value))
                current = []
            for part in list(builders):
                recs = builders[part][1]
                if recs:
                    await self._known_partition(part)
                    future = await self.producer.send_batch(builders[part][0], self.topic,
                                                            partition=part)
                    out.append((recs, future))
                del builders[part]
        except ValueError:
            raise
        except Exception as exc:  # noqa: BLE001 - the caller decides what to do about it
            rest = [rec for _builder, recs in builders.values() for rec in recs]
            rest.extend(current)
            rest.extend(items)
            out.append((rest, exc))
        return out

    async def send_many(
        self, records: Iterable[tuple[bytes | None, bytes]], partition: int | None = None,
        partitions: Sequence[int] | None = None,
    ) -> int:
        """Send records and wait until the broker has them; returns how many were sent.
        Raises the first error if any batch could not be enqueued or was not acknowledged.
        ``partitions``: each record's partition, as for :meth:`submit`."""
        submitted = await self.submit(records, partition, partitions=partitions)
        for _recs, outcome in submitted:
            if isinstance(outcome, BaseException):
                raise outcome
        await asyncio.gather(*(outcome for _recs, outcome in submitted))
        count = sum(len(recs) for recs, _outcome in submitted)
        self.sent += count
        return count


async def produce_raw(
    bootstrap: str,
    topic: str,
    records: Iterable[tuple[bytes, bytes]],
    *,
    partitions: int,
    linger_ms: int = 5,
    batch_bytes: int = 512 * 1024,
) -> int:
    """Produce ``(key, value)`` records quickly with explicit record batches (idempotently, see
    :class:`RawProducer`); return the count."""
    producer = RawProducer(bootstrap, topic, partitions, linger_ms=linger_ms,
                           batch_bytes=batch_bytes)
    await producer.start()
    try:
        return await producer.send_many(records)
    finally:
        await producer.stop()
