"""Which Avro writer schemas a source accepts (streams/job/source/schema_registry.py,
``schema_refusal``) and how bounded decoding is with the accepted ones (streams/job/source/avro.py).

A schema in which a named type can contain itself, that nests deeper than ``MAX_DEPTH`` or that
decodes to far more values than its body has bytes is refused before anything is decoded with
it: its records are dead letters ``unsupported_schema``, the refusal is kept for good and said
once per id. With an accepted schema no body, however hostile (random bytes, cut short, lengths
and item counts of 2**40 and 2**62), makes decoding raise, go deep or allocate much: every
record is decoded or rejected with a reason."""

from __future__ import annotations

import asyncio
import io
import tracemalloc
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from app_event_schemas import EVENT as APP_EVENT
from app_event_schemas import EVENT_V2 as APP_EVENT_V2
from fastavro import parse_schema, schemaless_writer
from hypothesis import given, settings
from hypothesis import strategies as st
from schema_registry import wire
from test_avro_decoding import DEVICE
from test_avro_decoding import EVENT as DECODED_EVENT
from test_avro_decoding import EVENT_V2 as DECODED_EVENT_V2

from streams.job.source.avro import UNDECODED, AvroSource
from streams.job.source.schema_registry import (
    MAX_DEPTH,
    SPARE_VALUES,
    VALUES_PER_BYTE,
    SchemaRegistry,
    UnsupportedSchema,
    schema_refusal,
    without_logical_types,
)
from streams.records.field_formats import Reason


def record(name: str, *fields: tuple[str, Any], **attrs: Any) -> dict[str, Any]:
    return {"type": "record", "name": name, **attrs,
            "fields": [{"name": n, "type": t} for n, t in fields]}


def chain(depth: int, leaf: Any = "int") -> Any:
    """Records nested ``depth`` deep, the innermost holding a ``leaf``."""
    schema = leaf
    for i in range(depth):
        schema = record(f"R{i}", ("f", schema))
    return schema


def zigzag(n: int) -> bytes:
    """``n`` as an Avro long: zig-zag, then base-128 varint."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


NODE = record("Node", ("id", "string"), ("next", ["null", "Node"]))
KITCHEN = record(
    "Kitchen", ("id", "string"), ("n", "long"), ("x", "double"), ("raw", "bytes"),
    ("flag", "boolean"), ("opt", ["null", "string", "long"]),
    ("tags", {"type": "array", "items": "string"}),
    ("attrs", {"type": "map", "values": ["null", "int"]}),
    ("kind", {"type": "enum", "name": "Kind", "symbols": ["a", "b"]}),
    ("hash", {"type": "fixed", "name": "Hash", "size": 4}),
    ("items", {"type": "array", "items": record("Item", ("k", "Kind"), ("v", "float"))}),
    ("more", {"type": "array", "items": "Item"}), namespace="k")
ORDINARY = {
    "the end-to-end app event": APP_EVENT,
    "its second version": APP_EVENT_V2,
    "the decoding tests' event": DECODED_EVENT,
    "and its second version": DECODED_EVENT_V2,
    "a string": {"type": "string"},
    "every kind of type": KITCHEN,
    "optional records": record("A", ("b", ["null", record("B", ("c", ["null", "long"]))])),
    "a named type used twice": record("Pair", ("a", DEVICE), ("b", "app.Device"),
                                      namespace="app"),
    "records nested to the bound": chain(MAX_DEPTH),
    "a map of nulls": {"type": "map", "values": "null"},
}


# -- the analysis --------------------------------------------------------------------------------

@pytest.mark.parametrize("schema", ORDINARY.values(), ids=ORDINARY.keys())
def test_ordinary_schemas_are_accepted(schema):
    assert schema_refusal(schema) is None
    parse_schema(schema)  # and they are Avro


def test_a_record_reaching_itself_directly_is_refused():
    assert schema_refusal(NODE) == ("recursive: the named type Node can contain itself "
                                    "(Node -> Node)")
    for field in ("Node", {"type": "array", "items": "Node"}, {"type": "map", "values": "Node"}):
        why = schema_refusal(record("Node", ("next", field)))
        assert why is not None and "(Node -> Node)" in why, field


@pytest.mark.parametrize("back", [["null", "A"], {"type": "array", "items": "A"},
                                  {"type": "map", "values": "x.A"},
                                  ["null", {"type": "array", "items": {"type": "map",
                                                                       "values": "A"}}]],
                         ids=["union", "array", "map", "union-array-map"])
def test_mutual_recursion_is_refused(back):
    schema = record("A", ("b", record("B", ("a", back))), namespace="x")
    assert schema_refusal(schema) == ("recursive: the named type x.A can contain itself "
                                      "(x.A -> x.B -> x.A)")
    assert set(parse_schema(schema)["__named_schemas"]) == {"x.A", "x.B"}  # fastavro's names


def test_recursion_through_a_referenced_schema_is_refused():
    node = {**NODE, "namespace": "lib"}
    outer = record("Outer", ("head", ["null", "lib.Node"]), namespace="app")
    why = schema_refusal(outer, [node])
    assert why == "recursive: the named type lib.Node can contain itself (lib.Node -> lib.Node)"
    # through two references: lib.Tree's children are lib.Forest, whose trees are lib.Tree
    forest = record("Forest", ("trees", {"type": "array", "items": "Tree"}), namespace="lib")
    tree = record("Tree", ("children", ["null", "lib.Forest"]), namespace="lib")
    why = schema_refusal(record("Top", ("t", "lib.Tree")), [forest, tree])
    assert why is not None and "lib.Tree -> lib.Forest -> lib.Tree" in why
    # a referenced schema is checked even where the schema does not use it
    assert schema_refusal(record("Top", ("id", "string")), [node]) is not None
    assert schema_refusal(outer, [record("Node", ("id", "string"), namespace="lib")]) is None


def test_names_resolve_by_namespace():
    # the same short name in two namespaces: two types, no recursion
    inner = record("Item", ("v", "int"), namespace="b")
    schema = record("Item", ("inner", inner), ("again", "b.Item"), namespace="a")
    assert schema_refusal(schema) is None
    assert set(parse_schema(schema)["__named_schemas"]) == {"a.Item", "b.Item"}
    # a short name is resolved in the enclosing namespace: a.Item itself
    assert "a.Item -> a.Item" in schema_refusal(record("Item", ("next", ["null", "Item"]),
                                                       namespace="a"))
    # a name with a dot is full and sets the namespace its fields are in
    dotted = record("x.Node", ("next", ["null", "Node"]), namespace="y")
    assert "x.Node -> x.Node" in schema_refusal(dotted)
    assert set(parse_schema(dotted)["__named_schemas"]) == {"x.Node"}
    # a nested record without a namespace is in its enclosing record's
    nested = record("Outer", ("in", record("Inner", ("up", ["null", "Outer"]))), namespace="a")
    assert "a.Outer -> a.Inner -> a.Outer" in schema_refusal(nested)
    # with a namespace of its own, "Outer" there is b.Outer: another (undefined) type
    other = record("Outer", ("in", record("Inner", ("up", ["null", "Outer"]), namespace="b")),
                   namespace="a")
    assert schema_refusal(other) is None


def test_schemas_nested_deeper_than_the_bound_are_refused():
    too_deep = f"records, arrays, maps and unions nest more than {MAX_DEPTH} deep"
    assert schema_refusal(chain(MAX_DEPTH)) is None
    assert schema_refusal(chain(MAX_DEPTH + 1)) == too_deep
    arrays: Any = "long"
    for _ in range(MAX_DEPTH - 1):
        arrays = {"type": "array", "items": arrays}
    assert schema_refusal(record("R", ("a", arrays))) is None
    assert schema_refusal(record("R", ("a", {"type": "array", "items": arrays}))) == too_deep
    unions: Any = "long"
    for i in range(MAX_DEPTH // 2):
        unions = ["null", record(f"U{i}", ("u", unions))]
    assert schema_refusal(unions) is None
    assert schema_refusal(["null", record("Top", ("u", unions))]) == too_deep
    # a named type deep enough where it is defined, used again deeper
    deep = chain(MAX_DEPTH - 1)
    used_deeper = record("Top", ("a", deep),
                         ("b", {"type": "array", "items": {"type": "array", "items": "R62"}}))
    assert schema_refusal(deep) is None and schema_refusal(used_deeper) == too_deep
    # no Python recursion beyond the bound, however deep the JSON
    very: Any = "int"
    for _ in range(100_000):
        very = {"type": "array", "items": very}
    assert schema_refusal(very) == too_deep


def test_schemas_decoding_to_far_more_values_than_bytes_are_refused():
    def nulls(n: int, *rest: tuple[str, Any]) -> dict[str, Any]:
        return record("I", *[(f"n{i}", "null") for i in range(n)], *rest)

    for items in ("null", record("Empty"), {"type": "fixed", "name": "F", "size": 0},
                  nulls(VALUES_PER_BYTE - 1, ("b", "boolean"))):
        why = schema_refusal({"type": "array", "items": items})
        assert why is not None and why.startswith("an array's items"), items
    # an item of VALUES_PER_BYTE values in one byte is the most accepted
    assert schema_refusal({"type": "array", "items": nulls(VALUES_PER_BYTE - 2,
                                                           ("b", "boolean"))}) is None
    assert schema_refusal({"type": "map", "values": nulls(VALUES_PER_BYTE)}) is not None
    # records of nulls doubled level by level: 3 * 2**40 - 1 values from no byte
    doubled: Any = record("D0", ("n", "null"))
    for i in range(1, 41):
        doubled = record(f"D{i}", ("a", doubled), ("b", f"D{i - 1}"))
    why = schema_refusal(doubled)
    assert why is not None and why.startswith(f"a datum can decode to {3 * 2 ** 40 - 1} values")
    # the same with a boolean at the bottom takes a byte per value: accepted, and fast
    doubled = record("D0", ("n", "boolean"))
    for i in range(1, 41):
        doubled = record(f"D{i}", ("a", doubled), ("b", f"D{i - 1}"))
    assert schema_refusal(doubled) is None


NAMES = st.sampled_from(["null", "int", "string", "record", "array", "map", "enum", "fixed",
                         "error", "A", "B", "x.A", "y.B", "", "."])
SHAPES = st.recursive(
    st.one_of(NAMES, st.integers(-2, 2 ** 70), st.none(), st.booleans()),
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(["type", "name", "namespace", "fields", "items",
                                         "values", "size", "symbols"]), inner, max_size=5),
        st.lists(st.fixed_dictionaries({"name": NAMES, "type": inner}), max_size=3).map(
            lambda fields: {"type": "record", "name": "A", "fields": fields})),
    max_leaves=40)


@settings(max_examples=500, deadline=None)
@given(SHAPES, st.lists(SHAPES, max_size=2))
def test_the_analysis_never_raises_on_any_json(schema, references):
    why = schema_refusal(schema, references)
    assert why is None or isinstance(why, str) and why


def count_values(datum: Any) -> int:
    if isinstance(datum, dict):
        return 1 + sum(count_values(v) for v in datum.values())
    if isinstance(datum, list):
        return 1 + sum(count_values(v) for v in datum)
    return 1


def test_an_accepted_schema_decodes_no_more_values_than_its_bound():
    """The densest item accepted, repeated as often as a body of 30,000 bytes allows: one
    boolean byte per item plus the block count."""
    schema = {"type": "array", "items": record("I", *[(f"n{i}", "null") for i in range(6)],
                                               ("b", "boolean"))}
    assert schema_refusal(schema) is None
    count = 30_000
    body = zigzag(count) + b"\x01" * count + b"\x00"
    decoded = read(schema, body)
    assert len(decoded) == count
    assert count_values(decoded) <= VALUES_PER_BYTE * len(body) + SPARE_VALUES


# -- the registry refuses for good and says it once ---------------------------------------------

class FakeRegistry(SchemaRegistry):
    """A registry answering from ``docs`` (path -> JSON document), counting its requests."""

    def __init__(self, docs: dict[str, Any], **kw: Any) -> None:
        super().__init__("http://registry.invalid/apis/ccompat/v7", **kw)
        self.docs, self.asked = docs, []

    def _get(self, path: str) -> Any:
        self.asked.append(path)
        return self.docs.get(path)


def schema_doc(schema: Any, references: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    text = schema if isinstance(schema, str) else orjson.dumps(schema).decode()
    return {"schema": text, "references": references or []}


EVENT_BODY = {"device": {"id": "d1"}, "ts": 1764756900123, "country": "DE"}


def encoded(schema: Any, schema_id: int, datum: Any) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), datum)
    return wire(schema_id, out.getvalue())


def test_a_refused_schema_is_refused_for_good_and_said_once():
    now = [0.0]
    said: list[str] = []
    registry = FakeRegistry({"/schemas/ids/1": schema_doc(DECODED_EVENT),
                             "/schemas/ids/7": schema_doc(NODE)},
                            retry_s=5, refuse=said.append, clock=lambda: now[0])
    with pytest.raises(UnsupportedSchema) as refused:
        registry.fetch(7)
    assert refused.value.reason is Reason.UNSUPPORTED_SCHEMA
    assert refused.value.detail == ("schema id 7 is refused: recursive: the named type Node can "
                                    "contain itself (Node -> Node)")
    assert said == [f"Avro {refused.value.detail}; the records written with it go to "
                    "dead-letters as unsupported_schema"]
    now[0] += 3600  # long past retry_s: a schema id never changes meaning
    source = AvroSource(registry)
    good = encoded(DECODED_EVENT, 1, EVENT_BODY)
    poison = wire(7, b"\x02x\x02\x02y\x00")
    for _ in range(3):
        batch = asyncio.run(source.decode([good, poison, good, poison]))
        assert batch.index == [0, 2]
        assert [(r.index, r.reason, r.detail) for r in batch.rejected] == [
            (1, Reason.UNSUPPORTED_SCHEMA, refused.value.detail),
            (3, Reason.UNSUPPORTED_SCHEMA, refused.value.detail)]
    assert registry.asked == ["/schemas/ids/7", "/schemas/ids/1"]  # each id asked once
    assert len(said) == 1
    assert Reason.UNSUPPORTED_SCHEMA in UNDECODED  # never counted against the mapping


def test_refusals_through_the_registrys_references_and_json():
    node_ref = {"name": "lib.Node", "subject": "lib-node", "version": 1}
    # a "doc" nested below orjson's limit of 1024 but beyond Python's recursion limit
    deep = orjson.dumps(record("Deep", ("id", "string"))).decode()[:-1] \
        + ',"doc":' + "[" * 1020 + "]" * 1020 + "}"
    registry = FakeRegistry({
        "/schemas/ids/1": schema_doc(record("Outer", ("n", ["null", "lib.Node"])), [node_ref]),
        "/subjects/lib-node/versions/1": schema_doc({**NODE, "namespace": "lib"}),
        "/schemas/ids/2": schema_doc(deep),
        # two subjects referencing each other: fetched once each, no endless loop
        "/schemas/ids/3": schema_doc(record("C", ("a", "A")), [
            {"name": "A", "subject": "a", "version": 1}]),
        "/subjects/a/versions/1": schema_doc(record("A", ("s", "string")), [
            {"name": "B", "subject": "b", "version": 1}]),
        "/subjects/b/versions/1": schema_doc(record("B", ("s", "string")), [
            {"name": "A", "subject": "a", "version": 1}]),
    })
    with pytest.raises(UnsupportedSchema, match="lib.Node -> lib.Node"):
        registry.fetch(1)
    with pytest.raises(UnsupportedSchema, match="its JSON nests too deep to parse"):
        registry.fetch(2)
    assert registry.fetch(3)["name"] == "C"
    assert registry.asked.count("/subjects/a/versions/1") == 1
    assert set(registry.refused) == {1, 2}


# -- decoding with accepted schemas is bounded ---------------------------------------------------

def read(schema: Any, body: bytes) -> Any:
    from fastavro import schemaless_reader

    return schemaless_reader(io.BytesIO(body), parse_schema(schema), None)


def decode_bounded(schemas: dict[int, Any], values: list[bytes | None]):
    """``AvroSource._decode`` with a registry of ``schemas`` (parsed), and the peak of memory
    Python allocated meanwhile."""
    source = AvroSource(SimpleNamespace(schemas=schemas, refused={}))  # type: ignore[arg-type]
    ids = [int.from_bytes(v[1:5], "big") if v is not None and len(v) >= 5 and v[0] == 0
           else -1 for v in values]
    tracemalloc.start()
    try:
        batch = source._decode(values, ids, {})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return batch, peak


HUGE = {
    "a string of 2**40 bytes": (record("S", ("s", "string")), zigzag(2 ** 40) + b"abc"),
    "bytes of 2**40": (record("B", ("b", "bytes")), zigzag(2 ** 40) + b"abc"),
    "a string of 2**31 bytes": (record("S", ("s", "string")), zigzag(2 ** 31) + b"abc"),
    "a string one byte longer than the body": (record("S", ("s", "string")),
                                               zigzag(4) + b"abc"),
    "a negative length": (record("S", ("s", "string")), zigzag(-5) + b"abc"),
    "2**62 longs": (record("A", ("a", {"type": "array", "items": "long"})),
                    zigzag(2 ** 62) + b"\x02" * 16),
    "2**62 records": (record("A", ("a", {"type": "array", "items": record(
        "I", ("s", "string"), ("n", ["null", "long"]))})), zigzag(2 ** 62) + b"\x02x\x00" * 8),
    "2**62 map entries": (record("M", ("m", {"type": "map", "values": "long"})),
                          zigzag(2 ** 62) + b"\x02k\x02" * 8),
    "a block of -2**62 with its size": (record("A", ("a", {"type": "array", "items": "long"})),
                                        zigzag(-(2 ** 62)) + zigzag(2 ** 40) + b"\x02" * 8),
    "a fixed of 2**40 bytes": (record("F", ("f", {"type": "fixed", "name": "Big",
                                                  "size": 2 ** 40})), b"abc"),
    "a varint that never ends": (record("L", ("n", "long")), b"\xff" * 4096),
}


@pytest.mark.parametrize("schema,body", HUGE.values(), ids=HUGE.keys())
def test_lengths_and_counts_beyond_the_body_are_malformed_without_allocating(schema, body):
    assert schema_refusal(schema) is None
    batch, peak = decode_bounded({3: parse_schema(schema)}, [wire(3, body)])
    assert batch.index == []
    [rejection] = batch.rejected
    assert rejection.reason is Reason.MALFORMED_AVRO
    assert "does not decode with schema id 3" in rejection.detail
    assert "MemoryError" not in rejection.detail
    assert peak < 2 ** 20, peak


FUZZED = {
    11: KITCHEN,
    12: DECODED_EVENT_V2,
    13: chain(MAX_DEPTH - 2, {"type": "array", "items": ["null", "string"]}),  # 64 deep
}
SAMPLES = {
    11: {"id": "k1", "n": -3, "x": 1.5, "raw": b"\x00\xff", "flag": True, "opt": 7,
         "tags": ["a", "bb"], "attrs": {"x": 1, "y": None}, "kind": "b", "hash": b"abcd",
         "items": [{"k": "a", "v": 0.5}], "more": []},
    12: {"device": {"id": "d1", "model": "m"}, "ts": 1764756900123, "country": None,
         "app": "7.2"},
    13: None,  # filled below: the chain's innermost array holds two strings
}
datum: Any = ["x", None]
for _ in range(MAX_DEPTH - 2):
    datum = {"f": datum}
SAMPLES[13] = datum
FUZZED = {sid: without_logical_types(schema) for sid, schema in FUZZED.items()}
PARSED = {sid: parse_schema(schema) for sid, schema in FUZZED.items()}
BODIES = {sid: encoded(FUZZED[sid], sid, SAMPLES[sid])[5:] for sid in FUZZED}


@st.composite
def hostile_body(draw: st.DrawFn) -> tuple[int, bytes]:
    """A schema id and a body: a valid one, or one with one hostile change."""
    sid = draw(st.sampled_from(sorted(FUZZED)))
    base = BODIES[sid]
    kind = draw(st.sampled_from(["as is", "random", "truncated", "huge varint", "flipped",
                                 "appended"]))
    at = draw(st.integers(0, len(base)))
    if kind == "random":
        return sid, draw(st.binary(max_size=256))
    if kind == "truncated":
        return sid, base[:at]
    if kind == "huge varint":
        n = draw(st.sampled_from([2 ** 31, 2 ** 40, 2 ** 62, -(2 ** 62), 2 ** 63 - 1]))
        return sid, base[:at] + zigzag(n) + base[at:]
    if kind == "flipped" and base:
        i = min(at, len(base) - 1)
        return sid, base[:i] + bytes([base[i] ^ draw(st.integers(1, 255))]) + base[i + 1:]
    if kind == "appended":
        return sid, base + draw(st.binary(min_size=1, max_size=16))
    return sid, base


@settings(max_examples=400, deadline=None)
@given(st.lists(hostile_body(), min_size=1, max_size=8))
def test_hostile_bodies_with_accepted_schemas_never_raise(bodies):
    assert all(schema_refusal(schema) is None for schema in FUZZED.values())
    values = [wire(sid, body) for sid, body in bodies]
    batch, peak = decode_bounded(PARSED, values)
    assert sorted([*batch.index, *(r.index for r in batch.rejected)]) == list(range(len(values)))
    assert {r.reason for r in batch.rejected} <= {Reason.MALFORMED_AVRO, Reason.BAD_TYPE}
    for i, doc in zip(batch.index, batch.records, strict=True):
        assert isinstance(doc, dict)
        if bodies[i][1] == BODIES[bodies[i][0]]:
            assert doc == SAMPLES[bodies[i][0]]
    for i, (sid, body) in enumerate(bodies):
        if body == BODIES[sid]:
            assert i in batch.index  # a valid body decodes
    assert peak < 4 * 2 ** 20, peak
