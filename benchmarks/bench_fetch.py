"""What a fetched record costs before a batch handler has it: aiokafka's records against
:class:`~streams.job.worker.ingest.RawFetched`'s tuples, in process.

Builds ``--events`` app events (the shape of ``bench_source.py``) into Kafka record batches of
``--batch`` records, then unpacks the same bytes, per run:

* as aiokafka's consumer does, a ``ConsumerRecord`` a record, made into the handler's tuple
  ``(key, value, partition, offset, timestamp)`` afterwards (the worker's fetch before
  :class:`~streams.job.worker.ingest.RawFetched`);
* through :class:`~streams.job.worker.ingest.RawFetched`, the tuple made straight from the
  record batch (now).

Both read with ``read_committed``, as the worker does. Prints the best and the median of
``--repeat`` runs each, in microseconds a record, and their ratio. Run::

    .venv/bin/python benchmarks/bench_fetch.py [--events 200000] [--batch 1000] [--repeat 15]
"""

from __future__ import annotations

import argparse
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

from aiokafka.consumer.fetcher import FetchResult, PartitionRecords  # noqa: E402
from aiokafka.record.memory_records import MemoryRecords  # noqa: E402
from aiokafka.structs import TopicPartition  # noqa: E402
from record_batches import record_batches  # noqa: E402

from streams.cli.worker import tune_collector  # noqa: E402
from streams.job.worker.ingest import RawFetched  # noqa: E402

READ_COMMITTED = 1
TP = TopicPartition("bench.source", 0)


def app_events(events: int, per_batch: int) -> bytes:
    """``events`` app events in uncompressed record batches (v2) of ``per_batch`` records."""
    values = [orjson.dumps({"device": {"id": f"d{n % 100_000}"},
                            "ts": f"2026-12-01T10:{n // 60 % 60:02d}:{n % 60:02d}Z",
                            "country": "DE", "app": "7.2"}) for n in range(events)]
    return record_batches([(0, [(None, v, 1_764_756_900_000 + start + i)
                                for i, v in enumerate(values[start:start + per_batch])])
                           for start in range(0, events, per_batch)])


def as_consumer_records(data: bytes) -> list:
    """aiokafka's records, then the handler's tuples (the fetch before)."""
    records = PartitionRecords(TP, MemoryRecords(data), [], 0, None, None, True, READ_COMMITTED)
    p = TP.partition
    return [(r.key, r.value, p, r.offset, r.timestamp) for r in records]


def as_raw_fetched(data: bytes) -> list:
    """The handler's tuples straight from the record batches (now)."""
    store = RawFetched({TP.topic: True}, {})
    records = PartitionRecords(TP, MemoryRecords(data), [], 0, None, None, True, READ_COMMITTED)
    store[TP] = FetchResult(TP, assignment=None, partition_records=records, backoff=0)
    return list(store[TP]._partition_records)


def timed(fn: Callable[[bytes], list], data: bytes, events: int, repeat: int) -> list[float]:
    """Microseconds a record, per run."""
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        got = fn(data)
        runs.append((time.perf_counter() - t0) / events * 1e6)
        assert len(got) == events
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1_000, help="records a record batch")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    tune_collector()  # the collector set as in a worker
    data = app_events(args.events, args.batch)
    assert as_consumer_records(data) == as_raw_fetched(data)
    rows = []
    for name, fn in (("ConsumerRecord, then a tuple (before)", as_consumer_records),
                     ("RawFetched (now)", as_raw_fetched)):
        runs = timed(fn, data, args.events, args.repeat)
        rows.append((name, min(runs), statistics.median(runs)))
    print(f"{args.events:,} records in batches of {args.batch:,}, {args.repeat} runs each")
    print("| fetch | best us a record | median us a record |")
    print("|---|---:|---:|")
    for name, best, median in rows:
        print(f"| {name} | {best:.3f} | {median:.3f} |")
    print(f"now / before: best {rows[1][1] / rows[0][1]:.2f}, "
          f"median {rows[1][2] / rows[0][2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
