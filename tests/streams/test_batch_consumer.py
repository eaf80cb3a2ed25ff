"""The batch consumer's fetch loop: records fetched for a partition that is not active are not
handed over, and that partition is fetched again from the first of them."""

from __future__ import annotations

import asyncio
from typing import Any

import faust
from aiokafka.structs import ConsumerRecord
from faust.types import TP

from streams.job.worker import ingest


def record(tp: TP, offset: int) -> ConsumerRecord:
    return ConsumerRecord(tp.topic, tp.partition, offset, 0, 0, b"k", b"v", None, 1, 1, [])


class Fetcher:
    """What the fetch loop needs of Faust's fetcher: its stopped event."""

    def __init__(self) -> None:
        self._stopped = asyncio.Event()


def drain(fetches: list[tuple[dict, set | None]], seek_fails: bool = False,
          flow_stopped: frozenset[int] = frozenset(), rebalance_after: TP | None = None,
          ) -> tuple[list, list]:
    """Run the fetch loop of an unconnected batch consumer over ``fetches`` (records by
    partition, active partitions); return the seeks it asked for and the records handed over.
    ``flow_stopped``: indices of the fetches that a rebalance's stopped flow meets;
    ``rebalance_after``: a new generation begins once this partition's batch was handed over."""
    app = faust.App("drain", broker="kafka://127.0.0.1:9", web_enabled=False,
                    **ingest.ingest_settings())
    ingest.install_batch_consumer(app)
    consumer, fetcher = app.consumer, Fetcher()
    seeks, delivered = [], []

    count = iter(range(len(fetches) + 1))

    async def wait_next_records(timeout: float) -> tuple[dict, Any]:
        consumer.flow_active = next(count) not in flow_stopped
        if not fetches:
            fetcher._stopped.set()
            return {}, None
        return fetches.pop(0)

    async def seek(tp: TP, offset: int) -> None:
        if seek_fails:
            raise AssertionError("partition not assigned")
        seeks.append((tp, offset))

    async def deliver_each(tp: TP, batch: list) -> None:
        delivered.extend((tp, r.offset) for r in batch)
        if tp == rebalance_after:
            app.consumer_generation_id += 1

    consumer._wait_next_records = wait_next_records  # type: ignore[method-assign]
    consumer.seek = seek  # type: ignore[method-assign]
    consumer._deliver_each = deliver_each  # type: ignore[method-assign]
    consumer.app.monitor.track_tp_end_offset = lambda tp, offset: None
    consumer.highwater = lambda tp: 0  # type: ignore[method-assign]
    asyncio.run(consumer._drain_messages(fetcher))
    return seeks, delivered


def test_records_of_a_paused_partition_are_fetched_again() -> None:
    a, b = TP("t", 0), TP("t", 1)
    fetched = {a: [record(a, 5), record(a, 6)], b: [record(b, 40), record(b, 41)]}
    # b was paused while the fetch ran: its records come back, b is not active
    seeks, delivered = drain([(fetched, {a})])
    assert delivered == [(a, 5), (a, 6)]
    assert seeks == [(b, 40)]
    # every partition paused (an empty active set, which aiokafka reads as "all")
    seeks, delivered = drain([({a: [record(a, 7)], b: [record(b, 42)]}, set())])
    assert delivered == [] and seeks == [(a, 7), (b, 42)]


def test_active_partitions_are_delivered_without_a_seek() -> None:
    a = TP("t", 0)
    seeks, delivered = drain([({a: [record(a, 0), record(a, 1)]}, {a}),
                              ({a: [record(a, 2)]}, None)])
    assert delivered == [(a, 0), (a, 1), (a, 2)] and seeks == []


def test_a_seek_refused_does_not_stop_the_loop() -> None:
    a, b = TP("t", 0), TP("t", 1)
    seeks, delivered = drain([({b: [record(b, 3)]}, {a}), ({a: [record(a, 9)]}, {a})],
                             seek_fails=True)
    assert seeks == [] and delivered == [(a, 9)]


def test_records_fetched_while_the_flow_is_stopped_are_fetched_again_from_the_first() -> None:
    # a and b were never committed (b's first record is offset 0): a seek to the committed
    # offsets would leave both where the fetch moved them, and their records unread
    a, b = TP("t", 0), TP("t", 1)
    fetched = {a: [record(a, 3), record(a, 4)], b: [record(b, 0), record(b, 1)]}
    seeks, delivered = drain([(fetched, {a, b}), ({a: [record(a, 3)]}, {a, b})],
                             flow_stopped=frozenset({0}))
    assert seeks == [(a, 3), (b, 0)]
    assert delivered == [(a, 3)]


def test_partitions_left_when_a_rebalance_begins_mid_fetch_are_fetched_again() -> None:
    a, b, c = TP("t", 0), TP("t", 1), TP("t", 2)
    fetched = {a: [record(a, 8)], b: [record(b, 0), record(b, 1)], c: [record(c, 5)]}
    seeks, delivered = drain([(fetched, None)], rebalance_after=a)
    assert delivered == [(a, 8)]
    assert seeks == [(b, 0), (c, 5)]
