"""A poisoned Avro source topic (docs/sources.md, "Avro source topics"): among good app
events, a producer registers a recursive record schema under a subject of its own (``Node``,
with the fields the mapping reads and ``"next": ["null", "Node"]``) and writes one record of it
nested 5,000 deep, enough to overflow the C stack of fastavro's compiled decoder. The worker
refuses the schema before decoding anything with it: it stays up, the record is a dead letter
``unsupported_schema``, the refusal is logged once and counted, every slot is released once
and the releases equal the in-process run of the good records. Started again on the same data
directory, the worker meets another such record and stays up as well. On both brokers, with a
real schema registry (Apicurio Registry, tests/schema_registry.py)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import os
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from brokers import broker_fixture
from fastavro import parse_schema, schemaless_writer
from forked_workers import Process, start_command
from prometheus_client.parser import text_string_to_metric_families
from schema_registry import SchemaRegistryServer, wire
from test_source_avro import (
    CONFIG,
    DEVICES,
    DOMAIN,
    EVENT,
    LEVELS,
    ORIGIN,
    SLOT,
    SOURCE_PARTS,
    avro,
    produce_source,
    read_all,
)

from local_kafka.embedded import free_port
from streams.job.pipeline import InProcessJob
from streams.job.source.avro import AvroSource
from streams.job.source.mapping import SourceMapping
from streams.job.source.rekey import report_value
from streams.job.source.schema_registry import SchemaRegistry
from streams.kafka.offsets import wait_consumed
from streams.kafka.topics import Topics, TopicSpec, create_topics
from streams.records.input_formats import DEAD_LETTER_PAYLOAD_BYTES
from tests.jobkit import (
    SECRET,
    config,
    job_nonce,
    setup_topics,
    slot_winners,
    stop_worker,
    timestamped_records,
    wait_for_slots,
)

DEPTH = 5_000  # fastavro's reader overflows the C stack well before (1,000 it survives)
DEVICE = {"type": "record", "name": "Device", "fields": [{"name": "id", "type": "string"}]}
CONSENT = {"type": "enum", "name": "Consent", "symbols": ["full", "basic"]}
LEVEL_FIELDS = [{"name": "device", "type": DEVICE}, {"name": "ts", "type": "long"},
                {"name": "country", "type": "string"}, {"name": "consent", "type": CONSENT}]
#: the attacker's schema: the fields the mapping reads, and the next node
NODE = {"type": "record", "name": "Node", "namespace": "attacker",
        "fields": [*LEVEL_FIELDS, {"name": "next", "type": ["null", "Node"]}]}
LEVEL = {"type": "record", "name": "Level", "namespace": "attacker", "fields": LEVEL_FIELDS}

broker = broker_fixture()


@pytest.fixture(scope="module")
def registry() -> Iterator[SchemaRegistryServer]:
    with SchemaRegistryServer() as server:
        yield server


def nested_node(schema_id: int, depth: int, ts: int) -> bytes:
    """A record of ``NODE`` nested ``depth`` deep in the wire format, encoded level by level (a
    recursive encoder would overflow like the decoder): each level's fields, then the union's
    branch, 1 (another node) or 0 (null) at the bottom."""
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(LEVEL), {"device": {"id": "mallory"}, "ts": ts,
                                                 "country": "DE", "consent": "full"})
    level = out.getvalue()
    return wire(schema_id, (level + b"\x02") * (depth - 1) + level + b"\x00")


def good_events(v1: int, slots: range) -> list[tuple[int, bytes]]:
    """(source partition, value): every device a few app events in each of ``slots``."""
    out = []
    for s in slots:
        for i in range(DEVICES):
            for k in range(1 + (i + s) % 3):
                t = ORIGIN + s * SLOT + (i * 7919 + k * 104_729) % SLOT
                out.append(((i + k + s) % SOURCE_PARTS, avro(EVENT, v1, {
                    "device": {"id": f"d{i}"}, "ts": t,
                    "country": ["DE", "FR", "IT", "US"][(i + s + k) % 4],
                    "consent": "full" if i % 4 == 0 else "basic"})))
    return out


def with_poison(events: list[tuple[int, bytes]], partition: int,
                poison: bytes) -> list[tuple[int, bytes]]:
    """``events`` with ``poison`` in the middle of ``partition``'s records."""
    at = [j for j, (p, _v) in enumerate(events) if p == partition][len(events) // 6]
    return [*events[:at], (partition, poison), *events[at:]]


def start(bootstrap: str, prefix: str, conf: Path, data: Path, log: Path,
          port: int) -> Process:
    """A worker whose job comes from ``conf``, serving its metrics on ``port``."""
    args = ["--config", str(conf), "worker", "--broker", bootstrap, "--prefix", prefix,
            "--partitions", "2", "--idle-close-ms", "1500", "--data-dir", str(data),
            "--metrics-host", "127.0.0.1", "--metrics-port", str(port)]
    return start_command(args, dict(os.environ, PWEVENT_SECRET=SECRET), log)


def refusals_counted(port: int) -> float | None:
    """``pwevent_source_mapping_problems_total{problem="unsupported_schema"}`` of a worker."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as resp:
        body = resp.read().decode()
    return next((s.value for family in text_string_to_metric_families(body)
                 for s in family.samples if s.name == "pwevent_source_mapping_problems_total"
                 and s.labels.get("problem") == "unsupported_schema"), None)


def run_until_released(bootstrap: str, prefix: str, conf: Path, data: Path, log: Path,
                       group: str, source: str, topics: Topics,
                       slots: set[int]) -> tuple[list[dict], float | None]:
    """Start a worker, wait until it consumed the source and released ``slots``, and stop it;
    the releases seen and its count of refused schemas. Fails unless the worker was still
    running by then; stops it whatever happens."""
    port = free_port()
    worker = start(bootstrap, prefix, conf, data, log, port)
    try:
        consumed = asyncio.run(wait_consumed(bootstrap, group, source, SOURCE_PARTS, 90,
                                             alive=lambda: worker.poll() is None))
        docs = wait_for_slots(bootstrap, topics, slots, 90, worker) if consumed else []
        alive = worker.poll() is None
        counted = refusals_counted(port) if alive else None
    finally:
        stop_worker(worker)
    text = log.read_text()
    assert consumed and alive, (f"the worker stopped (exit code {worker.returncode}) or did "
                                f"not consume {source}:\n{text[-3000:]}")
    return docs, counted


def test_a_recursive_writer_schema_cannot_crash_the_worker(broker, registry, tmp_path):
    prefix, source = "avropoison", "app-events-avro-poison"
    cfg = config(prefix, stream="app", domain=DOMAIN, slot_ms=SLOT, origin_ms=ORIGIN,
                 lateness_ms=4 * SLOT, secret="test-secret", default_levels=LEVELS)
    topics = setup_topics(broker.bootstrap, cfg)
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("app", source, SOURCE_PARTS)]))
    kind = type(broker).__name__
    v1 = registry.register(f"{source}-{kind}-value", EVENT)
    node = registry.register(f"attacker-{kind}-value", NODE)
    assert node != v1
    poison = [nested_node(node, DEPTH, ORIGIN + SLOT + 1),
              nested_node(node, DEPTH, ORIGIN + 4 * SLOT + 1)]
    conf = tmp_path / "pwevent.toml"
    conf.write_text(CONFIG.format(origin=ORIGIN, source=source, registry=registry.url))
    data, group = tmp_path / "data", cfg.app_id()
    # slots 0-3 with the first poisoned record among them
    produce_source(broker.bootstrap, source, with_poison(good_events(v1, range(4)), 0,
                                                         poison[0]))
    first_log = tmp_path / "worker-1.log"
    docs, counted = run_until_released(broker.bootstrap, prefix, conf, data, first_log, group,
                                       source, topics, set(range(4)))
    assert sorted(d["slot"] for d in docs) == list(range(4)), first_log.read_text()[-3000:]
    assert counted == 1
    # started again on the same data directory: slots 4-5, and the second poisoned record
    produce_source(broker.bootstrap, source, with_poison(good_events(v1, range(4, 6)), 1,
                                                         poison[1]))
    second_log = tmp_path / "worker-2.log"
    docs, counted = run_until_released(broker.bootstrap, prefix, conf, data, second_log, group,
                                       source, topics, set(range(6)))
    assert counted == 1
    # every slot released exactly once
    slots = Counter(orjson.loads(v)["slot"] for _k, v in read_all(broker.bootstrap,
                                                                 topics.releases, 1))
    assert slots == dict.fromkeys(range(6), 1), slots
    # the poisoned records are dead letters unsupported_schema, each once; nothing else is
    dead = [orjson.loads(v) for _k, v in read_all(broker.bootstrap, topics.dead_letters, 1)]
    from_source = [d for d in dead if d["topic"] == source]
    # (their values longer than a dead letter keeps: the leading bytes, the size and hash)
    assert sorted((d["value"], d["truncated"]["value_bytes"], d["truncated"]["sha256"])
                  for d in from_source) == sorted(
        (base64.b64encode(v[:DEAD_LETTER_PAYLOAD_BYTES]).decode(), len(v),
         hashlib.sha256(v).hexdigest()) for v in poison)
    assert {d["reason"] for d in from_source} == {"unsupported_schema"}, from_source
    why = (f"schema id {node} is refused: recursive: the named type attacker.Node can contain "
           "itself (attacker.Node -> attacker.Node)")
    assert {d["detail"] for d in from_source} == {why}
    assert {d["reason"] for d in dead if d["topic"] != source} <= {"duplicate_in_slot"}
    # each worker said it once, as an error
    for log in (first_log, second_log):
        text = log.read_text()
        said = [line for line in text.splitlines() if why in line]
        assert len(said) == 1 and "ERROR" in said[0], text[-3000:]
    # the good records were re-keyed, and released as the in-process run of them releases
    records = timestamped_records(broker.bootstrap, source, SOURCE_PARTS)
    mapping = SourceMapping.from_flags("device.id", "ts", ["country"], DOMAIN)
    decoder = AvroSource(SchemaRegistry(registry.url))
    mapped = []
    for p in range(SOURCE_PARTS):
        recs = [r for r in records if r[2] == p]
        b = asyncio.run(decoder.map(mapping, recs))
        assert [r.reason.value for r in b.rejected] == ["unsupported_schema"] * sum(
            r[1] in poison for r in recs)
        for j, user in enumerate(b.users):
            mapped.append((user.encode(), report_value(user, int(b.times[j]), b.values[j],
                                                       (0, p, recs[int(b.index[j])][3]))))
    assert len(mapped) == len(records) - len(poison)
    reports = {(k, v) for k, v in read_all(broker.bootstrap, topics.reports, cfg.partitions)
               if k is not None}
    # every (user, slot)'s report that counts was re-keyed, and no report was made up
    assert slot_winners(mapped, SLOT, ORIGIN) <= reports <= set(mapped)
    reqs = read_all(broker.bootstrap, topics.requirements, cfg.partitions)
    job = InProcessJob(cfg.__class__(**{**cfg.__dict__,
                                        "nonce": job_nonce(broker.bootstrap, topics, "app")}))
    job.register(reqs)
    # a partition keeps each user's report of a slot with the smallest (event time, source
    # position), the in-process job the first it is fed
    job.feed(sorted(mapped, key=lambda r: (orjson.loads(r[1])["time"],
                                           orjson.loads(r[1])["source"])))
    job.finish(ORIGIN + 6 * SLOT)
    raw = [v for _k, v in read_all(broker.bootstrap, topics.releases, 1)]
    assert sorted(raw, key=lambda v: orjson.loads(v)["slot"]) == job.releases
