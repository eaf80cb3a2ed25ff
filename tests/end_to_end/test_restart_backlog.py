"""A restart must not lose what waited in Kafka (docs/job.md, "Downtime and lag, live"): live, with
default flags, a source topic of 3 partitions keyed by device, 60 devices each sending an event
every half second, 1-second slots. The worker is SIGKILLed and stays down for 16 slots while events
keep coming, then starts again on its data directory: no event becomes ``late``, every device-slot
is counted, and the releases are the in-process run of the same records under the stream's nonce.
With ``--max-hold-ms`` below the downtime, exactly the events that reach their partition of
``reports`` after the bound closed their slot are ``late``. On both brokers."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

import orjson
import pytest
from brokers import broker_fixture

from streams.job.pipeline import InProcessJob
from streams.job.source.mapping import SourceMapping
from streams.kafka.offsets import read_topic
from streams.kafka.producer import RawProducer, key_partition
from streams.kafka.topics import TopicSpec, create_topics
from streams.records.dead_letters import decode_dead_letter
from tests.jobkit import (
    config,
    job_nonce,
    produce,
    rekeyed,
    requirement_records,
    setup_topics,
    start_configured_worker,
    stop_worker,
    timestamped_records,
)

DEVICES, PARTS, SLOT = 60, 3, 1000
DOMAIN = {"kind": "labels", "labels": ["DE", "FR", "IT", "other"], "other": "other"}
CONFIG = """
[worker]
stream = "live"
mechanism = "pbd"
domain = '{{"kind": "labels", "labels": ["DE", "FR", "IT", "other"], "other": "other"}}'
slot-ms = 1000
source-topic = ["{source}"]
user-field = "device.id"
time-field = "ts"
value-field = ["country"]
"""

broker = broker_fixture()


class Devices(threading.Thread):
    """Every device sends an event every half second, keyed by its id, until stopped."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.halt = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            asyncio.run(self._send())
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    async def _send(self) -> None:
        prod = RawProducer(self.bootstrap, self.topic, PARTS)
        await prod.start()
        try:
            k = 0
            while not self.halt.is_set():
                now = int(time.time() * 1000)
                batch = [(f"d{i}".encode(), orjson.dumps(
                    {"device": {"id": f"d{i}"}, "ts": now + i,
                     "country": ["DE", "FR", "IT", "US"][(i + k) % 4]})) for i in range(DEVICES)]
                for p in range(PARTS):
                    await prod.send_many([r for r in batch if key_partition(r[0], PARTS) == p],
                                         partition=p)
                self.sent += len(batch)
                k += 1
                await asyncio.sleep(0.5)
        finally:
            await prod.stop()


def mapped(records: list[tuple]) -> list[tuple[bytes, bytes]]:
    return rekeyed(records, SourceMapping.from_flags("device.id", "ts", ["country"], DOMAIN),
                   PARTS)


def forwarded(bootstrap: str, topic: str, partitions: int
              ) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """The reports on ``reports`` by (partition, offset)."""
    return {(p, offset): (key, value) for key, value, p, offset, _t
            in timestamped_records(bootstrap, topic, partitions) if key is not None}


def copies(bootstrap: str, topic: str, partitions: int
           ) -> dict[tuple[int, int], tuple[tuple[str, int], bool]]:
    """Every report on ``reports`` by (partition, offset): its event (user, event time), and
    whether it reached its partition after a watermark record at or past its slot's end (the
    bound). A source batch read again after a crash sends its reports again: an event may have
    several copies."""
    out = {}
    for key, value, p, offset, _t in timestamped_records(bootstrap, topic, partitions):
        doc = orjson.loads(value)
        if key is None:
            if "watermark" in doc:
                marks = out.setdefault(("mark", p), [-1])  # type: ignore[arg-type]
                marks[0] = max(marks[0], doc["watermark"])
            continue
        mark = out.get(("mark", p), [-1])[0]  # type: ignore[index]
        out[(p, offset)] = ((doc["user"], doc["time"]),
                            mark >= (doc["time"] // SLOT + 1) * SLOT)
    return {k: v for k, v in out.items() if k[0] != "mark"}


def copies_per_slot(reported: dict[tuple[int, int], tuple[tuple[str, int], bool]]
                    ) -> Counter[tuple[str, int]]:
    """How many copies on ``reports`` (:func:`copies`) each device-slot has."""
    return Counter((user, t // SLOT) for (user, t), _behind in reported.values())


def unsettled(bootstrap: str, topics, partitions: int) -> list[tuple[int, int]]:
    """The copies on ``reports`` behind the bound that have no ``late`` dead letter yet and are
    the only copy of their device-slot: reports the job has not read yet."""
    reported = copies(bootstrap, topics.reports, partitions)
    late = {(d["partition"], d["offset"]) for d in
            (decode_dead_letter(v) for _k, v in
             asyncio.run(read_topic(bootstrap, topics.dead_letters, 1)))
            if d["reason"] == "late"}
    per_slot = copies_per_slot(reported)
    return [w for w, ((user, t), behind) in reported.items()
            if behind and w not in late and per_slot[(user, t // SLOT)] == 1]


@pytest.mark.parametrize("how", ["restart", "bound-exceeded"])
def test_a_restart_loses_nothing_that_waited_in_kafka(broker, tmp_path: Path, how: str) -> None:
    """``restart``: the worker is SIGKILLed, down for 16 slots, started again on its data
    directory. ``bound-exceeded``: the same with ``--max-hold-ms`` 4000."""
    run_scenario(broker, tmp_path, how)


def run_scenario(broker, tmp_path: Path, how: str) -> None:  # noqa: C901 - one story
    """The scenario of the module doc, one way (the test's doc); ``joined-then-killed``: a
    second worker joins the running group, takes its share of the partitions and is SIGKILLed
    for good: the first takes them back through the session timeout
    (test_takeover_backlog.py)."""
    hold = 4000 if how == "bound-exceeded" else None
    prefix, source = f"bk{how[:4]}", f"devices-{how[:4]}"
    cfg = config(prefix, stream="live", domain=DOMAIN, slot_ms=SLOT, event_time="live")
    topics = setup_topics(broker.bootstrap, cfg)
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("live", source, PARTS)]))
    users = [f"d{i}" for i in range(DEVICES)]
    requirements = requirement_records(users, [10] * DEVICES, [1.0] * DEVICES)
    produce(broker.bootstrap, topics.requirements, cfg.partitions, requirements)
    conf = tmp_path / "pwevent.toml"
    conf.write_text(CONFIG.format(source=source)
                    + (f"max-hold-ms = {hold}\n" if hold is not None else ""))
    data, log = tmp_path / "data", tmp_path / "worker.log"
    devices = Devices(broker.bootstrap, source)
    worker = start_configured_worker(broker.bootstrap, prefix, conf, data, log)
    try:
        devices.start()
        deadline = time.monotonic() + 60
        while not asyncio.run(read_topic(broker.bootstrap, topics.releases, 1)):
            assert time.monotonic() < deadline and worker.poll() is None, \
                log.read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(2)
        if how == "joined-then-killed":
            other = start_configured_worker(broker.bootstrap, prefix, conf,
                                            tmp_path / "data-2", tmp_path / "worker-2.log")
            time.sleep(8)  # it joins and takes its share
            stop_worker(other, kill=True)
            time.sleep(16)  # its partitions wait for the session timeout, then move back
        else:
            stop_worker(worker, kill=True)
            time.sleep(16)  # 16 slots of events wait in Kafka
            worker = start_configured_worker(broker.bootstrap, prefix, conf, data, log)
            time.sleep(5)
        devices.halt.set()
        devices.join(10)
        assert devices.error is None, devices.error
        records = timestamped_records(broker.bootstrap, source, PARTS)
        last = max(orjson.loads(r[1])["ts"] for r in records) // SLOT
        docs = {}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and worker.poll() is None:
            docs = [orjson.loads(v) for _k, v in
                    asyncio.run(read_topic(broker.bootstrap, topics.releases, 1))]
            if last in {d["slot"] for d in docs}:
                break
            time.sleep(0.5)
        # the bound closes slots by the clock, not by the stage's reading: the stage may still
        # forward reports of the backlog after the last slot's release, each behind the bound.
        # The worker runs on until every such copy met its dead letter (or its slot another copy)
        while (time.monotonic() < deadline and worker.poll() is None
               and unsettled(broker.bootstrap, topics, cfg.partitions)):
            time.sleep(0.5)
        assert worker.poll() is None, log.read_text()[-3000:]
    finally:
        devices.halt.set()
        stop_worker(worker)
    slots = sorted(d["slot"] for d in docs)
    # live, the clock goes on: a slot after the last event may be released too by the time
    # the topic is read (its end plus the bound passed), and it must follow in order as well
    assert slots == list(range(slots[0], max(slots[-1], last) + 1)), \
        "every slot up to the last event's released once, in order"
    dead = [decode_dead_letter(v) for _k, v in
            asyncio.run(read_topic(broker.bootstrap, topics.dead_letters, 1))]
    assert {d["reason"] for d in dead} <= {"late", "duplicate_in_slot"}, dead[:3]
    reported = copies(broker.bootstrap, topics.reports, cfg.partitions)
    late_copies = {(d["partition"], d["offset"]) for d in dead if d["reason"] == "late"}
    # an event is lost when every copy of it was late
    events: dict[tuple[str, int], list[bool]] = {}
    for where, (event, _bounded) in reported.items():
        events.setdefault(event, []).append(where in late_copies)
    late = {e for e, lates in events.items() if all(lates)}
    # every device-slot is counted unless every copy of its forwarded report was late (the
    # stage forwards per device and slot only the event that can still win: the earliest)
    on_time = {reported[w][0] for w in reported if w not in late_copies}
    device_slots = {(orjson.loads(v)["user"], orjson.loads(v)["time"] // SLOT)
                    for _k, v in mapped(records)}
    counted = {(u, t // SLOT) for u, t in on_time}
    assert counted <= device_slots
    lost = device_slots - counted
    assert lost <= {(u, t // SLOT) for u, t in late}
    # a late copy is behind the bound's watermark record, or of a device-slot counted anyway
    # (an event that lost to the counted one before the crash, forwarded again by a stage that
    # read its source batch again); the copies behind the bound that are not late are copies
    # of, or lose to, a report taken before
    bounded = {w for w, (_e, behind) in reported.items() if behind}
    per_slot = copies_per_slot(reported)
    slot_of = {w: (e[0], e[1] // SLOT) for w, (e, _b) in reported.items()}
    unexplained = sorted(w for w in late_copies if w not in bounded and slot_of[w] not in counted)
    assert not unexplained, (
        [(w, reported[w][0], [d.get("detail") for d in dead if (d["partition"], d["offset"]) == w])
         for w in unexplained[:5]], log.read_text()[-3000:])
    assert all(per_slot[slot_of[w]] > 1 for w in bounded - late_copies)
    if hold is None:
        assert lost == set(), f"{len(lost)} device-slots that waited in Kafka were lost"
        assert bounded == set()
    else:
        assert lost, "16 slots down with a 4-slot bound: the bound closed slots with events"
    # the releases are the in-process run of the reports taken (the forwarded ones that were
    # not late) under the job's nonce, from the stream's first slot on
    taken = {w: v for w, v in ((w, v) for w, v in forwarded(broker.bootstrap, topics.reports,
                                                           cfg.partitions).items())
             if w not in late_copies}
    reports = sorted((r for r in taken.values() if orjson.loads(r[1])["time"] // SLOT
                      >= slots[0]), key=lambda r: orjson.loads(r[1])["time"])
    job = InProcessJob(replace(cfg, event_time="history", origin_ms=0,
                               nonce=job_nonce(broker.bootstrap, topics, "live")))
    job.register(requirements)
    job.feed(reports)
    raw = sorted((v for _k, v in asyncio.run(read_topic(broker.bootstrap, topics.releases, 1))),
                 key=lambda v: orjson.loads(v)["slot"])
    # live, the clock went on until the worker stopped: it may have released slots after the
    # last event's (and after ``docs`` was read); the in-process run closes as far
    through = max([last, *(orjson.loads(v)["slot"] for v in raw)])
    assert [orjson.loads(v)["slot"] for v in raw] == list(range(slots[0], through + 1))
    job.finish((through + 1) * SLOT)
    assert raw == [v for v in job.releases if orjson.loads(v)["slot"] >= slots[0]]
