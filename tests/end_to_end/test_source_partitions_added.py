"""A source topic that gains partitions while the job runs (``kafka-topics --alter
--partitions``): from when a worker's consumer sees them in the broker's metadata, the new
partitions hold the stream's event time back until their first progress, and the group
rebalances to read them. test_source_event_time.py's events, slots 0-3 on 3 partitions; once
the worker read them, the topic grows to 6, slots 4-7 arrive on the new partitions and, once the
worker saw them, on the old ones, which it reads first: none is ``late``, every slot is released
once, and the releases are the in-process run of the same records. On both brokers."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from brokers import broker_fixture
from test_source import DOMAIN, ORIGIN, iso, produce_source
from test_source_event_time import (
    CONFIG,
    LEVELS,
    PARTS,
    SLOT,
    SLOTS,
    assert_in_process_releases,
    assert_nothing_late,
    events,
)

from streams.job.source.mapping import SourceMapping
from streams.kafka.offsets import wait_consumed
from streams.kafka.settings import client_options
from streams.kafka.topics import TopicSpec, create_topics
from tests.jobkit import (
    config,
    rekeyed,
    setup_topics,
    start_configured_worker,
    stop_worker,
    timestamped_records,
    wait_for_slots,
    wait_while_running,
)

broker = broker_fixture()
BEFORE = 3  # the source topic's partitions at the worker's start; PARTS after it grew


def grow(bootstrap: str, topic: str, total: int) -> None:
    """Add partitions to ``topic`` up to ``total``."""
    async def go() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options())
        await admin.start()
        try:
            await admin.create_partitions({topic: NewPartitions(total_count=total)})
        finally:
            await admin.close()

    asyncio.run(go())


def test_partitions_added_to_a_source_hold_time_back(broker, tmp_path: Path) -> None:
    prefix, source = "evgrow", "ev-grow"
    cfg = config(prefix, stream="ev", domain=DOMAIN, slot_ms=SLOT, origin_ms=ORIGIN,
                 default_levels=LEVELS)
    topics = setup_topics(broker.bootstrap, cfg)
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("ev", source, BEFORE)]))
    evs = events()
    early = [(p % BEFORE, e) for p, e in evs if e["ts"] < iso(ORIGIN + 4 * SLOT)]
    late_old = [(p, e) for p, e in evs if e["ts"] >= iso(ORIGIN + 4 * SLOT) and p < BEFORE]
    late_new = [(p, e) for p, e in evs if e["ts"] >= iso(ORIGIN + 4 * SLOT) and p >= BEFORE]
    assert late_new and late_old
    produce_source(broker.bootstrap, source, early, BEFORE)
    conf = tmp_path / "pwevent.toml"
    conf.write_text(CONFIG.format(origin=ORIGIN, source=source))
    log = tmp_path / "worker.log"
    worker = start_configured_worker(broker.bootstrap, prefix, conf, tmp_path / "data", log)
    alive = lambda: worker.poll() is None  # noqa: E731
    try:
        assert asyncio.run(wait_consumed(broker.bootstrap, cfg.app_id(), source, BEFORE, 120,
                                         alive=alive)), log.read_text()[-3000:]
        grow(broker.bootstrap, source, PARTS)
        # producers write to the new partitions at once; the worker sees them within seconds
        produce_source(broker.bootstrap, source, late_new, PARTS)
        grown = f"source topic {source} grew from {BEFORE} to {PARTS} partitions"
        wait_while_running(lambda: grown in log.read_text(), 60, worker, log)
        # the old partitions' later slots: they must not close what the new ones hold
        produce_source(broker.bootstrap, source, late_old, PARTS)
        assert asyncio.run(wait_consumed(broker.bootstrap, cfg.app_id(), source, PARTS, 120,
                                         alive=alive)), log.read_text()[-3000:]
        docs = wait_for_slots(broker.bootstrap, topics, set(range(SLOTS)), 120, worker)
        assert alive(), log.read_text()[-3000:]
    finally:
        stop_worker(worker)
    text = log.read_text()
    assert sorted(d["slot"] for d in docs) == list(range(SLOTS)), text[-3000:]
    assert_nothing_late(broker.bootstrap, topics)
    records = timestamped_records(broker.bootstrap, source, PARTS)
    assert len(records) == len(evs)
    mapping = SourceMapping.from_flags("device.id", "ts", ["country"], DOMAIN)
    assert_in_process_releases(broker.bootstrap, cfg, topics, rekeyed(records, mapping, PARTS))
