"""No input record can make a decoder of the job raise: byte-level fuzzing of every JSON decoder
the job runs on input (the reports' typed and per-record paths, a source topic's typed and
general mapping, requirements a batch at a time and one by one, watermark records), with deep
nesting, huge lengths, truncated and invalid UTF-8 bytes, numbers beyond every range and
duplicate keys. On every input the fast path and the per-record path agree, and every record is
either taken or rejected with a reason, once. The bounds of :mod:`streams.records.json_limits`
and the bisection of :mod:`streams.job.isolation` are tested here too."""

from __future__ import annotations

import json
import sys

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.job.config import JobConfig
from streams.job.isolation import isolated
from streams.job.partitions.accumulator import PartitionAccumulator, watermark_of
from streams.job.partitions.admission import admit_requirement, admit_requirements
from streams.job.roles import make_accumulator, make_registry
from streams.job.source.mapping import SourceMapping
from streams.records.domains import CellDomain
from streams.records.field_formats import Reason
from streams.records.field_parsing import RecordError
from streams.records.json_limits import MAX_JSON_DEPTH, MAX_RECORD_BYTES, json_depth, screen_one
from streams.records.report_parsing import parse_reports

NUMBERS = [b"1e400", b"-1e400", b"1180591620717411303424", b"-0", b"0.0000001e-400",
           b"18446744073709551616", b"9007199254740993", b"1e308", b"NaN", b"Infinity", b"-"]


def nest(depth: int, kind: str) -> bytes:
    """A JSON value nested ``depth`` deep: arrays, objects, or both in turn."""
    if kind == "array":
        return b"[" * depth + b"1" + b"]" * depth
    if kind == "object":
        return b'{"a":' * depth + b"1" + b"}" * depth
    opens = [b"[" if i % 2 else b'{"a":' for i in range(depth)]
    closes = [b"]" if i % 2 else b"}" for i in reversed(range(depth))]
    return b"".join(opens) + b"1" + b"".join(closes)


DEPTHS = st.sampled_from([1, 2, MAX_JSON_DEPTH - 2, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH,
                          MAX_JSON_DEPTH + 1, 100, 1_000, 5_000, 50_000])


@st.composite
def hostile(draw: st.DrawFn, base: bytes, fields: tuple[bytes, ...]) -> bytes | None:
    """``base`` (a valid record) with one hostile change, or bytes of its own."""
    kind = draw(st.sampled_from(["as is", "deep", "truncated", "utf8", "number", "duplicate",
                                 "long", "binary", "none", "deep string"]))
    if kind == "as is":
        return base
    if kind == "none":
        return None
    if kind == "binary":
        return draw(st.binary(max_size=64))
    if kind == "truncated":
        return base[:draw(st.integers(0, len(base)))]
    if kind == "utf8":
        at = draw(st.integers(0, len(base)))
        return base[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"])) \
            + base[at:]
    field = draw(st.sampled_from(fields))
    if kind == "number":
        value = draw(st.sampled_from(NUMBERS))
    elif kind == "deep":
        value = nest(draw(DEPTHS), draw(st.sampled_from(["array", "object", "mixed"])))
    elif kind == "deep string":  # brackets inside a string are no nesting
        value = b'"' + b"[{" * draw(DEPTHS) + b'\\"]"'
    elif kind == "long":
        value = b'"' + b"x" * draw(st.sampled_from([300, 70_000, 300_000])) + b'"'
    else:  # a duplicate key: the last one counts for both parsers
        return base[:-1] + b',"' + field + b'":' + draw(st.sampled_from(NUMBERS)) + b"}"
    doc = orjson.loads(base)
    marker = "@@VALUE@@"
    if field in (b"extra", b"deep.extra"):
        doc["extra"] = marker
    else:
        doc[field.decode()] = marker
    return orjson.dumps(doc).replace(f'"{marker}"'.encode(), value)


REPORT = b'{"user":"u1","time":1000,"value":1}'
REPORT_FIELDS = (b"user", b"time", b"value", b"extra", b"source")


@settings(max_examples=300, deadline=None)
@given(st.lists(hostile(REPORT, REPORT_FIELDS), max_size=12), st.booleans())
def test_report_decoding_never_raises_and_both_paths_agree(values: list, keyed: bool) -> None:
    keys = [b"u1" if v is not None else None for v in values] if keyed else None
    fast = parse_reports(values, CellDomain(4), keys)
    whole = parse_reports(values, CellDomain(4), keys, typed=False)
    assert fast.index.tolist() == whole.index.tolist()
    assert fast.users.tolist() == whole.users.tolist()
    assert fast.times.tolist() == whole.times.tolist()
    assert fast.cells.tolist() == whole.cells.tolist()
    assert fast.rejected == whole.rejected
    outcome = fast.index.tolist() + [r.index for r in fast.rejected]
    assert sorted(outcome) == list(range(len(values))), "every record once: taken or rejected"
    for r in fast.rejected:
        raw = values[r.index]
        if raw is not None and len(raw) <= MAX_RECORD_BYTES and json_depth(raw) > MAX_JSON_DEPTH:
            assert r.reason is Reason.TOO_DEEP


SOURCE = b'{"device":{"id":"d1","extra":1},"ts":1764756900000,"country":"DE"}'
SOURCE_FIELDS = (b"device", b"ts", b"country", b"extra")
MAPPING = SourceMapping.from_flags("device.id", "ts", ["country"],
                                   {"kind": "labels", "labels": ["DE", "FR", "other"],
                                    "other": "other"})


@settings(max_examples=300, deadline=None)
@given(st.lists(hostile(SOURCE, SOURCE_FIELDS), max_size=12),
       st.sampled_from([(), (("device", "extra"),)]))
def test_source_mapping_never_raises_and_both_paths_agree(values: list, extra: tuple) -> None:
    records = [(None, v, 0, i, 1_764_756_900_000 + i) for i, v in enumerate(values)]
    fast, general = MAPPING.map(records, extra), MAPPING.map(records, extra, typed=False)
    assert fast.index.tolist() == general.index.tolist()
    assert fast.users == general.users
    assert fast.times.tolist() == general.times.tolist()
    assert json.dumps(fast.values) == json.dumps(general.values)
    assert fast.rejected == general.rejected
    assert json.dumps(fast.extras) == json.dumps(general.extras)
    assert sorted(fast.index.tolist() + [r.index for r in fast.rejected]) == \
        list(range(len(values)))


CONFIG = JobConfig(stream="s", mechanism="pbd", domain={"kind": "cells", "size": 3},
                   slot_ms=1000, partitions=1, secret="k", event_time="history")
REQUIREMENT = b'{"user":"u1","w":4,"E":1.0}'
REQUIREMENT_FIELDS = (b"user", b"w", b"E", b"extra")


@settings(max_examples=300, deadline=None)
@given(st.lists(hostile(REQUIREMENT, REQUIREMENT_FIELDS), max_size=12))
def test_requirement_decoding_never_raises_and_batches_agree_with_records(values: list) -> None:
    keys = [b"u1"] * len(values)
    batch = admit_requirements(keys, values, 0, CONFIG)
    for i, value in enumerate(values):
        try:
            alone = admit_requirement(b"u1", value, 0, CONFIG)
        except RecordError as exc:
            assert batch.errors[i].reason is exc.reason, (value, batch.errors[i], exc)
        else:
            assert i not in batch.errors
            assert batch.users[i] == alone.user


@settings(max_examples=200, deadline=None)
@given(hostile(b'{"watermark":5000,"mac":"00"}', (b"watermark", b"mac", b"extra")))
def test_a_watermark_record_never_raises_but_as_a_refused_control(value: bytes | None) -> None:
    try:
        assert watermark_of((None, value, 0, 0), b"k", "s") is None
    except RecordError as exc:
        assert exc.reason is Reason.UNAUTHENTICATED_CONTROL


# -- the bounds ------------------------------------------------------------------------------

JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.text(alphabet='[]{}"\\ab,:é')),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(alphabet='[]{}"\\a', max_size=3), inner,
                                            max_size=3)),
    max_leaves=30)


def depth_of(doc: object) -> int:
    if isinstance(doc, list):
        return 1 + max((depth_of(x) for x in doc), default=0)
    if isinstance(doc, dict):
        return 1 + max((depth_of(x) for x in doc.values()), default=0)
    return 0


@settings(max_examples=500, deadline=None)
@given(JSON)
def test_the_depth_scan_is_exact_on_json_with_brackets_and_escapes_in_strings(doc) -> None:
    raw = json.dumps(doc, ensure_ascii=False).encode()
    assert json_depth(raw) == depth_of(doc)


def test_records_within_the_bounds_pass_and_the_others_are_refused_before_decoding() -> None:
    at_bound = b'{"user":"u","time":1,"value":' + nest(MAX_JSON_DEPTH - 1, "array") + b"}"
    assert json_depth(at_bound) == MAX_JSON_DEPTH
    assert screen_one(at_bound) is None
    over = b'{"user":"u","time":1,"value":' + nest(MAX_JSON_DEPTH, "array") + b"}"
    assert screen_one(over)[0] is Reason.TOO_DEEP
    many = b'{"user":"u","time":1,"value":[' + b",".join([b"[1]"] * 500) + b"]}"
    assert screen_one(many) is None, "many brackets side by side are no depth"
    big = b'{"user":"u","time":1,"value":"' + b"x" * MAX_RECORD_BYTES + b'"}'
    assert screen_one(big)[0] is Reason.TOO_LARGE


def test_a_thousand_nested_brackets_are_a_dead_letter_not_a_crash() -> None:
    """The record that stopped every worker: 1,000 nested brackets in a report's value, with
    the recursion limit as low as a deep stack leaves it."""
    poison = b'{"user":"u0","time":5,"value":' + nest(1_000, "array") + b"}"
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(200)
    try:
        batch = parse_reports([poison, b'{"user":"u1","time":5,"value":1}'], CellDomain(4))
    finally:
        sys.setrecursionlimit(limit)
    assert batch.users.tolist() == ["u1"]
    assert [(r.index, r.reason) for r in batch.rejected] == [(0, Reason.TOO_DEEP)]


# -- isolation -------------------------------------------------------------------------------

@settings(max_examples=200, deadline=None)
@given(st.integers(1, 200), st.sets(st.integers(0, 199), max_size=8))
def test_bisection_takes_out_exactly_the_items_that_fail(n: int, bad: set[int]) -> None:
    bad = {b for b in bad if b < n}

    def step(items: list[int]) -> list[int]:
        if any(i in bad for i in items):
            raise ValueError("bad item")
        return [i * 2 for i in items]

    keep, result, rejected = isolated(list(range(n)), step, lambda i: ("t", 0, i))
    assert keep == [i for i in range(n) if i not in bad]
    assert result == [i * 2 for i in keep]
    assert [r.index for r in rejected] == sorted(bad)
    assert all(r.reason is Reason.UNPROCESSABLE and "ValueError" in r.detail for r in rejected)


def test_a_step_failing_with_no_item_to_blame_still_raises() -> None:
    def step(items: list[int]) -> int:
        if len(items) > 1:
            raise RuntimeError("a fault of the step")
        return 0

    with pytest.raises(RuntimeError):
        isolated([1, 2, 3], step, lambda i: ("t", 0, i))


class _Trap(CellDomain):
    """A domain whose mapping raises on one value: a fault in decoding nobody foresaw."""

    def map_values(self, values):  # type: ignore[no-untyped-def]
        if 2 in values:
            raise ZeroDivisionError("unforeseen")
        return super().map_values(values)


def test_a_record_that_makes_decoding_raise_is_taken_out_of_its_batch(caplog) -> None:
    """The accumulator meets a record its decoding raises on: that record is a dead letter
    (``unprocessable``, logged with its topic, partition and offset), every other record of
    the batch is counted, and the partition's offset moves past the batch."""
    registry = make_registry(CONFIG, 0)
    registry.apply_batch([b"u0", b"u1", b"u2"], [orjson.dumps({"user": u, "w": 4, "E": 1.0})
                                                   for u in ("u0", "u1", "u2")])
    acc: PartitionAccumulator = make_accumulator(0, CONFIG, registry)
    acc.domain = _Trap(3)
    records = [(f"u{i}".encode(), orjson.dumps({"user": f"u{i}", "time": 10, "value": i}), 0,
                40 + i) for i in range(3)]
    _partials, dead = acc.process(records, "pw.reports")
    assert [(d.offset, d.reason) for d in dead] == [(42, "unprocessable")]
    assert "ZeroDivisionError" in dead[0].detail
    assert acc.accepted == {0: 2}
    assert acc.next_offset == 43
    assert "pw.reports[0] offset 42" in caplog.text
    assert np.asarray(list(acc.seen[0][:2])).all()


def test_an_avro_record_that_makes_mapping_raise_is_taken_out_of_its_batch() -> None:
    """The same for a decoded Avro source record: the record the mapping raises on is an
    ``unprocessable`` dead letter, its neighbours are mapped."""
    import asyncio
    import io
    from types import SimpleNamespace

    from fastavro import parse_schema, schemaless_writer

    from streams.job.source.avro import AvroSource

    schema = parse_schema({"type": "record", "name": "E", "fields": [
        {"name": "u", "type": "string"}, {"name": "t", "type": "long"},
        {"name": "v", "type": "long"}]})

    def wire(doc: dict) -> bytes:
        body = io.BytesIO()
        schemaless_writer(body, schema, doc)
        return b"\0" + (7).to_bytes(4, "big") + body.getvalue()

    mapping = SourceMapping.from_flags("u", "t", ["v"], {"kind": "cells", "size": 3})
    object.__setattr__(mapping, "_domain", _Trap(3))  # a fault nobody foresaw
    records = [(None, wire({"u": f"d{i}", "t": 1_764_756_900_000, "v": i}), 0, 10 + i,
                1_764_756_900_000) for i in range(3)]
    source = AvroSource(SimpleNamespace(schemas={7: schema}, refused={}))  # type: ignore[arg-type]
    batch = asyncio.run(source.map(mapping, records, (), "events"))
    assert batch.users == ["d0", "d1"] and batch.index.tolist() == [0, 1]
    assert [(r.index, r.reason) for r in batch.rejected] == [(2, Reason.UNPROCESSABLE)]
