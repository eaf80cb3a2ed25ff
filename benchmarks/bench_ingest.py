"""Ingest throughput: raw aiokafka versus Faust, on the embedded broker.

Starts an embedded broker, produces small report records into a topic with 1 and with 4
partitions, then measures, on the same topic:

* ``raw``: an aiokafka consumer, ``getmany`` + ``orjson.loads`` per record;
* ``faust-agent``: a plain Faust agent, ``async for value in stream`` over raw bytes;
* ``faust-take``: a Faust agent using ``stream.take(10000, within=0.2)`` with a large
  ``stream_buffer_maxsize`` and ``broker_max_poll_records``;
* ``faust-batch``: :class:`streams.job.worker.ingest.BatchIngest` (``orjson.loads`` per record, a
  RocksDB table updated per batch);
* ``faust-batch-parse``: the same with full validation
  (:func:`streams.records.report_parsing.parse_reports`).

Every Faust variant runs in its own process and consumer group with ``store="rocksdb://"``, the
web server disabled and a temporary data directory. Rates count records from the first delivered
record to the last. Run::

    .venv/bin/python benchmarks/bench_ingest.py                  # the table
    .venv/bin/python benchmarks/bench_ingest.py --records 500000 --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aiokafka import AIOKafkaConsumer  # noqa: E402

from local_kafka.embedded import EmbeddedBroker  # noqa: E402
from streams.job.worker.ingest import (  # noqa: E402
    BatchIngest,
    committed_offsets,
    ingest_settings,
)
from streams.kafka.producer import produce_raw  # noqa: E402
from streams.kafka.topics import TopicSpec, create_topics  # noqa: E402
from streams.records.domains import CellDomain  # noqa: E402
from streams.records.report_parsing import parse_reports  # noqa: E402

FAUST_VARIANTS = ("faust-agent", "faust-take", "faust-batch", "faust-batch-parse")
TIME0 = 1_700_000_000_000


def report_records(n: int, users: int = 10_000, cells: int = 64) -> Iterator[tuple[bytes, bytes]]:
    """``n`` small report records ``(key, value)``, about 60 bytes each."""
    for i in range(n):
        user = f"u{i % users}"
        yield (
            user.encode(),
            orjson.dumps({"user": user, "time": TIME0 + i * 10, "value": i % cells}),
        )


# -- raw --------------------------------------------------------------------------------------


async def consume_timed(bootstrap: str, topic: str, n: int,
                        take: Callable[[int, list[Any]], Awaitable[None] | None],
                        tuples: bool = False) -> dict[str, Any]:
    """Consume ``n`` records of ``topic`` with a bare aiokafka consumer, handing each fetched
    partition's records to ``take(partition, records)`` (awaited if it returns an awaitable);
    timed from the first fetch that returned records, in wall-clock seconds and in this
    process's CPU time a record (``cpu_us``, which other work on the machine moves less).
    ``tuples``: the records come as a worker's fetch makes them for a batch handler,
    ``(key, value, partition, offset, timestamp)`` tuples a record batch at a time
    (:class:`~streams.job.worker.raw_fetch.RawFetched`), instead of aiokafka's records."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=16 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
    )
    await consumer.start()
    if tuples:
        from streams.job.worker.raw_fetch import RawFetched

        fetcher = consumer._fetcher
        fetcher._records = RawFetched({topic: True}, fetcher._records)
    got, t0, cpu0 = 0, None, 0.0
    try:
        while got < n:
            fetched = await consumer.getmany(timeout_ms=1000, max_records=20_000)
            if fetched and t0 is None:
                t0, cpu0 = time.perf_counter(), time.process_time()
            for tp, records in fetched.items():
                pending = take(tp.partition, records)
                if pending is not None:
                    await pending
                got += len(records)
        seconds = time.perf_counter() - (t0 or time.perf_counter())
        cpu = time.process_time() - cpu0
    finally:
        await consumer.stop()
    return {"records": got, "seconds": seconds, "rate": got / seconds if seconds else 0.0,
            "cpu_us": cpu / got * 1e6 if got else 0.0}


async def measure_raw(bootstrap: str, topic: str, n: int) -> dict[str, Any]:
    """Consume ``n`` records with a bare aiokafka consumer and decode each with orjson."""
    loads = orjson.loads

    def take(_partition: int, records: list[Any]) -> None:
        for record in records:
            loads(record.value)

    return await consume_timed(bootstrap, topic, n, take)


# -- faust (child process) --------------------------------------------------------------------


def run_faust_variant(
    variant: str, bootstrap: str, topic: str, partitions: int, n: int, timeout: float
) -> dict[str, Any]:
    """Consume ``n`` records of ``topic`` with one Faust variant; return the measurement."""
    import faust

    logging.basicConfig(level=logging.WARNING)
    datadir = tempfile.mkdtemp(prefix="pwevent-bench-faust-")
    base = {
        "broker": f"kafka://{bootstrap}",
        "store": "rocksdb://",
        "web_enabled": False,
        "datadir": datadir,
        "consumer_auto_offset_reset": "earliest",
        "topic_partitions": partitions,
        "topic_disable_leader": True,
    }
    if variant in ("faust-batch", "faust-batch-parse"):
        settings = ingest_settings(**base)
    elif variant == "faust-take":
        settings = dict(
            base,
            broker_max_poll_records=20_000,
            consumer_max_fetch_size=16 * 1024 * 1024,
            stream_buffer_maxsize=100_000,
        )
    else:
        settings = base
    app = faust.App(f"bench-{variant}-{os.getpid()}", **settings)
    state: dict[str, Any] = {"n": 0, "t0": None, "t1": None}
    done = asyncio.Event()

    def count(k: int) -> None:
        if state["t0"] is None:
            state["t0"] = time.perf_counter()
        state["n"] += k
        if state["n"] >= n and state["t1"] is None:
            state["t1"] = time.perf_counter()
            state["n1"] = state["n"]
            done.set()

    loads = orjson.loads
    if variant in ("faust-batch", "faust-batch-parse"):
        table = app.Table("ingest-batches", default=int, partitions=partitions)
        domain = CellDomain(64)

        async def handler(records: list[tuple[bytes | None, bytes | None, int, int]]) -> None:
            if variant == "faust-batch":
                for record in records:
                    loads(record[1])
            else:
                batch = parse_reports([r[1] for r in records], domain, [r[0] for r in records])
                if batch.rejected:
                    raise RuntimeError(f"unexpected rejections: {batch.rejected[:3]}")
            table[records[0][2]] += 1
            count(len(records))

        BatchIngest(app, topic, handler)
    else:
        source = app.topic(
            topic, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw"
        )

        if variant == "faust-agent":

            @app.agent(source)
            async def agent(stream: Any) -> None:
                async for value in stream:
                    loads(value)
                    count(1)

        else:

            @app.agent(source)
            async def agent(stream: Any) -> None:
                async for values in stream.take(10_000, within=0.2):
                    for value in values:
                        loads(value)
                    count(len(values))

    async def main() -> None:
        started = time.perf_counter()
        await app.start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), timeout)
        state["wall"] = time.perf_counter() - started
        await asyncio.sleep(0.5)
        await app.consumer.commit()
        state["committed"] = sum(v or 0 for v in committed_offsets(app, topic).values())
        await app.stop()

    asyncio.run(main())
    seconds = (state["t1"] or time.perf_counter()) - (state["t0"] or time.perf_counter())
    counted = state.get("n1", state["n"])
    return {
        "records": counted,
        "seconds": seconds,
        "rate": counted / seconds if seconds > 0 else 0.0,
        "wall": state["wall"],
        "committed": state["committed"],
        "complete": state["n"] >= n,
    }


def faust_in_child(
    variant: str, bootstrap: str, topic: str, partitions: int, n: int, timeout: float
) -> dict[str, Any]:
    """Run :func:`run_faust_variant` in a fresh interpreter (own event loop, own Faust state)."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        variant,
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--partitions-child",
        str(partitions),
        "--records",
        str(n),
        "--timeout",
        str(timeout),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 60)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = "\n".join(proc.stderr.splitlines()[-15:])
        raise RuntimeError(f"{variant} failed (exit {proc.returncode}):\n{tail}")
    return json.loads(lines[-1])


# -- driver -----------------------------------------------------------------------------------


async def prepare(bootstrap: str, topic: str, partitions: int, n: int) -> float:
    """Create ``topic`` and fill it with ``n`` reports; return the produce rate."""
    await create_topics(bootstrap, [TopicSpec("reports", topic, partitions)])
    t0 = time.perf_counter()
    await produce_raw(bootstrap, topic, report_records(n), partitions=partitions)
    return n / (time.perf_counter() - t0)


def run(
    records: int, agent_records: int, partitions: list[int], variants: list[str], timeout: float
) -> list[dict[str, Any]]:
    """Run every measurement; return one row per (partitions, variant)."""
    rows: list[dict[str, Any]] = []
    with EmbeddedBroker() as broker:
        for parts in partitions:
            topic = f"bench.reports.p{parts}"
            produce_rate = asyncio.run(prepare(broker.bootstrap, topic, parts, records))
            raw = asyncio.run(measure_raw(broker.bootstrap, topic, records))
            rows.append({"partitions": parts, "variant": "raw", **raw, "produce": produce_rate})
            for variant in variants:
                n = agent_records if variant in ("faust-agent", "faust-take") else records
                result = faust_in_child(variant, broker.bootstrap, topic, parts, n, timeout)
                result["of_raw"] = result["rate"] / raw["rate"] if raw["rate"] else 0.0
                rows.append({"partitions": parts, "variant": variant, **result})
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    """Print the measurements as a text table."""
    header = f"{'partitions':>10}  {'variant':<18} {'records':>9} {'records/s':>11} {'of raw':>7}"
    print(header)
    print("-" * len(header))
    for row in rows:
        share = f"{row['of_raw']:.0%}" if "of_raw" in row else "-"
        print(
            f"{row['partitions']:>10}  {row['variant']:<18} {row['records']:>9,} "
            f"{row['rate']:>11,.0f} {share:>7}"
        )
    batch = [r for r in rows if r["variant"] == "faust-batch"]
    for row in batch:
        verdict = "ok" if row["rate"] >= 100_000 and row["of_raw"] >= 0.2 else "MISSED"
        print(
            f"target (>= 100,000/s and >= 20% of raw), {row['partitions']} partition(s): {verdict}"
        )


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000, help="records per topic")
    parser.add_argument(
        "--agent-records",
        type=int,
        default=20_000,
        help="records for the per-event Faust variants (they are ~100x slower)",
    )
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--variants", nargs="+", default=list(FAUST_VARIANTS))
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--partitions-child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        result = run_faust_variant(
            args.child,
            args.bootstrap,
            args.topic,
            args.partitions_child,
            args.records,
            args.timeout,
        )
        print(json.dumps(result))
        return 0
    unknown = set(args.variants) - set(FAUST_VARIANTS)
    if unknown:
        parser.error(f"unknown variants: {sorted(unknown)}")
    rows = run(args.records, args.agent_records, args.partitions, args.variants, args.timeout)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print_table(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
