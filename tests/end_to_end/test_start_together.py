"""Two workers started at the same moment, several times on one embedded broker: every time
both end up holding partitions of ``reports`` and slots are released, byte for byte what the
same input gives without Kafka.

Starting together is where the embedded broker is weakest: when the second worker's JoinGroup
reaches it as it completes the first one's (a fraction of a second after), the broker may hold
both joins until the rebalance timeout (60 s) and then give the group leader an empty
assignment. aiokafka's membership task dies on it, and the worker's consumer stops the worker
with status 1 (``streams.job.worker.ingest.CoordinationFailed``); a worker whose consumer stops
answering fetches exits with status 1 too (``FetchStalled``). Workers run under a supervisor
that starts them again; so does this test, and it reports how often it had to (seen in about
1 round of 15, which then takes about 75 s)."""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest
from jobkit import (
    Workers,
    config,
    in_process,
    instance_held,
    job_nonce,
    register,
    releases,
    requirement_records,
    send_slots,
    setup_topics,
    slot_reports,
)

from local_kafka.embedded import EmbeddedBroker

ROUNDS = 3
SLOTS = 2
USERS = [f"u{i}" for i in range(12)]
#: Bound of one round: a broker that holds both joins until its rebalance timeout (60 s), then
#: a restart of the worker that received the empty assignment.
ROUND_S = 150.0


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


def share(workers: Workers, topic: str, deadline: float) -> dict[str, set[int]] | None:
    """Wait, supervising, until the group is stable with both workers' identities, each holding
    partitions of ``topic``; the last description seen otherwise."""
    seen = None
    while time.monotonic() < deadline:
        workers.supervise()
        held = instance_held(workers.bootstrap, workers.cfg, topic)
        seen = held if held is not None else seen
        ids = {workers.instance(n) for n in workers.procs}
        if held is not None and set(held) == ids and all(held.values()):
            return held
        time.sleep(0.3)
    return seen


def released(workers: Workers, topics, slots: int, deadline: float) -> list[bytes]:
    """Wait, supervising, until slots 0..slots-1 are on ``releases``; the releases by slot."""
    raw: list[bytes] = []
    while time.monotonic() < deadline:
        workers.supervise()
        raw = [v for _k, v in releases(workers.bootstrap, topics)]
        if len(raw) >= slots:
            break
        time.sleep(0.3)
    return raw


def test_workers_started_together_share_partitions_and_release(broker, tmp_path: Path) -> None:
    reqs = requirement_records(USERS, [3] * len(USERS), [1.0] * len(USERS))
    report: list[str] = []
    exits: list[tuple[int, str, int, str]] = []
    for k in range(ROUNDS):
        cfg = config(f"together-{k}", partitions=4)
        topics = setup_topics(broker.bootstrap, cfg)
        batches = [slot_reports(USERS, t, cfg.d) for t in range(SLOTS)]
        workers = Workers(broker.bootstrap, cfg, tmp_path / f"round-{k}")
        began = time.monotonic()
        try:
            workers.start("a")
            workers.start("b")
            held = share(workers, topics.reports, began + ROUND_S)
            context = f"round {k}: {report}, exits {workers.exits}\n{workers.logs()}"
            assert held is not None and len(held) == 2 and all(held.values()), (held, context)
            register(broker.bootstrap, topics, cfg, reqs, workers.procs["a"])
            send_slots(broker.bootstrap, topics, cfg, batches, range(len(batches)))
            raw = released(workers, topics, SLOTS, began + ROUND_S)
        finally:
            workers.stop_all()
        exits += [(k, *e) for e in workers.exits]
        report.append(f"round {k}: {time.monotonic() - began:.1f} s, "
                      f"{len(workers.exits)} restarts")
        context = f"round {k}: {report}, exits {workers.exits}\n{workers.logs()}"
        expected = in_process(cfg, reqs, batches, SLOTS * cfg.slot_ms,
                              nonce=job_nonce(broker.bootstrap, topics))
        assert sorted(raw, key=lambda v: orjson.loads(v)["slot"]) == expected, context
    print(f"{ROUNDS} rounds of two workers started together: {'; '.join(report)}; "
          f"workers that exited by themselves: {exits or 'none'}")
    # a worker stops by itself only as the job means it to: status 1, with its reason logged
    assert all(status == 1 and reason != "(no error logged)"
               for _k, _name, status, reason in exits), exits
