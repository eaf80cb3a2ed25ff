"""``pwevent replay --mechanism lbu|lsp|lpu|plbu|lbd|lba|lpd|lpa|mtsp``: a dataset or recorded file
replayed through one local-DP client per user (:class:`~streams.ldp_client.devices.Devices`) into
``<prefix>.ldp-reports``, then the watermark records that close its last slot; with
``--in-process``, through the collector in this process, printing its releases. The two-round
protocols go slot by slot with the collector's decisions (:mod:`streams.cli.replay_rounds`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Iterator
from typing import TextIO

import orjson
from aiokafka.errors import KafkaError

from streams.cli.job_args import need_broker
from streams.cli.replay import build_source
from streams.data.sources import Source
from streams.job.partitions.key_hashing import key_partitions
from streams.job.partitions.watermarks import watermark_record
from streams.kafka.topics import TopicError
from streams.ldp_client.devices import Devices
from streams.ldp_collector.kafka_job import LdpJobSettings

Slots = Iterator[tuple[int, list[tuple[bytes, bytes]]]]


def settings(args: argparse.Namespace, source: Source) -> LdpJobSettings:
    """The stream's settings from the flags (the worker's, ``--ldp-start`` 0 by default: the
    replay's first slot from ``--origin-ms``; ``--cells`` by default the dataset's domain);
    ValueError for a wrong one."""
    from streams.cli.ldp_worker import settings as worker_settings

    given = vars(args)
    args = argparse.Namespace(**{
        **given, "ldp_start": 0 if args.ldp_start is None else args.ldp_start,
        "cells": given.get("cells") or source.d, "domain": given.get("domain")})
    return worker_settings(args, args.broker or "")


def _requirements(source: Source, built: LdpJobSettings):  # type: ignore[no-untyped-def]
    """A user's (w, E): the stream's for lbu/lsp/lpu, for plbu the user's own (the dataset's,
    or --requirements)."""
    if built.protocol != "plbu":
        return lambda _user: (built.w, built.E)
    table: dict[str, tuple[int, float]] = {}
    if source.declared is not None:
        for _slot, records in source.declared:
            for _key, value in records:
                doc = orjson.loads(value)
                table[str(doc["user"])] = (int(doc["w"]), float(doc["E"]))
    elif source.requirements is not None:
        r = source.requirements
        table = {u: (int(w), float(E)) for u, w, E in zip(r.users, r.w.tolist(), r.E.tolist(),
                                                          strict=True)}
    if not table:
        raise ValueError("plbu users bring their own requirements: replay a dataset that has "
                         "them, or give --requirements FILE")

    def lookup(user: str) -> tuple[int, float]:
        if user not in table:
            raise ValueError(f"user {user!r} has no requirement in --requirements")
        return table[user]

    return lookup


def slot_values(built: LdpJobSettings, source: Source, devices: Devices
                ) -> Iterator[tuple[int, list[tuple[str, object]]]]:
    """Slot by slot from the stream's first, the source's (user, value) pairs (records without
    a user counted as ``no_value`` in the devices' counts)."""
    for slot, records in source.slot_batches(built.origin_ms, built.slot_ms):
        if slot < built.start:
            continue
        values = []
        for _key, line in records:
            try:
                doc = orjson.loads(line)
            except orjson.JSONDecodeError:
                doc = None
            if isinstance(doc, dict) and doc.get("user") is not None:
                values.append((str(doc["user"]), doc.get("value")))
            else:
                devices.counts["no_value"] += 1
        yield slot, values


def make_devices(args: argparse.Namespace, built: LdpJobSettings, source: Source) -> Devices:
    """One client per user of the stream (seeded by ``--nonce``, or the CSPRNG)."""
    return Devices(built.protocol, built.d, built.start, _requirements(source, built),
                   nonce=args.nonce, lpu_key=built.lpu_key, lpu_rotate=built.lpu_rotate)


def device_reports(args: argparse.Namespace, built: LdpJobSettings,
                   source: Source) -> tuple[Devices, Slots]:
    """The devices and, slot by slot, their reports of the source's values: every slot from
    the stream's first to the source's last, where each enrolled device reports, with its value
    or without (a recorded file's further batch of a slot sent before: its values alone)."""
    devices = make_devices(args, built, source)

    def slots() -> Slots:
        last = built.start - 1
        for slot, values in slot_values(built, source, devices):
            for gap in range(last + 1, slot):
                yield gap, devices.reports(gap, [])
            yield slot, devices.reports(slot, values, absent=slot > last)
            last = max(last, slot)

    return devices, slots()


def closing_marks(built: LdpJobSettings, last: int, partitions: int) -> list[tuple[None, bytes]]:
    """The watermark records that close every slot up to ``last``, one per partition."""
    end = built.origin_ms + (last + 1) * built.slot_ms
    return [(None, watermark_record(end, built.secret, built.stream, p))
            for p in range(partitions)]


def run_in_process(args: argparse.Namespace, out: TextIO) -> int:
    """The releases, as JSON lines, of the replay run through the collector in process."""
    from streams.ldp_collector.stream_time import PartitionedCollector

    source = build_source(args)
    built = settings(args, source)
    if built.collector().rounds:
        from streams.cli.replay_rounds import run_in_process as rounds_in_process

        return rounds_in_process(args, built, source, out)
    stream = PartitionedCollector(built.collector(), args.partitions, built.secret, built.stream)
    devices, slots = device_reports(args, built, source)
    offsets = [0] * args.partitions
    refused: list[str] = []
    last = built.start - 1

    def take(p: int, records: list) -> None:
        refused.extend(r.reason for r in stream.take(
            p, [(k, v, offsets[p] + i) for i, (k, v) in enumerate(records)]))
        offsets[p] += len(records)

    for slot, records in slots:
        last = max(last, slot)
        home = key_partitions([k for k, _v in records], args.partitions).tolist()
        for p in range(args.partitions):
            take(p, [r for r, h in zip(records, home, strict=True) if h == p])
    for p, mark in enumerate(closing_marks(built, last, args.partitions)):
        take(p, [mark])
    released = stream.ready()
    for _key, value in released:
        out.write(value.decode() + "\n")
    print(f"{len(released)} releases, {devices.counts['reports']} reports, {len(refused)} "
          f"refused by the collector", file=sys.stderr)
    return 0


async def produce(args: argparse.Namespace, built: LdpJobSettings, source: Source,
                  show: bool = True) -> tuple[dict, Devices]:
    """Send the replay's reports, then its closing watermarks: a summary, and the devices."""
    from streams.kafka.producer import RawProducer
    from streams.kafka.topics import create_topics
    from streams.ldp_collector.kafka_job import topic_specs

    await create_topics(built.broker, topic_specs(built.prefix, args.partitions))
    if built.collector().rounds:
        from streams.cli.replay_rounds import produce as produce_rounds

        return await produce_rounds(args, built, source, show)
    devices, slots = device_reports(args, built, source)
    producer = RawProducer(built.broker, built.reports_topic, args.partitions)
    await producer.start()
    last, count = built.start - 1, 0
    try:
        for slot, records in slots:
            last = max(last, slot)
            await producer.send_many(records)
            count += 1
            if show and count % 10 == 0:
                print(f"pwevent replay: slot {slot}: {devices.counts['reports']} reports sent",
                      file=sys.stderr)
        for p, mark in enumerate(closing_marks(built, last, args.partitions)):
            await producer.send_many([mark], partition=p)
    finally:
        await producer.stop()
    return {"topic": built.reports_topic, "slots": count, "last_slot": last,
            **dict(sorted(devices.counts.items()))}, devices


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``pwevent replay`` of a local-DP stream; 2 with a one-line error."""
    out = out or sys.stdout
    try:
        if args.secret is None and not os.environ.get("PWEVENT_SECRET"):
            raise ValueError("the closing watermark records are signed: give --secret or "
                             "$PWEVENT_SECRET, the collector's")
        if args.in_process:
            return run_in_process(args, out)
        args.broker = need_broker(args)
        source = build_source(args)
        # a broker that does not answer is one line below, not the client's retry messages
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
        sent, _devices = asyncio.run(produce(args, settings(args, source), source))
    except (ValueError, ImportError) as exc:
        print(f"pwevent replay: error: {exc}", file=sys.stderr)
        return 2
    except (KafkaError, TopicError, OSError) as exc:  # TimeoutError is an OSError
        print(f"pwevent replay: error: the broker {args.broker}: {exc!r}", file=sys.stderr)
        return 2
    out.write(orjson.dumps(sent).decode() + "\n")
    return 0
