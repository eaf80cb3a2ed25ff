"""One record must never stop the job (docs/operations.md, "Trust model"): a record of 1,000 nested
brackets, about 2 KB, on each kind of input topic, met by a worker that is then SIGKILLed and
started again on its data directory. The worker keeps running, the record is a dead letter
(``too_deep``), every slot is released once, before and after it, and the releases are byte for
byte the in-process run of the good records. On both brokers.

(On the reports and a source topic such a record stopped every worker, again after each
restart; the requirements and watermark records held already and are kept so here.)"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import orjson
from brokers import broker_fixture
from test_source import (
    CONFIG,
    DOMAIN,
    LEVELS,
    ORIGIN,
    SLOT,
    SOURCE_PARTS,
    app_events,
    iso,
    produce_source,
    read_all,
)

from streams.job.pipeline import InProcessJob
from streams.job.source.mapping import SourceMapping
from streams.kafka.offsets import wait_consumed
from streams.kafka.topics import TopicSpec, create_topics
from streams.records.dead_letters import decode_dead_letter
from tests.jobkit import (
    close_through,
    config,
    in_process,
    job_nonce,
    produce,
    register,
    rekeyed,
    requirement_records,
    setup_topics,
    slot_reports,
    start_configured_worker,
    start_worker,
    stop_worker,
    timestamped_records,
    wait_for_slots,
)

broker = broker_fixture()

USERS = [f"u{i}" for i in range(10)]
DEEP = b"[" * 1_000 + b"1" + b"]" * 1_000


def once(docs: list[dict], slots: int) -> bool:
    return sorted(d["slot"] for d in docs) == list(range(slots))


def dead_letters(bootstrap: str, topic: str) -> list[dict]:
    return [decode_dead_letter(v) for _k, v in read_all(bootstrap, topic, 1)]


def test_deep_records_on_the_jobs_own_topics(broker, tmp_path: Path) -> None:
    """A deep report (keyed by a registered user, on its partition, before that user's good
    report of the slot), a deep requirement of a registered user, and a deep record shaped like
    a watermark."""
    cfg = config("deep")
    topics = setup_topics(broker.bootstrap, cfg)
    requirements = requirement_records(USERS, [4] * len(USERS), [1.0] * len(USERS))
    good = [slot_reports(USERS, t, cfg.d) for t in range(5)]
    poison_report = (b"u0", b'{"user":"u0","time":2000,"value":' + DEEP + b"}")
    poison_requirement = (b"u1", b'{"user":"u1","w":' + DEEP + b',"E":1.0}')
    poison_mark = (None, b'{"watermark":' + DEEP + b',"mac":"00"}')
    data, log = tmp_path / "data", tmp_path / "worker.log"
    worker = start_worker(broker.bootstrap, cfg, data, log)
    try:
        register(broker.bootstrap, topics, cfg, requirements, worker)
        for t in range(2):
            produce(broker.bootstrap, topics.reports, cfg.partitions, good[t])
        produce(broker.bootstrap, topics.reports, cfg.partitions, [poison_report, poison_mark])
        produce(broker.bootstrap, topics.requirements, cfg.partitions, [poison_requirement])
        produce(broker.bootstrap, topics.reports, cfg.partitions, good[2])
        close_through(broker.bootstrap, topics, cfg, 3 * cfg.slot_ms)
        first = wait_for_slots(broker.bootstrap, topics, {0, 1, 2}, 90, worker)
        assert worker.poll() is None, log.read_text()[-3000:]
    finally:
        stop_worker(worker, kill=True)
    assert once(first, 3), log.read_text()[-3000:]
    for t in (3, 4):
        produce(broker.bootstrap, topics.reports, cfg.partitions, good[t])
    close_through(broker.bootstrap, topics, cfg, 5 * cfg.slot_ms)
    worker = start_worker(broker.bootstrap, cfg, data, log)
    try:
        docs = wait_for_slots(broker.bootstrap, topics, set(range(5)), 90, worker)
        assert worker.poll() is None, log.read_text()[-3000:]
    finally:
        stop_worker(worker)
    assert once(docs, 5), log.read_text()[-3000:]
    raw = sorted((v for _k, v in read_all(broker.bootstrap, topics.releases, 1)),
                 key=lambda v: orjson.loads(v)["slot"])
    assert raw == in_process(cfg, requirements, good, 5 * cfg.slot_ms,
                             nonce=job_nonce(broker.bootstrap, topics))
    reasons = {(d["topic"], d["reason"]) for d in dead_letters(broker.bootstrap,
                                                               topics.dead_letters)}
    assert reasons == {(topics.reports, "too_deep"), (topics.requirements, "too_deep"),
                       (topics.reports, "unauthenticated_control")}


def test_deep_records_on_a_source_topic(broker, tmp_path: Path) -> None:
    """A source event whose mapped value nests 1,000 deep, and one that is 50,000 nested
    objects, among the README's app events."""
    prefix, source = "deepsrc", "deep-app-events"
    cfg = config(prefix, stream="app", domain=DOMAIN, slot_ms=SLOT, origin_ms=ORIGIN,
                 default_levels=LEVELS)
    topics = setup_topics(broker.bootstrap, cfg)
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("app", source, SOURCE_PARTS)]))
    events = [e for e in app_events(16) if "device" in e[1]]
    first = [e for e in events if e[1]["ts"] < iso(ORIGIN + 2 * SLOT)]
    poison = [b'{"device":{"id":"d3"},"ts":"' + iso(ORIGIN + SLOT).encode()
              + b'","country":' + DEEP + b"}",
              b'{"a":' * 50_000 + b"1" + b"}" * 50_000]
    produce_source(broker.bootstrap, source, first[:40])
    produce(broker.bootstrap, source, SOURCE_PARTS, [(None, v) for v in poison], partition=1)
    produce_source(broker.bootstrap, source, first[40:])
    conf = tmp_path / "pwevent.toml"
    conf.write_text(CONFIG.format(origin=ORIGIN, source=source))
    data, log = tmp_path / "data", tmp_path / "worker.log"
    worker = start_configured_worker(broker.bootstrap, prefix, conf, data, log)
    try:
        assert asyncio.run(wait_consumed(broker.bootstrap, cfg.app_id(), source, SOURCE_PARTS,
                                         90, alive=lambda: worker.poll() is None)), \
            log.read_text()[-3000:]
        time.sleep(1)
        assert worker.poll() is None, log.read_text()[-3000:]
    finally:
        stop_worker(worker, kill=True)
    produce_source(broker.bootstrap, source, [e for e in events if e not in first])
    worker = start_configured_worker(broker.bootstrap, prefix, conf, data, log)
    try:
        assert asyncio.run(wait_consumed(broker.bootstrap, cfg.app_id(), source, SOURCE_PARTS,
                                         90, alive=lambda: worker.poll() is None))
        docs = wait_for_slots(broker.bootstrap, topics, set(range(4)), 90, worker)
        assert worker.poll() is None, log.read_text()[-3000:]
    finally:
        stop_worker(worker)
    assert once(docs, 4), log.read_text()[-3000:]
    # the releases are the in-process run of the good records, mapped as the stage maps them
    records = timestamped_records(broker.bootstrap, source, SOURCE_PARTS)
    good = [r for r in records if r[1] not in poison]
    assert len(good) == len(records) - 2
    mapped = rekeyed(good, SourceMapping.from_flags("device.id", "ts", ["country"], DOMAIN),
                     SOURCE_PARTS)
    assert len(mapped) == len(good)
    job = InProcessJob(replace(cfg, nonce=job_nonce(broker.bootstrap, topics, "app")))
    job.register(read_all(broker.bootstrap, topics.requirements, cfg.partitions))
    job.feed(mapped)
    job.finish(ORIGIN + 4 * SLOT)
    raw = sorted((v for _k, v in read_all(broker.bootstrap, topics.releases, 1)),
                 key=lambda v: orjson.loads(v)["slot"])
    assert raw == job.releases
    dead = [d for d in dead_letters(broker.bootstrap, topics.dead_letters)
            if d["topic"] == source]
    assert {d["reason"] for d in dead} == {"too_deep"}
    assert {d["offset"] for d in dead} == {r[3] for r in records if r[1] in poison}
