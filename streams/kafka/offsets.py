"""Small Kafka helpers for commands and tests: offsets and reading a topic to its end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    CoordinatorLoadInProgressError,
    GroupCoordinatorNotAvailableError,
    NotCoordinatorForGroupError,
)

from streams.kafka.consumer_stop import stop_consumer
from streams.kafka.settings import client_options, consumer_options


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The offset each partition is read to: its last stable offset (the log end when no
    transaction is open on it; :data:`streams.kafka.settings.ISOLATION_LEVEL`)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **consumer_options())
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: off for tp, off in ends.items()}
    finally:
        await stop_consumer(consumer)


async def committed_offsets(bootstrap: str, group: str, topic: str,
                            retry_for: float = 30.0) -> dict[int, int]:
    """The group's committed offset per partition of ``topic`` (missing: none committed).

    Apache Kafka answers that the group's coordinator is not available while it creates its
    offsets topic (the first time any group is looked up) or moves the coordinator after a node
    failed; the look-up is retried for up to ``retry_for`` seconds."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options())
    await admin.start()
    try:
        deadline = time.monotonic() + retry_for
        while True:
            try:
                offsets = await admin.list_consumer_group_offsets(group)
                break
            except (GroupCoordinatorNotAvailableError, NotCoordinatorForGroupError,
                    CoordinatorLoadInProgressError):
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.25)
        return {tp.partition: meta.offset for tp, meta in offsets.items()
                if tp.topic == topic and meta.offset >= 0}
    finally:
        await admin.close()


async def wait_consumed(bootstrap: str, group: str, topic: str, partitions: int,
                        timeout: float, alive: Callable[[], bool] = lambda: True) -> bool:
    """Wait until ``group`` has committed the end of every partition of ``topic``.

    Gives up early when ``alive()`` turns false (the consuming process ended).
    """
    ends = await end_offsets(bootstrap, topic, partitions)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        done = await committed_offsets(bootstrap, group, topic)
        if all(done.get(p, 0) >= end for p, end in ends.items()):
            return True
        await asyncio.sleep(0.3)
    return False


async def topic_partitions(consumer: AIOKafkaConsumer, topic: str,
                           wait: float = 5.0) -> list[TopicPartition]:
    """The partitions of ``topic`` (none when it does not exist), from the broker's metadata.

    A consumer that has not subscribed knows only the metadata of its bootstrap request, which
    names no topic: the embedded broker answers it with every topic, Apache Kafka with none. So
    the metadata of every topic is asked for when ``topic`` is unknown, again for up to ``wait``
    seconds while it is listed without partitions (a topic just created)."""
    deadline = time.monotonic() + wait
    while True:
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return [TopicPartition(topic, p) for p in sorted(parts)]
        await consumer._client.force_metadata_update()  # noqa: SLF001 - no public call asks
        parts = consumer.partitions_for_topic(topic)
        if parts:
            return [TopicPartition(topic, p) for p in sorted(parts)]
        if parts is None or time.monotonic() >= deadline:
            return []
        await asyncio.sleep(0.2)


async def records_to_end(consumer: AIOKafkaConsumer, tps: list[TopicPartition],
                         limit: float) -> dict[TopicPartition, list[ConsumerRecord]]:
    """Every record of the partitions ``tps`` (assigned to ``consumer``) from its position to
    the log-end offset each has when the call starts, in offset order.

    The end is the broker's own, never a pause in what arrives: a slow broker cannot make the
    read stop early. Raises :class:`TimeoutError`, naming each partition's position, when the
    end is not reached within ``limit`` seconds."""
    ends = await consumer.end_offsets(tps)
    deadline = time.monotonic() + limit
    got: dict[TopicPartition, list[ConsumerRecord]] = {tp: [] for tp in tps}
    todo = set(tps)
    while True:
        at = {tp: await consumer.position(tp) for tp in todo}
        todo = {tp for tp in todo if at[tp] < ends[tp]}
        if not todo:
            return got
        if time.monotonic() >= deadline:
            behind = ", ".join(f"{tp.topic} partition {tp.partition} at {at[tp]} of {ends[tp]}"
                               for tp in sorted(todo))
            raise TimeoutError(f"reading to the end took longer than {limit:g} s ({behind})")
        batch = await consumer.getmany(*todo, timeout_ms=200)
        for tp, recs in batch.items():
            got[tp] += [r for r in recs if r.offset < ends[tp]]


async def holds_records(bootstrap: str, topic: str, partition: int, start: int, stop: int,
                        limit: float = 5.0) -> bool:
    """Whether ``partition`` of ``topic`` holds, at an offset in [``start``, ``stop``), a record
    a consumer hands over or may yet hand over. Consumers read only what transactions committed
    (:data:`streams.kafka.settings.ISOLATION_LEVEL`), so ``False`` when every such offset is a
    transaction marker or a record of an aborted transaction (or was removed by retention).
    ``True`` when a transaction still open holds one of the offsets (its records wait until it
    ends, which moves the log's end past ``stop``), and when that is not known within ``limit``
    seconds."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **consumer_options(),
                                enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        consumer.seek(tp, start)
        deadline = time.monotonic() + limit
        while (position := await consumer.position(tp)) < stop:
            stable = consumer.last_stable_offset(tp)
            if stable is not None and position >= stable:
                return True  # at the start of a transaction still open
            if time.monotonic() >= deadline:
                return True
            got = await consumer.getmany(tp, timeout_ms=200, max_records=1)
            if any(r.offset < stop for r in got.get(tp, ())):
                return True
        return False
    finally:
        await stop_consumer(consumer)


async def read_topic(bootstrap: str, topic: str, partitions: int = 1,
                     limit: float = 30.0) -> list[tuple[bytes | None, bytes]]:
    """Every record of a topic from the beginning to the log-end offsets it has when the call
    starts, partition after partition in offset order (:func:`records_to_end`)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **consumer_options(),
                                enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = await records_to_end(consumer, tps, limit)
    finally:
        await stop_consumer(consumer)
    return [(r.key, r.value) for tp in tps for r in got[tp]]
