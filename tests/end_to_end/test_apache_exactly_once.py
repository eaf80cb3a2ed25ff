"""What decides the job's exactly-once design on Apache Kafka: kill -9 at the moment a release
reaches the broker.

A reader tails ``releases`` and SIGKILLs the worker as soon as the release of a chosen slot is
there: between the release reaching the broker and the coordinator's mark that it was emitted
reaching its changelog, the window where a release can be put on the topic twice. The worker is
started again at once, the second time on an empty data directory (its tables come back from
the changelogs, after its dead static member's session timed out). Every slot is released;
a slot put on the topic more than once is put there byte for byte the same; the first record
of each slot is what the in-process run gives. With Kafka transactions instead (one per slot,
``benchmarks/bench_exactly_once.py``) a crash after the commit repeats a committed slot all the
same, and readers in Kafka's default ``read_uncommitted`` see the aborted ones too: the byte
identity of a repeat is what readers rely on either way (docs/design.md, "Running it").
"""

from __future__ import annotations

import signal
from pathlib import Path

from brokers import broker_fixture
from jobkit import (
    ReleaseKiller,
    config,
    in_process,
    job_nonce,
    register,
    releases,
    requirement_records,
    send_slots,
    setup_topics,
    slot_reports,
    start_worker,
    stop_worker,
    wait_for_slots,
)

USERS = [f"u{i}" for i in range(30)]
SLOTS = 14
KILL_AT = {4: "same data directory", 9: "empty data directory"}

broker = broker_fixture(("apache-kafka",))


def test_a_worker_killed_as_its_release_lands_repeats_it_byte_for_byte(broker,
                                                                        tmp_path: Path) -> None:
    cfg = config("eos", partitions=2, idle_close_ms=600_000)
    topics = setup_topics(broker.bootstrap, cfg)
    reqs = requirement_records(USERS, [3 + i % 4 for i in range(len(USERS))],
                               [0.5 + (i % 3) * 0.5 for i in range(len(USERS))])
    batches = [slot_reports(USERS, t, cfg.d) for t in range(SLOTS)]
    log = tmp_path / "worker.log"
    data = [tmp_path / "data0"]
    procs = [start_worker(broker.bootstrap, cfg, data[-1], log)]
    killer = ReleaseKiller(broker.bootstrap, topics.releases, set(KILL_AT), lambda: procs[-1])
    try:
        register(broker.bootstrap, topics, cfg, reqs, procs[-1])
        killer.start()
        for t in range(SLOTS):
            send_slots(broker.bootstrap, topics, cfg, batches, [t])
            if t in KILL_AT:
                got = wait_for_slots(broker.bootstrap, topics, {t}, 60, procs[-1])
                assert t in {d["slot"] for d in got}, log.read_text()[-3000:]
                procs[-1].wait(30)  # killed as its release landed
                if KILL_AT[t] == "empty data directory":
                    data.append(tmp_path / f"data{len(data)}")
                procs.append(start_worker(broker.bootstrap, cfg, data[-1], log))
        got = wait_for_slots(broker.bootstrap, topics, set(range(SLOTS)), 180, procs[-1])
    finally:
        killer.stop.set()
        for proc in procs:
            stop_worker(proc)
    assert killer.killed == sorted(KILL_AT), killer.killed
    assert all(p.returncode == -signal.SIGKILL for p in procs[:-1])
    assert {d["slot"] for d in got} == set(range(SLOTS)), log.read_text()[-3000:]
    by_slot: dict[int, list[bytes]] = {}
    for key, value in releases(broker.bootstrap, topics):
        by_slot.setdefault(int(key.rsplit(b"/", 1)[1]), []).append(value)
    assert sorted(by_slot) == list(range(SLOTS))
    assert all(len(set(v)) == 1 for v in by_slot.values()), \
        {s: len(v) for s, v in by_slot.items() if len(set(v)) > 1}
    expected = in_process(cfg, reqs, batches, SLOTS * cfg.slot_ms,
                          nonce=job_nonce(broker.bootstrap, topics))
    assert [by_slot[s][0] for s in range(SLOTS)] == expected
