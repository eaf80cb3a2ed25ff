"""Crash failover on Apache Kafka by the session timeout alone.

Two workers on four partitions; one is killed with SIGKILL mid-stream and never comes back, and
nobody runs ``pwevent group remove``. Apache Kafka expires its static member after the workers'
session timeout (10 s), the survivor takes its partitions (and the coordinator, when the dead one
held it) and restores their tables from the changelogs. Every slot is released once, byte for
byte what the same input gives without Kafka. (The embedded broker never expires a dead member:
there ``pwevent group remove`` is the recovery, tests/end_to_end/test_membership.py.)
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from brokers import broker_fixture
from jobkit import (
    Workers,
    config,
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
SLOTS = 24
KILL_AT = 10

broker = broker_fixture(("apache-kafka",))


@pytest.mark.parametrize("mechanism", ["pbd", "dpbd"])
def test_a_killed_worker_is_replaced_by_the_session_timeout_alone(broker, tmp_path: Path,
                                                                  mechanism: str) -> None:
    cfg = config(f"failover-{mechanism}", mechanism=mechanism, partitions=4)
    topics = setup_topics(broker.bootstrap, cfg)
    reqs = (dynamic_requirements(USERS) if cfg.dynamic else requirement_records(
        USERS, [3 + i % 4 for i in range(len(USERS))], [0.5 + (i % 3) * 0.5
                                                        for i in range(len(USERS))]))
    batches = [slot_reports(USERS, t, cfg.d) for t in range(SLOTS)]
    workers = Workers(broker.bootstrap, cfg, tmp_path)
    try:
        workers.start("a")
        assert wait_for_assignment(broker.bootstrap, cfg, topics.reports, 1, 60)
        workers.start("b")
        two = wait_for_assignment(broker.bootstrap, cfg, topics.reports, 2, 90)
        assert two is not None and len(two) == 2, workers.logs()
        register(broker.bootstrap, topics, cfg, reqs, workers.procs["a"])
        send_slots(broker.bootstrap, topics, cfg, batches, range(KILL_AT))
        wait_for_slots(broker.bootstrap, topics, set(range(KILL_AT)), 60)
        workers.kill("a")  # gone for good: its member stays until the session times out
        killed = time.monotonic()
        send_slots(broker.bootstrap, topics, cfg, batches, range(KILL_AT, SLOTS))
        got = wait_for_slots(broker.bootstrap, topics, set(range(SLOTS)), 120,
                             workers.procs["b"])
        took = time.monotonic() - killed
        one = wait_for_assignment(broker.bootstrap, cfg, topics.reports, 1, 30)
    finally:
        workers.stop_all()
    assert {d["slot"] for d in got} == set(range(SLOTS)), workers.logs()
    # the survivor holds every partition: the dead member was expired, not removed
    assert one is not None and [sorted(p) for p in one.values()] == [[0, 1, 2, 3]], one
    assert took >= 10 - 1, f"slots after the kill released {took:.1f} s after it"
    assert "group remove" not in workers.log("b")
    by_slot = values_by_slot(releases(broker.bootstrap, topics))
    assert sorted(by_slot) == list(range(SLOTS))
    assert all(len(v) == 1 for v in by_slot.values()), "a slot released twice, differently"
    expected = in_process(cfg, reqs, batches, SLOTS * cfg.slot_ms,
                          nonce=job_nonce(broker.bootstrap, topics))
    assert [next(iter(by_slot[s])) for s in range(SLOTS)] == expected
