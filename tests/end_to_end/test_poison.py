"""No record can stop a worker: records from empty to the broker's size limit, on the reports
and the requirements topics of the embedded broker, are dead-lettered (payloads capped) and the
job keeps releasing; dead letters the broker refuses are counted and logged, and the job still
acknowledges its batches and keeps releasing."""

from __future__ import annotations

import asyncio
import hashlib
import urllib.request

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from brokers import broker_fixture
from jobkit import (
    close_through,
    config,
    produce,
    register,
    requirement_records,
    setup_topics,
    slot_reports,
    start_worker,
    stop_worker,
    wait_for_slots,
)
from prometheus_client.parser import text_string_to_metric_families

from local_kafka.embedded import free_port
from streams.kafka.offsets import end_offsets, read_topic, wait_consumed
from streams.kafka.producer import key_partition
from streams.kafka.topics import Topics
from streams.records.dead_letters import decode_dead_letter
from streams.records.input_formats import DEAD_LETTER_PAYLOAD_BYTES

USERS = [f"u{i}" for i in range(12)]
SIZES = [0, 1, 1_000, 100_000, 800_000, 1_000_000]


broker = broker_fixture()


async def send_large(bootstrap: str, topic: str, partitions: int,
                     records: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, max_request_size=2**21,
                                max_batch_size=2**21, acks="all")
    await producer.start()
    try:
        for key, value in records:
            await (await producer.send(topic, value, key=key,
                                       partition=key_partition(key, partitions)))
    finally:
        await producer.stop()


def test_records_up_to_the_size_limit_never_stop_the_worker(broker, tmp_path):
    cfg = config("poison")
    topics = setup_topics(broker.bootstrap, cfg)
    worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", tmp_path / "worker.log")
    poison = [(b"u1", b"x" * n) for n in SIZES]
    # keyed by no registered user: a requirement that is no JSON must not touch one
    bad_requirements = [(b"nobody", b"x" * n) for n in SIZES]
    try:
        register(broker.bootstrap, topics, cfg,
                 requirement_records(USERS, [4] * len(USERS), [1.0] * len(USERS)), worker)
        for t in range(6):
            if t == 2:
                asyncio.run(send_large(broker.bootstrap, topics.reports, cfg.partitions, poison))
                asyncio.run(send_large(broker.bootstrap, topics.requirements, cfg.partitions,
                                       bad_requirements))
            produce(broker.bootstrap, topics.reports, cfg.partitions, slot_reports(USERS, t, 3))
        close_through(broker.bootstrap, topics, cfg, 6 * cfg.slot_ms)
        docs = wait_for_slots(broker.bootstrap, topics, set(range(6)), 90, worker)
        assert worker.poll() is None, "the worker must survive every record"
    finally:
        stop_worker(worker)
    log = (tmp_path / "worker.log").read_text()
    assert sorted(d["slot"] for d in docs) == list(range(6)), log[-3000:]
    assert all(d["users"] == len(USERS) for d in docs), "a bad requirement touched a user"
    dead = [v for _k, v in asyncio.run(read_topic(broker.bootstrap, topics.dead_letters))]
    assert len(dead) == 2 * len(SIZES)
    assert all(len(v) < 3 * DEAD_LETTER_PAYLOAD_BYTES for v in dead)
    for topic in (topics.reports, topics.requirements):
        by_size = {}
        for value in dead:
            doc = decode_dead_letter(value)
            if doc["topic"] != topic:
                continue
            assert doc["reason"] == "malformed_json"
            size = doc.get("truncated", {}).get("value_bytes", len(doc["value"]))
            by_size[size] = doc
        assert sorted(by_size) == SIZES, topic
        big = by_size[800_000]
        assert big["value"] == b"x" * DEAD_LETTER_PAYLOAD_BYTES
        assert big["truncated"]["sha256"] == hashlib.sha256(b"x" * 800_000).hexdigest()
        assert "truncated" not in by_size[1_000]
    assert orjson.loads(dead[0])["topic"] in (topics.reports, topics.requirements)


def metric(port: int, name: str) -> float | None:
    """The value of an unlabelled sample of the worker's /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as resp:
        body = resp.read().decode()
    return next((s.value for family in text_string_to_metric_families(body)
                 for s in family.samples if s.name == name and not s.labels), None)


def test_dead_letters_the_broker_refuses_are_counted_and_the_job_goes_on(broker, tmp_path):
    """The dead-letters topic takes no record (its ``max.message.bytes`` is below any dead
    letter's size), so every send fails in the broker's answer: each failure is counted
    (``pwevent_dead_letters_failed_total``) and logged, the reports and requirements batches
    holding the bad records are still acknowledged (the group commits the ends of both topics),
    and every slot is released."""
    cfg = config("refused")
    topics = Topics(prefix=cfg.prefix, partitions=cfg.partitions)

    async def tiny_dead_letters() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topics.dead_letters, 1, 1, topic_configs={
                "cleanup.policy": "delete", "max.message.bytes": "64"})])
        finally:
            await admin.close()

    asyncio.run(tiny_dead_letters())
    setup_topics(broker.bootstrap, cfg)  # the others; the dead-letters topic exists
    port = free_port()
    log = tmp_path / "worker.log"
    worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", log,
                          "--metrics-port", str(port), "--metrics-host", "127.0.0.1")
    bad_reports = [(b"u1", b"not json"), (b"u2", b"{}"), (b"u3", b"")]
    group = f"pwevent-{cfg.prefix}-{cfg.stream}"
    try:
        register(broker.bootstrap, topics, cfg,
                 requirement_records(USERS, [4] * len(USERS), [1.0] * len(USERS))
                 + [(b"nobody", b"not json")], worker)
        for t in range(4):
            if t == 1:
                produce(broker.bootstrap, topics.reports, cfg.partitions, bad_reports)
            produce(broker.bootstrap, topics.reports, cfg.partitions, slot_reports(USERS, t, 3))
        close_through(broker.bootstrap, topics, cfg, 4 * cfg.slot_ms)
        docs = wait_for_slots(broker.bootstrap, topics, set(range(4)), 90, worker)
        committed = {topic: asyncio.run(wait_consumed(broker.bootstrap, group, topic,
                                                      cfg.partitions, 30,
                                                      alive=lambda: worker.poll() is None))
                     for topic in (topics.reports, topics.requirements)}
        failed = metric(port, "pwevent_dead_letters_failed_total")
        assert worker.poll() is None, "a refused dead letter must not stop the worker"
    finally:
        stop_worker(worker, kill=True)  # its shutdown is not what this test is about
    text = log.read_text()
    assert sorted(d["slot"] for d in docs) == list(range(4)), text[-3000:]
    assert committed == {topics.reports: True, topics.requirements: True}
    assert failed == 1 + len(bad_reports)
    assert text.count("could not be sent") == 1 + len(bad_reports), text[-3000:]
    assert "MessageSizeTooLarge" in text
    assert asyncio.run(end_offsets(broker.bootstrap, topics.dead_letters, 1)) == {0: 0}
