"""Event time on the embedded broker: a live stream's first reports cannot move its time (far
ahead, a day back, at the epoch), reports made just before the worker read them count with the
default lateness, and a recorded stream with overnight gaps replays with the default settings."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import orjson
from brokers import broker_fixture
from forked_workers import run_command
from jobkit import (
    SECRET,
    config,
    produce,
    register,
    report,
    requirement_records,
    setup_topics,
    start_worker,
    stop_worker,
    wait_for_slots,
)

from streams.kafka.offsets import read_topic
from streams.kafka.producer import key_partition
from streams.records.dead_letters import decode_dead_letter

USERS = [f"u{i}" for i in range(8)]
DAY = 86_400_000
HOUR = 3_600_000


broker = broker_fixture()


def dead_letters(bootstrap: str, topic: str) -> list[dict]:
    return [decode_dead_letter(v) for _k, v in asyncio.run(read_topic(bootstrap, topic))]


def test_a_live_streams_first_reports_cannot_move_its_time(broker, tmp_path):
    """Live, with the default lateness and skew: first reports dated ten years ahead, a day back
    and at the epoch are dead letters (future, late, late) and move nothing; reports made a
    moment before the worker read them are counted, and the idle close releases their slot
    alone, with no storm of empty slots either way."""
    cfg = config("live-time", event_time="live")
    assert cfg.lateness_ms == 0 and cfg.max_skew_ms == 300_000 and cfg.horizon_ms is None
    topics = setup_topics(broker.bootstrap, cfg)
    worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", tmp_path / "worker.log")
    try:
        register(broker.bootstrap, topics, cfg,
                 requirement_records(USERS, [4] * len(USERS), [1.0] * len(USERS)), worker)
        now = int(time.time() * 1000)
        bogus = [report("u1", now + 10 * 365 * DAY, 1), report("u1", now - DAY, 1),
                 report("u1", 0, 1)]
        produce(broker.bootstrap, topics.reports, cfg.partitions, bogus)
        at = now - 1_500  # made before the worker read them
        slot = at // cfg.slot_ms
        produce(broker.bootstrap, topics.reports, cfg.partitions,
                [report(u, at, i % 3) for i, u in enumerate(USERS)])
        docs = wait_for_slots(broker.bootstrap, topics, {slot}, 60, worker)
        time.sleep(3 * cfg.idle_close_ms / 1000)  # idle closes that could release more
        docs = wait_for_slots(broker.bootstrap, topics, {slot}, 5, worker)
        assert worker.poll() is None
    finally:
        stop_worker(worker)
    log = (tmp_path / "worker.log").read_text()
    assert [d["slot"] for d in docs] == [slot], log[-3000:]
    assert docs[0]["users"] == len(USERS)
    dead = dead_letters(broker.bootstrap, topics.dead_letters)
    p = key_partition(b"u1", cfg.partitions)
    assert [(d["reason"], d["partition"]) for d in dead] == [
        ("future", p), ("late", p), ("late", p)], dead


def test_a_recorded_stream_with_overnight_gaps_replays_with_the_defaults(broker, tmp_path):
    """Hourly slots, 8 working hours a day and 16-hour gaps overnight (the old one-hour horizon
    rejected every report after a gap): ``pwevent replay --dataset recorded`` with its
    requirements file and default settings, into a worker replaying history. Nothing is
    rejected, and every slot from the first to the last, gaps included, is released once."""
    t0 = 1_700_000_000_000 - 1_700_000_000_000 % DAY
    users = [f"r{i}" for i in range(10)]
    hours, lines = [], []
    for day in range(3):
        for h in range(8, 16):
            hours.append(day * 24 + h)
            lines += [orjson.dumps({"user": u, "time": t0 + (day * 24 + h) * HOUR + i * 1000,
                                    "value": (i + h) % 3}) for i, u in enumerate(users)]
    recorded = tmp_path / "recorded.jsonl"
    recorded.write_bytes(b"\n".join(lines) + b"\n")
    requirements = tmp_path / "requirements.csv"
    requirements.write_text("user,w,E\n" + "".join(f"{u},4,1.0\n" for u in users))
    cfg = config("gaps", slot_ms=HOUR, idle_close_ms=2000)
    assert cfg.event_time == "history"
    topics = setup_topics(broker.bootstrap, cfg)
    worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", tmp_path / "worker.log")
    try:
        done = run_command(
            ["replay", "--broker", broker.bootstrap, "--prefix", cfg.prefix, "--partitions",
             str(cfg.partitions), "--stream", cfg.stream, "--slot-ms", str(HOUR), "--secret",
             SECRET, "--dataset", "recorded", "--data", str(recorded), "--requirements",
             str(requirements)], timeout=120, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        first, last = t0 // HOUR + hours[0], t0 // HOUR + hours[-1]
        docs = wait_for_slots(broker.bootstrap, topics, set(range(first, last + 1)), 90, worker)
    finally:
        stop_worker(worker)
    log = (tmp_path / "worker.log").read_text()
    assert sorted(d["slot"] for d in docs) == list(range(first, last + 1)), log[-3000:]
    assert dead_letters(broker.bootstrap, topics.dead_letters) == []
    working = {t0 // HOUR + h for h in hours}
    assert Counter(d["users"] for d in docs) == Counter({len(users): len(docs)})
    assert {d["slot"] for d in docs} >= working and len(docs) == 2 * 24 + 8
