"""A source topic written by transactional producers (a stream processor's exactly-once sink):
each transaction ends in a commit marker, an offset that holds no record the consumer hands
over. A source partition read to its last record is read to its end all the same: with default
flags, the history replay of test_source_event_time.py's events, written in transactions of 50
records, releases every slot (the last one once every partition is idle), nothing is ``late``,
and the releases are the in-process run of the same mapped reports. On both brokers."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer
from brokers import broker_fixture
from test_source import DOMAIN, ORIGIN
from test_source_event_time import CONFIG, LEVELS, PARTS, SLOT, SLOTS, events

from streams.job.pipeline import InProcessJob
from streams.job.source.mapping import SourceMapping
from streams.kafka.offsets import end_offsets, holds_records, read_topic
from streams.kafka.settings import client_options
from streams.kafka.topics import TopicSpec, create_topics
from streams.records.dead_letters import decode_dead_letter
from tests.jobkit import (
    config,
    job_nonce,
    rekeyed,
    setup_topics,
    start_configured_worker,
    stop_worker,
    timestamped_records,
    wait_for_slots,
)

broker = broker_fixture()


def produce_in_transactions(bootstrap: str, topic: str, evs: list[tuple[int, dict]]) -> None:
    """Each partition's events as keyless JSON records, in committed transactions of 50."""
    async def go() -> None:
        prod = AIOKafkaProducer(bootstrap_servers=bootstrap, **client_options(),
                                transactional_id=f"tx-{topic}", enable_idempotence=True)
        await prod.start()
        try:
            for p in range(PARTS):
                mine = [e for q, e in evs if q == p]
                for i in range(0, len(mine), 50):
                    async with prod.transaction():
                        for e in mine[i:i + 50]:
                            await prod.send(topic, orjson.dumps(e), partition=p)
        finally:
            await prod.stop()

    asyncio.run(go())


def test_a_transactional_source_replays_to_its_last_slot(broker, tmp_path: Path) -> None:
    prefix, source = "evtx", "ev-tx"
    cfg = config(prefix, stream="ev", domain=DOMAIN, slot_ms=SLOT, origin_ms=ORIGIN,
                 default_levels=LEVELS)
    topics = setup_topics(broker.bootstrap, cfg)
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("ev", source, PARTS)]))
    evs = events()
    produce_in_transactions(broker.bootstrap, source, evs)
    records = timestamped_records(broker.bootstrap, source, PARTS)
    assert len(records) == len(evs)
    ends = asyncio.run(end_offsets(broker.bootstrap, source, PARTS))
    assert sum(ends.values()) > len(evs), "the commit markers take offsets"
    last = max(r[3] for r in records if r[2] == 0)  # partition 0's last record, then a marker
    assert ends[0] == last + 2
    assert not asyncio.run(holds_records(broker.bootstrap, source, 0, last + 1, ends[0]))
    assert asyncio.run(holds_records(broker.bootstrap, source, 0, last, ends[0]))
    conf = tmp_path / "pwevent.toml"
    conf.write_text(CONFIG.format(origin=ORIGIN, source=source))
    log = tmp_path / "worker.log"
    worker = start_configured_worker(broker.bootstrap, prefix, conf, tmp_path / "data", log)
    try:
        # the last slot closes only once every partition, read to its marker, is idle
        docs = wait_for_slots(broker.bootstrap, topics, set(range(SLOTS)), 120, worker)
        assert worker.poll() is None, log.read_text()[-3000:]
    finally:
        stop_worker(worker)
    text = log.read_text()
    assert sorted(d["slot"] for d in docs) == list(range(SLOTS)), text[-3000:]
    assert "reading them again" not in text, "a partition ending in a marker was read again"
    dead = [decode_dead_letter(v) for _k, v in
            asyncio.run(read_topic(broker.bootstrap, topics.dead_letters, 1))]
    assert {d["reason"] for d in dead} <= {"duplicate_in_slot"}, dead[:3]
    job = InProcessJob(replace(cfg, nonce=job_nonce(broker.bootstrap, topics, "ev")))
    job.register(asyncio.run(read_topic(broker.bootstrap, topics.requirements, cfg.partitions)))
    job.feed(rekeyed(records, SourceMapping.from_flags("device.id", "ts", ["country"], DOMAIN),
                     PARTS))
    job.finish(ORIGIN + SLOTS * SLOT)
    raw = sorted((v for _k, v in asyncio.run(read_topic(broker.bootstrap, topics.releases, 1))),
                 key=lambda v: orjson.loads(v)["slot"])
    assert raw == job.releases
