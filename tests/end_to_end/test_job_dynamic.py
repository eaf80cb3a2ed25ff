"""The Kafka job under DPBD and DPBA against the embedded broker: the slot conversation between
partitions and coordinator end to end, and a worker killed mid-run."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import orjson
from brokers import broker_fixture
from jobkit import (
    accepted_by_slot,
    close_through,
    config,
    dynamic_requirements,
    in_process,
    job_nonce,
    kill_and_resume,
    produce,
    produce_batches,
    register,
    releases,
    setup_topics,
    slot_reports,
    start_worker,
    stop_worker,
    stop_workers,
    values_by_slot,
    wait_accepted,
    wait_for_slots,
)

from local_kafka.embedded import free_port
from streams.job.config import JobConfig
from streams.job.pipeline import InProcessJob
from streams.job.slot_protocol import secret_check
from streams.kafka.offsets import read_topic
from streams.kafka.topics import Topics

USERS = [f"u{i}" for i in range(60)]


broker = broker_fixture()


def decision_records(bootstrap: str, topics: Topics) -> list[tuple[bytes, bytes]]:
    return asyncio.run(read_topic(bootstrap, topics.decisions))


def test_dpba_job_releases_every_slot_once_equal_to_in_process(broker, tmp_path: Path):
    cfg = config("dyn-e2e", mechanism="dpba")
    topics = setup_topics(broker.bootstrap, cfg)
    worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", tmp_path / "worker.log")
    reqs = dynamic_requirements(USERS)
    batches = [slot_reports(USERS, t, cfg.d) for t in range(15)]
    try:
        register(broker.bootstrap, topics, cfg, reqs, worker)
        produce_batches(broker.bootstrap, topics.reports, cfg.partitions, batches)
        close_through(broker.bootstrap, topics, cfg, 15 * cfg.slot_ms)
        docs = wait_for_slots(broker.bootstrap, topics, set(range(15)), 90, worker)
    finally:
        stop_worker(worker)
    log = (tmp_path / "worker.log").read_text()
    assert sorted(d["slot"] for d in docs) == list(range(15)), log[-3000:]
    assert all(d["mechanism"] == "dpba" and d["users"] == len(USERS) for d in docs)
    raw = sorted((v for _k, v in releases(broker.bootstrap, topics)),
                 key=lambda v: orjson.loads(v)["slot"])
    nonce = job_nonce(broker.bootstrap, topics)
    assert raw == in_process(cfg, reqs, batches, 15 * cfg.slot_ms, nonce=nonce)
    records = decision_records(broker.bootstrap, topics)
    keys = [k for k, _v in records]
    assert keys[0] == b"s/start" and orjson.loads(records[0][1]) == {
        "stream": "s", "start": 0, "nonce": nonce,
        "secret_check": secret_check(cfg.secret_bytes(), "s"), "config": cfg.public()}
    decided = [orjson.loads(v) for k, v in records[1:] if b"/declared/" not in k]
    assert sorted(d["slot"] for d in decided) == list(range(15))
    declared = [orjson.loads(v) for k, v in records if b"/declared/" in k]
    assert sum(len(d["users"]) for d in declared if d["declared"] == 0) == len(USERS)


def test_dpbd_worker_killed_mid_run_loses_nothing_and_changes_nothing(broker, tmp_path: Path):
    cfg = config("dyn-restart", mechanism="dpbd")
    topics = setup_topics(broker.bootstrap, cfg)
    reqs = dynamic_requirements(USERS)
    batches = [slot_reports(USERS, t, cfg.d) for t in range(24)]
    text = kill_and_resume(broker.bootstrap, topics, cfg, tmp_path, reqs, batches, 12, 8)
    by_slot = values_by_slot(releases(broker.bootstrap, topics))
    assert sorted(by_slot) == list(range(24)), text[-12000:]
    assert all(len(vs) == 1 for vs in by_slot.values()), "a slot was released with two values"
    decided = values_by_slot(decision_records(broker.bootstrap, topics))
    assert all(len(vs) == 1 for vs in decided.values()), "a slot was decided twice"
    expected = in_process(cfg, reqs, batches, 24 * cfg.slot_ms,
                          nonce=job_nonce(broker.bootstrap, topics))
    assert [next(iter(by_slot[s])) for s in range(24)] == expected


def test_removed_users_leave_the_dpbd_job_as_in_process(broker, tmp_path: Path):
    """Tombstones on the requirements topic mid-run: the removed users' reports already
    accepted still count, later ones go to dead letters, and the releases equal the in-process
    job's with the same removal between the same slots (DPBD's releases do not depend on when
    a suspension starts, only on who is counted)."""
    cfg = config("dyn-removal", mechanism="dpbd")
    topics = setup_topics(broker.bootstrap, cfg)
    worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", tmp_path / "worker.log")
    reqs, gone = dynamic_requirements(USERS), [(u.encode(), None) for u in USERS[:20]]
    batches = [slot_reports(USERS, t, cfg.d) for t in range(12)]
    try:
        register(broker.bootstrap, topics, cfg, reqs, worker)
        produce_batches(broker.bootstrap, topics.reports, cfg.partitions, batches[:5])
        # the idle close releases slot 4, so the removal follows every plan of slots 0-4
        wait_for_slots(broker.bootstrap, topics, set(range(5)), 90, worker)
        register(broker.bootstrap, topics, cfg, gone, worker)
        produce_batches(broker.bootstrap, topics.reports, cfg.partitions, batches[5:])
        close_through(broker.bootstrap, topics, cfg, 12 * cfg.slot_ms)
        docs = wait_for_slots(broker.bootstrap, topics, set(range(12)), 90, worker)
    finally:
        stop_worker(worker)
    log = (tmp_path / "worker.log").read_text()
    docs = sorted(docs, key=lambda d: d["slot"])
    assert [d["users"] for d in docs] == [60] * 5 + [40] * 7, log[-3000:]
    accepted = accepted_by_slot(broker.bootstrap, topics)
    assert [accepted[s] for s in range(12)] == [60] * 5 + [40] * 7
    dead = asyncio.run(read_topic(broker.bootstrap, topics.dead_letters))
    assert len(dead) == 20 * 7 and all(b"unregistered_user" in v for _k, v in dead)
    job = InProcessJob(replace(cfg, nonce=job_nonce(broker.bootstrap, topics)))
    job.register(reqs)
    for k, batch in enumerate(batches):
        if k == 5:
            job.finish(5 * cfg.slot_ms)
            job.register(gone)
        job.feed(batch)
    job.finish(12 * cfg.slot_ms)
    assert docs == [orjson.loads(v) for v in job.releases]


def start_record(cfg: JobConfig, nonce: str) -> bytes:
    """The start record of ``cfg``'s stream with ``nonce``, as its coordinator writes it."""
    return orjson.dumps({"stream": cfg.stream, "start": 0, "nonce": nonce,
                         "secret_check": secret_check(cfg.secret_bytes(), cfg.stream),
                         "config": cfg.public()})


def test_a_removed_users_report_moves_nothing_public_on_the_broker(broker, tmp_path: Path):
    """A DPBD user reports in slot 3 and is removed (a tombstone on requirements) before slot 3
    closes: the partition withdraws the report when it plans the slot. Two jobs, one given that
    report and one not, run side by side under one nonce: each decisions topic holds the same
    start record beforehand, and a coordinator takes a started stream's nonce from it. Every
    release, byte for byte, and every decision record (levels, users, projected users, eps,
    nullified, published; the declarations) are identical."""
    gone, slots = 3, 6
    reqs = dynamic_requirements(USERS)
    batches = [slot_reports(USERS, t, 3) for t in range(slots)]
    runs = {}
    try:
        for name in ("reported", "silent"):
            # no idle close: slot 3 closes with the reports of slot 4, after the removal
            cfg = config(f"dyn-gone-{name}", mechanism="dpbd", idle_close_ms=600_000)
            topics = setup_topics(broker.bootstrap, cfg)
            produce(broker.bootstrap, topics.decisions, 1, [(b"s/start", start_record(cfg,
                                                                                      "5eed" * 8))])
            port = free_port()
            worker = start_worker(broker.bootstrap, cfg, tmp_path / name, tmp_path / f"{name}.log",
                                  "--metrics-port", str(port), "--metrics-host", "127.0.0.1")
            mine = [list(b) for b in batches]
            if name == "silent":
                mine[gone] = [r for r in mine[gone] if r[0] != b"u0"]
            runs[name] = (cfg, topics, worker, port, mine)
        for cfg, topics, worker, _port, _mine in runs.values():
            register(broker.bootstrap, topics, cfg, reqs, worker)
        for cfg, topics, _worker, _port, mine in runs.values():
            produce_batches(broker.bootstrap, topics.reports, cfg.partitions, mine[: gone + 1])
        for cfg, topics, worker, port, mine in runs.values():
            sent = sum(len(b) for b in mine[: gone + 1])
            assert wait_accepted(port, sent, 60, worker) == sent  # u0's report was counted
            # slots 0-2 planned (a partition plans a closed slot once the last is decided), and
            # slot 3, still open, not yet: the removal comes between them in both jobs
            wait_for_slots(broker.bootstrap, topics, set(range(gone)), 60, worker)
            register(broker.bootstrap, topics, cfg, [(b"u0", None)], worker)
        for cfg, topics, _worker, _port, mine in runs.values():
            produce_batches(broker.bootstrap, topics.reports, cfg.partitions, mine[gone + 1:])
            close_through(broker.bootstrap, topics, cfg, slots * cfg.slot_ms)
        docs = {name: wait_for_slots(broker.bootstrap, topics, set(range(slots)), 90, worker)
                for name, (cfg, topics, worker, _port, _mine) in runs.items()}
    finally:
        stop_workers([worker for _cfg, _topics, worker, _port, _mine in runs.values()])
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in runs}
    public, decided = {}, {}
    for name, (_cfg, topics, _worker, _port, _mine) in runs.items():
        got = sorted(docs[name], key=lambda d: d["slot"])
        assert [d["slot"] for d in got] == list(range(slots)), logs[name][-3000:]
        assert [d["users"] for d in got] == [60] * gone + [59] * (slots - gone)
        public[name] = sorted(releases(broker.bootstrap, topics))
        decided[name] = [(k, orjson.loads(v)) for k, v in sorted(
            decision_records(broker.bootstrap, topics), key=lambda kv: kv[0])]
    assert "slot 3: 1 reports withdrawn with their users' removal" in logs["reported"]
    assert "withdrawn" not in logs["silent"]
    assert public["reported"] == public["silent"]
    assert decided["reported"] == decided["silent"]
    assert [k for k, _v in decided["reported"]].count(b"s/start") == 1  # the one given
    assert {k for k, _v in decided["reported"]} >= {f"s/{t}".encode() for t in range(slots)}
