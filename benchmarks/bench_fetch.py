"""What a fetched record costs before a batch handler has it: aiokafka's records against
:class:`~streams.job.worker.raw_fetch.RawFetched`'s tuples, in process.

Builds ``--events`` app events (the shape of ``bench_source.py``) into Kafka record batches of
``--batch`` records, then takes the same fetched bytes as the fetcher does (``getall`` of up to
20,000 records, the worker's ``max_poll_records``, until the partition is done), per run:

* aiokafka's ``ConsumerRecord`` a record, made into the handler's tuple
  ``(key, value, partition, offset, timestamp)`` afterwards (the worker's fetch at first);
* the tuple made by aiokafka's generator a record at a time (``_consumer_record``, the worker's
  fetch before :meth:`~streams.job.worker.raw_fetch.RawRecords.take`; still what a partition
  whose records aiokafka began to hand out gets);
* the tuples of a whole record batch in one list comprehension
  (:class:`~streams.job.worker.raw_fetch.RawFetched`, now).

All read with ``read_committed``, as the worker does. Prints the best and the median of
``--repeat`` runs each, in microseconds a record, and their ratios to the first. Run::

    .venv/bin/python benchmarks/bench_fetch.py [--events 200000] [--batch 1000] [--repeat 15]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from aiokafka.consumer.fetcher import FetchResult  # noqa: E402
from aiokafka.structs import TopicPartition  # noqa: E402
from record_batches import fetched_partition, record_batches  # noqa: E402

from streams.cli.worker import tune_collector  # noqa: E402
from streams.job.worker.raw_fetch import RawRecords  # noqa: E402

MAX_POLL_RECORDS = 20_000  # streams/job/worker/ingest.py's broker_max_poll_records
TP = TopicPartition("bench.source", 0)


def app_events(events: int, per_batch: int) -> bytes:
    """``events`` app events in uncompressed record batches (v2) of ``per_batch`` records."""
    values = [orjson.dumps({"device": {"id": f"d{n % 100_000}"},
                            "ts": f"2026-12-01T10:{n // 60 % 60:02d}:{n % 60:02d}Z",
                            "country": "DE", "app": "7.2"}) for n in range(events)]
    return record_batches([(0, [(None, v, 1_764_756_900_000 + start + i)
                                for i, v in enumerate(values[start:start + per_batch])])
                           for start in range(0, events, per_batch)])


def fetch_result(data: bytes, topics: dict[str, bool]) -> FetchResult:
    """The fetched partition of ``data`` as aiokafka's fetcher stores it, in a ``RawFetched``
    of ``topics``."""
    return fetched_partition(data, TP, topics)


def take_all(result: FetchResult) -> list:
    """Every record, as the fetcher takes them."""
    out: list = []
    while result.has_more():
        out += result.getall(MAX_POLL_RECORDS)
    return out


def as_consumer_records(data: bytes) -> list:
    """aiokafka's records, then the handler's tuples (the fetch at first)."""
    p = TP.partition
    return [(r.key, r.value, p, r.offset, r.timestamp)
            for r in take_all(fetch_result(data, {}))]


def as_record_tuples(data: bytes) -> list:
    """The handler's tuples, made by aiokafka's generator a record at a time (before)."""
    result = fetch_result(data, {})
    result._partition_records.__class__ = RawRecords  # aiokafka's generator, our tuples
    return take_all(result)


def as_batch_tuples(data: bytes) -> list:
    """The handler's tuples, a record batch at a time (now)."""
    return take_all(fetch_result(data, {TP.topic: True}))


def timed(fn: Callable[[bytes], list], data: bytes, events: int, repeat: int) -> list[float]:
    """Microseconds a record, per run."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        got = fn(data)
        runs.append((time.perf_counter() - t0) / events * 1e6)
        assert len(got) == events
    return runs


async def measure(data: bytes, events: int, repeat: int) -> list[tuple[str, float, float]]:
    """Per way of fetching: its name, best and median microseconds a record."""
    assert as_consumer_records(data) == as_record_tuples(data) == as_batch_tuples(data)
    rows = []
    for name, fn in (("ConsumerRecord, then a tuple (at first)", as_consumer_records),
                     ("a tuple a record (before)", as_record_tuples),
                     ("a record batch's tuples at once (now)", as_batch_tuples)):
        runs = timed(fn, data, events, repeat)
        rows.append((name, min(runs), statistics.median(runs)))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1_000, help="records a record batch")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    tune_collector()  # the collector set as in a worker
    data = app_events(args.events, args.batch)
    rows = asyncio.run(measure(data, args.events, args.repeat))
    print(f"{args.events:,} records in batches of {args.batch:,}, {args.repeat} runs each")
    print("| fetch | best us a record | median us a record | best / first's | median / first's |")
    print("|---|---:|---:|---:|---:|")
    for name, best, median in rows:
        print(f"| {name} | {best:.3f} | {median:.3f} | {best / rows[0][1]:.2f} | "
              f"{median / rows[0][2]:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
