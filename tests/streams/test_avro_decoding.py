"""Avro source records (streams/job/source/avro.py, streams/job/source/schema_registry.py)
against a real schema registry (Apicurio Registry, tests/schema_registry.py): decoding the
Confluent wire format, the mapping by the same dotted paths as JSON, and every way a record can
fail, each a rejection with its reason at its own position, never an exception and never a
silent drop."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastavro import parse_schema, schemaless_writer
from schema_registry import SchemaRegistryServer, wire

from local_kafka.embedded import free_port
from streams.job.source.avro import AvroSource
from streams.job.source.mapping import SourceMapping
from streams.job.source.schema_registry import (
    RegistryUnavailable,
    SchemaRegistry,
    UnknownSchema,
    without_logical_types,
)

LABELS = {"kind": "labels", "labels": ["DE", "FR", "other"], "other": "other"}
DEVICE = {"type": "record", "name": "Device", "namespace": "app",
          "fields": [{"name": "id", "type": "string"}]}
EVENT = {"type": "record", "name": "AppEvent", "namespace": "app", "fields": [
    {"name": "device", "type": DEVICE},
    {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    {"name": "country", "type": ["null", "string"], "default": None},
]}
#: the next version: the device has a model, an app version is added
EVENT_V2 = {**EVENT, "fields": [
    {"name": "device", "type": {**DEVICE, "fields": [*DEVICE["fields"],
                                                    {"name": "model", "type": "string"}]}},
    *EVENT["fields"][1:], {"name": "app", "type": "string", "default": "?"}]}
TS = 1764756900123  # 2025-12-03T10:15:00.123Z


def encode(schema: dict[str, Any], schema_id: int, datum: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), datum)
    return wire(schema_id, out.getvalue())


def recs(*values: bytes | None) -> list[tuple]:
    return [(None, v, 2, 50 + i, 7) for i, v in enumerate(values)]


@pytest.fixture(scope="module")
def registry() -> Iterator[SchemaRegistryServer]:
    with SchemaRegistryServer() as server:
        yield server


@pytest.fixture(scope="module")
def ids(registry: SchemaRegistryServer) -> dict[str, int]:
    return {"v1": registry.register("app-events-value", EVENT),
            "v2": registry.register("app-events-value", EVENT_V2),
            "string": registry.register("names-value", {"type": "string"})}


def mapped(registry: SchemaRegistryServer, records: list[tuple], **kw: Any):
    m = SourceMapping.from_flags("device.id", "ts", ["country"], LABELS)
    source = AvroSource(SchemaRegistry(registry.url, **kw))
    return asyncio.run(source.map(m, records)), source


def test_wire_format_records_of_two_schema_versions_map_by_dotted_paths(registry, ids):
    batch, source = mapped(registry, recs(
        encode(EVENT, ids["v1"], {"device": {"id": "d17"}, "ts": TS, "country": "DE"}),
        encode(EVENT_V2, ids["v2"], {"device": {"id": "d18", "model": "x"}, "ts": TS + 1,
                                     "country": "FR", "app": "7.2"}),
        encode(EVENT, ids["v1"], {"device": {"id": "d19"}, "ts": TS + 2, "country": "US"})))
    assert batch.rejected == []
    assert batch.index.tolist() == [0, 1, 2]
    assert batch.users == ["d17", "d18", "d19"]
    # timestamp-millis is read as the epoch ms it encodes
    assert batch.times.tolist() == [TS, TS + 1, TS + 2]
    assert batch.values == ["DE", "FR", "other"] and batch.cells.tolist() == [0, 1, 2]
    assert set(source.registry.schemas) == {ids["v1"], ids["v2"]}


def test_every_bad_record_is_rejected_with_its_reason_at_its_position(registry, ids):
    good = encode(EVENT, ids["v1"], {"device": {"id": "d1"}, "ts": TS, "country": "DE"})
    unknown = max(ids.values()) + 1000
    batch, _ = mapped(registry, recs(
        good,
        None,                                              # a tombstone
        b"\0\0\0",                                         # shorter than the header
        b'{"device": {"id": "d2"}}',                       # JSON, not the wire format
        wire(ids["v1"], good[5:-3]),                       # the body cut short
        good + b"\x00\x02",                                # bytes after the datum
        wire(unknown, good[5:]),                           # an id the registry never gave
        encode({"type": "string"}, ids["string"], "d3"),   # a datum that is no record
        encode(EVENT, ids["v1"], {"device": {"id": "d4"}, "ts": TS, "country": None}),
        encode(EVENT, ids["v1"], {"device": {"id": ""}, "ts": TS, "country": "FR"}),
        good))
    assert batch.index.tolist() == [0, 10]
    assert [(r.index, r.reason.value) for r in batch.rejected] == [
        (1, "malformed_avro"), (2, "malformed_avro"), (3, "malformed_avro"),
        (4, "malformed_avro"), (5, "malformed_avro"), (6, "unknown_schema"), (7, "bad_type"),
        (8, "bad_type"), (9, "bad_type")]
    detail = {r.index: r.detail for r in batch.rejected}
    assert detail[1] == "empty value (tombstone)"
    assert "shorter than the Confluent wire format's 5-byte header" in detail[2]
    assert detail[3].startswith("magic byte 123, not 0")
    assert f"does not decode with schema id {ids['v1']}" in detail[4]
    assert detail[5] == f"2 bytes after the datum of schema id {ids['v1']}"
    assert detail[6] == f"schema id {unknown} is not in the registry"
    assert "must be an Avro record, not string" in detail[7]


def test_a_schema_that_is_not_avro_is_an_unknown_schema(registry):
    proto = 'syntax = "proto3";\nmessage AppEvent { string country = 1; }\n'
    proto_id = registry.request("POST", "/subjects/proto-events-value/versions",
                                {"schemaType": "PROTOBUF", "schema": proto})["id"]
    client = SchemaRegistry(registry.url)
    with pytest.raises(UnknownSchema, match=f"schema id {proto_id} is a PROTOBUF schema, not "
                                            "Avro"):
        client.fetch(proto_id)
    batch, _ = mapped(registry, recs(wire(proto_id, b"\x00\x0a\x02DE")))
    assert [(r.reason.value, r.detail) for r in batch.rejected] == [
        ("unknown_schema", f"schema id {proto_id} is a PROTOBUF schema, not Avro")]


def test_schema_references_are_fetched_and_parsed_first(registry):
    registry.register("device-value", DEVICE)
    event = {**EVENT, "fields": [{"name": "device", "type": "app.Device"}, *EVENT["fields"][1:]]}
    sid = registry.register("referencing-value", event, references=[
        {"name": "app.Device", "subject": "device-value", "version": 1}])
    batch, _ = mapped(registry, recs(
        encode(EVENT, sid, {"device": {"id": "d7"}, "ts": TS, "country": "FR"})))
    assert batch.rejected == [] and batch.users == ["d7"] and batch.values == ["FR"]


def test_schemas_are_cached_by_id_and_an_outage_is_reported_once(caplog):
    """A registry that stops: ids fetched before still decode; a new id is schema_unavailable,
    reported once per outage, without asking the stopped registry again for ``retry_s``; once
    it answers again the id decodes."""
    now = [0.0]
    reports: list[str] = []
    with SchemaRegistryServer() as server:
        v1 = server.register("events-value", EVENT)
        client = SchemaRegistry(server.url, retry_s=30, report=reports.append,
                                clock=lambda: now[0])
        source = AvroSource(client)
        m = SourceMapping.from_flags("device.id", "ts", ["country"], LABELS)
        first = encode(EVENT, v1, {"device": {"id": "d1"}, "ts": TS, "country": "DE"})
        assert asyncio.run(source.map(m, recs(first))).users == ["d1"]
        server.stop()
        newer = encode(EVENT_V2, v1 + 1, {"device": {"id": "d2", "model": "m"}, "ts": TS,
                                          "country": "FR", "app": "1"})
        for _ in range(3):
            batch = asyncio.run(source.map(m, recs(first, newer)))
            assert batch.users == ["d1"]  # its schema is cached
            assert [(r.index, r.reason.value) for r in batch.rejected] == [
                (1, "schema_unavailable")]
        assert len(reports) == 1 and f"schema registry {server.url} cannot be reached" \
            in reports[0]
        server.start()
        assert server.register("events-value", EVENT) == v1  # in memory: registered anew
        assert server.register("events-value", EVENT_V2) == v1 + 1
        # within retry_s the registry is not asked again
        assert [r.reason.value for r in asyncio.run(source.map(m, recs(newer))).rejected] == [
            "schema_unavailable"]
        now[0] += 31
        with caplog.at_level(logging.WARNING, logger="pwevent.source"):
            assert asyncio.run(source.map(m, recs(newer))).users == ["d2"]
        assert f"schema registry {server.url} answers again" in caplog.text
        server.stop()
        now[0] += 31
        unknown = wire(v1 + 2, newer[5:])
        assert [r.reason.value for r in asyncio.run(source.map(m, recs(unknown))).rejected] == [
            "schema_unavailable"]
        assert len(reports) == 2  # a second outage, said again


def test_a_registry_nobody_listens_on_is_unavailable_not_an_exception():
    client = SchemaRegistry(f"http://127.0.0.1:{free_port()}/apis/ccompat/v7", timeout=2)
    with pytest.raises(RegistryUnavailable, match="ConnectionRefused|Connection refused"):
        client.fetch(1)
    batch = asyncio.run(AvroSource(client).map(
        SourceMapping.from_flags("u", None, ["v"], LABELS), recs(wire(1, b"\x02a"))))
    assert [r.reason.value for r in batch.rejected] == ["schema_unavailable"]


def test_logical_types_are_dropped_before_parsing():
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "t", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "u", "type": ["null", {"type": "string", "logicalType": "uuid"}]}]}
    assert without_logical_types(schema) == {"type": "record", "name": "R", "fields": [
        {"name": "t", "type": {"type": "long"}}, {"name": "u", "type": ["null",
                                                                       {"type": "string"}]}]}


# -- the worker's flags ----------------------------------------------------------------------------

def test_avro_flags_from_the_command_line_and_the_config_file():
    from streams.job.config import JobConfig
    from streams.job.source.options import source_settings
    from tests.jobkit import parse_worker_args as parse

    cfg = JobConfig(domain=LABELS)
    conf = {"worker": {"source-topic": ["a"], "user-field": "device.id",
                       "value-field": ["country"], "source-format": "avro",
                       "schema-registry": "http://127.0.0.1:8081/apis/ccompat/v7/"}}
    got = source_settings(parse([], conf), cfg)
    assert got.source_format == "avro"
    assert got.schema_registry == "http://127.0.0.1:8081/apis/ccompat/v7"
    got = source_settings(parse(["--source-format", "json"], {"worker": {
        k: v for k, v in conf["worker"].items() if k != "schema-registry"}}), cfg)
    assert got.source_format == "json" and got.schema_registry is None
    base = ["--source-topic", "a", "--user-field", "u", "--value-field", "v"]
    for argv, why in ((["--source-format", "avro"], "need --source-topic"),
                      ([*base, "--source-format", "avro"], "needs --schema-registry URL"),
                      ([*base, "--schema-registry", "http://h:1"], "needs --source-format avro"),
                      ([*base, "--source-format", "avro", "--schema-registry", "h:1"],
                       "must be an http:// or https:// URL")):
        with pytest.raises(ValueError, match=why):
            source_settings(parse(argv), cfg)
    with pytest.raises(SystemExit):
        parse([*base, "--source-format", "protobuf"])
