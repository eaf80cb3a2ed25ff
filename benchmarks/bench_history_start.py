"""A new live stream's first start on a source topic with retained history.

Fills a source topic (3 partitions, keyed by device) with ``--events`` app events spread over the
last ``--hours`` (their Kafka timestamps and event times alike), then one event of each device
now, and starts one worker of a new stream (``--event-time live``, the default) on it. Reports
the seconds from the worker's start to the release of the slot of the recent events, the dead
letters written by then, and what the worker said it did not read
(docs/sources.md, "Retained history"). ``--code DIR`` runs the worker of another checkout of
this repository (default: this one), to set two versions side by side on one broker::

    .venv/bin/python benchmarks/bench_history_start.py [--events 300000] [--hours 48] \\
        [--broker embedded|apache-kafka] [--code DIR] [--runs 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aiokafka import AIOKafkaProducer  # noqa: E402

from local_kafka.apache import ApacheKafka  # noqa: E402
from local_kafka.embedded import EmbeddedBroker  # noqa: E402
from streams.kafka.offsets import read_topic  # noqa: E402
from streams.kafka.topics import Topics, TopicSpec, create_topics  # noqa: E402

SOURCE, PARTS, DEVICES, SLOT_MS = "telemetry", 3, 2_000, 10_000
CONFIG = """[worker]
stream = "tele"
domain = '{{"kind": "labels", "labels": ["DE", "FR", "IT", "other"], "other": "other"}}'
slot-ms = {slot}
source-topic = ["{source}"]
user-field = "device.id"
time-field = "ts"
value-field = ["country"]
default-requirement = ["w=20,E=1"]
"""


async def send(bootstrap: str, events: list[tuple[str, int, int | None]]) -> None:
    """Each (device, event time, Kafka timestamp or None for the broker's clock), keyed by
    device."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20,
                                max_batch_size=1 << 20)
    await producer.start()
    try:
        for device, ts, kafka_ts in events:
            value = orjson.dumps({"device": {"id": device}, "ts": ts, "country": "DE"})
            await producer.send(SOURCE, value, key=device.encode(), timestamp_ms=kafka_ts)
        await producer.flush()
    finally:
        await producer.stop()


def fill(bootstrap: str, events: int, hours: float) -> None:
    """The source topic and its history."""
    asyncio.run(create_topics(bootstrap, [TopicSpec("t", SOURCE, PARTS)]))
    now = int(time.time() * 1000)
    span = int(hours * 3_600_000)
    asyncio.run(send(bootstrap, [(f"d{i % DEVICES}", now - span + i * (span // events),
                                  now - span + i * (span // events)) for i in range(events)]))


def first_start(bootstrap: str, code: Path, prefix: str, work: Path) -> dict:
    """One new stream's worker on the topic, until the recent events' slot is released."""
    topics = Topics(prefix=prefix, partitions=2)
    asyncio.run(create_topics(bootstrap, topics.specs()))
    now = int(time.time() * 1000)
    asyncio.run(send(bootstrap, [(f"d{i}", now - 1_000, None) for i in range(DEVICES)]))
    slot = (now - 1_000) // SLOT_MS
    conf = work / f"{prefix}.toml"
    conf.write_text(CONFIG.format(slot=SLOT_MS, source=SOURCE))
    log = work / f"{prefix}.log"
    env = dict(os.environ, PWEVENT_SECRET="bench", PYTHONPATH=str(code))
    started = time.monotonic()
    with log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "--config", str(conf), "worker", "--broker",
             bootstrap, "--prefix", prefix, "--partitions", "2", "--idle-close-ms", "1500",
             "--data-dir", str(work / f"data-{prefix}"), "--metrics-port", "0"],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=code)
    try:
        while True:
            released = [orjson.loads(v)["slot"] for _k, v in
                        asyncio.run(read_topic(bootstrap, topics.releases, 1))]
            if any(s >= slot for s in released):
                break
            if worker.poll() is not None or time.monotonic() - started > 900:
                raise RuntimeError(f"no release of slot {slot}: {log.read_text()[-2000:]}")
            time.sleep(0.25)
        took = time.monotonic() - started
        dead = len(asyncio.run(read_topic(bootstrap, topics.dead_letters, 1)))
    finally:
        worker.terminate()
        worker.wait(60)
    said = re.findall(r"the (\d+) older records", log.read_text())
    return {"prefix": prefix, "seconds": round(took, 1), "dead_letters": dead,
            "not_read": int(said[0]) if said else 0}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300_000)
    parser.add_argument("--hours", type=float, default=48.0)
    parser.add_argument("--broker", choices=("embedded", "apache-kafka"), default="embedded")
    parser.add_argument("--code", type=Path, default=ROOT,
                        help="the checkout whose worker runs (default: this one)")
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    cluster = EmbeddedBroker() if args.broker == "embedded" else ApacheKafka(1, heap_mb=1024)
    with cluster as broker, tempfile.TemporaryDirectory(prefix="bench-history-") as tmp:
        fill(broker.bootstrap, args.events, args.hours)
        rows = [first_start(broker.bootstrap, args.code.resolve(), f"h{run}", Path(tmp))
                for run in range(args.runs)]
    print(f"broker: {args.broker}; {args.events:,} events over {args.hours:g} h, "
          f"{DEVICES:,} devices, slots of {SLOT_MS} ms; worker of {args.code}")
    print("| run | first release of the recent slot, s | dead letters | records not read |")
    print("|---:|---:|---:|---:|")
    for i, row in enumerate(rows):
        print(f"| {i + 1} | {row['seconds']} | {row['dead_letters']:,} | {row['not_read']:,} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
