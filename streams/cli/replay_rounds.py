"""``pwevent replay --mechanism lbd|lba|lpd|lpa|mtsp``: a replay of a two-round stream, slot by
slot.

Its devices answer the collector's decisions (:mod:`mechanisms.local.rounds`), so the replay
cannot send a whole history at once. For each slot t from the stream's first it sends the
publication reports answering decision t - 1 and the dissimilarity reports of slot t, then the
watermark records of t's end to every partition, and waits for decision t; one slot after the
last it sends the last answers and the watermarks that close them. Against Kafka the decisions
come from ``<prefix>.ldp-decisions`` (a ``pwevent worker`` of the stream must run); in process
from the collector itself.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import TextIO

from aiokafka import AIOKafkaConsumer, TopicPartition

from mechanisms.local.rounds import Decision, parse_decision
from streams.cli.replay_ldp import make_devices, slot_values
from streams.data.sources import Source
from streams.job.partitions.key_hashing import key_partitions
from streams.job.partitions.watermarks import watermark_record
from streams.kafka.consumer_stop import stop_consumer
from streams.kafka.settings import consumer_options
from streams.ldp_client.devices import Devices
from streams.ldp_collector.kafka_job import LdpJobSettings

#: Seconds a replay waits for one decision before it gives up.
DECISION_TIMEOUT_S = 120.0


class RoundSlots:
    """What the devices send before each slot's watermark, given the previous decision."""

    def __init__(self, devices: Devices, values: Iterator[tuple[int, list]], start: int) -> None:
        """Slots from ``start``; ``values`` gives (slot, [(user, value)]) in increasing slot
        order, slots without values left out."""
        self.devices, self.values = devices, values
        self.ahead = next(values, None)
        self.held: list = []  # the values of the slot the next decision is for
        self.last = start - 1  # the last slot with values seen
        self.sent = start - 1  # the last slot sent

    @property
    def done(self) -> bool:
        """Whether every slot with values has been sent, and the slot after the last (its
        answers)."""
        return self.ahead is None and self.sent > self.last

    def records(self, slot: int, previous: Decision | None) -> list[tuple[bytes, bytes]]:
        """The answers to ``previous`` (decision ``slot`` - 1) and the dissimilarity reports of
        ``slot``."""
        out = self.devices.answers(previous, self.held) if previous is not None else []
        values: list = []
        if self.ahead is not None and self.ahead[0] == slot:
            values, self.last = self.ahead[1], slot
            self.ahead = next(self.values, None)
        out += self.devices.reports(slot, values, previous)
        self.held, self.sent = values, slot
        return out


def marks(built: LdpJobSettings, slot: int, partitions: int) -> list[tuple[None, bytes]]:
    """The watermark records of ``slot``'s end, one per partition."""
    end = built.origin_ms + (slot + 1) * built.slot_ms
    return [(None, watermark_record(end, built.secret, built.stream, p))
            for p in range(partitions)]


def run_in_process(args: argparse.Namespace, built: LdpJobSettings, source: Source,
                   out: TextIO) -> int:
    """The replay through the collector in this process: its releases as JSON lines."""
    from streams.ldp_collector.stream_time import PartitionedCollector

    stream = PartitionedCollector(built.collector(), args.partitions, built.secret,
                                  built.stream)
    devices = make_devices(args, built, source)
    slots = RoundSlots(devices, slot_values(built, source, devices), built.start)
    offsets = [0] * args.partitions
    refused: list[str] = []
    released = 0

    def take(p: int, records: list) -> None:
        refused.extend(r.reason for r in stream.take(
            p, [(k, v, offsets[p] + i) for i, (k, v) in enumerate(records)]))
        offsets[p] += len(records)

    previous, slot = None, built.start
    while True:
        records = slots.records(slot, previous)
        home = key_partitions([k for k, _v in records], args.partitions).tolist()
        for p, mark in enumerate(marks(built, slot, args.partitions)):
            take(p, [r for r, h in zip(records, home, strict=True) if h == p] + [mark])
        step = stream.advance()
        refused.extend(w.refused.reason for w in step.refused)
        for _key, value in step.releases:
            out.write(value.decode() + "\n")
        released += len(step.releases)
        previous = parse_decision(step.decisions[-1][1])
        if slots.done:
            break
        slot += 1
    print(f"{released} releases, {devices.counts['reports']} reports, {len(refused)} refused "
          f"by the collector", file=sys.stderr)
    return 0


class DecisionReader:
    """The decisions of one stream on ``<prefix>.ldp-decisions``, as the collector writes them."""

    def __init__(self, built: LdpJobSettings) -> None:
        """A reader from the topic's first record."""
        self.built = built
        self.consumer = AIOKafkaConsumer(bootstrap_servers=built.broker, **consumer_options(),
                                         enable_auto_commit=False, auto_offset_reset="earliest")
        self.seen: dict[int, Decision] = {}

    async def start(self) -> None:
        """Connect and read from the beginning."""
        await self.consumer.start()
        tp = TopicPartition(self.built.decisions_topic, 0)
        self.consumer.assign([tp])
        await self.consumer.seek_to_beginning(tp)

    async def stop(self) -> None:
        """Close the connection."""
        await stop_consumer(self.consumer)

    async def decision(self, slot: int, timeout_s: float = DECISION_TIMEOUT_S) -> Decision:
        """Decision ``slot``, once the collector has written it; TimeoutError after
        ``timeout_s`` without it."""
        head = f"{self.built.stream}/".encode()
        deadline = time.monotonic() + timeout_s
        while slot not in self.seen:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no decision for slot {slot} on {self.built.decisions_topic} in "
                    f"{timeout_s:.0f} s: does a pwevent worker --mechanism "
                    f"{self.built.protocol} of stream {self.built.stream!r} run on this prefix?")
            batch = await self.consumer.getmany(timeout_ms=200)
            for records in batch.values():
                for r in records:
                    if r.key is not None and r.key.startswith(head):
                        decision = parse_decision(r.value)
                        self.seen[decision.slot] = decision
        return self.seen[slot]


async def produce(args: argparse.Namespace, built: LdpJobSettings, source: Source,
                  show: bool = True) -> tuple[dict, Devices]:
    """Send the replay slot by slot, each slot's watermarks after its reports, reading the
    collector's decisions in between: a summary, and the devices."""
    from streams.kafka.producer import RawProducer

    devices = make_devices(args, built, source)
    slots = RoundSlots(devices, slot_values(built, source, devices), built.start)
    producer = RawProducer(built.broker, built.reports_topic, args.partitions)
    reader = DecisionReader(built)
    await producer.start()
    try:
        await reader.start()
        previous, slot, count = None, built.start, 0
        while True:
            await producer.send_many(slots.records(slot, previous))
            for p, mark in enumerate(marks(built, slot, args.partitions)):
                await producer.send_many([mark], partition=p)
            previous = await reader.decision(slot)
            count += 1
            if show and count % 10 == 0:
                print(f"pwevent replay: slot {slot}: {devices.counts['reports']} reports sent",
                      file=sys.stderr)
            if slots.done:
                break
            slot += 1
    finally:
        await reader.stop()
        await producer.stop()
    return {"topic": built.reports_topic, "slots": count, "last_slot": slots.last,
            **dict(sorted(devices.counts.items()))}, devices


__all__ = ["DecisionReader", "RoundSlots", "produce", "run_in_process"]
