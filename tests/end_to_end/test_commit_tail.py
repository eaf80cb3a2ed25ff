"""A partition's last records are committed even when they change nothing: a watermark that
arrives after its slots closed (a producer's mark behind the worker's own idle mark, or a mark
sent twice) leaves no message and so no checkpoint, and the worker still checkpoints and
acknowledges such a tail once the partition goes quiet, on both brokers."""

from __future__ import annotations

import asyncio

import jobkit as kit
from brokers import broker_fixture

from streams.kafka.offsets import committed_offsets, end_offsets, wait_consumed

USERS = [f"u{i}" for i in range(10)]

broker = broker_fixture()


def test_a_tail_that_changes_nothing_is_still_committed(broker, tmp_path):
    cfg = kit.config("tail")
    topics = kit.setup_topics(broker.bootstrap, cfg)
    log = tmp_path / "worker.log"
    worker = kit.start_worker(broker.bootstrap, cfg, tmp_path / "data", log)
    group = f"pwevent-{cfg.prefix}-{cfg.stream}"
    alive = lambda: worker.poll() is None  # noqa: E731
    try:
        requirements = kit.requirement_records(USERS, [4] * len(USERS), [1.0] * len(USERS))
        kit.register(broker.bootstrap, topics, cfg, requirements, worker)
        for t in range(2):
            reports = kit.slot_reports(USERS, t, 3)
            kit.produce(broker.bootstrap, topics.reports, cfg.partitions, reports)
        kit.close_through(broker.bootstrap, topics, cfg, 2 * cfg.slot_ms)
        docs = kit.wait_for_slots(broker.bootstrap, topics, {0, 1}, 90, worker)
        assert sorted(d["slot"] for d in docs) == [0, 1], log.read_text()[-3000:]
        assert asyncio.run(wait_consumed(broker.bootstrap, group, topics.reports,
                                         cfg.partitions, 30, alive=alive)), \
            log.read_text()[-3000:]
        # the same marks again: every partition's watermark stands there already
        kit.close_through(broker.bootstrap, topics, cfg, 2 * cfg.slot_ms)
        ends = asyncio.run(end_offsets(broker.bootstrap, topics.reports, cfg.partitions))
        done = asyncio.run(wait_consumed(broker.bootstrap, group, topics.reports,
                                         cfg.partitions, 30, alive=alive))
        committed = asyncio.run(committed_offsets(broker.bootstrap, group, topics.reports))
        assert worker.poll() is None, log.read_text()[-3000:]
    finally:
        kit.stop_worker(worker)
    assert done, (ends, committed, log.read_text()[-3000:])
    # nothing was released again, nor anything new
    after = kit.wait_for_slots(broker.bootstrap, topics, {0, 1}, 10)
    assert sorted(d["slot"] for d in after) == [0, 1]
