"""The trust model enforced on Apache Kafka: SASL/SCRAM-SHA-512 over TLS, the StandardAuthorizer
and the ACLs of deploy/acls.sh, one principal per role.

The job runs under its least-privilege ``worker`` principal and releases every slot; the
``producer`` writes reports and requirements and is refused everywhere else; the ``analyst``
reads releases and decisions and is refused on reports, slot-partials, dead-letters and the
changelogs; the worker itself cannot write requirements.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError
from jobkit import (
    close_through,
    config,
    produce,
    releases,
    requirement_records,
    setup_topics,
    slot_reports,
    start_worker,
    stop_worker,
    wait_for_slots,
)

from local_kafka.apache import ApacheKafka, Security
from streams.kafka import settings
from streams.kafka.offsets import wait_consumed

ROOT = Path(__file__).resolve().parents[2]
USERS = [f"u{i}" for i in range(20)]
SLOTS = 5
PRINCIPALS = ("worker", "producer", "analyst")


@pytest.fixture(scope="module")
def cluster() -> Iterator[ApacheKafka]:
    security = Security(users={name: uuid.uuid4().hex for name in PRINCIPALS})
    with ApacheKafka(1, security=security) as kafka:
        yield kafka


@contextlib.contextmanager
def as_principal(cluster: ApacheKafka, user: str | None = None) -> Iterator[None]:
    """This process's Kafka clients connect as ``user`` (the administrator by default)."""
    before = settings.current()
    settings.configure(settings.KafkaSettings(**cluster.client_settings(user)))
    try:
        yield
    finally:
        settings.configure(before)


async def read_one(bootstrap: str, topic: str) -> int:
    """Records read from partition 0 of ``topic`` from its beginning. aiokafka does not raise
    when the broker refuses a topic's metadata: it logs it and fetches nothing, so the refusal
    is read off the metadata the broker answered and raised here."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **settings.client_options(),
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                request_timeout_ms=5000)
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer._client.force_metadata_update()  # noqa: SLF001 - the broker's answer
        if topic in consumer._client.cluster.unauthorized_topics:  # noqa: SLF001
            raise TopicAuthorizationFailedError(topic)
        await consumer.seek_to_beginning(tp)
        got = await consumer.getmany(tp, timeout_ms=3000)
        if topic in consumer._client.cluster.unauthorized_topics:  # noqa: SLF001
            assert not got
            raise TopicAuthorizationFailedError(topic)
        return sum(len(v) for v in got.values())
    finally:
        await consumer.stop()


async def write_one(bootstrap: str, topic: str) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **settings.client_options(),
                                acks="all", request_timeout_ms=5000)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"{}", key=b"u0")
    finally:
        await producer.stop()


def refused(call) -> bool:  # type: ignore[no-untyped-def]
    """Whether the broker refuses ``call()`` for want of a topic ACL."""
    try:
        asyncio.run(call())
    except TopicAuthorizationFailedError:
        return True
    return False


def test_each_principal_gets_what_its_role_needs_and_no_more(cluster: ApacheKafka, tmp_path,
                                                             monkeypatch) -> None:
    cfg = config("acl", mechanism="pbd")
    boot = cluster.bootstrap
    with as_principal(cluster):  # the administrator creates the topics and sets the ACLs
        topics = setup_topics(boot, cfg)
        tool = " ".join(cluster.tool("org.apache.kafka.tools.AclCommand"))
        done = subprocess.run(
            [str(ROOT / "deploy" / "acls.sh"), boot, cfg.prefix, cfg.stream],
            env=dict(os.environ, KAFKA_ACLS=tool,
                     COMMAND_CONFIG=str(cluster.admin_properties())),
            capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
    changelog = f"{cfg.app_id()}-users-changelog"
    worker_settings = settings.KafkaSettings(**cluster.client_settings("worker"))
    for name, value in worker_settings.environment().items():
        monkeypatch.setenv(name, value)
    log = tmp_path / "worker.log"
    worker = start_worker(boot, cfg, tmp_path / "data", log)
    try:
        reqs = requirement_records(USERS, [3] * len(USERS), [1.0] * len(USERS))
        with as_principal(cluster, "producer"):
            produce(boot, topics.requirements, cfg.partitions, reqs)
        with as_principal(cluster):  # the operator watches the group's progress
            assert asyncio.run(wait_consumed(boot, cfg.app_id(), topics.requirements,
                                             cfg.partitions, 60, lambda: worker.poll() is None)
                               ), log.read_text()[-3000:]
        with as_principal(cluster, "producer"):
            for t in range(SLOTS):
                produce(boot, topics.reports, cfg.partitions, slot_reports(USERS, t, cfg.d))
        with as_principal(cluster):  # watermarks carry the secret's signature, not a role
            close_through(boot, topics, cfg, SLOTS * cfg.slot_ms)
        with as_principal(cluster, "analyst"):
            docs = wait_for_slots(boot, topics, set(range(SLOTS)), 90, worker)
            assert {d["slot"] for d in docs} == set(range(SLOTS)), log.read_text()[-3000:]
            assert len(releases(boot, topics)) == SLOTS
            assert asyncio.run(read_one(boot, topics.decisions)) > 0
            for topic in (topics.reports, topics.slot_partials, topics.dead_letters,
                          topics.requirements, changelog):
                assert refused(lambda t=topic: read_one(boot, t)), f"analyst read {topic}"
            assert refused(lambda: write_one(boot, topics.releases))
        with as_principal(cluster, "producer"):
            for topic in (topics.releases, topics.decisions, topics.slot_partials, changelog):
                assert refused(lambda t=topic: read_one(boot, t)), f"producer read {topic}"
            for topic in (topics.releases, topics.decisions, topics.slot_partials):
                assert refused(lambda t=topic: write_one(boot, t)), f"producer wrote {topic}"
        with as_principal(cluster, "worker"):
            assert refused(lambda: write_one(boot, topics.requirements))
        assert worker.poll() is None, log.read_text()[-3000:]
    finally:
        stop_worker(worker)
