"""Stopping a consumer whose broker was SIGKILLed while a fetch was in flight."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from jobkit import RestartableBroker

from streams.kafka.consumer_stop import stop_consumer


async def stop_after_broker_loss(broker: RestartableBroker,
                                 stop: Callable[[AIOKafkaConsumer], Awaitable[None]]) -> None:
    """Read one record, SIGKILL the broker, fetch until a request is backing off from it (long:
    ten seconds), then ``stop`` the consumer; afterwards no task of the consumer is left."""
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait("t", b"x")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                retry_backoff_ms=10_000)
    await consumer.start()
    tp = TopicPartition("t", 0)
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)
    assert (await consumer.getmany(tp, timeout_ms=5000))[tp][0].value == b"x"
    broker.kill()
    for _ in range(5):
        await consumer.getmany(tp, timeout_ms=100)
    await stop(consumer)
    await asyncio.sleep(0)
    assert {t for t in asyncio.all_tasks() if not t.done()} == {asyncio.current_task()}


@pytest.fixture()
def broker(tmp_path: Path):
    broker = RestartableBroker(tmp_path)
    broker.start()
    yield broker
    broker.stop()


def test_aiokafka_ends_a_stop_with_the_cancellation_of_its_own_fetch(broker) -> None:
    """What the helper is for: aiokafka's own ``stop()`` raises ``CancelledError`` although
    nobody cancelled the caller."""
    async def plain_stop(consumer: AIOKafkaConsumer) -> None:
        with pytest.raises(asyncio.CancelledError):
            await consumer.stop()
        assert asyncio.current_task().cancelling() == 0
        await consumer._client.close()  # noqa: SLF001 - so that the check after it holds

    asyncio.run(stop_after_broker_loss(broker, plain_stop))


def test_stop_consumer_returns_and_closes_the_client(broker) -> None:
    asyncio.run(stop_after_broker_loss(broker, stop_consumer))


def test_a_cancelled_caller_is_still_cancelled(broker) -> None:
    async def cancelled_stop(consumer: AIOKafkaConsumer) -> None:
        task = asyncio.create_task(stop_consumer(consumer))
        await asyncio.sleep(0)  # it is inside stop(), waiting for the fetch task
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await stop_consumer(consumer)  # already stopped: returns at once
        await consumer._client.close()  # noqa: SLF001 - what the cancelled stop left open

    asyncio.run(stop_after_broker_loss(broker, cancelled_stop))
