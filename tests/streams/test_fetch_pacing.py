"""Fetch pacing on the embedded broker, which answers an empty fetch at once: an idle consumer
sends a few dozen fetches a second instead of thousands, and a record produced while it waits
still reaches it within a few pacing intervals."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.client import AIOKafkaClient

from local_kafka.embedded import EmbeddedBroker
from streams.kafka import fetch_pacing
from streams.kafka.settings import client_options
from streams.kafka.topics import TopicSpec, create_topics

TOPIC = "paced"


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        asyncio.run(create_topics(b.bootstrap, [TopicSpec("paced", TOPIC, 2)]))
        yield b


def test_every_client_of_the_process_is_paced() -> None:
    assert getattr(AIOKafkaClient.send, "_paces_fetches", False)
    fetch_pacing.install()  # a second install changes nothing
    assert getattr(AIOKafkaClient.send, "_paces_fetches", False)


def test_only_error_free_answers_without_records_count_as_empty() -> None:
    def answer(*partitions: tuple) -> SimpleNamespace:
        return SimpleNamespace(topics=[(TOPIC, list(partitions))])

    assert fetch_pacing.empty_answer(answer((0, 0, 5, 5, [], None), (1, 0, 0, 0, [], b"")))
    assert not fetch_pacing.empty_answer(answer((0, 0, 5, 5, [], b"\x00records")))
    assert not fetch_pacing.empty_answer(answer((0, 1, 5, 5, [], None)))  # an error is not paced


def count_fetches(consumer: AIOKafkaConsumer) -> list[float]:
    """Record the round trip of every fetch the consumer sends from now on."""
    client = consumer._client
    paced = client.send
    trips: list[float] = []

    async def send(node_id, request, **kw):
        started = time.monotonic()
        response = await paced(node_id, request, **kw)
        if getattr(request, "API_KEY", None) == 1:
            trips.append(time.monotonic() - started)
        return response

    client.send = send
    return trips


def test_an_idle_consumer_fetches_tens_of_times_a_second_and_still_gets_records(broker) -> None:
    async def go() -> tuple[list[float], float, bytes]:
        consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=broker.bootstrap, group_id=None,
                                    auto_offset_reset="latest", **client_options())
        await consumer.start()
        try:
            await consumer.getmany(timeout_ms=500)  # positions set
            trips = count_fetches(consumer)
            assert await consumer.getmany(timeout_ms=2000) == {}
            idle = list(trips)
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, **client_options())
            await producer.start()
            try:
                await producer.send_and_wait(TOPIC, b"v", key=b"k", partition=1)
                sent = time.monotonic()
                record = await asyncio.wait_for(consumer.getone(), 5)
                return idle, time.monotonic() - sent, record.value
            finally:
                await producer.stop()
        finally:
            await consumer.stop()

    idle, latency, value = asyncio.run(go())
    assert value == b"v"
    # Unpaced, the embedded broker's instant empty answers give about 3,400 fetches in 2 s.
    assert 10 <= len(idle) <= 2 / fetch_pacing.PACE_S * 1.5, len(idle)
    assert sorted(idle)[len(idle) // 2] >= fetch_pacing.PACE_S * 0.9
    assert latency < 20 * fetch_pacing.PACE_S, latency
