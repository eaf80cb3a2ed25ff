"""The source stage's rate: existing telemetry mapped and re-keyed by user, next to raw aiokafka.

Starts the embedded broker (or, with ``--broker apache-kafka``, a one-node Apache Kafka from the
jars ``./setup.sh test`` fetched) and fills a keyless source topic of ``--source-partitions``
partitions with ``--events`` app events shaped as in the README's example
(``{"device": {"id": ...}, "ts": ISO 8601, "country": ...}``, ``--devices`` devices). It
measures a bare aiokafka consumer (``getmany`` + ``orjson.loads``) on that topic, then one real
worker (``pwevent worker --source-topic ... --user-field device.id --time-field ts
--value-field country``) reading the same backlog: the worker maps every event, re-keys it by
user and produces it to the job's ``reports`` topic, so its rate counts the re-keying produce.
The worker's rate is the reports it produced over the span of their Kafka timestamps; its CPU
an event is read from ``/proc`` between its group's first and last commit of the source topic
(start-up left out). ``--workers N`` starts N worker processes of the same group instead, which
share the source's partitions; rate and CPU are then theirs together. Every device declared a
requirement beforehand (``--defaults`` lets the stage write defaults instead, which adds the
wait for their registration to the first events of each device).

``--format avro`` writes the same events in the Confluent wire format instead (Avro, the time
as a ``timestamp-millis`` long), their schema registered in the schema registry the tests use
(Apicurio Registry, ``tests/schema_registry.py``, from ``./setup.sh test``), and the worker runs
with ``--source-format avro --schema-registry URL``; the bare consumer then decodes each record
with fastavro instead of orjson. Before the broker runs, the mapping alone is timed in process
(``SourceMapping.map``, or ``AvroSource.map`` for Avro, in batches of 20,000). Run::

    .venv/bin/python benchmarks/bench_source.py [--events 500000] [--devices 20000] \\
        [--per-slot 1] [--broker embedded|apache-kafka] [--defaults] [--format json|avro] \\
        [--workers 1]

``--latency`` measures instead how long a slot's release waits for the repartition hop: events
are produced live (event time = now) for ``--live-slots`` slots of 2 s, once to the source
topic through the stage and once, mapped by the benchmark, straight to ``reports`` in the job's
own format, each to its own worker (``--event-time live``, lateness 0, ``--idle-close-ms``
1000). Per slot, the release's Kafka timestamp minus the slot's end is its wait; the two routes'
waits compare in one run::

    .venv/bin/python benchmarks/bench_source.py --latency [--rate 5000] [--live-slots 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: E402
from aiokafka.client import AIOKafkaClient  # noqa: E402
from bench_idle import cpu_seconds  # noqa: E402
from bench_ingest import consume_timed, measure_raw  # noqa: E402

from local_kafka.apache import ApacheKafka  # noqa: E402
from local_kafka.embedded import EmbeddedBroker  # noqa: E402
from streams.kafka.fetch_pacing import empty_answer  # noqa: E402
from streams.kafka.producer import RawProducer, produce_raw  # noqa: E402
from streams.kafka.topics import Topics, TopicSpec, create_topics  # noqa: E402

ORIGIN = int(datetime(2026, 12, 3, 10, 0, tzinfo=UTC).timestamp() * 1000)
SLOT_MS = 60_000
COUNTRIES = ["DE", "FR", "IT", "ES", "NL", "PL", "SE", "other"]
DOMAIN = {"kind": "labels", "labels": COUNTRIES, "other": "other"}


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def events(n: int, devices: int, span_ms: int) -> list[bytes]:
    """``n`` app events of ``devices`` devices, in time order over ``span_ms`` (each device's
    events spread evenly over it)."""
    return [orjson.dumps({"device": {"id": f"d{i % devices}"},
                          "ts": iso(ORIGIN + i * span_ms // n),
                          "country": COUNTRIES[(i * 7) % len(COUNTRIES)], "app": "7.2"})
            for i in range(n)]


#: The Avro schema of the same events.
AVRO_SCHEMA = {"type": "record", "name": "AppEvent", "namespace": "bench", "fields": [
    {"name": "device", "type": {"type": "record", "name": "Device",
                                "fields": [{"name": "id", "type": "string"}]}},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "country", "type": "string"},
    {"name": "app", "type": "string"}]}


def avro_events(n: int, devices: int, span_ms: int, schema_id: int) -> list[bytes]:
    """The same events in the Confluent wire format, of schema ``schema_id``."""
    from io import BytesIO

    from fastavro import parse_schema, schemaless_writer

    schema = parse_schema(AVRO_SCHEMA)
    header = b"\0" + schema_id.to_bytes(4, "big")
    out = []
    for i in range(n):
        body = BytesIO()
        schemaless_writer(body, schema, {"device": {"id": f"d{i % devices}"},
                                         "ts": ORIGIN + i * span_ms // n,
                                         "country": COUNTRIES[(i * 7) % len(COUNTRIES)],
                                         "app": "7.2"})
        out.append(header + body.getvalue())
    return out


async def measure_raw_avro(bootstrap: str, topic: str, n: int) -> dict:
    """Consume ``n`` records with a bare aiokafka consumer and decode each with fastavro."""
    from io import BytesIO

    from fastavro import parse_schema, schemaless_reader

    from streams.job.source.schema_registry import without_logical_types

    schema = parse_schema(without_logical_types(AVRO_SCHEMA))

    def take(_partition: int, records: list[Any]) -> None:
        for record in records:
            schemaless_reader(BytesIO(record.value[5:]), schema, None)

    return await consume_timed(bootstrap, topic, n, take)


def mapping_rate(values: list[bytes], registry_url: str | None) -> float:
    """Events per second through the mapping alone, in process, in batches of 20,000."""
    from streams.job.source.mapping import SourceMapping

    mapping = SourceMapping.from_flags("device.id", "ts", ["country"], DOMAIN)
    records = [(None, v, 0, i, ORIGIN) for i, v in enumerate(values)]
    batches = [records[i:i + 20_000] for i in range(0, len(records), 20_000)]
    if registry_url is None:
        t0 = time.perf_counter()
        n = sum(len(mapping.map(b)) for b in batches)
    else:
        from streams.job.source.avro import AvroSource
        from streams.job.source.schema_registry import SchemaRegistry

        source = AvroSource(SchemaRegistry(registry_url))
        asyncio.run(source.map(mapping, batches[0][:1]))  # the schema fetched once
        t0 = time.perf_counter()
        n = sum(len(asyncio.run(source.map(mapping, b))) for b in batches)
    seconds = time.perf_counter() - t0
    assert n == len(values), f"{n} of {len(values)} events mapped"
    return n / seconds


async def fill_source(bootstrap: str, topic: str, values: list[bytes], parts: int) -> None:
    producer = RawProducer(bootstrap, topic, parts)
    await producer.start()
    try:
        for p in range(parts):
            await producer.send_many([(None, v) for v in values[p::parts]], partition=p)
    finally:
        await producer.stop()


async def reports_span(bootstrap: str, topic: str, parts: int, timeout: float
                       ) -> tuple[int, int, float]:
    """(keyed records, all records, seconds between the first and the last one's Kafka
    timestamp) of ``topic``, read to its end offsets (the progress records of the source stage
    are the keyless ones)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest",
                                max_partition_fetch_bytes=16 * 1024 * 1024)
    await consumer.start()
    first, last, n, total = None, None, 0, 0
    try:
        tps = [TopicPartition(topic, p) for p in range(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        async def behind() -> bool:
            return any([await consumer.position(tp) < ends[tp] for tp in tps])

        while time.monotonic() < deadline and await behind():
            got = await consumer.getmany(timeout_ms=500, max_records=50_000)
            for recs in got.values():
                for r in recs:
                    total += 1
                    first = r.timestamp if first is None else min(first, r.timestamp)
                    last = r.timestamp if last is None else max(last, r.timestamp)
                    n += r.key is not None  # else a progress or watermark record
    finally:
        await consumer.stop()
    return n, total, ((last - first) / 1000.0 if first is not None else float("nan"))


def stop(worker: subprocess.Popen) -> None:
    """Stop a worker this benchmark started: SIGTERM, then SIGKILL after 30 s."""
    worker.terminate()
    try:
        worker.wait(30)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def declare(bootstrap: str, topics: Topics, parts: int, devices: int) -> None:
    """Every device declares the same fixed requirement (w = 10, E = 1) on ``requirements``."""
    reqs = [(f"d{i}".encode(), orjson.dumps({"user": f"d{i}", "w": 10, "E": 1.0}))
            for i in range(devices)]
    asyncio.run(produce_raw(bootstrap, topics.requirements, reqs, partitions=parts))


async def wait_committed(bootstrap: str, group: str, topic: str, want: int, timeout: float,
                         alive: Callable[[], bool], cpu: Callable[[], float]
                         ) -> list[tuple[int, float]]:
    """Until ``group`` has committed ``want`` records of ``topic`` (looked up twice a second);
    returns, per look, the records committed and ``cpu()`` then."""
    from streams.kafka.offsets import committed_offsets

    looks: list[tuple[int, float]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and alive():
        done = sum((await committed_offsets(bootstrap, group, topic)).values())
        looks.append((done, cpu()))
        if done >= want:
            break
        await asyncio.sleep(0.5)
    return looks


def cpu_us_an_event(looks: list[tuple[int, float]]) -> float:
    """The CPU a source event cost while the worker read its backlog: from the first commit
    to the last (start-up and the first commit's wait left out); ``nan`` with one commit."""
    started = [(done, cpu) for done, cpu in looks if done > 0]
    if len(started) < 2 or started[-1][0] == started[0][0]:
        return float("nan")
    return (started[-1][1] - started[0][1]) / (started[-1][0] - started[0][0]) * 1e6


async def measure_path(bootstrap: str, source: str, topics: Topics, parts: int, n: int,
                       registry_url: str | None) -> dict[str, Any]:
    """The mapping and re-keying path alone, on the same backlog as the bare consumer: a bare
    aiokafka consumer of the source topic, fetching as the worker does (the handler's tuples a
    record batch at a time), hands each partition's fetched records to the stage
    (:class:`~streams.job.source.rekey.Rekeyer`), which maps them and produces the re-keyed
    reports through the worker's producer path (record batches, partitions hashed a batch at a
    time), acknowledged by the broker before the clock stops. No Faust and no job: this is what
    the stage adds to a consumer."""
    from collections import Counter

    from streams.job.config import JobConfig
    from streams.job.source.rekey import Rekeyer, SourceSettings

    out = RawProducer(bootstrap, topics.reports, parts)
    await out.start()

    async def send_reports(records: list, partitions: list) -> Any:
        submitted = await out.submit(records, partitions=partitions)
        for _recs, outcome in submitted:
            if isinstance(outcome, BaseException):
                raise outcome
        return asyncio.gather(*(outcome for _recs, outcome in submitted))

    class NoLetters:
        sent = 0

        async def send(self, dead: list, wait: bool = False) -> list:
            NoLetters.sent += len(dead)
            return []

    from streams.job.source.mapping import SourceMapping

    config = JobConfig(stream="app", mechanism="pbd", domain=DOMAIN, secret="bench",
                       partitions=parts, prefix="benchpath")
    mapping = SourceMapping.from_flags("device.id", "ts", ["country"], DOMAIN)
    settings = (SourceSettings((source,), mapping) if registry_url is None else
                SourceSettings((source,), mapping, source_format="avro",
                               schema_registry=registry_url))
    stage = Rekeyer(config, settings, topics, None, NoLetters(), Counter(),
                    send_reports=send_reports)
    async def take(_partition: int, records: list[Any]) -> None:
        await stage.on_batch(source, records)

    try:
        timed = await consume_timed(bootstrap, source, n, take, tuples=True)
        t0, cpu0 = time.perf_counter(), time.process_time()
        await stage.drain()  # the clock runs until the broker has every report
        timed["seconds"] += time.perf_counter() - t0
        timed["cpu_us"] += (time.process_time() - cpu0) / n * 1e6
    finally:
        await out.stop()
    taken = stage.counters["source_produced"] + stage.counters["source_superseded"]
    assert taken == n and NoLetters.sent == 0, stage.counters
    return {**timed, "rate": timed["records"] / timed["seconds"]}


def measure(bootstrap: str, n: int, devices: int, source_parts: int, parts: int,
            defaults: bool, registry: Any = None, per_slot: int = 1, workers: int = 1) -> dict:
    """One run; ``registry`` (a started ``SchemaRegistryServer``): the events in Avro;
    ``per_slot``: events of each device in each slot (telemetry sends many; the stage forwards
    per device and slot only the one that can still count); ``workers``: worker processes of
    the job's group sharing the source."""
    span = max(1, n // (devices * per_slot)) * SLOT_MS
    prefix = f"benchsrc{'d' if defaults else ''}{'a' if registry else ''}"
    source = f"{prefix}-telemetry"
    topics = Topics(prefix=prefix, partitions=parts)
    asyncio.run(create_topics(bootstrap, [*topics.specs(),
                                          TopicSpec("source", source, source_parts)]))
    if registry is None:
        values = events(n, devices, span)
        fmt: list[str] = []
    else:
        values = avro_events(n, devices, span,
                             registry.register(f"{source}-value", AVRO_SCHEMA))
        fmt = ["--source-format", "avro", "--schema-registry", registry.url]
    mapped_rate = mapping_rate(values[:200_000], registry.url if registry else None)
    asyncio.run(fill_source(bootstrap, source, values, source_parts))
    raw = asyncio.run((measure_raw if registry is None else measure_raw_avro)(bootstrap, source,
                                                                               n))
    path_topics = Topics(prefix=f"{prefix}path", partitions=parts)
    asyncio.run(create_topics(bootstrap, [TopicSpec("reports", path_topics.reports, parts)]))
    path = asyncio.run(measure_path(bootstrap, source, path_topics, parts, n,
                                    registry.url if registry else None))
    if not defaults:
        declare(bootstrap, topics, parts, devices)
    workdir = Path(tempfile.mkdtemp(prefix="pwevent-bench-source-"))
    cmds = [[sys.executable, "-m", "streams.cli", "worker", "--broker", bootstrap, "--prefix",
             prefix, "--partitions", str(parts), "--stream", "app", "--mechanism", "pbd",
             "--domain", orjson.dumps(DOMAIN).decode(), "--slot-ms", str(SLOT_MS),
             "--origin-ms", str(ORIGIN), "--event-time", "history", "--lateness-ms",
             str(10 * SLOT_MS), "--idle-close-ms", "600000", "--source-topic", source,
             "--user-field", "device.id", "--time-field", "ts", "--value-field", "country",
             *(["--default-requirement", "w=10,E=1"] if defaults else []), *fmt,
             "--data-dir", str(workdir / f"data{k}"), "--loglevel", "warning",
             "--metrics-port", "0"] for k in range(workers)]
    running = [subprocess.Popen(cmd, stdout=(workdir / f"log{k}").open("wb"),
                                stderr=subprocess.STDOUT,
                                env=dict(os.environ, PWEVENT_SECRET="bench"))
               for k, cmd in enumerate(cmds)]
    try:
        # reading reports while the workers write them would take a core from them: wait until
        # their group committed the whole source topic, then read them
        looks = asyncio.run(wait_committed(
            bootstrap, f"pwevent-{prefix}-app", source, n, 600,
            lambda: all(w.poll() is None for w in running),
            lambda: sum(cpu_seconds(w.pid) for w in running)))
        want = min(n, devices * (span // SLOT_MS))  # a report per device and slot at least
        got, total, seconds = asyncio.run(reports_span(bootstrap, topics.reports, parts, 120))
    finally:
        for w in running:
            stop(w)
    assert got >= want, f"{got} of {want} device-slots re-keyed; log in {workdir}"
    # the worker's rate in source events: every event was read, mapped and either forwarded
    # or superseded between the first and the last record it wrote to reports (the first is
    # written a batch after it began, so this counts one batch's reading less)
    rate = n / seconds
    return {"format": "avro" if registry else "json", "defaults": defaults, "events": n,
            "devices": devices, "source_partitions": source_parts, "partitions": parts,
            "mapping_rate": mapped_rate, "raw_rate": raw["rate"], "path_rate": path["rate"],
            "raw_cpu_us": raw["cpu_us"], "path_cpu_us": path["cpu_us"],
            "path_of_raw": path["rate"] / raw["rate"], "stage_rate": rate,
            "of_raw": rate / raw["rate"], "worker_cpu_us": cpu_us_an_event(looks),
            "per_slot": per_slot, "reports": got, "repartition_per_event": total / n,
            "workers": workers}


LIVE_SLOT_MS = 2_000
IDLE_CLOSE_MS = 1_000
#: The timing consumer's wait after an empty fetch answer, whatever its idle time: pwevent's own
#: clients wait longer the longer they are idle (streams/kafka/fetch_pacing.py), which, on the
#: releases topic idle between slots, would time that consumer instead of the job.
TIMING_PACE_S = 0.01


async def produce_live(bootstrap: str, topic: str, parts: int, route: str, devices: int,
                       rate: int, until_ms: int) -> int:
    """Events with event time = now, ``rate`` a second, until the clock reaches ``until_ms``:
    keyless app events round the source partitions (``source``), or reports keyed by device
    on their murmur2 partition (``reports``). Returns how many were sent."""
    producer = RawProducer(bootstrap, topic, parts, linger_ms=1)
    await producer.start()
    sent, i = 0, 0
    start = time.time()
    try:
        while (now := int(time.time() * 1000)) < until_ms:
            due = int((time.time() - start) * rate)
            batch = []
            for _ in range(max(due - sent, 0)):
                device, country = f"d{i % devices}", COUNTRIES[(i * 7) % len(COUNTRIES)]
                if route == "source":
                    batch.append((None, orjson.dumps({"device": {"id": device}, "ts": iso(now),
                                                      "country": country})))
                else:
                    batch.append((device.encode(), orjson.dumps({"user": device, "time": now,
                                                                 "value": country})))
                i += 1
            if batch:
                if route == "source":
                    for p in range(parts):
                        await producer.send_many(batch[p::parts], partition=p)
                else:
                    await producer.send_many(batch)
                sent += len(batch)
            await asyncio.sleep(0.02)
    finally:
        await producer.stop()
    return sent


async def release_times(bootstrap: str, topic: str, want: set[int], timeout: float
                        ) -> dict[int, int]:
    """Slot -> wall-clock ms at which its release was read from ``topic`` (read while it is
    written, a fetch at most every ``TIMING_PACE_S`` when there is nothing new; a release's own
    timestamp is its slot's end), for the slots in ``want``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    client = consumer._client
    unpaced = AIOKafkaClient.send.unpaced  # type: ignore[attr-defined]

    async def send(node_id: Any, request: Any, **kw: Any) -> Any:
        response = await unpaced(client, node_id, request, **kw)
        if getattr(request, "API_KEY", None) == 1 and empty_answer(response):
            await asyncio.sleep(TIMING_PACE_S)
        return response

    client.send = send
    out: dict[int, int] = {}
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + timeout
        while not want <= out.keys() and time.monotonic() < deadline:
            for recs in (await consumer.getmany(timeout_ms=10)).values():
                seen = int(time.time() * 1000)
                for r in recs:
                    out.setdefault(orjson.loads(r.value)["slot"], seen)
    finally:
        await consumer.stop()
    return out


def measure_latency(bootstrap: str, route: str, devices: int, rate: int, slots: int,
                    parts: int) -> dict:
    """One route's per-slot waits from the slot's end to its release (module doc)."""
    prefix = f"benchlat{route}"
    source = f"{prefix}-telemetry"
    topics = Topics(prefix=prefix, partitions=parts)
    asyncio.run(create_topics(bootstrap, [*topics.specs(), TopicSpec("source", source, 3)]))
    declare(bootstrap, topics, parts, devices)
    workdir = Path(tempfile.mkdtemp(prefix="pwevent-bench-latency-"))
    cmd = [sys.executable, "-m", "streams.cli", "worker", "--broker", bootstrap, "--prefix",
           prefix, "--partitions", str(parts), "--stream", "app", "--mechanism", "pbd",
           "--domain", orjson.dumps(DOMAIN).decode(), "--slot-ms", str(LIVE_SLOT_MS),
           "--event-time", "live", "--idle-close-ms", str(IDLE_CLOSE_MS),
           *(["--source-topic", source, "--user-field", "device.id", "--time-field", "ts",
               "--value-field", "country"] if route == "source" else []),
           "--data-dir", str(workdir / "data"), "--loglevel", "warning", "--metrics-port", "0"]
    worker = subprocess.Popen(cmd, stdout=(workdir / "log").open("wb"), stderr=subprocess.STDOUT,
                              env=dict(os.environ, PWEVENT_SECRET="bench"))
    try:
        time.sleep(8)  # the worker joins its group and takes its partitions
        now = int(time.time() * 1000)
        first = now // LIVE_SLOT_MS + 1
        until = (first + slots) * LIVE_SLOT_MS
        # the first slot with events is partial and the last ends with the production
        want = set(range(first, first + slots - 1))

        async def both() -> dict[int, int]:
            reading = asyncio.ensure_future(release_times(bootstrap, topics.releases, want,
                                                          slots * LIVE_SLOT_MS / 1000 + 30))
            await produce_live(bootstrap, source if route == "source" else topics.reports,
                               3 if route == "source" else parts, route, devices, rate, until)
            return await reading

        released = asyncio.run(both())
    finally:
        stop(worker)
    missing = want - released.keys()
    assert not missing, f"slots {sorted(missing)} not released; log in {workdir}"
    by_slot = [released[s] - (s + 1) * LIVE_SLOT_MS for s in sorted(want)]
    waits = sorted(by_slot)
    return {"route": route, "slots": len(waits), "wait_p50_ms": waits[len(waits) // 2],
            "wait_p99_ms": waits[min(len(waits) - 1, (99 * len(waits)) // 100)],
            "wait_max_ms": waits[-1], "idle_close_ms": IDLE_CLOSE_MS, "waits_ms": by_slot}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500_000)
    parser.add_argument("--devices", type=int, default=20_000)
    parser.add_argument("--per-slot", type=int, default=1,
                        help="events of each device in each slot (e.g. 10)")
    parser.add_argument("--source-partitions", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1,
                        help="worker processes of the job's group sharing the source")
    parser.add_argument("--defaults", action="store_true",
                        help="devices declare nothing: the stage writes default requirements")
    parser.add_argument("--broker", choices=("embedded", "apache-kafka"), default="embedded")
    parser.add_argument("--format", choices=("json", "avro"), default="json",
                        help="the source records' encoding (avro: with a schema registry)")
    parser.add_argument("--latency", action="store_true",
                        help="measure the wait of a slot's release through the stage instead")
    parser.add_argument("--rate", type=int, default=5_000, help="--latency: events a second")
    parser.add_argument("--live-slots", type=int, default=10, help="--latency: slots produced")
    args = parser.parse_args()
    from streams.cli.worker import tune_collector

    tune_collector()  # the collector set as in a worker, for every measurement of this process
    cluster = EmbeddedBroker() if args.broker == "embedded" else ApacheKafka(1, heap_mb=1024)
    if args.latency:
        with cluster as broker:
            rows = [measure_latency(broker.bootstrap, route, args.devices, args.rate,
                                    args.live_slots, args.partitions)
                    for route in ("reports", "source")]
        for row in rows:
            print(orjson.dumps(row).decode())
        print(f"broker: {args.broker}; {args.rate:,} events/s, slots of {LIVE_SLOT_MS} ms, "
              f"idle close {IDLE_CLOSE_MS} ms")
        print("| route | slots | release after the slot's end, p50 ms | p99 ms | max ms |")
        print("|---|---:|---:|---:|---:|")
        for row in rows:
            name = ("through the source stage" if row["route"] == "source"
                    else "straight to reports")
            print(f"| {name} | {row['slots']} | {row['wait_p50_ms']:,} | "
                  f"{row['wait_p99_ms']:,} | {row['wait_max_ms']:,} |")
        return 0
    with contextlib.ExitStack() as stack:
        registry = None
        if args.format == "avro":
            from schema_registry import SchemaRegistryServer

            registry = stack.enter_context(SchemaRegistryServer())
        broker = stack.enter_context(cluster)
        row = measure(broker.bootstrap, args.events, args.devices, args.source_partitions,
                      args.partitions, args.defaults, registry, args.per_slot, args.workers)
    print(orjson.dumps(row).decode())
    print(f"broker: {args.broker}; {args.workers} worker process(es)")
    print("| format | events | devices | events per device and slot | defaults | "
          "mapping alone /s | raw aiokafka /s | mapping and re-keying path /s | of raw | "
          "CPU us an event, raw / path | worker (stage and job) /s | of raw | "
          "CPU us an event, worker | repartition records per event |")
    print("|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| {row['format']} | {row['events']:,} | {row['devices']:,} | {row['per_slot']} | "
          f"{'yes' if row['defaults'] else 'no'} | {row['mapping_rate']:,.0f} | "
          f"{row['raw_rate']:,.0f} | {row['path_rate']:,.0f} | {row['path_of_raw']:.0%} | "
          f"{row['raw_cpu_us']:.1f} / {row['path_cpu_us']:.1f} | "
          f"{row['stage_rate']:,.0f} | {row['of_raw']:.0%} | {row['worker_cpu_us']:.1f} | "
          f"{row['repartition_per_event']:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
