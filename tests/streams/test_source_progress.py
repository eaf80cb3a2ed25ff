"""A stream's event time over source partitions (:mod:`streams.job.source_progress`): the
smallest time any busy source partition has reached, idle ones left out; progress records are
signed per partition of ``reports``; a partition of ``reports`` closes a slot only once every
source partition has passed its end, whatever order their reports arrive in."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.job.config import JobConfig
from streams.job.partitions.slotting import LATE, OK, Slotter
from streams.job.roles import make_accumulator, make_registry
from streams.job.slot_clock import SlotClock
from streams.job.source.rekey import report_value
from streams.job.source_progress import Progress, SourceProgress, progress_of, progress_record
from streams.records.field_formats import Reason
from streams.records.field_parsing import RecordError

SECRET, STREAM = b"k", "s"


def test_the_event_time_is_the_smallest_busy_partition_s() -> None:
    sp = SourceProgress((2, 1))
    assert sp.event_time() is None
    sp.take(Progress(0, 0, 5_000, False))
    sp.take(Progress(0, 1, 9_000, False))
    assert sp.event_time() is None, "a partition that said nothing yet holds time back"
    sp.take(Progress(1, 0, 3_000, False))
    assert sp.event_time() == 3_000
    assert sp.holding_back() == ((1, 0), 6_000)
    sp.take(Progress(1, 0, 2_000, False))
    assert sp.event_time() == 3_000, "a partition's time never goes back"
    sp.take(Progress(1, 0, 3_000, True))
    assert sp.event_time() == 5_000, "an idle partition does not hold time back"
    sp.take(Progress(0, 0, 5_000, True))
    sp.take(Progress(0, 1, 9_000, True))
    assert sp.event_time() == 9_000, "all idle: the largest time any reached"
    sp.take(Progress(0, 0, 6_000, False))
    assert sp.event_time() == 6_000, "records again: the partition holds time back again"
    again = SourceProgress((2, 1))
    again.load(orjson.loads(orjson.dumps(sp.state())))
    assert (again.reached, again.idle) == (sp.reached, sp.idle)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(-1, 10_000), st.booleans()),
                max_size=30))
def test_the_event_time_matches_its_definition(steps: list) -> None:
    sp = SourceProgress((3,))
    reached: dict[int, int] = {}
    idle: set[int] = set()
    for p, ms, is_idle in steps:
        sp.take(Progress(0, p, ms, is_idle))
        reached[p] = max(reached.get(p, -1), ms)
        (idle.add if is_idle else idle.discard)(p)
        busy = [q for q in range(3) if q not in idle]
        if busy:
            low = min(reached.get(q, -1) for q in busy)
            want = None if low < 0 else low
        else:
            want = max((t for t in reached.values() if t >= 0), default=None)
        assert sp.event_time() == want


def test_progress_records_are_signed_for_one_partition_of_reports() -> None:
    p = Progress(1, 4, 123_456, False)
    value = progress_record(p, SECRET, STREAM, 2)
    assert progress_of(value, SECRET, STREAM, 2) == p
    assert progress_of(b'{"user":"a"}', SECRET, STREAM, 2) is None
    for forged in (progress_record(p, SECRET, STREAM, 3),  # another partition's
                   progress_record(p, b"other", STREAM, 2),
                   value.replace(b"123456", b"999999"),
                   b'{"progress":5,"source":[0,0],"idle":true}'):
        with pytest.raises(RecordError) as err:
            progress_of(forged, SECRET, STREAM, 2)
        assert err.value.reason is Reason.UNAUTHENTICATED_CONTROL


def test_a_slotter_that_does_not_advance_only_moves_when_told() -> None:
    slotter = Slotter(SlotClock(1000), advance=False)
    import numpy as np

    got = slotter.assign(np.array(["a", "b"], dtype=object), np.array([5_500, 1_200]))
    assert got.status.tolist() == [OK, OK] and slotter.watermark is None
    slotter.restore(2_000, {}, slotter.first_slot)
    got = slotter.assign(np.array(["c", "d"], dtype=object), np.array([1_999, 2_000]))
    assert got.status.tolist() == [LATE, OK]


CFG = JobConfig(stream=STREAM, mechanism="pbd", domain={"kind": "cells", "size": 2},
                slot_ms=1000, partitions=1, secret="k", event_time="history",
                source_partitions=(3,))


def _report(user: str, t: int, src: int, offset: int) -> tuple:
    return (user.encode(), report_value(user, t, 1, (0, src, offset)), 0, 0)


def test_a_partition_of_reports_waits_for_every_source_partition() -> None:
    """Source partitions 0 and 1 run four slots ahead of partition 2; partition 2's reports of
    slot 0 arrive last and count; slot 0 closes only once partition 2 has passed its end."""
    registry = make_registry(CFG, 0)
    users = [f"u{i}" for i in range(6)]
    registry.apply_batch([u.encode() for u in users],
                         [orjson.dumps({"user": u, "w": 4, "E": 1.0}) for u in users])
    acc = make_accumulator(0, CFG, registry)

    def mark(src: int, ms: int, idle: bool = False) -> tuple:
        return (None, progress_record(Progress(0, src, ms, idle), SECRET, STREAM, 0), 0, 0)

    fast = [_report("u0", 100, 0, 0), _report("u1", 4_500, 1, 0), mark(0, 4_600),
            mark(1, 4_500)]
    slow = [_report("u2", 300, 2, 0), _report("u3", 900, 2, 1), mark(2, 900)]
    records = [(k, v, 0, i) for i, (k, v, _p, _o) in enumerate(fast + slow)]
    partials, dead = acc.process(records[:4], "reports")
    assert dead == [] and partials == [] and acc.closed_through is None
    partials, dead = acc.process(records[4:6], "reports")
    assert dead == [], "partition 2's reports of slot 0 are on time"
    assert acc.closed_through is None
    partials, dead = acc.process(records[6:], "reports")
    assert acc.closed_through is None, "900 ms has not passed slot 0's end"
    tail = [(k, v, 0, 7 + i) for i, (k, v, _p, _o) in enumerate([mark(2, 2_000)])]
    partials, dead = acc.process(tail, "reports")
    assert acc.closed_through == 1
    assert partials[-1]["slots"]["0"]["accepted"] == 3, "partition 2's two reports counted"
    # a report of slot 0 from partition 2 after that is late by partition 2's own order
    late = [(b"u4", report_value("u4", 500, 1, (0, 2, 9)), 0, 8)]
    _partials, dead = acc.process(late, "reports")
    assert [d.reason for d in dead] == ["late"]
    # the progress survives a checkpoint
    again = make_accumulator(0, CFG, registry)
    again.restore(acc.snapshot())
    assert again.sources.reached == acc.sources.reached


def test_a_partition_added_to_a_source_holds_time_back_once_seen() -> None:
    """Source partitions 0-2 all idle past slot 1; the topic grows to 5 partitions. From then
    on, the new partitions hold the stream's event time back: partitions 0-2 running on to
    slot 4 close nothing until partitions 3 and 4 say where they are, and a report of partition
    4 in slot 2 read after that counts. Before the topic is seen to grow, the partitions it
    does not know of hold nothing back."""
    registry = make_registry(CFG, 0)
    users = [f"u{i}" for i in range(6)]
    registry.apply_batch([u.encode() for u in users],
                         [orjson.dumps({"user": u, "w": 4, "E": 1.0}) for u in users])
    acc = make_accumulator(0, CFG, registry)
    offset = iter(range(1_000))

    def mark(src: int, ms: int, idle: bool = False) -> tuple:
        return (None, progress_record(Progress(0, src, ms, idle), SECRET, STREAM, 0), 0,
                next(offset))

    def report(user: str, t: int, src: int) -> tuple:
        return (user.encode(), report_value(user, t, 1, (0, src, 0)), 0, next(offset))

    acc.process([report("u0", 100, 0), mark(0, 1_500, True), mark(1, 1_200, True),
                 mark(2, 1_100, True)], "reports")
    assert acc.closed_through == 1, "all idle: through the slot of the largest time"
    assert acc.sources is not None
    acc.sources.grow((5,))
    assert acc.sources.expected() == [(0, p) for p in range(5)]
    partials, dead = acc.process([report("u1", 2_100, 1), mark(0, 4_200), mark(1, 4_300),
                                  mark(2, 4_100)], "reports")
    assert dead == [] and acc.closed_through == 1, "partitions 3 and 4 said nothing yet"
    partials, dead = acc.process([mark(3, 0, True), report("u2", 2_500, 4), mark(4, 2_600)],
                                 "reports")
    assert dead == [], "partition 4's report of slot 2 is on time"
    assert acc.closed_through == 1, "2,600 ms has not passed slot 2's end"
    partials, dead = acc.process([mark(4, 4_000, True)], "reports")
    assert acc.closed_through == 3, "the busy partitions 0-2 are in slot 4"
    counted = {s: doc["accepted"] for part in partials for s, doc in part["slots"].items()}
    assert counted.get("2") == 2, "u1 and u2 counted in slot 2"
    with pytest.raises(ValueError):
        acc.sources.grow((5, 1))  # one count per source topic


def test_a_restarted_live_worker_closes_what_waited_longer_than_the_bound() -> None:
    """Live, a worker that comes back after its partitions' slots waited past ``--max-hold-ms``
    writes, before records flow, a signed watermark record at the bound to each partition whose
    stream has begun (what the backlog holds for those slots is then ``late``); the status says
    how long the oldest open slot has waited."""
    import asyncio
    import time
    from collections import Counter
    from dataclasses import replace
    from types import SimpleNamespace

    from faust.types import TP

    from streams.job.operations.worker_metrics import WorkerMetrics
    from streams.job.partitions.accumulator import watermark_of
    from streams.job.partitions.checkpoint_store import write_chunked
    from streams.job.worker.partition_runner import PartitionRunner
    from streams.kafka.topics import Topics

    cfg = replace(CFG, event_time="live", partitions=2, max_hold_ms=5_000)
    topics = Topics(prefix="hold", partitions=2)
    now = int(time.time() * 1000)
    checkpoints: dict[bytes, bytes] = {}
    registry = make_registry(cfg, 0)
    registry.apply_batch([b"u0"], [orjson.dumps({"user": "u0", "w": 4, "E": 1.0})])
    acc = make_accumulator(0, cfg, registry)
    acc.process([(b"u0", report_value("u0", now - 30_000, 1, (0, 0, 0)), 0, 0)])
    write_chunked(checkpoints, 0, acc.snapshot())  # partition 1 never began
    sent: list[tuple[int, bytes]] = []

    async def send(topic: str, key: bytes | None, value: bytes, partition: int, *_: object):
        sent.append((partition, value))
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    assigned = {TP(topics.reports, 0), TP(topics.reports, 1)}
    app = SimpleNamespace(producer=SimpleNamespace(send=send),
                          consumer=SimpleNamespace(assignment=lambda: assigned))
    runner = PartitionRunner(app, cfg, "unused:9092", topics, {}, checkpoints,  # type: ignore[arg-type]
                             Counter(), WorkerMetrics(topics.reports))
    asyncio.run(runner.hold_assigned())
    bound = runner.hold_bound()
    after = int(time.time() * 1000)  # the bound is read from the clock at the call
    clock = cfg.clock
    assert bound is not None
    assert clock.start(int(clock.slot_of(now - 5_000))) <= bound
    assert bound <= clock.start(int(clock.slot_of(after - 5_000)))
    assert [(p, watermark_of((None, v, p, 0), b"k", STREAM)) for p, v in sent] == [(0, bound)]
    wait, holding = runner.event_time_status()
    assert 29 <= wait <= 40 and holding is None  # slot of now - 30 s, still open here


def test_a_copy_sent_again_after_its_slot_closed_is_no_late_report() -> None:
    """A source batch read again after a crash sends its reports again; a copy that reaches its
    partition after the slot closed is counted as superseded, not dead-lettered as ``late``.
    A report past every source offset taken that comes after its slot closed is ``late``."""
    registry = make_registry(CFG, 0)
    registry.apply_batch([b"u0", b"u1"], [orjson.dumps({"user": u, "w": 4, "E": 1.0})
                                          for u in ("u0", "u1")])
    acc = make_accumulator(0, CFG, registry)

    def mark(src: int, ms: int) -> tuple:
        return (None, progress_record(Progress(0, src, ms, False), SECRET, STREAM, 0))

    first = [_report("u0", 100, 0, 7)[:2], mark(0, 1_500), mark(1, 1_500), mark(2, 1_500)]
    acc.process([(k, v, 0, i) for i, (k, v) in enumerate(first)], "reports")
    assert acc.closed_through == 0
    again = [_report("u0", 100, 0, 7)[:2], _report("u1", 200, 0, 8)[:2]]
    _partials, dead = acc.process([(k, v, 0, 10 + i) for i, (k, v) in enumerate(again)],
                                  "reports")
    assert acc.superseded == 1
    assert [(d.offset, d.reason) for d in dead] == [(11, "late")]
