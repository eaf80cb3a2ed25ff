"""The job's ingest rate and slot-close-to-release latency, next to raw aiokafka.

Starts the embedded broker (or, with ``--broker apache-kafka``, a one-node Apache Kafka from the
jars ``./setup.sh test`` fetched); for each of ``--partitions`` and each of ``--workers`` it
registers ``--users`` users, fills the ``reports`` topic with one report per user per slot for
``--slots`` slots, measures a bare aiokafka consumer (``getmany`` + ``orjson.loads``) on that
topic, then starts that many real workers (``pwevent worker``, ``--event-time history``: the
reports are dated from the epoch, as recorded data replayed), all in the group before the
reports come, on the backlog. Slot t closes when the worker reads the first report of
slot t + 1, so the worker's rate is the reports of the closed slots over the time between the
first and the last slot close (Kafka timestamps of the partials). The latency of a slot is the
time from its last partial to its release, measured in a second run where reports arrive at a
steady ``--live-rate`` (on a backlog it includes the wait behind the reports already fetched).
Run::

    .venv/bin/python benchmarks/bench_job.py [--users 100000] [--slots 12] [--partitions 1 4] \
        [--workers 1] [--mechanism pbd] [--broker embedded]
    .venv/bin/python benchmarks/bench_job.py --broker apache-kafka --partitions 8 \
        --workers 1 2 4

With ``--mechanism dpbd`` or ``dpba`` the users declare dynamic requirements and a slot's
latency includes the partitions' plans and the decisions' round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402
from bench_ingest import measure_raw  # noqa: E402

from local_kafka.apache import ApacheKafka  # noqa: E402
from local_kafka.embedded import EmbeddedBroker  # noqa: E402
from streams.job.worker.membership import describe_group  # noqa: E402
from streams.kafka.offsets import wait_consumed  # noqa: E402
from streams.kafka.producer import produce_raw  # noqa: E402
from streams.kafka.topics import Topics, create_topics  # noqa: E402

SLOT_MS = 60_000


def records(users: int, slots: int) -> list[list[tuple[bytes, bytes]]]:
    """Per slot, one report per user."""
    names = [f"u{i}" for i in range(users)]
    keys = [n.encode() for n in names]
    out = []
    for t in range(slots):
        base = t * SLOT_MS
        out.append([(keys[i], orjson.dumps({"user": names[i], "time": base + (i % SLOT_MS),
                                            "value": (i + t) % 100}))
                    for i in range(users)])
    return out


async def produce_live(bootstrap: str, topic: str, data: list, parts: int, rate: float) -> None:
    """Send the slots one after another at ``rate`` reports per second."""
    from streams.kafka.producer import RawProducer

    producer = RawProducer(bootstrap, topic, parts)
    await producer.start()
    try:
        start, sent = time.perf_counter(), 0
        for slot in data:
            for i in range(0, len(slot), 5000):
                chunk = slot[i:i + 5000]
                sent += await producer.send_many(chunk)
                ahead = sent / rate - (time.perf_counter() - start)
                if ahead > 0:
                    await asyncio.sleep(ahead)
    finally:
        await producer.stop()


async def timestamps(bootstrap: str, topic: str, want: int, timeout: float) -> list[tuple]:
    """(Kafka timestamp ms, decoded value) of the first ``want`` records of a 1-partition topic."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    out: list[tuple] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + timeout
        while len(out) < want and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            out.extend((r.timestamp, orjson.loads(r.value)) for r in batch.get(tp, []))
    finally:
        await consumer.stop()
    return out


def requirements(users: int, mechanism: str) -> list[tuple[bytes, bytes]]:
    """Ten fixed requirement levels, or dynamic requirements over ten levels per field."""
    if mechanism in ("dpbd", "dpba"):
        return [(f"u{i}".encode(), orjson.dumps({
            "user": f"u{i}", "wB": 20 + 20 * (i % 10), "EB": 0.5 + 0.5 * (i // 10 % 10),
            "wF": 20 + 20 * (i // 100 % 10), "EF": 0.5 + 0.5 * (i // 1000 % 10)}))
            for i in range(users)]
    return [(f"u{i}".encode(), orjson.dumps({"user": f"u{i}", "w": 10 + 10 * (i % 10),
                                             "E": 0.2 + 0.2 * (i % 5)})) for i in range(users)]


def wait_members(bootstrap: str, group: str, topic: str, members: int, timeout: float) -> bool:
    """Whether the group became stable with ``members`` members each holding a partition of
    ``topic`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            g = asyncio.run(describe_group(bootstrap, group))
        except Exception:  # noqa: BLE001 - the coordinator may be moving; ask again
            g = None
        if (g is not None and g.state == "Stable" and len(g.members) == members
                and all(m.partitions.get(topic) for m in g.members)):
            return True
        time.sleep(0.5)
    return False


def measure(bootstrap: str, parts: int, users: int, slots: int, data: list,
            live_rate: float = 0.0, mechanism: str = "pbd", workers: int = 1) -> dict:
    """One configuration: a backlog (``live_rate`` 0) or reports sent at ``live_rate``/s, read
    by ``workers`` workers."""
    prefix = f"bench{mechanism}{parts}w{workers}{'live' if live_rate else ''}"
    topics = Topics(prefix=prefix, partitions=parts)
    asyncio.run(create_topics(bootstrap, topics.specs()))
    reqs = requirements(users, mechanism)
    asyncio.run(produce_raw(bootstrap, topics.requirements, reqs, partitions=parts))
    workdir = Path(tempfile.mkdtemp(prefix="pwevent-bench-"))
    env = dict(os.environ, PWEVENT_SECRET="bench")
    procs = []
    for w in range(workers):
        cmd = [sys.executable, "-m", "streams.cli", "worker", "--broker", bootstrap, "--prefix",
               prefix, "--partitions", str(parts), "--stream", "b", "--mechanism", mechanism,
               "--cells", "100", "--slot-ms", str(SLOT_MS),
               "--data-dir", str(workdir / f"data{w}"),
               "--idle-close-ms", "600000", "--loglevel", "warning",
               "--metrics-port", "0", "--event-time", "history"]
        procs.append(subprocess.Popen(cmd, stdout=(workdir / f"log{w}").open("wb"),
                                      stderr=subprocess.STDOUT, env=env))
    try:
        group = f"pwevent-{prefix}-b"
        assert wait_members(bootstrap, group, topics.reports, workers, 300), \
            (workdir / "log0").read_text()[-2000:]
        assert asyncio.run(wait_consumed(bootstrap, group, topics.requirements, parts, 300)), \
            (workdir / "log0").read_text()[-2000:]
        # the worker idles on an empty reports topic; fill it, then it reads the backlog
        flat = [r for slot in data for r in slot]
        t0 = time.perf_counter()
        if live_rate:
            asyncio.run(produce_live(bootstrap, topics.reports, data, parts, live_rate))
        else:
            asyncio.run(produce_raw(bootstrap, topics.reports, flat, partitions=parts))
        produce_rate = len(flat) / (time.perf_counter() - t0)
        closed = slots - 1  # the last slot stays open: no later report closes it
        partials = asyncio.run(timestamps(bootstrap, topics.slot_partials, 10**9, 0))
        deadline = time.monotonic() + 600
        rel: list[tuple] = []
        # a release's own timestamp is its slot's end in event time: when it was released is
        # the timestamp of its decision record (produced with it)
        while (len(rel) < closed and time.monotonic() < deadline
               and all(p.poll() is None for p in procs)):
            rel = [(ts, doc) for ts, doc in asyncio.run(
                timestamps(bootstrap, topics.decisions, 10**6, 5))
                if "published" in doc and "slot" in doc]
        partials = asyncio.run(timestamps(bootstrap, topics.slot_partials, 10**6, 3))
        raw = asyncio.run(measure_raw(bootstrap, topics.reports, len(flat)))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    close_at: dict[int, int] = {}  # slot -> when its last partition closed it
    for ts, msg in partials:
        if "closed_through" not in msg:
            continue  # a dynamic mechanism's plan
        slot = msg["closed_through"]
        close_at[slot] = max(close_at.get(slot, 0), ts)
    release_at = {doc["slot"]: ts for ts, doc in rel}
    slots_done = sorted(s for s in release_at if s in close_at and close_at[s] > 0)
    latency = [release_at[s] - close_at[s] for s in slots_done]
    first, last = min(slots_done), max(slots_done)
    span = (close_at[last] - close_at[first]) / 1000.0
    rate = users * (last - first) / span if span > 0 else float("nan")
    return {"mechanism": mechanism, "partitions": parts, "workers": workers,
            "mode": "live" if live_rate else "backlog",
            "reports": len(flat), "produce_rate": produce_rate,
            "raw_rate": raw["rate"], "worker_rate": rate, "of_raw": rate / raw["rate"],
            "latency_median_ms": float(np.median(latency)),
            "latency_p99_ms": float(np.percentile(latency, 99)),
            "latency_max_ms": float(np.max(latency)), "slots_released": len(rel)}


def main() -> int:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=100_000)
    parser.add_argument("--slots", type=int, default=12)
    parser.add_argument("--partitions", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--mechanism", default="pbd",
                        choices=("pbd", "pba", "bd", "ba", "uniform", "sample", "dpbd", "dpba"))
    parser.add_argument("--live-rate", type=float, default=50_000,
                        help="reports/s of the live run that measures latency (default 50000)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1],
                        help="numbers of workers to measure, each on every partition count")
    parser.add_argument("--broker", choices=("embedded", "apache-kafka"), default="embedded",
                        help="the embedded broker, or a one-node Apache Kafka")
    args = parser.parse_args()
    data = records(args.users, args.slots)
    rows = []
    cluster = EmbeddedBroker() if args.broker == "embedded" else ApacheKafka(1, heap_mb=1024)
    with cluster as broker:
        for parts in args.partitions:
            for n in args.workers:
                rows.append(measure(broker.bootstrap, parts, args.users, args.slots, data,
                                    mechanism=args.mechanism, workers=n))
                print(orjson.dumps(rows[-1]).decode(), flush=True)
                rows.append(measure(broker.bootstrap, parts, args.users, args.slots, data,
                                    args.live_rate, args.mechanism, workers=n))
                print(orjson.dumps(rows[-1]).decode(), flush=True)
    print(f"broker: {args.broker}")
    print("| partitions | workers | input | reports | raw aiokafka /s | job /s | of raw | "
          "close-to-release p50 ms | p99 ms | max ms |")
    print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        rate = f"{r['worker_rate']:,.0f}" if r["mode"] == "backlog" else "(input rate)"
        share = f"{r['of_raw']:.0%}" if r["mode"] == "backlog" else "-"
        print(f"| {r['partitions']} | {r['workers']} | {r['mode']} | {r['reports']:,} | "
              f"{r['raw_rate']:,.0f} | {rate} | {share} | {r['latency_median_ms']:.0f} | "
              f"{r['latency_p99_ms']:.0f} | {r['latency_max_ms']:.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
