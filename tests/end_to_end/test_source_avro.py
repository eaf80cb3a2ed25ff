"""An Avro source topic plugged in (docs/sources.md, "Avro source topics"): keyless app
events in the Confluent wire format, of two versions of their schema, on a topic with another
partition count; schemas from a real schema registry (Apicurio Registry,
tests/schema_registry.py). Every record is mapped or dead-lettered with its reason, nothing is
lost or counted twice, the releases equal the in-process run of the same mapped reports,
``pwevent audit`` is clean and the source topic untouched. On both brokers."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from app_event_schemas import EVENT, EVENT_V2
from brokers import broker_fixture
from fastavro import parse_schema, schemaless_writer
from schema_registry import SchemaRegistryServer, wire
from test_source import LEVELS, PUBLIC_USERS

from local_kafka.embedded import free_port
from streams.cli.main import main
from streams.job.pipeline import InProcessJob
from streams.job.source.avro import AvroSource
from streams.job.source.mapping import SourceMapping
from streams.job.source.rekey import report_value
from streams.job.source.schema_registry import SchemaRegistry
from streams.kafka.offsets import read_topic, wait_consumed
from streams.kafka.producer import RawProducer
from streams.kafka.topics import TopicSpec, create_topics
from tests.jobkit import (
    config,
    job_nonce,
    setup_topics,
    slot_winners,
    start_configured_worker,
    stop_worker,
    timestamped_records,
    wait_for_slots,
)

ORIGIN = int(datetime(2026, 12, 3, 10, 0, tzinfo=UTC).timestamp() * 1000)
SLOT, SLOTS, SOURCE_PARTS, DEVICES = 60_000, 4, 3, 24
COUNTRIES = ["DE", "FR", "IT", "other"]
DOMAIN = {"kind": "labels", "labels": COUNTRIES, "other": "other"}
CONFIG = """
[worker]
stream = "app"
mechanism = "pbd"
domain = '{{"kind": "labels", "labels": ["DE", "FR", "IT", "other"], "other": "other"}}'
slot-ms = 60000
event-time = "history"
origin-ms = {origin}
lateness-ms = 240000
source-topic = ["{source}"]
source-format = "avro"
schema-registry = "{registry}"
user-field = "device.id"
time-field = "ts"
value-field = ["country"]
default-requirement = ["consent=full:w=10,E=2", "w=20,E=1"]
"""

broker = broker_fixture()


@pytest.fixture(scope="module")
def registry() -> Iterator[SchemaRegistryServer]:
    with SchemaRegistryServer() as server:
        yield server


def avro(schema: dict, schema_id: int, datum: dict) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), datum)
    return wire(schema_id, out.getvalue())


def app_events(v1: int, v2: int) -> list[tuple[int, bytes]]:
    """(source partition, record value): every device a few events per slot, spread over the
    partitions, half of them in the schema's second version; some countries outside the
    domain; and three records that cannot be decoded."""
    out = []
    for s in range(SLOTS):
        for i in range(DEVICES):
            for k in range(1 + (i + s) % 3):
                t = ORIGIN + s * SLOT + (i * 7919 + k * 104_729) % SLOT
                event = {"device": {"id": f"d{i}"}, "ts": t,
                         "country": ["DE", "FR", "IT", "US"][(i + s + k) % 4],
                         "consent": "full" if i % 4 == 0 else "basic"}
                value = (avro(EVENT_V2, v2, {**event, "app": "7.2"}) if (i + k) % 2
                         else avro(EVENT, v1, event))
                out.append(((i + k + s) % SOURCE_PARTS, value))
    good = avro(EVENT, v1, {"device": {"id": "d0"}, "ts": ORIGIN, "country": "DE",
                            "consent": "full"})
    out.append((0, orjson.dumps({"device": {"id": "d0"}, "ts": ORIGIN})))  # JSON: no header
    out.append((1, wire(v2 + 100, good[5:])))  # an id the registry never gave
    out.append((2, good[:-2]))  # the body cut short
    return out


def produce_source(bootstrap: str, topic: str, events: list[tuple[int, bytes]]) -> None:
    async def go() -> None:
        prod = RawProducer(bootstrap, topic, SOURCE_PARTS)
        await prod.start()
        try:
            for p in range(SOURCE_PARTS):
                await prod.send_many([(None, v) for q, v in events if q == p], partition=p)
        finally:
            await prod.stop()

    asyncio.run(go())


def read_all(bootstrap: str, topic: str, partitions: int) -> list[tuple[bytes | None, bytes]]:
    return asyncio.run(read_topic(bootstrap, topic, partitions))


def test_avro_app_events_plugged_in(broker, registry, tmp_path: Path, capsys):
    prefix, source = "avro", "app-events-avro"
    cfg = config(prefix, stream="app", domain=DOMAIN, slot_ms=SLOT, origin_ms=ORIGIN,
                 lateness_ms=4 * SLOT, secret="test-secret", default_levels=LEVELS)
    topics = setup_topics(broker.bootstrap, cfg)
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("app", source, SOURCE_PARTS)]))
    subject = f"{source}-{type(broker).__name__}-value"
    v1, v2 = registry.register(subject, EVENT), registry.register(subject, EVENT_V2)
    produce_source(broker.bootstrap, source, app_events(v1, v2))
    before = timestamped_records(broker.bootstrap, source, SOURCE_PARTS)
    conf = tmp_path / "pwevent.toml"
    conf.write_text(CONFIG.format(origin=ORIGIN, source=source, registry=registry.url))
    log_file = tmp_path / "worker.log"
    worker = start_configured_worker(broker.bootstrap, prefix, conf, tmp_path / "data",
                                     log_file)
    try:
        assert asyncio.run(wait_consumed(broker.bootstrap, cfg.app_id(), source, SOURCE_PARTS,
                                         90, alive=lambda: worker.poll() is None))
        docs = wait_for_slots(broker.bootstrap, topics, set(range(SLOTS)), 90, worker)
    finally:
        stop_worker(worker)
    log = log_file.read_text()
    assert sorted(d["slot"] for d in docs) == list(range(SLOTS)), log[-3000:]
    assert all(d["users"] == PUBLIC_USERS for d in docs), log[-3000:]
    assert "were not applied within" not in log, log[-3000:]
    assert timestamped_records(broker.bootstrap, source, SOURCE_PARTS) == before  # untouched
    # every device registered once, by its default (the rule on the Avro enum first)
    reqs = read_all(broker.bootstrap, topics.requirements, cfg.partitions)
    assert sorted(k for k, _ in reqs) == sorted(f"d{i}".encode() for i in range(DEVICES))
    for k, v in reqs:
        want = {"w": 10, "E": 2.0} if int(k[1:]) % 4 == 0 else {"w": 20, "E": 1.0}
        assert orjson.loads(v) == {"user": k.decode(), **want, "registered": "default"}
    # the records that do not decode are dead letters naming the source record, each once
    dead = [orjson.loads(v) for _k, v in read_all(broker.bootstrap, topics.dead_letters, 1)]
    from_source = sorted((d["partition"], d["reason"]) for d in dead if d["topic"] == source)
    assert from_source == [(0, "malformed_avro"), (1, "unknown_schema"),
                           (2, "malformed_avro")], dead
    assert {d["reason"] for d in dead if d["topic"] != source} <= {"duplicate_in_slot"}
    # nothing lost: every decoded event was re-keyed onto reports, once
    mapping = SourceMapping.from_flags("device.id", "ts", ["country"], DOMAIN)
    decoder = AvroSource(SchemaRegistry(registry.url))
    mapped = []
    for p in range(SOURCE_PARTS):
        recs = [r for r in before if r[2] == p]
        b = asyncio.run(decoder.map(mapping, recs))
        assert len(b) + len(b.rejected) == len(recs)
        for j, user in enumerate(b.users):
            rec = recs[int(b.index[j])]
            mapped.append((user.encode(), report_value(user, int(b.times[j]), b.values[j],
                                                       (0, p, rec[3]))))
    assert len(mapped) == len(before) - 3
    reports = [(k, v) for k, v in read_all(broker.bootstrap, topics.reports, cfg.partitions)
               if k is not None]
    # every (user, slot)'s report that counts was re-keyed, and no report was made up (a batch
    # read again may repeat some; the stage forwards only reports that can still win)
    assert slot_winners(mapped, SLOT, ORIGIN) <= set(reports) <= set(mapped)
    # releases equal the in-process run of the same mapped reports under the job's nonce
    job = InProcessJob(cfg.__class__(**{**cfg.__dict__,
                                        "nonce": job_nonce(broker.bootstrap, topics, "app")}))
    job.register(reqs)
    job.feed(sorted(mapped, key=lambda r: orjson.loads(r[1])["time"]))
    job.finish(ORIGIN + SLOTS * SLOT)
    raw = [v for _k, v in read_all(broker.bootstrap, topics.releases, 1)]
    assert sorted(raw, key=lambda v: orjson.loads(v)["slot"]) == job.releases
    status = main(["audit", "--broker", broker.bootstrap, "--prefix", prefix, "--stream", "app",
                   "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["violations"] == [], out
    assert out["slots_audited"] == SLOTS


def test_a_registry_that_cannot_be_reached_costs_dead_letters_and_one_error(broker, tmp_path):
    """Nobody listens at ``--schema-registry``: the worker keeps running, every record becomes a
    ``schema_unavailable`` dead letter with its original bytes, and the outage is logged as an
    error once; records that were never decoded do not count as records missing the mapped
    fields (more than the 1,000 the bad-mapping check looks at)."""
    prefix, source = "avrodown", "app-events-avro-down"
    cfg = config(prefix, stream="app", domain=DOMAIN, slot_ms=SLOT, origin_ms=ORIGIN,
                 lateness_ms=4 * SLOT, secret="test-secret", default_levels=LEVELS)
    topics = setup_topics(broker.bootstrap, cfg)
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("app", source, SOURCE_PARTS)]))
    events = [(p, avro(EVENT, 1, {"device": {"id": f"d{i}"}, "ts": ORIGIN + i,
                                  "country": "DE", "consent": "basic"}))
              for i in range(1200) for p in [i % SOURCE_PARTS]]
    produce_source(broker.bootstrap, source, events)
    conf = tmp_path / "pwevent.toml"
    down = f"http://127.0.0.1:{free_port()}/apis/ccompat/v7"
    conf.write_text(CONFIG.format(origin=ORIGIN, source=source, registry=down))
    log_file = tmp_path / "worker.log"
    worker = start_configured_worker(broker.bootstrap, prefix, conf, tmp_path / "data",
                                     log_file)
    try:
        assert asyncio.run(wait_consumed(broker.bootstrap, cfg.app_id(), source, SOURCE_PARTS,
                                         90, alive=lambda: worker.poll() is None))
        assert worker.poll() is None
    finally:
        stop_worker(worker)
    log = log_file.read_text()
    dead = [orjson.loads(v) for _k, v in read_all(broker.bootstrap, topics.dead_letters, 1)]
    assert sorted(base64.b64decode(d["value"]) for d in dead) == sorted(v for _p, v in events)
    assert {d["reason"] for d in dead} == {"schema_unavailable"}, dead
    assert log.count(f"schema registry {down} cannot be reached") == 1, log[-3000:]
    assert "check the mapping" not in log, log[-3000:]
    assert [k for k, _v in read_all(broker.bootstrap, topics.reports, cfg.partitions)
            if k is not None] == []
