"""The Kafka job against the embedded broker: releases, equivalence, bad input, restarts."""

from __future__ import annotations

import base64
import time
from pathlib import Path

import jsonschema
import orjson
from brokers import broker_fixture
from forked_workers import run_command
from jobkit import (
    accepted_by_slot,
    close_through,
    config,
    in_process,
    job_nonce,
    kill_and_resume,
    produce,
    produce_batches,
    register,
    releases,
    report,
    requirement_records,
    setup_topics,
    slot_reports,
    start_worker,
    stop_worker,
    values_by_slot,
    wait_for_slots,
)

from streams.kafka.offsets import read_topic
from streams.records.formats import load_schema

USERS = [f"u{i}" for i in range(60)]
W = [4 + (i % 3) * 3 for i in range(60)]
E = [0.5 + (i % 4) * 0.5 for i in range(60)]


broker = broker_fixture()


def test_twenty_slots_released_exactly_once_and_equal_to_in_process(broker, tmp_path: Path):
    cfg = config("e2e", mechanism="pba")
    topics = setup_topics(broker.bootstrap, cfg)
    worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", tmp_path / "worker.log")
    try:
        reqs = requirement_records(USERS, W, E)
        register(broker.bootstrap, topics, cfg, reqs, worker)
        batches = [slot_reports(USERS, t, cfg.d) for t in range(20)]
        produce_batches(broker.bootstrap, topics.reports, cfg.partitions, batches)
        close_through(broker.bootstrap, topics, cfg, 20 * cfg.slot_ms)
        docs = wait_for_slots(broker.bootstrap, topics, set(range(20)), 90, worker)
    finally:
        stop_worker(worker)
    log = (tmp_path / "worker.log").read_text()
    slots = [d["slot"] for d in docs]
    assert sorted(slots) == list(range(20)), log[-3000:]
    assert len(slots) == 20  # exactly once
    accepted = accepted_by_slot(broker.bootstrap, topics)
    assert all(accepted[d["slot"]] == len(USERS) and d["users"] == len(USERS) for d in docs)
    assert all(d["stream"] == "s" and d["mechanism"] == "pba" for d in docs)
    assert all(all(isinstance(x, int) for x in d["histogram"]) for d in docs)
    # bit for bit what the same input gives without Kafka, under the job's stream nonce
    raw = [v for _k, v in releases(broker.bootstrap, topics)]
    expected = in_process(cfg, reqs, batches, 20 * cfg.slot_ms,
                          nonce=job_nonce(broker.bootstrap, topics))
    assert sorted(raw, key=lambda v: orjson.loads(v)["slot"]) == expected
    decisions = asyncio_read(broker, topics.decisions)
    assert sorted(orjson.loads(v)["slot"] for v in decisions if b'"nonce"' not in v) == \
        list(range(20))


def asyncio_read(broker, topic: str) -> list[bytes]:
    import asyncio

    return [v for _k, v in asyncio.run(read_topic(broker.bootstrap, topic))]


def test_bad_input_goes_to_dead_letters_and_the_job_keeps_running(broker, tmp_path: Path):
    cfg = config("bad", horizon_ms=60_000)
    topics = setup_topics(broker.bootstrap, cfg)
    worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", tmp_path / "worker.log")
    try:
        good = requirement_records(USERS[:10], W[:10], E[:10])
        bad_reqs = [
            (b"r1", orjson.dumps({"user": "r1", "w": 0, "E": 1.0})),
            (b"r2", orjson.dumps({"user": "r2", "w": 3, "E": -1.0})),
            (b"u0", orjson.dumps({"user": "u0", "w": 99, "E": 1.0})),  # a changed requirement
        ]
        register(broker.bootstrap, topics, cfg, good + bad_reqs, worker)
        bad = [
            (b"u1", b"{not json"),
            (b"u1", orjson.dumps({"user": "u1", "time": 10})),
            (b"u1", orjson.dumps({"user": "u1", "time": "yesterday", "value": 1})),
            (b"u1", orjson.dumps({"user": "u1", "time": 20, "value": 7})),
            (b"stranger", orjson.dumps({"user": "stranger", "time": 30, "value": 1})),
        ]
        first = slot_reports(USERS[:10], 0, cfg.d)
        produce(broker.bootstrap, topics.reports, cfg.partitions, first + bad)
        # a second report of u2 in slot 0: the first one counts
        produce(broker.bootstrap, topics.reports, cfg.partitions, [report("u2", 500, 1)])
        later = [slot_reports(USERS[:10], t, cfg.d) for t in (1, 2, 3)]
        produce_batches(broker.bootstrap, topics.reports, cfg.partitions, later)
        produce(broker.bootstrap, topics.reports, cfg.partitions, [
            report("u3", 100, 1),                  # slot 0 closed by now: late
            report("u4", 10_000_000, 1),           # far beyond the horizon: future
        ])
        close_through(broker.bootstrap, topics, cfg, 4 * cfg.slot_ms)
        docs = wait_for_slots(broker.bootstrap, topics, {0, 1, 2, 3}, 90, worker)
        assert worker.poll() is None, "the worker must survive bad input"
    finally:
        stop_worker(worker)
    log = (tmp_path / "worker.log").read_text()
    assert {d["slot"] for d in docs} == {0, 1, 2, 3}, log[-3000:]
    dead = [orjson.loads(v) for v in asyncio_read(broker, topics.dead_letters)]
    for d in dead:
        jsonschema.validate(d, load_schema("dead-letters"))
    for d in docs:
        jsonschema.validate(d, load_schema("releases"))
    reasons = {d["reason"] for d in dead}
    assert reasons >= {"malformed_json", "missing_field", "bad_type", "out_of_domain",
                       "unregistered_user", "invalid_requirement", "duplicate_in_slot", "late",
                       "future"}, (reasons, log[-3000:])
    # original bytes come back, with the reason
    malformed = [d for d in dead if d["reason"] == "malformed_json"]
    assert base64.b64decode(malformed[0]["value"]) == b"{not json"
    by_reason = {}
    for d in dead:
        by_reason.setdefault(d["reason"], []).append(d)
    assert len(by_reason["invalid_requirement"]) == 3
    # 10 users x 4 slots; nothing else counted
    assert sum(accepted_by_slot(broker.bootstrap, topics).values()) == 40


def test_restart_after_sigkill_loses_nothing_and_changes_nothing(broker, tmp_path: Path):
    # the default configuration: its branch (pbu here) and its filter survive the SIGKILL
    cfg = config("restart", mechanism="default")
    topics = setup_topics(broker.bootstrap, cfg)
    reqs = requirement_records(USERS, W, E)
    batches = [slot_reports(USERS, t, cfg.d) for t in range(30)]
    text = kill_and_resume(broker.bootstrap, topics, cfg, tmp_path, reqs, batches, 15, 10)
    by_slot = values_by_slot(releases(broker.bootstrap, topics))
    assert sorted(by_slot) == list(range(30)), text[-12000:]
    assert all(len(vs) == 1 for vs in by_slot.values()), "a slot was released with two values"
    decisions = values_by_slot([(b"", v) for v in asyncio_read(broker, topics.decisions)])
    assert all(len(vs) == 1 for vs in decisions.values()), "a slot was charged twice"
    accepted = accepted_by_slot(broker.bootstrap, topics)
    assert all(accepted[s] == len(USERS) for s in by_slot)
    expected = in_process(cfg, reqs, batches, 30 * cfg.slot_ms,
                          nonce=job_nonce(broker.bootstrap, topics))
    assert [next(iter(by_slot[s])) for s in range(30)] == expected
    assert {orjson.loads(v)["mechanism"] for vs in by_slot.values() for v in vs} == {"pbu"}
    assert all(orjson.loads(v)["estimate"]["method"] == "kalman_split"
               for vs in by_slot.values() for v in vs)


def test_replay_command_into_the_job_equals_replay_in_process(broker, tmp_path: Path):

    # no --mechanism, no --postprocess: the default configuration on both sides
    cfg = config("cli", mechanism="default", domain={"kind": "cells", "size": 2})
    topics = setup_topics(broker.bootstrap, cfg)
    common = ["--prefix", "cli", "--partitions", "2", "--stream", "s",
              "--cells", "2", "--slot-ms", "1000", "--dataset", "sin", "--users", "300",
              "--slots", "15", "--seed", "3"]
    worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", tmp_path / "worker.log")
    try:
        time.sleep(1.0)
        sent = run_command(["replay", "--broker", broker.bootstrap, *common])
        assert sent.returncode == 0, sent.stderr.decode()
        wait_for_slots(broker.bootstrap, topics, set(range(15)), 90, worker)
    finally:
        stop_worker(worker)
    got = sorted((v for _k, v in releases(broker.bootstrap, topics)),
                 key=lambda v: orjson.loads(v)["slot"])
    offline = run_command(["replay", "--in-process", "--secret", cfg.secret, "--nonce",
                           job_nonce(broker.bootstrap, topics), *common])
    assert offline.returncode == 0, offline.stderr.decode()
    expected = offline.stdout.decode().splitlines()
    assert len(expected) == 15
    assert [v.decode() for v in got] == expected, (tmp_path / "worker.log").read_text()[-3000:]
    assert orjson.loads(got[0])["mechanism"] in ("pbu", "pbad") and "estimate" in orjson.loads(
        got[0])
