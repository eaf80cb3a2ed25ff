"""A new live stream on a source topic with retained history (docs/sources.md, "Retained
history"): the worker starts each source partition after the records the broker took before the
cutoff, which could only be ``late``, says how many it did not read, and writes no dead letter
for them; what came since is counted. A restart reads everything its group left unread, however
old its Kafka timestamps. On both brokers."""

from __future__ import annotations

import asyncio
import re
import time
from pathlib import Path

import orjson
from aiokafka import AIOKafkaProducer
from brokers import broker_fixture
from test_restart_backlog import CONFIG  # the README's plug-in, live, 1-second slots

from streams.job.source.history_start import MARGIN_MS, history_cutoff_ms
from streams.kafka.offsets import committed_offsets, end_offsets, read_topic
from streams.kafka.producer import key_partition
from streams.kafka.topics import TopicSpec, create_topics
from streams.records.dead_letters import decode_dead_letter
from tests.jobkit import (
    accepted_by_slot,
    config,
    produce,
    requirement_records,
    setup_topics,
    start_configured_worker,
    stop_worker,
    wait_for_slots,
)

DEVICES, PARTS, SLOT = 30, 3, 1000
HOUR = 3_600_000

broker = broker_fixture()


def send_events(bootstrap: str, topic: str, events: list[tuple[str, int, int]],
                partitions: int = PARTS) -> None:
    """Each (device, event time, Kafka timestamp) as an app event keyed by its device."""
    async def go() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for device, ts, kafka_ts in events:
                value = orjson.dumps({"device": {"id": device}, "ts": ts, "country": "FR"})
                await producer.send(topic, value, key=device.encode(),
                                    partition=key_partition(device.encode(), partitions),
                                    timestamp_ms=kafka_ts)
            await producer.flush()
        finally:
            await producer.stop()

    asyncio.run(go())


def dead_letter_reasons(bootstrap: str, topic: str) -> list[str]:
    return [decode_dead_letter(v)["reason"] for _k, v in asyncio.run(read_topic(bootstrap, topic))]


def test_a_new_live_stream_starts_after_its_sources_retained_history(broker,
                                                                      tmp_path: Path) -> None:
    prefix, source = "hist", "app-history"
    cfg = config(prefix, stream="live", slot_ms=SLOT, event_time="live")
    topics = setup_topics(broker.bootstrap, cfg)
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("hist", source, PARTS)]))
    devices = [f"d{i}" for i in range(DEVICES)]
    produce(broker.bootstrap, topics.requirements, cfg.partitions,
            requirement_records(devices, [10] * DEVICES, [1.0] * DEVICES))
    now = int(time.time() * 1000)
    # two hours ago, one event a device and minute for 20 minutes, stamped then by the broker
    history = [(d, now - 2 * HOUR + m * 60_000 + i, now - 2 * HOUR + m * 60_000 + i)
               for m in range(20) for i, d in enumerate(devices)]
    recent = [(d, now - 2_000, now) for d in devices]
    send_events(broker.bootstrap, source, history + recent)
    conf = tmp_path / "pwevent.toml"
    conf.write_text(CONFIG.format(source=source))
    data, log = tmp_path / "data", tmp_path / "worker.log"
    worker = start_configured_worker(broker.bootstrap, prefix, conf, data, log)
    try:
        slot = (now - 2_000) // SLOT
        released = wait_for_slots(broker.bootstrap, topics, {slot}, 60, worker)
        assert slot in {d["slot"] for d in released}, log.read_text()[-3000:]
        # every device's recent event counted, no dead letter of any kind
        assert accepted_by_slot(broker.bootstrap, topics).get(slot) == DEVICES
        assert dead_letter_reasons(broker.bootstrap, topics.dead_letters) == []
        # the group stands at the first record after the history on every partition
        said = re.findall(r"the (\d+) older records \(offsets ([^)]*)\)", log.read_text())
        assert said and int(said[0][0]) == len(history), log.read_text()[-3000:]
        per_partition = {p: sum(key_partition(d.encode(), PARTS) == p for d, _t, _k in history)
                         for p in range(PARTS)}
        assert said[0][1] == ", ".join(f"{p}: 0-{n - 1}" for p, n in per_partition.items()
                                       if n)
        stop_worker(worker)
        # while it is down, events of now whose producer stamped them hours ago: the group has
        # offsets on every partition now, so a restart reads them all
        later = int(time.time() * 1000)
        send_events(broker.bootstrap, source, [(d, later, later - 3 * HOUR) for d in devices])
        worker = start_configured_worker(broker.bootstrap, prefix, conf, data, log)
        released = wait_for_slots(broker.bootstrap, topics, {later // SLOT}, 60, worker)
        assert later // SLOT in {d["slot"] for d in released}, log.read_text()[-3000:]
        assert accepted_by_slot(broker.bootstrap, topics).get(later // SLOT) == DEVICES
        assert dead_letter_reasons(broker.bootstrap, topics.dead_letters) == []
        assert len(re.findall("older records", log.read_text())) == 1
        ends = asyncio.run(end_offsets(broker.bootstrap, source, PARTS))
        deadline = time.monotonic() + 30
        while asyncio.run(committed_offsets(broker.bootstrap, cfg.app_id(), source)) != ends:
            assert time.monotonic() < deadline
            time.sleep(0.3)
    finally:
        stop_worker(worker)


def test_a_topic_new_to_the_group_gets_an_offset_on_every_partition(broker) -> None:
    """Partition 0 holds only history, 1 only recent records, 2 nothing: each gets its offset
    (the end of the history, the first recent record, 0), before any record is read, and only
    partition 0's skip is said. A topic the group has an offset on is left alone from then on,
    whatever its partitions hold later; another topic new to the group gets its own."""
    from streams.job.source.history_start import begin_after_history, describe

    topic, group = "history-offsets", "history-offsets-group"
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("h", topic, PARTS)]))
    now = int(time.time() * 1000)

    async def fill() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
        await producer.start()
        try:
            for i in range(5):
                await producer.send(topic, b"{}", partition=0, timestamp_ms=now - HOUR + i)
            for i in range(3):
                await producer.send(topic, b"{}", partition=1, timestamp_ms=now + i)
            await producer.flush()
        finally:
            await producer.stop()

    asyncio.run(fill())
    cutoff = history_cutoff_ms(now, 300_000, 0)
    starts = asyncio.run(begin_after_history(broker.bootstrap, group, {topic: PARTS}, cutoff))
    assert [(s.partition, s.first, s.start, s.skipped) for s in starts] == [
        (0, 0, 5, 5), (1, 0, 0, 0), (2, 0, 0, 0)]
    assert asyncio.run(committed_offsets(broker.bootstrap, group, topic)) == {0: 5, 1: 0, 2: 0}
    said = describe(starts, cutoff)
    assert len(said) == 1 and "the 5 older records (offsets 0: 0-4)" in said[0], said
    # the topic is the group's now: old records arriving on it are read, never skipped
    asyncio.run(fill())
    assert asyncio.run(begin_after_history(broker.bootstrap, group, {topic: PARTS},
                                           cutoff)) == []
    assert asyncio.run(committed_offsets(broker.bootstrap, group, topic)) == {0: 5, 1: 0, 2: 0}
    other = "history-offsets-2"
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("h", other, 1)]))
    send_events(broker.bootstrap, other, [("d0", now - HOUR, now - HOUR)], partitions=1)
    starts = asyncio.run(begin_after_history(broker.bootstrap, group, {topic: PARTS, other: 1},
                                             cutoff))
    assert [(s.topic, s.partition, s.skipped) for s in starts] == [(other, 0, 1)]


def test_a_group_with_members_keeps_its_offsets(broker) -> None:
    """While a member of the group runs (another worker), the broker refuses a commit from
    outside it: the starting worker skips nothing and reads from the group's offsets."""
    from aiokafka import AIOKafkaConsumer

    from streams.job.source.history_start import start_after_history

    topics = ("history-member-1", "history-member-2")
    group = "history-member-group"
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("h", t, 1) for t in topics]))
    now = int(time.time() * 1000)
    send_events(broker.bootstrap, topics[1], [("d0", now - HOUR, now - HOUR)], partitions=1)

    async def with_a_member() -> list:
        member = AIOKafkaConsumer(topics[0], bootstrap_servers=broker.bootstrap,
                                  group_id=group)
        await member.start()
        try:
            deadline = time.monotonic() + 30
            while not member.assignment():
                assert time.monotonic() < deadline
                await member.getmany(timeout_ms=500)
            return await asyncio.to_thread(start_after_history, broker.bootstrap, group,
                                           {topics[1]: 1}, history_cutoff_ms(now, 300_000, 0))
        finally:
            await member.stop()

    assert asyncio.run(with_a_member()) == []
    assert asyncio.run(committed_offsets(broker.bootstrap, group, topics[1])) == {}


def test_the_cutoff_lies_twice_the_clock_bound_and_a_minute_before_now() -> None:
    """A record the broker took before the cutoff, made by a device whose clock ran up to the
    bound ahead, is a bound older than the start of a stream starting now."""
    assert history_cutoff_ms(10 * HOUR, 300_000, 0) == 10 * HOUR - 600_000 - MARGIN_MS
    assert history_cutoff_ms(10 * HOUR, 300_000, 900_000) == 10 * HOUR - 1_800_000 - MARGIN_MS
