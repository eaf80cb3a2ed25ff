"""Reading a topic to its end (``streams.kafka.offsets.read_topic``): the end is the broker's
log-end offsets, so a broker slow to answer makes the read slower, never shorter. The
coordinator learns from such reads which slots were already released: a read cut short by a
pause would let it release a slot again."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.client import AIOKafkaClient
from jobkit import produce

from local_kafka.embedded import EmbeddedBroker
from streams.kafka.offsets import read_topic
from streams.kafka.topics import TopicSpec, create_topics

TOPIC = "read-to-end"
RECORDS = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(12)]


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        asyncio.run(create_topics(b.bootstrap, [TopicSpec("read", TOPIC, 2)]))
        produce(b.bootstrap, TOPIC, 2, RECORDS)
        yield b


def slow_fetches(monkeypatch: pytest.MonkeyPatch, delay: float) -> None:
    """Every fetch answer of every client arrives ``delay`` seconds late."""
    send = AIOKafkaClient.send

    async def late(self, node_id, request, **kw):
        response = await send(self, node_id, request, **kw)
        if getattr(request, "API_KEY", None) == 1:
            await asyncio.sleep(delay)
        return response

    monkeypatch.setattr(AIOKafkaClient, "send", late)


def test_every_record_by_partition_in_offset_order(broker) -> None:
    got = asyncio.run(read_topic(broker.bootstrap, TOPIC, partitions=2))
    assert sorted(got) == sorted(RECORDS)
    by_partition = [asyncio.run(read_topic(broker.bootstrap, TOPIC, partitions=2))]
    assert by_partition == [got]  # the same order every time: partition 0, then 1
    numbers = [int(k[1:]) for k, _v in got]
    split = next(i for i in range(1, len(numbers)) if numbers[i] < numbers[i - 1])
    assert numbers[:split] == sorted(numbers[:split]) and numbers[split:] == sorted(numbers[split:])


def test_a_broker_slow_to_answer_makes_the_read_slower_not_shorter(broker, monkeypatch) -> None:
    slow_fetches(monkeypatch, 1.5)  # longer than any pause a reader might take for the end
    got = asyncio.run(read_topic(broker.bootstrap, TOPIC, partitions=2, limit=60))
    assert sorted(got) == sorted(RECORDS)


def test_an_end_not_reached_in_time_is_an_error_naming_where_it_stopped(broker,
                                                                        monkeypatch) -> None:
    slow_fetches(monkeypatch, 3.0)
    with pytest.raises(TimeoutError, match=rf"reading to the end took longer than 1 s \({TOPIC} "
                                           rf"partition 0 at 0 of \d+, {TOPIC} partition 1 at 0"):
        asyncio.run(read_topic(broker.bootstrap, TOPIC, partitions=2, limit=1))
