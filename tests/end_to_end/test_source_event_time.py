"""A stream's event time over a source of several partitions (docs/job.md, "Event time over source
topics"): with default flags (no allowed lateness), a keyless topic of 6 partitions of unequal
sizes, every device once or more in each slot, replayed as history. Kafka hands the consumer the
partitions' records apart in event time (a fetch covers all slots of one partition before the next):
none becomes ``late``, every slot is released once, and the releases are the in-process run of the
same mapped reports; also with the worker SIGKILLed mid-way and started again on its data directory,
with two workers sharing the source, and over two source topics at once. On both brokers."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from brokers import broker_fixture
from test_source import DOMAIN, ORIGIN, iso, produce_source

from streams.job.config import JobConfig
from streams.job.pipeline import InProcessJob
from streams.job.source.defaults import DEFAULT_PRIOR, default_levels
from streams.job.source.mapping import SourceMapping
from streams.kafka.offsets import read_topic, wait_consumed
from streams.kafka.topics import Topics, TopicSpec, create_topics
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

SLOT, SLOTS, PARTS, DEVICES = 60_000, 8, 6, 60
#: The README's plug-in shape with every flag the job leaves at its default.
CONFIG = """
[worker]
stream = "ev"
mechanism = "pbd"
domain = '{{"kind": "labels", "labels": ["DE", "FR", "IT", "other"], "other": "other"}}'
slot-ms = 60000
event-time = "history"
origin-ms = {origin}
source-topic = ["{source}"]
user-field = "device.id"
time-field = "ts"
value-field = ["country"]
default-requirement = ["w=20,E=1"]
"""
LEVELS = default_levels(["w=20,E=1"], JobConfig())  # the worker's, from the flag above

broker = broker_fixture()


def assert_nothing_late(bootstrap: str, topics: Topics) -> None:
    """No event on time became ``late``; a device's further events in a slot are the only
    dead letters."""
    dead = [decode_dead_letter(v) for _k, v in
            asyncio.run(read_topic(bootstrap, topics.dead_letters, 1))]
    assert [d for d in dead if d["reason"] == "late"] == [], "an event on time became late"
    assert {d["reason"] for d in dead} <= {"duplicate_in_slot"}, dead[:3]


def assert_in_process_releases(bootstrap: str, cfg: JobConfig, topics: Topics,
                               mapped: list[tuple[bytes, bytes]],
                               requirements: list | None = None) -> list[bytes]:
    """The releases on ``topics`` are those of the in-process run of the ``mapped`` reports
    (under ``requirements``, else those on the requirements topic), slot by slot; they are
    returned."""
    job = InProcessJob(replace(cfg, nonce=job_nonce(bootstrap, topics, "ev")))
    job.register(requirements if requirements is not None else
                 asyncio.run(read_topic(bootstrap, topics.requirements, cfg.partitions)))
    job.feed(mapped)
    job.finish(ORIGIN + SLOTS * SLOT)
    raw = sorted((v for _k, v in asyncio.run(read_topic(bootstrap, topics.releases, 1))),
                 key=lambda v: orjson.loads(v)["slot"])
    assert raw == job.releases
    return raw


def events() -> list[tuple[int, dict]]:
    """(source partition, event): device i sits on partition ``i % 6`` only for even devices;
    odd ones spread over the first three partitions, so the partitions differ in size (the
    first three hold about twice what the last three do)."""
    out = []
    for s in range(SLOTS):
        for i in range(DEVICES):
            for k in range(1 + (i + s) % 2):
                t = ORIGIN + s * SLOT + (i * 7919 + k * 104_729) % SLOT
                part = i % PARTS if i % 2 == 0 else (i + s) % 3
                out.append((part, {"device": {"id": f"d{i}"}, "ts": iso(t),
                                   "country": ["DE", "FR", "IT", "US"][(i + s + k) % 4]}))
    return out


@pytest.mark.parametrize("how", ["one", "killed", "two"])
def test_no_event_of_a_multi_partition_source_is_late(broker, tmp_path: Path, how: str) -> None:
    prefix, source = f"evt{how}", f"ev-{how}"
    cfg = config(prefix, stream="ev", domain=DOMAIN, slot_ms=SLOT, origin_ms=ORIGIN,
                 default_levels=LEVELS)
    topics = setup_topics(broker.bootstrap, cfg)
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("ev", source, PARTS)]))
    evs = events()
    half = [e for e in evs if e[1]["ts"] < iso(ORIGIN + 4 * SLOT)]
    produce_source(broker.bootstrap, source, half if how == "killed" else evs, PARTS)
    conf = tmp_path / "pwevent.toml"
    conf.write_text(CONFIG.format(origin=ORIGIN, source=source))
    logs = [tmp_path / "w0.log", tmp_path / "w1.log"]
    workers = [start_configured_worker(broker.bootstrap, prefix, conf, tmp_path / "d0", logs[0])]
    try:
        if how in ("two", "killed"):  # once the first worker reads (its reports are out)
            deadline = time.monotonic() + 90
            while not asyncio.run(read_topic(broker.bootstrap, topics.reports, cfg.partitions)):
                assert time.monotonic() < deadline and workers[0].poll() is None
                time.sleep(0.05)
        if how == "two":
            # A second worker joins while the first reads: a rebalance mid-way. Not as the first
            # starts: two joins a fraction of a second apart are the embedded broker's
            # start-together case, which needs a supervisor (test_start_together.py).
            workers.append(start_configured_worker(broker.bootstrap, prefix, conf,
                                                   tmp_path / "d1", logs[1]))
        if how == "killed":
            stop_worker(workers[0], kill=True)
            produce_source(broker.bootstrap, source, [e for e in evs if e not in half], PARTS)
            workers[0] = start_configured_worker(broker.bootstrap, prefix, conf,
                                                 tmp_path / "d0", logs[0])
        alive = lambda: all(w.poll() is None for w in workers)  # noqa: E731
        assert asyncio.run(wait_consumed(broker.bootstrap, cfg.app_id(), source, PARTS, 120,
                                         alive=alive)), (
            f"alive={[w.poll() for w in workers]}\n"
            + "".join(p.read_text()[-3000:] for p in logs if p.exists()))
        docs = wait_for_slots(broker.bootstrap, topics, set(range(SLOTS)), 120)
        assert alive(), "".join(p.read_text()[-2000:] for p in logs if p.exists())
    finally:
        for w in workers:
            stop_worker(w)
    text = "".join(p.read_text()[-3000:] for p in logs if p.exists())
    assert sorted(d["slot"] for d in docs) == list(range(SLOTS)), text
    assert_nothing_late(broker.bootstrap, topics)
    # every device counted in every slot, and the releases are the in-process run's
    records = timestamped_records(broker.bootstrap, source, PARTS)
    # (in event-time order: the in-process run's reports move its watermark themselves)
    mapped = rekeyed(records, SourceMapping.from_flags("device.id", "ts", ["country"], DOMAIN),
                     PARTS)
    assert len(mapped) == len(records)
    raw = assert_in_process_releases(broker.bootstrap, cfg, topics, mapped)
    assert all(orjson.loads(v)["users"] == DEFAULT_PRIOR for v in raw)  # public: the prior


def test_two_source_topics_at_once(broker, tmp_path: Path) -> None:
    """The rule over several source topics: events split over two topics (6 and 2 partitions,
    unequal in size), read by one worker at their own speeds; every partition of both holds the
    stream's event time, so none is ``late``."""
    prefix, sources = "evt2", ("ev2-a", "ev2-b")
    cfg = config(prefix, stream="ev", domain=DOMAIN, slot_ms=SLOT, origin_ms=ORIGIN,
                 default_levels=LEVELS)
    topics = setup_topics(broker.bootstrap, cfg)
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("ev", sources[0], PARTS),
                                                 TopicSpec("ev", sources[1], 2)]))
    evs = events()
    first = [e for i, e in enumerate(evs) if i % 3]
    second = [(p % 2, e) for i, (p, e) in enumerate(evs) if not i % 3]
    produce_source(broker.bootstrap, sources[0], first, PARTS)
    produce_source(broker.bootstrap, sources[1], second, 2)
    conf = tmp_path / "pwevent.toml"
    conf.write_text(CONFIG.format(origin=ORIGIN, source=sources[0]).replace(
        f'source-topic = ["{sources[0]}"]', f'source-topic = ["{sources[0]}", "{sources[1]}"]'))
    log = tmp_path / "worker.log"
    worker = start_configured_worker(broker.bootstrap, prefix, conf, tmp_path / "data", log)
    try:
        assert asyncio.run(wait_consumed(broker.bootstrap, cfg.app_id(), sources[0], PARTS, 120,
                                         alive=lambda: worker.poll() is None))
        assert asyncio.run(wait_consumed(broker.bootstrap, cfg.app_id(), sources[1], 2, 120,
                                         alive=lambda: worker.poll() is None))
        docs = wait_for_slots(broker.bootstrap, topics, set(range(SLOTS)), 120, worker)
        assert worker.poll() is None, log.read_text()[-3000:]
    finally:
        stop_worker(worker)
    assert sorted(d["slot"] for d in docs) == list(range(SLOTS)), log.read_text()[-3000:]
    assert_nothing_late(broker.bootstrap, topics)
    mapping = SourceMapping.from_flags("device.id", "ts", ["country"], DOMAIN)
    mapped = sorted(
        rekeyed(timestamped_records(broker.bootstrap, sources[0], PARTS), mapping, PARTS, 0)
        + rekeyed(timestamped_records(broker.bootstrap, sources[1], 2), mapping, 2, 1),
        key=lambda r: orjson.loads(r[1])["time"])
    assert len(mapped) == len(evs)
    assert_in_process_releases(broker.bootstrap, cfg, topics, mapped)
