"""The local-DP collector on Kafka next to a bare consumer of the same topic, in one run.

Starts the embedded broker (or, with ``--broker apache-kafka``, a one-node Apache Kafka from
the jars ``./setup.sh test`` fetches), writes ``--users`` users' LBU reports (OUE over
``--cells`` cells, E = 1, w = 10; made by the Python client with fast deterministic words, not
timed) for ``--slots`` slots to ``<prefix>.ldp-reports`` on ``--partitions`` partitions, and the
watermark records closing the last slot. Then, in alternation, best of ``--repeat``:

- a bare aiokafka consumer reading the topic to its end (nothing decoded);
- the collector (:class:`streams.ldp_collector.kafka_job.LdpJob`, in this process, a fresh
  consumer group each time) from its start until it has sent every slot's release.

Printed: records/s of each and the ratio collector/bare (the whole worker against a bare
consumer of the same topic), the collector's microseconds per report, its start (topics
checked, releases read, group joined: the seconds until its first batch) and its microseconds
per report after the start.

Run: ``.venv/bin/python benchmarks/bench_ldp_kafka.py [--users 20000] [--slots 20]
[--partitions 6] [--broker embedded|apache-kafka] [--repeat 3] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402

from local_kafka.apache import ApacheKafka  # noqa: E402
from local_kafka.embedded import EmbeddedBroker  # noqa: E402
from streams.job.partitions.watermarks import watermark_record  # noqa: E402
from streams.kafka.producer import RawProducer  # noqa: E402
from streams.kafka.topics import create_topics  # noqa: E402
from streams.ldp_client import LdpClient, ReportConfig  # noqa: E402
from streams.ldp_collector.kafka_job import LdpJob, LdpJobSettings, topic_specs  # noqa: E402

SECRET = b"bench-secret"
SLOT_MS = 60_000


class Pcg:
    """Fast deterministic words for making the reports (not what a device uses)."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def take(self, n: int) -> np.ndarray:
        return self.rng.integers(0, 2**32, size=n, dtype=np.uint32)


def reports(users: int, slots: int, d: int) -> list[tuple[bytes, bytes]]:
    """Every user's LBU report at every slot, slot by slot."""
    cells = np.random.default_rng(1).integers(0, d, size=(slots, users)).tolist()
    clients = [LdpClient(ReportConfig("lbu", f"u{i}", d=d, w=10, E=1.0), words=Pcg(i))
               for i in range(users)]
    return [(f"u{i}".encode(), c.report(t, cells[t][i]))
            for t in range(slots) for i, c in enumerate(clients)]


async def fill(bootstrap: str, prefix: str, partitions: int, records: list, slots: int) -> None:
    await create_topics(bootstrap, topic_specs(prefix, partitions))
    producer = RawProducer(bootstrap, f"{prefix}.ldp-reports", partitions)
    await producer.start()
    try:
        await producer.send_many(records)
        for p in range(partitions):
            mark = watermark_record(slots * SLOT_MS, SECRET, "s", p)
            await producer.send_many([(None, mark)], partition=p)
    finally:
        await producer.stop()


async def bare(bootstrap: str, topic: str, partitions: int) -> tuple[int, float]:
    """(records, seconds) of a bare consumer reading the topic to its end."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        left, n = dict(ends), 0
        started = time.perf_counter()
        while any(left[tp] > 0 for tp in tps):
            for tp, recs in (await consumer.getmany(timeout_ms=500)).items():
                n += len(recs)
                left[tp] = ends[tp] - recs[-1].offset - 1
        return n, time.perf_counter() - started
    finally:
        await consumer.stop()


async def collector(bootstrap: str, prefix: str, partitions: int, d: int,
                    slots: int) -> tuple[int, float, float]:
    """(records, seconds) of a collector from its start until every slot was released, and
    the seconds until it had read its first batch (its start)."""
    settings = LdpJobSettings(broker=bootstrap, prefix=prefix, stream="s", protocol="lbu",
                              d=d, origin_ms=0, slot_ms=SLOT_MS, start=0, E=1.0, w=10,
                              secret=SECRET, event_time="history", partitions=partitions)
    job = LdpJob(settings)
    stop = asyncio.Event()

    async def watch() -> None:
        # every slot closed (its release sent, or found on the topic from an earlier run)
        while job.collector.next_slot < slots:
            await asyncio.sleep(0.005)
        stop.set()

    started = time.monotonic()
    await asyncio.gather(job.run(stop), watch())
    return (job.counters["records"], time.monotonic() - started,
            job.times["first_batch"] - job.times["start"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--users", type=int, default=20_000)
    parser.add_argument("--slots", type=int, default=20)
    parser.add_argument("--cells", type=int, default=8)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--broker", choices=("embedded", "apache-kafka"), default="embedded")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    print(f"making {args.users * args.slots:,} reports ...", flush=True)
    made = reports(args.users, args.slots, args.cells)
    cluster = EmbeddedBroker() if args.broker == "embedded" else ApacheKafka(1, heap_mb=1024)
    with cluster:
        bootstrap, prefix = cluster.bootstrap, "bench"
        asyncio.run(fill(bootstrap, prefix, args.partitions, made, args.slots))
        best_bare = best_job = float("inf")
        n_bare = n_job = 0
        best_start = float("nan")
        for _ in range(args.repeat):
            n_bare, s = asyncio.run(bare(bootstrap, f"{prefix}.ldp-reports", args.partitions))
            best_bare = min(best_bare, s)
            n_job, s, start = asyncio.run(collector(bootstrap, prefix, args.partitions,
                                                    args.cells, args.slots))
            if s < best_job:
                best_job, best_start = s, start
    result = {"broker": args.broker, "records": n_bare, "reports": len(made),
              "bare_records_per_s": n_bare / best_bare,
              "collector_records_per_s": n_job / best_job,
              "ratio_collector_to_bare": (n_job / best_job) / (n_bare / best_bare),
              "collector_us_per_report": best_job / len(made) * 1e6,
              "collector_start_s": best_start,
              "collector_us_per_report_after_start": (best_job - best_start) / len(made) * 1e6}
    for key, value in result.items():
        print(f"{key}: {value:,.3f}" if isinstance(value, float) else f"{key}: {value}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
