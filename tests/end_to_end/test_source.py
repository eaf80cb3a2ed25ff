"""Plugging existing telemetry in (docs/sources.md, "Plugging in existing telemetry"): keyless app
events on a topic with another partition count, mapped and re-keyed by user onto ``reports``, users
registered by a default requirement; releases equal to the in-process run of the same mapped
reports, ``pwevent audit`` clean, the source topic untouched."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from brokers import broker_fixture

from streams.cli.main import main
from streams.job.config import JobConfig
from streams.job.pipeline import InProcessJob
from streams.job.source.defaults import default_levels
from streams.job.source.mapping import SourceMapping
from streams.job.source.rekey import report_value
from streams.kafka.offsets import read_topic, wait_consumed
from streams.kafka.producer import RawProducer
from streams.kafka.topics import TopicSpec, create_topics
from tests.jobkit import (
    config,
    job_nonce,
    setup_topics,
    start_configured_worker,
    stop_worker,
    timestamped_records,
    wait_for_slots,
)

ORIGIN = int(datetime(2026, 12, 3, 10, 0, tzinfo=UTC).timestamp() * 1000)
SLOT, SLOTS, SOURCE_PARTS = 60_000, 4, 3
COUNTRIES = ["DE", "FR", "IT", "other"]
DOMAIN = {"kind": "labels", "labels": COUNTRIES, "other": "other"}

#: The README's example, as a configuration file (plus the test's broker and prefix).
CONFIG = """
[worker]
stream = "app"
mechanism = "pbd"
domain = '{{"kind": "labels", "labels": ["DE", "FR", "IT", "other"], "other": "other"}}'
slot-ms = 60000
event-time = "history"
origin-ms = {origin}
source-topic = ["{source}"]
user-field = "device.id"
time-field = "ts"
value-field = ["country"]
default-requirement = ["consent=full:w=10,E=2", "w=20,E=1"]
"""

#: the default rules' levels and public sizes, as the worker derives them from the flags above
RULES = ("consent=full:w=10,E=2", "w=20,E=1")
LEVELS = default_levels(RULES, JobConfig())
#: what every release's ``users`` reads: the default levels' public priors, whoever appeared
PUBLIC_USERS = sum(n for _k, n in LEVELS)


broker = broker_fixture()


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def app_events(devices: int) -> list[tuple[int, dict]]:
    """(source partition, event): every device a few events per slot, spread over the
    partitions; some countries outside the domain, some events without a device."""
    out = []
    for s in range(SLOTS):
        for i in range(devices):
            for k in range(1 + (i + s) % 3):
                t = ORIGIN + s * SLOT + (i * 7919 + k * 104_729) % SLOT
                country = ["DE", "FR", "IT", "US"][(i + s + k) % 4]
                event = {"device": {"id": f"d{i}"}, "ts": iso(t), "country": country,
                         "consent": "full" if i % 4 == 0 else "basic", "app": "7.2"}
                out.append(((i + k + s) % SOURCE_PARTS, event))
    out.append((0, {"ts": iso(ORIGIN), "country": "DE"}))  # no device: a dead letter
    return out


def produce_source(bootstrap: str, topic: str, events, parts: int = SOURCE_PARTS) -> None:
    """Each (source partition, event) as a keyless JSON record on that partition."""
    async def go() -> None:
        prod = RawProducer(bootstrap, topic, parts)
        await prod.start()
        try:
            for p in range(parts):
                await prod.send_many([(None, orjson.dumps(e)) for q, e in events if q == p],
                                     partition=p)
        finally:
            await prod.stop()

    asyncio.run(go())


def read_all(bootstrap: str, topic: str, partitions: int) -> list[tuple[bytes | None, bytes]]:
    return asyncio.run(read_topic(bootstrap, topic, partitions))


def wait_reports(bootstrap: str, topic: str, partitions: int, at_least: int,
                 timeout: float) -> int:
    """Poll ``topic`` until it holds ``at_least`` records; how many it held last."""
    deadline = time.monotonic() + timeout
    n = 0
    while time.monotonic() < deadline:
        n = len(read_all(bootstrap, topic, partitions))
        if n >= at_least:
            break
        time.sleep(0.05)
    return n


@pytest.mark.parametrize("killed", [False, True], ids=["run", "killed-mid-way"])
def test_readme_example_app_events_plugged_in(broker, tmp_path: Path, capsys, killed: bool):
    """``killed``: the worker is SIGKILLed once it has re-keyed part of the first half of the
    events, and started again on its data directory after the second half was sent."""
    prefix, source = f"src{int(killed)}", f"app-events-{int(killed)}"
    cfg = config(prefix, stream="app", domain=DOMAIN, slot_ms=SLOT, origin_ms=ORIGIN,
                 secret="test-secret", default_levels=LEVELS)
    topics = setup_topics(broker.bootstrap, cfg)
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("app", source, SOURCE_PARTS)]))
    events = app_events(24)
    first = [e for e in events if e[1].get("ts", "") < iso(ORIGIN + 2 * SLOT)]
    produce_source(broker.bootstrap, source, first if killed else events)
    conf = tmp_path / "pwevent.toml"
    conf.write_text(CONFIG.format(origin=ORIGIN, source=source))
    worker = start_configured_worker(broker.bootstrap, prefix, conf, tmp_path / "data",
                                     tmp_path / "worker.log")
    try:
        if killed:
            n = wait_reports(broker.bootstrap, topics.reports, cfg.partitions, 1, 90)
            stop_worker(worker, kill=True)
            assert n >= 1, (tmp_path / "worker.log").read_text()[-3000:]
            produce_source(broker.bootstrap, source, [e for e in events if e not in first])
            worker = start_configured_worker(broker.bootstrap, prefix, conf, tmp_path / "data",
                           tmp_path / "worker.log")
        before = timestamped_records(broker.bootstrap, source, SOURCE_PARTS)
        assert asyncio.run(wait_consumed(broker.bootstrap, cfg.app_id(), source, SOURCE_PARTS,
                                         90, alive=lambda: worker.poll() is None))
        docs = wait_for_slots(broker.bootstrap, topics, set(range(SLOTS)), 90, worker)
    finally:
        stop_worker(worker)
    log = (tmp_path / "worker.log").read_text()
    assert sorted(d["slot"] for d in docs) == list(range(SLOTS)), log[-3000:]
    assert all(d["users"] == PUBLIC_USERS for d in docs), log[-3000:]
    # no report waited out the limit for its user's default requirement
    assert "were not applied within" not in log, log[-3000:]
    # the source topic is untouched
    assert timestamped_records(broker.bootstrap, source, SOURCE_PARTS) == before
    # every device registered once, by its default (the consent rule first)
    reqs = read_all(broker.bootstrap, topics.requirements, cfg.partitions)
    assert sorted(k for k, _ in reqs) == sorted(f"d{i}".encode() for i in range(24))
    for k, v in reqs:
        want = {"w": 10, "E": 2.0} if int(k[1:]) % 4 == 0 else {"w": 20, "E": 1.0}
        assert orjson.loads(v) == {"user": k.decode(), **want, "registered": "default"}
    # the event without a device is a dead letter naming the source record
    dead = [orjson.loads(v) for _k, v in read_all(broker.bootstrap, topics.dead_letters, 1)]
    missing = [d for d in dead if d["topic"] == source]
    # (read again after a kill, a source record may be dead-lettered again)
    assert [d["reason"] for d in missing][:1] == ["missing_field"]
    assert len(missing) == 1 or killed
    assert {d["reason"] for d in dead} <= {"missing_field", "duplicate_in_slot"}
    # releases equal the in-process run of the same mapped reports under the job's nonce
    mapping = SourceMapping.from_flags("device.id", "ts", ["country"], DOMAIN)
    mapped = []
    for p in range(SOURCE_PARTS):
        recs = [r for r in before if r[2] == p]
        b = mapping.map(recs)
        for j, user in enumerate(b.users):
            rec = recs[int(b.index[j])]
            mapped.append((user.encode(), report_value(user, int(b.times[j]), b.values[j],
                                                       (0, p, rec[3]))))
    job = InProcessJob(cfg.__class__(**{**cfg.__dict__,
                                        "nonce": job_nonce(broker.bootstrap, topics, "app")}))
    job.register(reqs)
    # (in event-time order: the in-process run's own reports move its watermark)
    job.feed(sorted(mapped, key=lambda r: orjson.loads(r[1])["time"]))
    job.finish(ORIGIN + SLOTS * SLOT)
    raw = [v for _k, v in read_all(broker.bootstrap, topics.releases, 1)]
    assert sorted(raw, key=lambda v: orjson.loads(v)["slot"]) == job.releases
    # the audit re-derives every charge from the topics alone
    status = main(["audit", "--broker", broker.bootstrap, "--prefix", prefix, "--stream", "app",
                   "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 0 and out["violations"] == [], out
    assert out["slots_audited"] == SLOTS
    # and says what the analyst's topics depend on: the default levels' priors, not who came
    pop = out["population"]
    assert pop["defaulted_users"] == 24 and pop["default_levels"] == dict(LEVELS)
    assert pop["fields"]["releases.users"].startswith("public"), pop
