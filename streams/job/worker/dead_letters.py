"""Sending a worker's dead letters to the ``dead-letters`` topic: :class:`DeadLetterSender` caps
their payloads, counts them, and logs and counts any the broker refuses instead of letting it stop
the partition."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import faust

from streams.job.operations.worker_metrics import WorkerMetrics
from streams.job.partitions.accumulator import DeadLetter
from streams.records.dead_letters import dead_letter
from streams.records.input_formats import DEAD_LETTER_PAYLOAD_BYTES

log = logging.getLogger("pwevent.job")


class DeadLetterSender:
    """Sends dead letters through ``app``'s producer to ``topic``, counting them in ``counters``
    and ``metrics``."""

    def __init__(self, app: faust.App, topic: str, counters: Counter[str],
                 metrics: WorkerMetrics) -> None:
        self.app, self.topic = app, topic
        self.counters, self.metrics = counters, metrics

    async def send(self, dead: list[DeadLetter], wait: bool = True) -> list[Any]:
        """Send dead letters (payloads capped, so any record fits); a dead letter the broker
        refuses is logged and counted, never allowed to stop the partition. With ``wait``, return
        once the broker answered for each; without, return their futures."""
        self.metrics.dead(dead)
        futures = []
        for d in dead:
            value = dead_letter(d.topic, d.partition, d.offset, d.key, d.value, d.reason,
                                d.detail)
            key = None if d.key is None else d.key[:DEAD_LETTER_PAYLOAD_BYTES]
            self.counters[f"dead:{d.reason}"] += 1
            try:
                sent = await self.app.producer.send(self.topic, key, value, None, None, None)
            except Exception as exc:  # noqa: BLE001 - counted and logged, never fatal
                self._failed(d, exc)
                continue
            futures.append(asyncio.ensure_future(self._settle(d, sent)))
        if wait and futures:
            await asyncio.gather(*futures)
            return []
        return futures

    async def _settle(self, d: DeadLetter, sent: Any) -> None:
        try:
            await sent
        except Exception as exc:  # noqa: BLE001 - counted and logged, never fatal
            self._failed(d, exc)

    def _failed(self, d: DeadLetter, exc: BaseException) -> None:
        self.counters["dead_letters_failed"] += 1
        self.metrics.dead_letter_failed()
        log.error("dead letter of %s[%d]@%d (%s) could not be sent: %r", d.topic, d.partition,
                  d.offset, d.reason, exc)
