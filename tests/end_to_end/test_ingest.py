"""BatchIngest with a real Faust app against the embedded broker."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections import Counter
from typing import Any

import faust
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from brokers import broker_fixture

from local_kafka.embedded import EmbeddedBroker
from streams.job.batch_handling import ContinuityGuard, RawRecord, Rewind
from streams.job.worker.ingest import BatchIngest, ingest_settings
from streams.kafka.offsets import end_offsets
from streams.kafka.producer import key_partition, produce_raw
from streams.kafka.topics import TopicSpec, create_topics

PARTITIONS = 4


broker = broker_fixture()


def reports(start: int, n: int) -> list[tuple[bytes, bytes]]:
    out = []
    for i in range(start, start + n):
        user = f"u{i % 997}"
        out.append((user.encode(), orjson.dumps({"user": user, "time": i, "value": i % 16})))
    return out


async def committed_offsets(
    bootstrap: str, group: str, topic: str, partitions: int
) -> dict[int, int | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group)
    await consumer.start()
    try:
        return {p: await consumer.committed(TopicPartition(topic, p)) for p in range(partitions)}
    finally:
        await consumer.stop()


def run_worker(
    bootstrap: str, group: str, topic: str, side_topic: str, expected: int, datadir: str
) -> dict[str, Any]:
    """Run one Faust worker until ``expected`` batch records arrived; return what it saw."""
    app = faust.App(
        group,
        **ingest_settings(
            broker=f"kafka://{bootstrap}",
            store="rocksdb://",
            web_enabled=False,
            datadir=datadir,
            consumer_auto_offset_reset="earliest",
            topic_partitions=PARTITIONS,
            broker_max_poll_records=3_000,
            broker_commit_interval=0.5,
        ),
    )
    seen: list[RawRecord] = []
    batches: list[int] = []
    side: list[bytes] = []
    done = asyncio.Event()
    table = app.Table("records-per-partition", default=int, partitions=PARTITIONS)

    async def handler(records: list[RawRecord]) -> None:
        assert len({r[2] for r in records}) == 1, "a batch spans one partition"
        offsets = [r[3] for r in records]
        assert offsets == sorted(offsets)
        seen.extend(records)
        batches.append(len(records))
        table[records[0][2]] += len(records)
        if len(seen) >= expected:
            done.set()

    BatchIngest(app, topic, handler)
    side_source = app.topic(side_topic, value_type=bytes, value_serializer="raw")

    @app.agent(side_source)
    async def side_agent(stream: Any) -> None:
        async for value in stream:
            side.append(value)

    async def main() -> dict[int, int]:
        await app.start()
        try:
            await asyncio.wait_for(done.wait(), 40)
            deadline = time.monotonic() + 10
            while len(side) < 5 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.3)  # anything beyond ``expected`` would arrive now
            return {p: table[p] for p in range(PARTITIONS)}
        finally:
            await app.stop()

    counts = asyncio.run(main())
    return {"seen": seen, "batches": batches, "side": side, "table": counts}


def test_batch_ingest_delivers_every_record_once_and_commits(broker: EmbeddedBroker) -> None:
    topic, side_topic, group = "ingest.reports", "ingest.side", "ingest-test"
    asyncio.run(
        create_topics(
            broker.bootstrap,
            [TopicSpec("reports", topic, PARTITIONS), TopicSpec("side", side_topic, 1)],
        )
    )
    first = reports(0, 20_000)
    asyncio.run(produce_raw(broker.bootstrap, topic, first, partitions=PARTITIONS))
    asyncio.run(
        produce_raw(
            broker.bootstrap, side_topic, [(b"k", b"s%d" % i) for i in range(5)], partitions=1
        )
    )

    with tempfile.TemporaryDirectory() as datadir:
        run1 = run_worker(broker.bootstrap, group, topic, side_topic, len(first), datadir)
        seen = run1["seen"]
        positions = Counter((r[2], r[3]) for r in seen)
        assert len(seen) == len(first)
        assert max(positions.values()) == 1, "no record delivered twice"
        assert sorted((r[0], r[1]) for r in seen) == sorted(first)
        for key, _value, partition, _offset in seen:
            assert partition == key_partition(key, PARTITIONS)
        assert len(run1["batches"]) < len(first) / 100, "records arrive in batches"
        # ordinary agents on other topics still work in the same worker
        assert run1["side"] == [b"s%d" % i for i in range(5)]

        ends = asyncio.run(end_offsets(broker.bootstrap, topic, PARTITIONS))
        committed = asyncio.run(committed_offsets(broker.bootstrap, group, topic, PARTITIONS))
        assert committed == ends, "Faust committed every delivered offset"
        per_partition = Counter(r[2] for r in seen)
        assert {p: ends[p] for p in per_partition} == dict(per_partition)

        # a restarted worker in the same group resumes after the committed offsets,
        # and its table (restored from RocksDB / the changelog) kept the counts
        second = reports(20_000, 3_000)
        asyncio.run(produce_raw(broker.bootstrap, topic, second, partitions=PARTITIONS))
        run2 = run_worker(broker.bootstrap, group, topic, side_topic, len(second), datadir)
        assert sorted((r[0], r[1]) for r in run2["seen"]) == sorted(second)
        assert run2["side"] == []
        ends2 = asyncio.run(end_offsets(broker.bootstrap, topic, PARTITIONS))
        assert sum(run2["table"].values()) == sum(ends2.values())


def test_continuity_guard_rewinds_once_per_gap() -> None:
    guard = ContinuityGuard()
    recs = [(b"k", b"v", 2, o) for o in (7, 8, 9)]
    assert guard.check(2, 7, recs) is None  # continues where the state left off
    assert guard.check(2, 3, recs[:0]) is None  # nothing new
    assert guard.check(2, 9, recs) is None  # old records are filtered, 9 is next
    assert guard.check(2, 5, recs) == Rewind(5)  # 5 and 6 were never delivered
    assert guard.check(2, 5, recs) is None  # the same gap again: gone from the broker
    assert (guard.rewinds, guard.skipped) == (1, 2)
    assert guard.check(2, 5, recs) == Rewind(5)  # a later gap is rewound again


def test_a_handler_rewinds_and_gets_the_records_again(broker: EmbeddedBroker) -> None:
    """A handler that answers :class:`Rewind` gets the partition again from that offset, and
    only what it kept is acknowledged before it."""
    topic, group = "ingest.rewind", "ingest-rewind"
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("reports", topic, 1)]))
    sent = [(b"u%d" % i, b"%d" % i) for i in range(500)]
    asyncio.run(produce_raw(broker.bootstrap, topic, sent, partitions=1))
    with tempfile.TemporaryDirectory() as datadir:
        app = faust.App(group, **ingest_settings(
            broker=f"kafka://{broker.bootstrap}", store="memory://", web_enabled=False,
            datadir=datadir, consumer_auto_offset_reset="earliest", topic_partitions=1,
            broker_max_poll_records=100, broker_commit_interval=0.2))
        kept: list[int] = []
        done = asyncio.Event()
        rewound: list[int] = []

        async def handler(records: list[RawRecord]) -> Rewind | None:
            offsets = [r[3] for r in records]
            if not rewound and offsets[-1] >= 250:
                rewound.append(offsets[0])  # state lost back to 180: read from there again
                del kept[180:]
                return Rewind(180)
            kept.extend(offsets)
            if offsets[-1] == len(sent) - 1:
                done.set()
            return None

        BatchIngest(app, topic, handler)

        async def main() -> None:
            await app.start()
            try:
                await asyncio.wait_for(done.wait(), 40)
                await asyncio.sleep(1.0)  # a commit interval
            finally:
                await app.stop()

        asyncio.run(main())
    assert rewound, "the handler rewound once"
    assert kept == list(range(len(sent))), "every record once, in order, after the rewind"
    committed = asyncio.run(committed_offsets(broker.bootstrap, group, topic, 1))
    assert committed == {0: len(sent)}


def test_a_fetch_that_never_returns_stops_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fetch handed to Faust's consumer thread that never comes back raises FetchStalled
    (the worker then exits and is restarted) instead of holding its partitions for ever."""
    from faust.transport.drivers import aiokafka as faust_aiokafka

    from streams.job.worker import ingest

    async def never(self: Any, active_partitions: Any, timeout: float) -> dict:
        await asyncio.sleep(3600)
        return {}

    async def answers(self: Any, active_partitions: Any, timeout: float) -> dict:
        return {"tp": ["record"]}

    monkeypatch.setattr(ingest, "FETCH_STALL_S", 0.2)
    app = faust.App("ingest-stall", broker="kafka://127.0.0.1:9", web_enabled=False,
                    **ingest_settings())
    ingest.install_batch_consumer(app)
    consumer = app.consumer
    monkeypatch.setattr(faust_aiokafka.Consumer, "_getmany", answers)
    assert asyncio.run(consumer._getmany(set(), 0.01)) == {"tp": ["record"]}
    monkeypatch.setattr(faust_aiokafka.Consumer, "_getmany", never)
    with pytest.raises(ingest.FetchStalled, match="did not answer a fetch"):
        asyncio.run(consumer._getmany(set(), 0.01))


def test_a_group_membership_that_died_stops_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """When aiokafka's group membership task in Faust's consumer thread ends with an error, the
    consumer's check raises CoordinationFailed (the worker then exits and is restarted) instead
    of the worker holding no partition for ever; a membership still running, or stopped by
    cancellation, is fine."""
    from types import SimpleNamespace

    from streams.job.worker import ingest

    app = faust.App("ingest-membership", broker="kafka://127.0.0.1:9", web_enabled=False,
                    **ingest_settings())
    ingest.install_batch_consumer(app)
    consumer = app.consumer
    assert consumer.coordination_failure() is None  # the consumer thread has not started
    consumer.check_coordination()

    async def membership(outcome: str) -> asyncio.Task:
        async def routine() -> None:
            if outcome == "fails":
                raise ValueError("empty assignment")
            await asyncio.sleep(3600)

        task = asyncio.ensure_future(routine())
        await asyncio.sleep(0.01)
        if outcome == "cancelled":
            task.cancel()
            await asyncio.sleep(0.01)
        return task

    def with_task(task: asyncio.Task) -> None:
        coordinator = SimpleNamespace(_coordination_task=task)
        monkeypatch.setattr(consumer._thread, "_consumer",
                            SimpleNamespace(_coordinator=coordinator))

    async def main() -> None:
        running = await membership("runs")
        with_task(running)
        consumer.check_coordination()
        running.cancel()
        with_task(await membership("cancelled"))
        consumer.check_coordination()
        with_task(await membership("fails"))
        assert isinstance(consumer.coordination_failure(), ValueError)
        with pytest.raises(ingest.CoordinationFailed,
                           match=r"group membership failed \(empty assignment\)"):
            consumer.check_coordination()

    asyncio.run(main())
