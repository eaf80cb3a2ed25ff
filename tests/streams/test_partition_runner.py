"""A worker's partitions of ``reports`` (:class:`PartitionRunner`) without Kafka: resuming them
once the tables are recovered after a rebalance, when another rebalance interrupts that.

Faust calls the app's ``on_rebalance_complete`` receivers from the table recovery and cancels
them when the next rebalance reaches the worker (mode's ``Service.wait_first``), which is when
its partitions have just been revoked (:meth:`PartitionRunner.forget`)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import orjson
from faust.types import TP
from jobkit import dynamic_requirements, slot_reports

from streams.job.config import JobConfig
from streams.job.operations.worker_metrics import WorkerMetrics
from streams.job.partitions.checkpoint_store import write_chunked
from streams.job.roles import make_accumulator, make_registry
from streams.job.worker.partition_runner import PartitionRunner
from streams.kafka.producer import key_partition
from streams.kafka.topics import Topics

CFG = JobConfig(mechanism="dpbd", domain={"kind": "cells", "size": 3}, slot_ms=1000,
                partitions=2, secret="k", stream="s", event_time="history")
TOPICS = Topics(prefix="runner", partitions=CFG.partitions)
USERS = [f"u{i}" for i in range(12)]
START = {"stream": "s", "start": 0}


class Producer:
    """Keeps what is sent to ``slot-partials``; while ``held``, the broker acknowledges a table's
    writes (:meth:`table_written`) only with a permit."""

    def __init__(self) -> None:
        self.sent: list[dict] = []
        self.topics: list[str] = []  # of every record sent
        self.held = False
        self.permits: asyncio.Queue[None] = asyncio.Queue()
        self.writing = asyncio.Event()

    async def send(self, topic: str, key: Any, value: bytes, *_: Any) -> asyncio.Future:
        self.topics.append(topic)
        if topic == TOPICS.slot_partials:
            self.sent.append(orjson.loads(value))
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def table_written(self) -> None:
        self.writing.set()
        if self.held:
            await self.permits.get()


class Table(dict[bytes, bytes]):
    """A table whose writes are acknowledged when ``written`` says so (as a
    :class:`~streams.job.worker.tables.TrackedTable`'s are once the broker has them)."""

    def __init__(self, written: Callable[[], Awaitable[None]]) -> None:
        super().__init__()
        self.written = written


def restarted_worker() -> tuple[PartitionRunner, Producer]:
    """A worker started again on both partitions. Each partition's checkpoint has slots 0 and 1
    closed and slot 0 planned; the decisions topic, read before the tables were recovered,
    holds the stream's start and the decision of slot 0: each must plan slot 1 as it resumes,
    and the coordinator waits for that plan before it releases anything more."""
    producer = Producer()
    users: dict[bytes, bytes] = {}
    checkpoints = Table(producer.table_written)
    requirements = dict(dynamic_requirements(USERS))
    for p in range(CFG.partitions):
        mine = [u for u in USERS if key_partition(u.encode(), CFG.partitions) == p]
        registry = make_registry(CFG, p)
        for u in mine:
            registry.apply(u.encode(), requirements[u.encode()])
            users[u.encode()] = registry.export(u)
        acc = make_accumulator(p, CFG, registry)
        records = [rec for t in range(3) for rec in slot_reports(mine, t, CFG.d)]
        acc.process([(k, v, p, offset) for offset, (k, v) in enumerate(records)])
        acc.advance_messages(2 * CFG.slot_ms)
        assert [m["plan"] for m in acc.on_control(START) if "plan" in m] == [0]
        write_chunked(checkpoints, p, acc.snapshot())
    assigned = {TP(TOPICS.reports, p) for p in range(CFG.partitions)}
    app = SimpleNamespace(producer=producer, consumer=SimpleNamespace(assignment=lambda: assigned))
    runner = PartitionRunner(app, CFG, "unused:9092", TOPICS, users, checkpoints,  # type: ignore[arg-type]
                             Counter(), WorkerMetrics(TOPICS.reports))
    runner.start_record = START  # type: ignore[assignment]
    runner.decision_log = {0: True}
    return runner, producer


def plans(producer: Producer, p: int) -> list[int]:
    """The slots partition ``p`` sent plans of, in order."""
    return [m["plan"] for m in producer.sent if "plan" in m and m["partition"] == p]


async def interrupted_resume(runner: PartitionRunner, producer: Producer,
                             during: Callable[[], None] | None = None) -> None:
    """Resume the assigned partitions and cancel that, as the next rebalance does, while a
    partition writes its checkpoint: the first one, or, with ``during`` (a revocation) called
    while the first one does, the next one to get that far (if the resume goes on)."""
    producer.held = True
    resume = asyncio.ensure_future(runner.resume_assigned())
    await producer.writing.wait()
    if during is not None:
        during()
        producer.writing.clear()
        producer.permits.put_nowait(None)
        writing = asyncio.ensure_future(producer.writing.wait())
        await asyncio.wait([resume, writing], return_when=asyncio.FIRST_COMPLETED)
        writing.cancel()
    resume.cancel()
    await asyncio.gather(resume, return_exceptions=True)
    producer.held = False


def test_a_resume_cancelled_before_its_messages_went_out_is_done_again() -> None:
    """A resume cancelled while its partition checkpoints has not sent the plan that partition
    owes the coordinator: the next rebalance's resume sends it (it is not taken as resumed)."""
    async def go() -> None:
        runner, producer = restarted_worker()
        await interrupted_resume(runner, producer)
        assert plans(producer, 0) == []
        await runner.resume_assigned()  # after the next rebalance, with the same assignment
        assert plans(producer, 0)[-1:] == [1]
        assert plans(producer, 1) == [0, 1]

    asyncio.run(go())


def test_a_resume_overtaken_by_a_revocation_resumes_nothing_more() -> None:
    """Partitions revoked while a resume runs are not resumed by it: a partition it would
    resume next is left to the next rebalance (which may give it to another worker), with
    no accumulator rebuilt for it in between; once resumed there, each partition sends the
    plan it owes."""
    async def go() -> None:
        runner, producer = restarted_worker()

        def revoke_all() -> None:
            for p in range(CFG.partitions):
                runner.forget(p)

        await interrupted_resume(runner, producer, during=revoke_all)
        assert 1 not in runner.accumulators and not runner.resumed
        assert plans(producer, 1) == []
        await runner.resume_assigned()  # after the next rebalance, with the same assignment
        assert plans(producer, 0)[-1:] == [1]
        assert plans(producer, 1) == [0, 1]

    asyncio.run(go())


def test_a_hold_overtaken_by_a_revocation_builds_nothing_again() -> None:
    """Live, after a rebalance the assigned partitions are built and each behind the hold bound
    gets a watermark record; a revocation while that waits for a partition's lock stops it, and
    no revoked partition is built again from tables the next recovery has not caught up."""
    import dataclasses

    async def go(revoke: bool) -> tuple[PartitionRunner, Producer]:
        runner, producer = restarted_worker()
        runner.config = dataclasses.replace(CFG, event_time="live")
        lock = runner.lock(0)
        await lock.acquire()
        holding = asyncio.ensure_future(runner.hold_assigned())
        await asyncio.sleep(0.01)
        assert sorted(runner.accumulators) == [0, 1]  # built first
        if revoke:
            for p in range(CFG.partitions):
                runner.forget(p)
        lock.release()
        await asyncio.wait_for(holding, 1)
        return runner, producer

    runner, producer = asyncio.run(go(revoke=False))
    assert producer.topics.count(TOPICS.reports) == 2 and sorted(runner.accumulators) == [0, 1]
    runner, producer = asyncio.run(go(revoke=True))
    assert producer.topics.count(TOPICS.reports) == 0 and runner.accumulators == {}


class Acks:
    """A consumer's side the runner acknowledges through: the stops asked for, per partition."""

    def __init__(self, assigned: set[TP]) -> None:
        self.assigned = assigned
        self.flow_active = True
        self.stops: dict[int, list[int]] = {}

    def assignment(self) -> set[TP]:
        return self.assigned

    def acknowledge(self, tp: TP, stop: int) -> None:
        self.stops.setdefault(tp.partition, []).append(stop)


def test_a_quiet_partitions_tail_is_checkpointed_and_acknowledged() -> None:
    """Records taken after the last checkpoint that said nothing (a watermark behind the
    partition's own) are checkpointed and acknowledged once the partition is quiet, and not
    before; a checkpoint a decision caused is acknowledged too, though no batch followed it;
    nothing is settled while a rebalance stops the flow."""
    from streams.job.partitions.accumulator import watermark_record
    from streams.job.partitions.checkpoint_store import read_chunked

    async def go() -> None:
        runner, producer = restarted_worker()
        acks = Acks(runner.app.consumer.assignment())
        runner.app.consumer = acks  # type: ignore[attr-defined]
        await runner.resume_assigned()
        part = runner.partitions[0]
        start = part.next_offset
        assert part.acked == start
        behind = watermark_record(CFG.slot_ms, CFG.secret_bytes(), CFG.stream, 0)
        answer = await runner.on_reports([(None, behind, 0, start)])
        assert answer == start and part.next_offset == start + 1  # said nothing: not covered
        stored = read_chunked(runner.checkpoints, 0)
        now = runner.last_batch[0]
        await runner.settle_tails([0, 1], now + 0.1, 1.0)  # not quiet yet
        assert 0 not in acks.stops and read_chunked(runner.checkpoints, 0) == stored
        acks.flow_active = False
        await runner.settle_tails([0, 1], now + 5.0, 1.0)
        assert 0 not in acks.stops
        acks.flow_active = True
        await runner.settle_tails([0, 1], now + 5.0, 1.0)
        assert acks.stops[0][-1] == start + 1 and part.acked == start + 1
        assert read_chunked(runner.checkpoints, 0) != stored
        assert runner.counters["tails_checkpointed"] == 1
        # the stored checkpoint covers the tail: the partition comes back past it
        again = runner.build(0)
        assert again.next_offset == start + 1
        # a decision's checkpoint moves ``acked`` with no batch to answer it: slot 2 closes
        # (a checkpoint), a record says nothing, then slot 1's decision has slot 2 planned
        closing = watermark_record(3 * CFG.slot_ms, CFG.secret_bytes(), CFG.stream, 0)
        assert await runner.on_reports([(None, closing, 0, start + 1)]) == start + 2
        assert await runner.on_reports([(None, behind, 0, start + 2)]) == start + 2
        await runner.on_control({"stream": "s", "slot": 1, "published": True})
        assert plans(producer, 0)[-1] == 2 and part.acked == start + 3
        await runner.settle_tails([0, 1], runner.last_batch[0] + 5.0, 1.0)
        assert acks.stops[0][-1] == start + 3
        assert runner.counters["tails_checkpointed"] == 1  # that needed no checkpoint of its own

    asyncio.run(go())


def test_requirements_and_checkpoints_are_answered_only_once_on_the_broker() -> None:
    """A batch of requirements is answered (and then acknowledged) only once the broker has
    acknowledged the registry it wrote to the ``users`` table's changelog, and a checkpoint
    counts as stored only once its changelog records are: a worker killed after the commit that
    follows keeps both. The changelog records wait in the app's producer buffer here, taken out
    and acknowledged by hand."""
    import faust

    from streams.job.partitions.registry_store import read_blocks
    from streams.job.worker.ingest import partition_context
    from streams.job.worker.tables import TrackedTable

    async def acknowledge_all(app: faust.App) -> int:
        pending = app.producer.buffer.pending
        count = 0
        while not pending.empty():
            pending.get_nowait().set_result(None)
            count += 1
        await asyncio.sleep(0)
        return count

    async def go() -> None:
        app = faust.App("runner-tables", broker="kafka://127.0.0.1:9", web_enabled=False)
        tables = [app.tables.add(TrackedTable(app, name=name, beacon=app.tables.beacon,
                                              partitions=CFG.partitions, key_type=bytes,
                                              value_type=bytes))
                  for name in ("users", "checkpoints")]
        producer = Producer()
        assigned = {TP(TOPICS.reports, p) for p in range(CFG.partitions)}
        worker = SimpleNamespace(producer=producer,
                                 consumer=SimpleNamespace(assignment=lambda: assigned))
        runner = PartitionRunner(worker, CFG, "unused:9092", TOPICS, *tables,  # type: ignore[arg-type]
                                 Counter(), WorkerMetrics(TOPICS.reports))
        mine = [(k, v) for k, v in dynamic_requirements(USERS)
                if key_partition(k, CFG.partitions) == 0]
        with partition_context(app, TOPICS.requirements, 0):  # as the batch's handler runs
            registering = asyncio.ensure_future(runner.on_requirements(
                [(k, v, 0, offset) for offset, (k, v) in enumerate(mine)]))
            await asyncio.sleep(0.05)
            assert not registering.done()  # the registry's records are still on their way
            assert await acknowledge_all(app) > 0
            await asyncio.wait_for(registering, 1)
        with partition_context(app, TOPICS.requirements, 0):
            assert read_blocks(tables[0], 0)  # the registry, as stored

        reports = [(k, v, 0, offset) for offset, (k, v) in
                   enumerate(rec for t in range(3) for rec in slot_reports(
                       [k.decode() for k, _ in mine], t, CFG.d))]
        with partition_context(app, TOPICS.reports, 0):
            taking = asyncio.ensure_future(runner.on_reports(reports))
            await asyncio.sleep(0.05)
            assert not taking.done() and runner.partitions[0].acked == 0
            assert await acknowledge_all(app) > 0
            assert await asyncio.wait_for(taking, 1) == len(reports)

    asyncio.run(go())
