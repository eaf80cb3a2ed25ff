"""A broker that lost writes the worker's state holds (a crash before its last acknowledged
writes reached disk): the worker refuses to start with one line naming the changelog, its
partition and both offsets; ``--reset-local-state`` puts back the releases the broker lost and
rebuilds the tables from what the broker kept, and the job goes on without releasing any slot
again or with another value.

The first tests make the loss exact by deleting a changelog topic and creating it again empty,
which leaves the broker behind the worker's RocksDB stores just as a crash that lost the last
writes does. The last one SIGKILLs the embedded broker itself right after the job's
acknowledged writes: it snapshots its state to disk about once a second, so the kill loses what
the job wrote since (a consistent cut of every topic), whatever that is."""

from __future__ import annotations

import asyncio
import contextlib
import re
import subprocess
import time
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from jobkit import (
    RestartableBroker,
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

from local_kafka.embedded import EmbeddedBroker
from streams.kafka.consumer_stop import stop_consumer

USERS = [f"u{i}" for i in range(20)]
SLOTS = 12


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


async def empty_again(bootstrap: str, topic: str, partitions: int) -> None:
    """Delete ``topic`` and create it again, compacted and empty: its writes are lost."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
        for _ in range(50):
            if topic not in await admin.list_topics():
                break
            await asyncio.sleep(0.1)
        await admin.create_topics([NewTopic(topic, partitions, 1,
                                            topic_configs={"cleanup.policy": "compact"})])
    finally:
        await admin.close()


@pytest.mark.parametrize("table", ["checkpoints", "coordinator"])
def test_state_ahead_of_the_broker_is_one_line_and_reset_recovers(broker, tmp_path: Path,
                                                                  table: str) -> None:
    cfg = config(f"loss-{table}", mechanism="pbd")
    topics = setup_topics(broker.bootstrap, cfg)
    reqs = requirement_records(USERS, [3 + i % 3 for i in range(20)], [1.0] * 20)
    data = [slot_reports(USERS, t, cfg.d) for t in range(SLOTS)]
    log, data_dir = tmp_path / "worker.log", tmp_path / "data"
    worker = start_worker(broker.bootstrap, cfg, data_dir, log)
    try:
        register(broker.bootstrap, topics, cfg, reqs, worker)
        produce_batches(broker.bootstrap, topics.reports, cfg.partitions, data[:6])
        close_through(broker.bootstrap, topics, cfg, 6 * cfg.slot_ms)
        wait_for_slots(broker.bootstrap, topics, set(range(6)), 60, worker)
    finally:
        stop_worker(worker)
    before = values_by_slot(releases(broker.bootstrap, topics))
    parts = 1 if table == "coordinator" else cfg.partitions
    asyncio.run(empty_again(broker.bootstrap, f"{cfg.app_id()}-{table}-changelog", parts))

    refused = start_worker(broker.bootstrap, cfg, data_dir, tmp_path / "refused.log")
    assert refused.wait(60) == 2
    lines = (tmp_path / "refused.log").read_text().strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("pwevent worker: error: the broker has lost writes"), lines
    assert f"{cfg.app_id()}-{table}-changelog[" in lines[0] and "--reset-local-state" in lines[0]

    worker = start_worker(broker.bootstrap, cfg, data_dir, log, "--reset-local-state")
    try:
        produce_batches(broker.bootstrap, topics.reports, cfg.partitions, data[6:])
        close_through(broker.bootstrap, topics, cfg, SLOTS * cfg.slot_ms)
        wait_for_slots(broker.bootstrap, topics, set(range(SLOTS)), 90, worker)
    finally:
        stop_worker(worker)
    after = values_by_slot(releases(broker.bootstrap, topics))
    assert set(after) == set(range(SLOTS))
    assert all(len(values) == 1 for values in after.values()), "one value per slot"
    assert all(after[s] == before[s] for s in before), "no released slot changed"
    expected = in_process(cfg, reqs, data, SLOTS * cfg.slot_ms,
                          nonce=job_nonce(broker.bootstrap, topics))
    assert [next(iter(after[s])) for s in range(SLOTS)] == expected


def test_reset_without_state_is_harmless(broker, tmp_path: Path) -> None:
    """``--reset-local-state`` on a fresh data directory starts the worker as usual."""
    cfg = config("loss-fresh", mechanism="pbd")
    setup_topics(broker.bootstrap, cfg)
    log = tmp_path / "worker.log"
    worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", log, "--reset-local-state")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            worker.wait(8)  # still running
    finally:
        stop_worker(worker)
    assert "lost writes" not in log.read_text()


# -- the embedded broker SIGKILLed ------------------------------------------------------------

REFUSAL = re.compile(r"pwevent worker: error: the broker has lost writes that this worker's "
                     r"state holds: (\S+)\[(\d+)\] ends before offset (\d+), the state in "
                     r"\S+ has applied offset (\d+); restart the worker with "
                     r"--reset-local-state .*")
ROUNDS, PER_ROUND = 2, 3  # two kills, each after the release of three slots


async def kill_on_release(broker: RestartableBroker, topic: str, slot: int,
                          timeout: float) -> list[tuple[bytes, bytes]]:
    """Follow ``topic`` and SIGKILL the broker as soon as ``slot`` is on it (the job's last
    writes were acknowledged moments before); returns the records read until then."""
    consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    seen: list[tuple[bytes, bytes]] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for rec in (await consumer.getmany(tp, timeout_ms=20)).get(tp, []):
                seen.append((rec.key, rec.value))
                if orjson.loads(rec.value)["slot"] >= slot:
                    broker.kill()
                    return seen
        raise AssertionError(f"slot {slot} was not released within {timeout:g} s")
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(stop_consumer(consumer), 5)


def restart_worker(bootstrap: str, cfg, data_dir: Path, tmp_path: Path,
                   name: str) -> tuple[subprocess.Popen, str | None]:
    """Start the worker on its data directory: it starts cleanly, or refuses with the one line
    (checked), and is then started with ``--reset-local-state``. Returns the running worker and
    the changelog partition a refusal named (``None``: a clean start)."""
    log = tmp_path / f"{name}.log"
    worker = start_worker(bootstrap, cfg, data_dir, log)
    deadline = time.monotonic() + 60
    while worker.poll() is None and "[^Worker]: Starting" not in log.read_text():
        assert time.monotonic() < deadline, "the worker neither started nor refused"
        time.sleep(0.1)
    if worker.poll() is None:
        return worker, None
    assert worker.wait() == 2, log.read_text()[-2000:]
    lines = log.read_text().strip().splitlines()
    assert len(lines) == 1, lines
    match = REFUSAL.fullmatch(lines[0])
    assert match, lines[0]
    topic, part, end, applied = match.groups()
    assert topic.startswith(f"{cfg.app_id()}-") and topic.endswith("-changelog"), topic
    assert int(applied) >= int(end)
    worker = start_worker(bootstrap, cfg, data_dir, tmp_path / f"{name}-reset.log",
                          "--reset-local-state")
    return worker, f"{topic}[{part}]"


def test_a_broker_killed_after_acknowledged_writes_never_changes_a_release(tmp_path: Path):
    """Twice, the broker is SIGKILLed the moment a slot's release is acknowledged, and started
    again on its data: the first time the stream has just started (the kill may take its start
    record), the second time it has released slots for a while. The worker starts cleanly or
    refuses with one line, and ``--reset-local-state`` recovers; every release seen before a
    kill stays the slot's one value, and the stream ends as a run without the kills."""
    # slots close only through the worker's idle close, two seconds after the last report:
    # by then the broker has snapshotted the reports, so the kill takes the job's own writes
    cfg = config("killed", mechanism="pbd", lateness_ms=60_000, idle_close_ms=2_000)
    slots = ROUNDS * PER_ROUND + 1
    reqs = requirement_records(USERS, [3 + i % 3 for i in range(20)], [1.0] * 20)
    data = [slot_reports(USERS, t, cfg.d) for t in range(slots)]
    broker = RestartableBroker(tmp_path / "broker")
    broker.start()
    data_dir = tmp_path / "data"
    seen: list[tuple[bytes, bytes]] = []
    worker = None
    try:
        topics = setup_topics(broker.bootstrap, cfg)
        worker = start_worker(broker.bootstrap, cfg, data_dir, tmp_path / "worker.log")
        register(broker.bootstrap, topics, cfg, reqs, worker)
        for r in range(ROUNDS):
            produce_batches(broker.bootstrap, topics.reports, cfg.partitions,
                            data[r * PER_ROUND:(r + 1) * PER_ROUND])
            last = (r + 1) * PER_ROUND - 1
            seen += asyncio.run(kill_on_release(broker, topics.releases, last, 60))
            stop_worker(worker, kill=True)
            broker.start()
            worker, _refused = restart_worker(broker.bootstrap, cfg, data_dir, tmp_path,
                                              f"worker-{r}")
        produce_batches(broker.bootstrap, topics.reports, cfg.partitions, data[ROUNDS * PER_ROUND:])
        close_through(broker.bootstrap, topics, cfg, slots * cfg.slot_ms)
        wait_for_slots(broker.bootstrap, topics, set(range(slots)), 90, worker)
        final = values_by_slot(releases(broker.bootstrap, topics))
        nonce = job_nonce(broker.bootstrap, topics)
    finally:
        if worker is not None:
            stop_worker(worker, kill=True)  # its shutdown is not what this test is about
        broker.stop()
    assert set(final) == set(range(slots))
    assert all(len(values) == 1 for values in final.values()), "one value per slot"
    before = values_by_slot(seen)
    assert set(before) >= set(range(ROUNDS * PER_ROUND))
    changed = sorted(s for s, values in before.items() if values != final[s])
    assert not changed, f"slots released before a kill and again with another value: {changed}"
    expected = in_process(cfg, reqs, data, slots * cfg.slot_ms, nonce=nonce)
    assert [next(iter(final[s])) for s in range(slots)] == expected
