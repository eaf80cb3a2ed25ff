"""Fetch pacing on the embedded broker, which answers an empty fetch at once: an idle consumer
sends a few fetches a second instead of thousands, and a record produced while it waits still
reaches it within one pacing interval and a little."""

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


def count_fetches(consumer: AIOKafkaConsumer) -> list[tuple[float, float, bool]]:
    """Record every fetch the consumer sends from now on: (end, round trip, answer empty)."""
    client = consumer._client
    paced = client.send
    fetches: list[tuple[float, float, bool]] = []

    async def send(node_id, request, **kw):
        started = time.monotonic()
        response = await paced(node_id, request, **kw)
        if getattr(request, "API_KEY", None) == 1:
            end = time.monotonic()
            fetches.append((end, end - started, fetch_pacing.empty_answer(response)))
        return response

    client.send = send
    return fetches


def test_an_idle_consumer_fetches_a_few_times_a_second_and_still_gets_records(broker) -> None:
    async def go() -> tuple[list[tuple[float, float, bool]], list[tuple[float, float, bool]],
                            float, bytes]:
        consumer = AIOKafkaConsumer(TOPIC, bootstrap_servers=broker.bootstrap, group_id=None,
                                    auto_offset_reset="latest", **client_options())
        await consumer.start()
        try:
            await consumer.getmany(timeout_ms=500)  # positions set
            fetches = count_fetches(consumer)
            assert await consumer.getmany(timeout_ms=2000) == {}
            idle = list(fetches)
            producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, **client_options())
            await producer.start()
            try:
                await producer.send_and_wait(TOPIC, b"v", key=b"k", partition=1)
                sent = time.monotonic()
                record = await asyncio.wait_for(consumer.getone(), 5)
                latency = time.monotonic() - sent
            finally:
                await producer.stop()
            got = next(k for k, (_, _, empty) in enumerate(fetches) if not empty)
            await consumer.getmany(timeout_ms=500)  # idle again after the record
            return idle, fetches[got + 1:], latency, record.value
        finally:
            await consumer.stop()

    idle, after, latency, value = asyncio.run(go())
    pace, most = fetch_pacing.PACE_S, fetch_pacing.MAX_PACE_S
    assert value == b"v"
    # Unpaced, the embedded broker's instant empty answers give about 3,400 fetches in 2 s, and
    # at a constant PACE_S about 95: the pace grows to MAX_PACE_S (a few steps on the way).
    assert all(empty for _, _, empty in idle)
    assert 5 <= len(idle) <= 2 / most + 8, len(idle)
    trips = sorted(trip for _, trip, _ in idle)
    assert trips[len(trips) // 2] >= most * 0.9, trips
    assert latency < most + 0.25, latency
    # after the record the pace starts again at PACE_S and grows from there
    assert len(after) >= 3, after
    assert after[0][1] < most / 2, after
    assert after[2][1] > after[0][1] + pace, after
