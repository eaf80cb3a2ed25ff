"""Ten kill -9s of random workers while slots flow, under pbd and dpbd: nothing is lost, nothing
is counted twice, and every release is byte for byte what the same input gives without Kafka.

Two workers on four partitions; a killed worker is started again at once on its data directory,
so it takes its static member's place back (the embedded broker never expires a dead member, so
the other worker cannot take its partitions over: crash failover is not what this shows). A
worker that exits by itself is started again, as its supervisor would, and counted.

The kill schedule (which worker, before which slot, how far into it) is drawn from a seed that
is new on every run, printed and named in every failure; ``PWEVENT_KILL_SEED=N`` replays the
schedule of seed N."""

from __future__ import annotations

import os
import random
import secrets
import shutil
import time
from pathlib import Path

import pytest
from brokers import broker_fixture
from jobkit import (
    Workers,
    config,
    creation_cut_short,
    dynamic_requirements,
    in_process,
    job_nonce,
    register,
    releases,
    requirement_records,
    send_slots,
    setup_topics,
    slot_reports,
    values_by_slot,
    wait_for_assignment,
    wait_for_slots,
)

USERS = [f"u{i}" for i in range(40)]
SLOTS = 40
KILLS = 10
#: One seed per run, unless pinned: the schedules of both mechanisms derive from it.
SEED = int(os.environ.get("PWEVENT_KILL_SEED") or secrets.randbits(32))
#: The users' fixed requirements: windows of 3 to 6 slots, budgets 0.5 to 1.5.
FIXED_REQUIREMENTS = requirement_records(USERS, [3 + i % 4 for i in range(len(USERS))],
                                         [0.5 + (i % 3) * 0.5 for i in range(len(USERS))])


broker = broker_fixture()


def kill_schedule(seed: int, mechanism: str) -> tuple[dict[int, tuple[str, float]], str]:
    """Before which slots a worker is killed, which one and after how many seconds, and the
    schedule as text."""
    rng = random.Random(f"{seed}:{mechanism}")
    slots = sorted(rng.sample(range(2, SLOTS - 2), KILLS))
    plan = {t: (rng.choice("ab"), round(rng.uniform(0.0, 0.6), 3)) for t in slots}
    return plan, ", ".join(f"{who} before slot {t} +{pause}s" for t, (who, pause) in plan.items())


@pytest.mark.parametrize("mechanism", ["pbd", "dpbd"])
def test_ten_random_kills_lose_nothing_and_change_nothing(broker, tmp_path: Path,
                                                          mechanism: str) -> None:
    plan, schedule = kill_schedule(SEED, mechanism)
    print(f"{mechanism}: kill seed {SEED} (PWEVENT_KILL_SEED={SEED} replays it): {schedule}")
    cfg = config(f"kills-{mechanism}", mechanism=mechanism, partitions=4)
    topics = setup_topics(broker.bootstrap, cfg)
    reqs = dynamic_requirements(USERS) if cfg.dynamic else FIXED_REQUIREMENTS
    batches = [slot_reports(USERS, t, cfg.d) for t in range(SLOTS)]
    workers = Workers(broker.bootstrap, cfg, tmp_path)
    killed: list[str] = []
    context = f"kill seed {SEED} ({schedule})"
    began = time.monotonic()
    try:
        workers.start("a")
        # b after a: two first joins at once can stall the embedded broker (test_start_together)
        assert wait_for_assignment(broker.bootstrap, cfg, topics.reports, 1, 60), context
        workers.start("b")
        register(broker.bootstrap, topics, cfg, reqs, workers.procs["a"])
        for t in range(SLOTS):
            if t in plan:
                victim, pause = plan[t]
                time.sleep(pause)  # somewhere inside the work of a slot
                workers.kill(victim)
                killed.append(victim)
                workers.start(victim)
            send_slots(broker.bootstrap, topics, cfg, batches, [t])
            workers.supervise()
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            got = wait_for_slots(broker.bootstrap, topics, set(range(SLOTS)), 3)
            if {d["slot"] for d in got} >= set(range(SLOTS)):
                break
            workers.supervise()
    finally:
        workers.stop_all()
    exits = workers.exits
    print(f"{mechanism}: {len(killed)} kills in {time.monotonic() - began:.0f} s, workers that "
          f"exited by themselves: {exits or 'none'}")
    context += f"; self-exits {exits}"
    assert len(killed) == KILLS, context
    by_slot = values_by_slot(releases(broker.bootstrap, topics))
    assert sorted(by_slot) == list(range(SLOTS)), f"{context}\n{workers.logs()}"
    assert all(len(v) == 1 for v in by_slot.values()), f"a slot released twice: {context}"
    expected = in_process(cfg, reqs, batches, SLOTS * cfg.slot_ms,
                          nonce=job_nonce(broker.bootstrap, topics))
    assert [next(iter(by_slot[s])) for s in range(SLOTS)] == expected, (
        f"{context}\n{workers.warnings()}")
    # workers exit by themselves only as the job means them to: status 1, the reason logged
    assert all(status == 1 and reason != "(no error logged)" for _n, status, reason in exits), \
        f"{context}\n{workers.logs()}"


def test_a_store_whose_creation_a_kill_cut_short_is_made_again(shared_brokers,
                                                               tmp_path: Path) -> None:
    """A worker SIGKILLed while RocksDB creates one of its stores leaves a directory without
    ``CURRENT`` (found so after a kill of the test above). Started again on its data directory,
    the worker makes the store anew and recovers the table from its changelog; it refused to
    start at every attempt before. The store is the worker's local state: the embedded broker
    shows all of it."""
    bootstrap = shared_brokers.get("embedded").bootstrap
    cfg = config("kills-cut-short", mechanism="pbd", partitions=4)
    topics = setup_topics(bootstrap, cfg)
    reqs = FIXED_REQUIREMENTS
    slots = 8
    batches = [slot_reports(USERS, t, cfg.d) for t in range(slots)]
    workers = Workers(bootstrap, cfg, tmp_path)
    try:
        workers.start("a")
        assert wait_for_assignment(bootstrap, cfg, topics.reports, 1, 60)
        register(bootstrap, topics, cfg, reqs, workers.procs["a"])
        send_slots(bootstrap, topics, cfg, batches, range(4))
        wait_for_slots(bootstrap, topics, set(range(4)), 60, workers.procs["a"])
        workers.kill("a")
        stores = sorted((tmp_path / "data-a").rglob("checkpoints-*.db"))
        assert stores, "the worker made no checkpoints store"
        shutil.rmtree(stores[0])
        creation_cut_short(stores[0])
        workers.start("a")
        send_slots(bootstrap, topics, cfg, batches, range(4, slots))
        wait_for_slots(bootstrap, topics, set(range(slots)), 60, workers.procs["a"])
        workers.supervise()
    finally:
        workers.stop_all()
    assert workers.exits == [], workers.logs()
    assert (stores[0] / "CURRENT").exists()
    by_slot = values_by_slot(releases(bootstrap, topics))
    assert sorted(by_slot) == list(range(slots)) and all(len(v) == 1 for v in by_slot.values())
    expected = in_process(cfg, reqs, batches, slots * cfg.slot_ms,
                          nonce=job_nonce(bootstrap, topics))
    assert [next(iter(by_slot[s])) for s in range(slots)] == expected
