"""A source topic written by transactional producers (a stream processor's exactly-once sink):
each transaction ends in a commit marker, an offset that holds no record the consumer hands
over. A source partition read to its last record is read to its end all the same: with default
flags, the history replay of test_source_event_time.py's events, written in transactions of 50
records, releases every slot (the last one once every partition is idle), nothing is ``late``,
and the releases are the in-process run of the same mapped reports. A transaction still open
holds its partition's offsets: they wait. On both brokers; aborted transactions in
test_source_aborted.py."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer
from brokers import broker_fixture
from test_source import DOMAIN, ORIGIN, iso
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
from streams.kafka.offsets import end_offsets, holds_records, read_topic
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
)

broker = broker_fixture()


def aborted_events(batch: list[dict], n: int) -> list[dict]:
    """What a transaction after ``batch`` (the ``n``-th) writes and aborts: an event of a device
    that never reports, and one of the batch's devices a millisecond before its event in the
    same slot, in another country (it would be the one that counts)."""
    first = batch[0]
    t = round(datetime.fromisoformat(first["ts"].replace("Z", "+00:00")).timestamp() * 1000)
    earlier = t - 1 if (t - ORIGIN) % SLOT else t
    return [{"device": {"id": f"ghost{n}"}, "ts": first["ts"], "country": "US"},
            {"device": first["device"], "ts": iso(earlier),
             "country": "DE" if first["country"] != "DE" else "FR"}]


def produce_in_transactions(bootstrap: str, topic: str, evs: list[tuple[int, dict]],
                            abort: bool) -> int:
    """Each partition's events as keyless JSON records, in committed transactions of 50, each
    followed, when ``abort``, by an aborted transaction (:func:`aborted_events`); the number of
    records aborted."""
    async def go() -> int:
        prod = AIOKafkaProducer(bootstrap_servers=bootstrap, **client_options(),
                                transactional_id=f"tx-{topic}", enable_idempotence=True)
        await prod.start()
        aborted = 0
        try:
            for p in range(PARTS):
                mine = [e for q, e in evs if q == p]
                for i in range(0, len(mine), 50):
                    async with prod.transaction():
                        for e in mine[i:i + 50]:
                            await prod.send(topic, orjson.dumps(e), partition=p)
                    if not abort:
                        continue
                    await prod.begin_transaction()
                    for e in aborted_events(mine[i:i + 50], aborted):
                        await prod.send(topic, orjson.dumps(e), partition=p)
                        aborted += 1
                    await prod.abort_transaction()
        finally:
            await prod.stop()
        return aborted

    return asyncio.run(go())


def replay_transactional(bootstrap: str, tmp_path: Path, name: str, abort: bool) -> None:
    """Replay test_source_event_time.py's events written in transactions (aborted ones too when
    ``abort``) with default flags; check every slot is released once, nothing is ``late``, and
    the releases are the in-process run of the committed records."""
    prefix, source = f"ev{name}", f"ev-{name}"
    cfg = config(prefix, stream="ev", domain=DOMAIN, slot_ms=SLOT, origin_ms=ORIGIN,
                 default_levels=LEVELS)
    topics = setup_topics(bootstrap, cfg)
    asyncio.run(create_topics(bootstrap, [TopicSpec("ev", source, PARTS)]))
    evs = events()
    aborted = produce_in_transactions(bootstrap, source, evs, abort)
    records = timestamped_records(bootstrap, source, PARTS)  # read as the job reads
    assert len(records) == len(evs)
    assert not any(b"ghost" in r[1] for r in records)
    ends = asyncio.run(end_offsets(bootstrap, source, PARTS))
    assert sum(ends.values()) >= len(evs) + 3 * aborted // 2 + len(evs) // 50, \
        "markers and aborted records take offsets"
    # partition 0's last record and its commit marker (then two aborted records and their marker)
    last = max(r[3] for r in records if r[2] == 0)
    assert ends[0] == last + (5 if abort else 2)
    assert not asyncio.run(holds_records(bootstrap, source, 0, last + 1, ends[0]))
    assert asyncio.run(holds_records(bootstrap, source, 0, last, ends[0]))
    conf = tmp_path / "pwevent.toml"
    conf.write_text(CONFIG.format(origin=ORIGIN, source=source))
    log = tmp_path / "worker.log"
    worker = start_configured_worker(bootstrap, prefix, conf, tmp_path / "data", log)
    try:
        # the last slot closes only once every partition, read to its marker, is idle
        docs = wait_for_slots(bootstrap, topics, set(range(SLOTS)), 120, worker)
        assert worker.poll() is None, log.read_text()[-3000:]
    finally:
        stop_worker(worker)
    text = log.read_text()
    assert sorted(d["slot"] for d in docs) == list(range(SLOTS)), text[-3000:]
    assert "reading them again" not in text, "a partition ending in a marker was read again"
    assert_nothing_late(bootstrap, topics)
    requirements = asyncio.run(read_topic(bootstrap, topics.requirements, cfg.partitions))
    assert not any(b"ghost" in (k or b"") + v for k, v in requirements), "an aborted user"
    mapping = SourceMapping.from_flags("device.id", "ts", ["country"], DOMAIN)
    assert_in_process_releases(bootstrap, cfg, topics, rekeyed(records, mapping, PARTS),
                               requirements)


def test_a_transactional_source_replays_to_its_last_slot(broker, tmp_path: Path) -> None:
    replay_transactional(broker.bootstrap, tmp_path, "tx", abort=False)


def test_an_open_transaction_holds_its_offsets(broker) -> None:
    """Offsets a transaction still open holds may yet hold records: ``holds_records`` says so at
    once (not after its time limit), and says the same offsets hold none once it aborted."""
    topic = "ev-tx-open"
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("ev", topic, 1)]))

    async def go() -> None:
        prod = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, **client_options(),
                                transactional_id=f"tx-{topic}", enable_idempotence=True)
        await prod.start()
        try:
            async with prod.transaction():
                await prod.send(topic, b"{}", partition=0)
            await prod.begin_transaction()
            await prod.send_and_wait(topic, b"{}", partition=0)
            started = time.monotonic()
            assert await holds_records(broker.bootstrap, topic, 0, 2, 3, limit=30.0)
            assert time.monotonic() - started < 10.0, "it waited for its limit"
            assert (await end_offsets(broker.bootstrap, topic, 1))[0] == 2, "read to the open one"
            await prod.abort_transaction()
        finally:
            await prod.stop()
        assert not await holds_records(broker.bootstrap, topic, 0, 1, 4)
        assert (await end_offsets(broker.bootstrap, topic, 1))[0] == 4

    asyncio.run(go())
