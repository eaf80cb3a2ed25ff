"""``RawProducer`` sends to a partition only once its client's metadata lists it: aiokafka's
``send_batch`` neither waits for metadata nor refreshes it, and refused a partition that the
topic had gained since the client last looked ("Unrecognized partition"), as a producer started
right after a worker created its topics once met. On both brokers."""

from __future__ import annotations

import asyncio

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import UnknownTopicOrPartitionError
from brokers import broker_fixture
from test_source_partitions_added import grow

from streams.kafka.offsets import end_offsets
from streams.kafka.producer import RawProducer
from streams.kafka.topics import TopicSpec, create_topics

broker = broker_fixture()


def test_a_partition_the_topic_gained_after_the_client_looked_is_waited_for(broker):
    topic = "rawprod-grown"

    async def go() -> dict[int, int]:
        await create_topics(broker.bootstrap, [TopicSpec("t", topic, 1)])
        producer = RawProducer(broker.bootstrap, topic, 2)
        await producer.start()
        try:
            assert await producer.send_many([(b"a", b"1")], partition=0) == 1  # metadata: {0}
            await asyncio.to_thread(grow, broker.bootstrap, topic, 2)
            assert await producer.send_many([(b"b", b"2")], partition=1) == 1
        finally:
            await producer.stop()
        return await end_offsets(broker.bootstrap, topic, 2)

    assert asyncio.run(go()) == {0: 1, 1: 1}


def test_a_partition_that_never_comes_is_an_error_in_time(broker):
    topic = "rawprod-short"

    async def go() -> list:
        await create_topics(broker.bootstrap, [TopicSpec("t", topic, 1)])
        producer = RawProducer(broker.bootstrap, topic, 2, request_timeout_ms=1500)
        await producer.start()
        try:
            return await producer.submit([(b"a", b"1"), (b"b", b"2")], partition=1)
        finally:
            await producer.stop()

    submitted = asyncio.run(go())
    assert len(submitted) == 1
    records, outcome = submitted[0]
    assert records == [(b"a", b"1"), (b"b", b"2")]  # none enqueued, all handed back
    assert isinstance(outcome, UnknownTopicOrPartitionError)
    assert "has no partition 1" in str(outcome)


def test_a_topic_that_does_not_exist_is_an_error_and_is_not_created(broker):
    """Waiting for metadata never names the topic to the broker: the embedded broker would
    auto-create a topic so named, with one partition."""
    topic = "rawprod-missing"

    async def go() -> tuple[list, list[str]]:
        producer = RawProducer(broker.bootstrap, topic, 2, request_timeout_ms=1500)
        await producer.start()
        try:
            submitted = await producer.submit([(b"a", b"1")], partition=0)
        finally:
            await producer.stop()
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            return submitted, await admin.list_topics()
        finally:
            await admin.close()

    submitted, topics = asyncio.run(go())
    [(records, outcome)] = submitted
    assert records == [(b"a", b"1")] and isinstance(outcome, UnknownTopicOrPartitionError)
    assert str(outcome).endswith(f"no topic {topic}")
    assert topic not in topics
