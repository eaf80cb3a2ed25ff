"""A coordinator whose state is gone (lost with the broker's last writes, or wiped) recovers the
stream's nonce and every released slot from the decisions and releases topics: it never releases
a slot again, least of all with another value, and goes on where the stream was."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import orjson
import pytest
from brokers import BROKER_KINDS, running

from streams.job.config import JobConfig
from streams.job.pipeline import InProcessJob
from streams.job.roles import make_coordinator

USERS = [f"u{i}" for i in range(20)]
SLOT_MS = 100


def requirement(name: str, i: int, user: str) -> tuple[bytes, bytes]:
    doc = ({"user": user, "wB": 3 + i % 3, "EB": 1.0 + i % 2, "wF": 2 + i % 3, "EF": 1.5}
           if name.startswith("dp") else {"user": user, "w": 3 + i % 3, "E": 1.0 + i % 2})
    return user.encode(), orjson.dumps(doc)


def batches(T: int) -> list[list[tuple[bytes, bytes]]]:
    rng = np.random.default_rng(9)
    return [[(u.encode(), orjson.dumps({"user": u, "time": t * SLOT_MS + i, "value": int(c)}))
             for i, (u, c) in enumerate(zip(USERS, rng.integers(-1, 3, len(USERS)), strict=True))
             if c >= 0] for t in range(T)]


def topics_of(job: InProcessJob) -> tuple[dict, dict[int, bytes], dict[int, bytes]]:
    """What the decisions and releases topics hold: the start record, decisions, releases."""
    coord = job.coordinator
    releases = {orjson.loads(r)["slot"]: r for r in job.releases}
    return orjson.loads(coord.start_record()), dict(coord.decisions), releases


def whole_and_restarted(name: str) -> tuple[JobConfig, list, InProcessJob, InProcessJob]:
    """A job's config and 16 slots of data, the job run on all of them, and a second job of
    the same stream (same nonce) with the same users registered and nothing fed yet."""
    config = JobConfig(stream="s", mechanism=name, domain={"kind": "cells", "size": 3},
                       slot_ms=SLOT_MS, partitions=2, secret="k", event_time="history")
    reqs = [requirement(name, i, u) for i, u in enumerate(USERS)]
    data = batches(16)
    whole = InProcessJob(config)
    whole.register(reqs)
    for batch in data:
        whole.feed(batch)
    whole.finish()
    job = InProcessJob(replace(config, nonce=whole.coordinator.nonce))
    job.register(reqs)
    return config, data, whole, job


def go_on_with(job: InProcessJob, coordinator, rest: list, whole: InProcessJob) -> None:
    """Give ``job`` the recovered ``coordinator`` (its workers restart too and send their last
    messages again), feed it the rest of the data and check that every slot was released once
    and the stream is released exactly as ``whole`` released it."""
    job.coordinator = coordinator
    if job.config.dynamic:
        job._deliver([m for acc in job.accumulators for m in acc.resend()])
    for batch in rest:
        job.feed(batch)
    job.finish()
    slots = [orjson.loads(r)["slot"] for r in job.releases]
    assert slots == list(range(len(slots))), "a slot released twice or skipped"
    assert job.releases == whole.releases


@pytest.mark.parametrize("name", ["pbd", "dpba"])
def test_a_coordinator_without_state_recovers_from_the_topics(name: str) -> None:
    config, data, whole, job = whole_and_restarted(name)
    for batch in data[:8]:
        job.feed(batch)
    start, decisions, releases = topics_of(job)
    released = len(job.releases)
    assert released >= 5
    lost = make_coordinator(config)  # a fresh state draws a fresh nonce ...
    assert lost.nonce != start["nonce"]
    assert lost.recover(start, decisions, releases) == released
    assert lost.nonce == start["nonce"]  # ... unless it recovers the stream's
    assert lost.unemitted() == []  # nothing recovered is emitted again
    # nothing was pending at the coordinator when its state went: the stream goes on exactly
    # as without the loss (same nonce, same ledger)
    go_on_with(job, lost, data[8:], whole)


@pytest.mark.parametrize("name", ["pbd", "dpba"])
def test_a_coordinator_state_behind_the_topics_takes_the_released_slots(name: str) -> None:
    """The coordinator's state lost its last writes but the releases topic kept them: the
    restored (older) state adopts the slots released since, and nothing changes."""
    config, data, whole, job = whole_and_restarted(name)
    for batch in data[:4]:
        job.feed(batch)
    old, behind = job.coordinator.snapshot(), len(job.releases)
    for batch in data[4:8]:
        job.feed(batch)
    _start, decisions, releases = topics_of(job)
    assert len(job.releases) > behind + 2
    restored = make_coordinator(config)
    restored.restore(old)
    assert restored.adopt(decisions, releases) == len(job.releases) - behind
    assert restored.unemitted() == []
    assert restored.adopt(decisions, releases) == 0  # taken once
    go_on_with(job, restored, data[8:], whole)


@pytest.mark.parametrize("name", ["pbd", "dpba"])
def test_a_state_ahead_of_the_topics_puts_back_what_they_lost(name: str) -> None:
    """The broker lost the tail of the topics, the coordinator's state kept it: :meth:`lost`
    gives exactly the missing records, byte for byte (the start record only when the topics
    hold neither it nor a release); emitted again, the topics are whole and a coordinator
    recovered from them goes on as if nothing was lost."""
    config, data, whole, job = whole_and_restarted(name)
    for batch in data[:8]:
        job.feed(batch)
    start, decisions, releases = topics_of(job)
    coord = job.coordinator
    assert len(releases) >= 6
    cut = sorted(releases)[-3]  # the broker kept the slots before ``cut``
    kept_d = {s: d for s, d in decisions.items() if s < cut}
    kept_r = {s: r for s, r in releases.items() if s < cut}
    lost = coord.lost(start, kept_d, kept_r)
    assert [(s, r, d) for s, r, d in lost] == [(s, releases[s], decisions[s])
                                               for s in sorted(releases) if s >= cut]
    assert coord.lost(start, decisions, releases) == []  # nothing lost, nothing again
    # the cut fell between a slot's release and its decision: the pair goes again
    assert coord.lost(start, {s: d for s, d in decisions.items() if s != max(decisions)},
                      releases) == [(max(decisions), releases[max(decisions)],
                                     decisions[max(decisions)])]
    # decisions that expired (retention) while their releases were kept are not lost
    assert coord.lost(start, {s: d for s, d in decisions.items() if s > min(decisions)},
                      releases) == []
    # the start record went too: it comes first; a release on the topic means it expired
    everything = coord.lost(None, {}, {})
    assert everything[0] == (coord.start - 1, None, coord.start_record())
    assert len(everything) == 1 + len(releases)
    assert coord.lost(None, decisions, releases) == []
    # another start record: the stream was started again without this state, nothing goes back
    assert coord.lost({**start, "nonce": "00" * 16}, kept_d, kept_r) == []
    # emitted again, the topics are whole: a coordinator without state recovers from them
    put_back = {s: r for s, r, _d in lost}
    recovered = make_coordinator(config)
    assert recovered.recover(start, {**kept_d, **{s: d for s, _r, d in lost}},
                             {**kept_r, **put_back}) == len(releases)
    go_on_with(job, recovered, data[8:], whole)


@pytest.mark.parametrize("kept", [2, 0], ids=["the-last-slots", "all-with-the-start"])
def test_a_restored_coordinator_emits_again_what_the_topics_lost(monkeypatch, kept: int) -> None:
    """The worker's coordinator, restored from its table, finds the topics without their last
    records (with none left, without the start record too): it emits exactly those again, in
    order and byte for byte, as the coordinator emits them, and records that they are
    emitted."""
    import asyncio
    from collections import Counter

    from streams.job.operations.worker_metrics import WorkerMetrics
    from streams.job.worker import coordinator_runner
    from streams.job.worker.coordinator_runner import (
        COORDINATOR_KEY,
        CoordinatorRunner,
        emitted_records,
    )
    from streams.kafka.topics import Topics

    config, data, _whole, job = whole_and_restarted("pbd")
    for batch in data[:6]:
        job.feed(batch)
    start, decisions, releases = topics_of(job)
    assert len(releases) > kept + 2
    cut = sorted(releases)[kept] if kept else min(releases) - 1
    on_topics = (start if kept else None, {s: d for s, d in decisions.items() if s < cut},
                 {s: r for s, r in releases.items() if s < cut})

    async def topics_now(broker: str, topics: Topics, stream: str,
                         unstarted: bool = True) -> tuple:
        return on_topics  # what the broker kept

    class Producer:
        def __init__(self) -> None:
            self.sent: list[tuple[str, bytes, bytes, float | None]] = []

        async def send(self, topic: str, key: bytes, value: bytes, partition: int,
                       timestamp: float | None, headers: object) -> asyncio.Future[None]:
            self.sent.append((topic, key, value, timestamp))
            done = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done

    class App:
        producer = Producer()

    monkeypatch.setattr(coordinator_runner, "stream_records", topics_now)
    topics = Topics(prefix="p", partitions=2)
    state = {COORDINATOR_KEY.encode(): job.coordinator.snapshot()}
    runner = CoordinatorRunner(App(), config, "nowhere:9", topics, state, Counter(),
                               WorkerMetrics(topics.reports))
    coord = asyncio.run(runner._coordinator())
    lost = [] if kept else [(coord.start - 1, None, coord.start_record())]
    lost += [(s, releases[s], decisions[s]) for s in sorted(releases) if s >= cut]
    expected = [(t, k, v, None if ms is None else (ms + 0.5) / 1000)
                for t, k, v, ms in emitted_records(config, topics, lost)]
    assert App.producer.sent == expected
    assert [t for t, *_ in expected].count(topics.releases) == len(releases) - kept
    again = make_coordinator(config)
    again.restore(state[COORDINATOR_KEY.encode()])
    assert again.unemitted() == []  # recorded as emitted: a restart does not send them again


@pytest.mark.parametrize("kind", BROKER_KINDS)
def test_the_job_recovers_a_lost_coordinator_state_from_the_topics(tmp_path, kind: str) -> None:
    """On the embedded broker: the worker's data directory and the coordinator's changelog are
    wiped after slots were released; the restarted worker recovers the nonce and the released
    slots from the topics, releases none of them again and goes on with the same values as a
    run without the loss."""
    import asyncio
    import shutil

    from aiokafka.admin import AIOKafkaAdminClient
    from jobkit import (
        close_through,
        config,
        in_process,
        job_nonce,
        produce_batches,
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


    async def wipe(bootstrap: str, topic: str) -> None:
        """Delete the (compacted) changelog topic: the coordinator's state is gone."""
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.delete_topics([topic])
        finally:
            await admin.close()

    users = [f"u{i}" for i in range(20)]
    reqs = requirement_records(users, [3 + i % 3 for i in range(20)], [1.0] * 20)
    data = [slot_reports(users, t, 3) for t in range(12)]
    with running(kind) as broker:
        cfg = config("lost", mechanism="pbd")
        topics = setup_topics(broker.bootstrap, cfg)
        log = tmp_path / "worker.log"
        worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", log)
        try:
            register(broker.bootstrap, topics, cfg, reqs, worker)
            produce_batches(broker.bootstrap, topics.reports, cfg.partitions, data[:6])
            wait_for_slots(broker.bootstrap, topics, set(range(5)), 60, worker)
        finally:
            stop_worker(worker)
        changelog = f"pwevent-{cfg.prefix}-{cfg.stream}-coordinator-changelog"
        asyncio.run(wipe(broker.bootstrap, changelog))
        shutil.rmtree(tmp_path / "data")  # the same worker, its local state gone too
        worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", log)
        try:
            produce_batches(broker.bootstrap, topics.reports, cfg.partitions, data[6:])
            close_through(broker.bootstrap, topics, cfg, 12 * cfg.slot_ms)
            wait_for_slots(broker.bootstrap, topics, set(range(12)), 90, worker)
        finally:
            stop_worker(worker)
        text = log.read_text()
        by_slot = values_by_slot(releases(broker.bootstrap, topics))
        nonce = job_nonce(broker.bootstrap, topics)
    assert "coordinator state was missing" in text, text[-3000:]
    assert sorted(by_slot) == list(range(12)), text[-3000:]
    assert all(len(v) == 1 for v in by_slot.values()), "a slot released with two values"
    expected = in_process(cfg, reqs, data, 12 * cfg.slot_ms, nonce=nonce)
    assert [next(iter(by_slot[s])) for s in range(12)] == expected
