"""No record can stop a worker: records from empty to the broker's size limit, against the
embedded broker, are dead-lettered (payloads capped) and the job keeps releasing."""

from __future__ import annotations

import asyncio
import hashlib

import orjson
import pytest
from aiokafka import AIOKafkaProducer
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

from streams.kafka.broker import EmbeddedBroker
from streams.kafka.offsets import read_topic
from streams.kafka.producer import key_partition
from streams.records.dead_letters import decode_dead_letter
from streams.records.input_formats import DEAD_LETTER_PAYLOAD_BYTES

USERS = [f"u{i}" for i in range(12)]
SIZES = [0, 1, 1_000, 100_000, 800_000, 1_000_000]


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


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
    try:
        register(broker.bootstrap, topics, cfg,
                 requirement_records(USERS, [4] * len(USERS), [1.0] * len(USERS)), worker)
        for t in range(6):
            if t == 2:
                asyncio.run(send_large(broker.bootstrap, topics.reports, cfg.partitions, poison))
            produce(broker.bootstrap, topics.reports, cfg.partitions, slot_reports(USERS, t, 3))
        close_through(broker.bootstrap, topics, cfg, 6 * cfg.slot_ms)
        docs = wait_for_slots(broker.bootstrap, topics, set(range(6)), 90, worker)
        assert worker.poll() is None, "the worker must survive every record"
    finally:
        stop_worker(worker)
    log = (tmp_path / "worker.log").read_text()
    assert sorted(d["slot"] for d in docs) == list(range(6)), log[-3000:]
    dead = [v for _k, v in asyncio.run(read_topic(broker.bootstrap, topics.dead_letters,
                                                  idle=0.5))]
    assert len(dead) == len(SIZES)
    assert all(len(v) < 3 * DEAD_LETTER_PAYLOAD_BYTES for v in dead)
    by_size = {}
    for value in dead:
        doc = decode_dead_letter(value)
        assert doc["reason"] == "malformed_json"
        size = doc.get("truncated", {}).get("value_bytes", len(doc["value"]))
        by_size[size] = doc
    assert sorted(by_size) == SIZES
    big = by_size[800_000]
    assert big["value"] == b"x" * DEAD_LETTER_PAYLOAD_BYTES
    assert big["truncated"]["sha256"] == hashlib.sha256(b"x" * 800_000).hexdigest()
    assert "truncated" not in by_size[1_000]
    assert orjson.loads(dead[0])["topic"] == topics.reports
