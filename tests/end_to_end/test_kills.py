"""Ten kill -9s of random workers while slots flow, under pbd and dpbd: nothing is lost, nothing
is counted twice, and every release is byte for byte what the same input gives without Kafka.

Two workers on four partitions; a killed worker is started again at once on its data directory,
so it takes its static member's place back (the embedded broker never expires a dead member, so
the other worker cannot take its partitions over: crash failover is not what this shows). A
worker that exits by itself is started again, as its supervisor would (a worker whose Kafka
consumer stops answering exits on purpose; ``streams.job.ingest.FetchStalled``). The kill times
come from a seeded generator; the seed is in the test's id."""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

import pytest
from jobkit import (
    close_through,
    config,
    dynamic_requirements,
    in_process,
    job_nonce,
    produce,
    register,
    releases,
    requirement_records,
    setup_topics,
    slot_reports,
    start_worker,
    stop_worker,
    values_by_slot,
    wait_for_slots,
)

from streams.kafka.broker import EmbeddedBroker

USERS = [f"u{i}" for i in range(40)]
SLOTS = 40
KILLS = 10


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


@pytest.mark.parametrize(("mechanism", "seed"), [("pbd", 11), ("dpbd", 12)])
def test_ten_random_kills_lose_nothing_and_change_nothing(broker, tmp_path: Path,
                                                          mechanism: str, seed: int) -> None:
    rng = random.Random(seed)
    cfg = config(f"kills-{mechanism}", mechanism=mechanism, partitions=4)
    topics = setup_topics(broker.bootstrap, cfg)
    reqs = (dynamic_requirements(USERS) if cfg.dynamic else requirement_records(
        USERS, [3 + i % 4 for i in range(len(USERS))], [0.5 + (i % 3) * 0.5
                                                        for i in range(len(USERS))]))
    batches = [slot_reports(USERS, t, cfg.d) for t in range(SLOTS)]
    names = ["a", "b"]
    workers: dict[str, subprocess.Popen] = {}

    def start(name: str) -> None:
        workers[name] = start_worker(broker.bootstrap, cfg, tmp_path / f"data-{name}",
                                     tmp_path / f"worker-{name}.log")

    kill_after = sorted(rng.sample(range(2, SLOTS - 2), KILLS))  # before sending these slots
    killed: list[str] = []
    exited: list[str] = []

    def supervise() -> None:
        for name, proc in workers.items():
            if proc.poll() is not None:
                exited.append(name)
                start(name)

    try:
        for name in names:
            start(name)
        register(broker.bootstrap, topics, cfg, reqs, workers["a"])
        for t in range(SLOTS):
            if t in kill_after:
                time.sleep(rng.uniform(0.0, 0.6))  # somewhere inside the work of a slot
                victim = rng.choice(names)
                stop_worker(workers[victim], kill=True)
                killed.append(victim)
                start(victim)
            produce(broker.bootstrap, topics.reports, cfg.partitions, batches[t])
            close_through(broker.bootstrap, topics, cfg, (t + 1) * cfg.slot_ms)
            supervise()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            got = wait_for_slots(broker.bootstrap, topics, set(range(SLOTS)), 3)
            if {d["slot"] for d in got} >= set(range(SLOTS)):
                break
            supervise()
    finally:
        for proc in workers.values():
            stop_worker(proc)
    assert len(killed) == KILLS
    by_slot = values_by_slot(releases(broker.bootstrap, topics))
    logs = "\n".join((tmp_path / f"worker-{n}.log").read_text(errors="replace")[-3000:]
                     for n in names)
    assert sorted(by_slot) == list(range(SLOTS)), (exited, logs)
    assert all(len(v) == 1 for v in by_slot.values()), "a slot released with two values"
    expected = in_process(cfg, reqs, batches, SLOTS * cfg.slot_ms,
                          nonce=job_nonce(broker.bootstrap, topics))
    assert [next(iter(by_slot[s])) for s in range(SLOTS)] == expected
