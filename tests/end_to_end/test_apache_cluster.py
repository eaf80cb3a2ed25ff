"""The job on a three-node Apache Kafka cluster: replication factor 3, min.insync.replicas 2,
acks=all for every topic the job writes (changelogs included).

Mid-stream the node that coordinates the job's consumer group and leads the coordinator's input
(``slot-partials``) and the ``releases`` and ``decisions`` partitions is killed with SIGKILL, and
started again ten slots later; at the end another node is stopped, its log directory wiped, and
it rejoins and replicates everything back, which is shown by reading every release with the first
victim down. No slot is lost, none released twice, and the releases are byte for byte those of the
in-process run. The topic configurations are read back from the brokers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from jobkit import (
    Workers,
    config,
    in_process,
    job_nonce,
    register,
    releases,
    requirement_records,
    send_slots,
    slot_reports,
    values_by_slot,
    wait_for_slots,
)

from local_kafka.apache import ApacheKafka
from streams.kafka.topics import Topics

USERS = [f"u{i}" for i in range(40)]
SLOTS = 30
TABLES = ("users", "checkpoints", "coordinator")
PINNED = ("slot-partials", "releases", "decisions")  # led by the node that is killed


@pytest.fixture(scope="module")
def cluster() -> Iterator[ApacheKafka]:
    with ApacheKafka(3) as kafka:
        yield kafka


async def coordinator_of(bootstrap: str, group: str, timeout: float = 60.0) -> int:
    """The node coordinating ``group`` (retried while Kafka creates its offsets topic)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return int(await admin.find_coordinator(group))
            except Exception:  # noqa: BLE001 - not there yet; retried until the deadline
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.5)
    finally:
        await admin.close()


async def create_led_by(bootstrap: str, topics: Topics, leader: int, nodes: list[int]) -> None:
    """The job's topics with 3 replicas; the pinned ones with ``leader`` as preferred leader."""
    others = [n for n in nodes if n != leader]
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        new = []
        for spec in topics.specs():
            if spec.key in PINNED:
                assignment = {p: [leader, *others] for p in range(spec.partitions)}
                new.append(NewTopic(spec.name, -1, -1, replica_assignments=assignment,
                                    topic_configs=dict(spec.config)))
            else:
                new.append(spec.new_topic())
        await admin.create_topics(new, timeout_ms=30000)
    finally:
        await admin.close()


async def describe(bootstrap: str, names: list[str]) -> dict[str, list[dict]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {d["topic"]: d["partitions"] for d in await admin.describe_topics(names)}
    finally:
        await admin.close()


async def topic_configs(bootstrap: str, names: list[str]) -> dict[str, dict[str, str]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        answers = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, n) for n in names])
        out: dict[str, dict[str, str]] = {}
        for answer in answers:
            for _code, _msg, _type, name, entries in answer.resources:
                out[name] = {e[0]: e[1] for e in entries}
        return out
    finally:
        await admin.close()


def wait_in_sync(bootstrap: str, names: list[str], timeout: float) -> dict[str, list[dict]]:
    """Wait until every partition of ``names`` has all three replicas in sync."""
    deadline = time.monotonic() + timeout
    while True:
        parts = asyncio.run(describe(bootstrap, names))
        if all(len(p["isr"]) == 3 for ps in parts.values() for p in ps):
            return parts
        assert time.monotonic() < deadline, f"replicas out of sync: {parts}"
        time.sleep(1)


def test_three_nodes_lose_a_leader_and_a_disk_and_change_nothing(cluster: ApacheKafka,
                                                                 tmp_path: Path) -> None:
    cfg = config("cluster", mechanism="pbad", partitions=4)
    topics = Topics(prefix=cfg.prefix, partitions=cfg.partitions, replication=3)
    group = f"pwevent-{cfg.prefix}-{cfg.stream}"
    nodes = [n.node_id for n in cluster.nodes]
    victim = asyncio.run(coordinator_of(cluster.bootstrap, group))
    asyncio.run(create_led_by(cluster.bootstrap, topics, victim, nodes))
    reqs = requirement_records(USERS, [3 + i % 4 for i in range(len(USERS))],
                               [0.5 + (i % 3) * 0.5 for i in range(len(USERS))])
    batches = [slot_reports(USERS, t, cfg.d) for t in range(SLOTS)]
    workers = Workers(cluster.bootstrap, cfg, tmp_path)
    workers.extra = ("--replication-factor", "3")

    def send(slots: range) -> None:
        send_slots(cluster.bootstrap, topics, cfg, batches, slots)

    try:
        workers.start("a")
        register(cluster.bootstrap, topics, cfg, reqs, workers.procs["a"])
        send(range(10))
        assert len(wait_for_slots(cluster.bootstrap, topics, set(range(10)), 90,
                                  workers.procs["a"])) >= 10, workers.logs()
        led = asyncio.run(describe(cluster.bootstrap, [topics.name(k) for k in PINNED]))
        assert all(p["leader"] == victim for ps in led.values() for p in ps), led
        assert asyncio.run(coordinator_of(cluster.bootstrap, group)) == victim
        cluster.kill(victim)
        send(range(10, 20))
        got = wait_for_slots(cluster.bootstrap, topics, set(range(20)), 120, workers.procs["a"])
        assert {d["slot"] for d in got} >= set(range(20)), workers.logs()
        moved = asyncio.run(coordinator_of(cluster.bootstrap, group))
        assert moved != victim
        cluster.restart(victim)
        send(range(20, SLOTS))
        got = wait_for_slots(cluster.bootstrap, topics, set(range(SLOTS)), 120,
                             workers.procs["a"])
        assert {d["slot"] for d in got} == set(range(SLOTS)), workers.logs()
        # a lost disk: the node comes back empty and replicates everything again
        wiped = next(n for n in nodes if n not in (victim, moved))
        cluster.stop_node(wiped)
        cluster.wipe(wiped)
        cluster.restart(wiped)
        changelogs = [f"{group}-{t}-changelog" for t in TABLES]
        job_topics = [s.name for s in topics.specs()] + changelogs
        parts = wait_in_sync(cluster.bootstrap, job_topics, 120)
        configs = asyncio.run(topic_configs(cluster.bootstrap, job_topics))
    finally:
        workers.stop_all()
    # with the first victim down again, the wiped node serves what it replicated
    cluster.kill(victim)
    survivors = ",".join(f"127.0.0.1:{n.port}" for n in cluster.nodes if n.node_id != victim)
    by_slot = values_by_slot(releases(survivors, topics))
    assert sorted(by_slot) == list(range(SLOTS))
    assert all(len(v) == 1 for v in by_slot.values()), "a slot released twice, differently"
    expected = in_process(cfg, reqs, batches, SLOTS * cfg.slot_ms,
                          nonce=job_nonce(survivors, topics))
    assert [next(iter(by_slot[s])) for s in range(SLOTS)] == expected
    # the configuration every topic got, as the brokers answered with every node up
    for name in job_topics:
        assert configs[name]["min.insync.replicas"] == "2", (name, configs[name])
        assert all(len(p["replicas"]) == 3 for p in parts[name]), (name, parts[name])
    for name in [topics.requirements, *changelogs]:
        assert configs[name]["cleanup.policy"] == "compact", (name, configs[name])
    assert configs[topics.releases]["cleanup.policy"] == "delete"
    assert configs[topics.releases]["retention.ms"] == "-1"
    assert configs[topics.reports]["retention.ms"] == str(7 * 24 * 3600 * 1000)
