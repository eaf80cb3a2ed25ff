"""Small Kafka helpers for commands and tests: offsets and reading a topic to its end."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from streams.kafka.settings import client_options


async def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The log-end offset of each partition."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options())
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: off for tp, off in ends.items()}
    finally:
        await consumer.stop()


async def committed_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offset per partition of ``topic`` (missing: none committed)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options())
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
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


async def read_topic(bootstrap: str, topic: str, partitions: int = 1,
                     idle: float = 1.0, limit: float = 30.0) -> list[tuple[bytes | None, bytes]]:
    """Every record of a topic from the beginning, until nothing new arrives for ``idle`` s."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options(),
                                enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    out: list[tuple[bytes | None, bytes]] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + limit
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=200)
            got = [(r.key, r.value) for recs in batch.values() for r in recs]
            if got:
                out.extend(got)
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since >= idle:
                break
    finally:
        await consumer.stop()
    return out
