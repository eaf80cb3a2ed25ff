"""Stopping an aiokafka consumer whose broker may have gone away."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer


async def stop_consumer(consumer: AIOKafkaConsumer) -> None:
    """Stop ``consumer`` and close its connections, also when a broker went away under it.

    aiokafka (0.14) cancels the fetch requests still in flight when it stops and awaits them
    without absorbing their cancellation: a request backing off from a node that stopped
    answering ends ``stop()`` with ``CancelledError`` before the client's connections are
    closed. That error cancels nothing the caller asked for; it is absorbed here and the client
    closed. A cancellation of the caller itself still propagates."""
    try:
        await consumer.stop()
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is None or task.cancelling():
            raise
        await consumer._client.close()  # noqa: SLF001 - what stop() did not reach
