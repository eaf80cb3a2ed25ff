"""A broker that lost writes the worker's state holds (a crash before its last acknowledged
writes reached disk): the worker refuses to start with one line naming the changelog, its
partition and both offsets; ``--reset-local-state`` rebuilds the tables from what the broker
kept, and the job goes on without releasing any slot again or with another value.

The loss is made exact by deleting a changelog topic and creating it again empty, which leaves
the broker behind the worker's RocksDB stores just as a crash that lost the last writes does
(a SIGKILL of the embedded broker loses about its last second of writes, too irregular a cut
to test against)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from jobkit import (
    close_through,
    config,
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
        for batch in data[:6]:
            produce(broker.bootstrap, topics.reports, cfg.partitions, batch)
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
        for batch in data[6:]:
            produce(broker.bootstrap, topics.reports, cfg.partitions, batch)
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
