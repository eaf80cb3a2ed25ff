"""Record parsing and validation, domains, requirements, dead letters, JSON Schemas."""

from __future__ import annotations

import math

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobkit import spy_deliveries
from jsonschema import Draft202012Validator

from streams.kafka.topics import TOPIC_KEYS
from streams.records.dead_letters import dead_letter, decode_dead_letter
from streams.records.domains import (
    BinDomain,
    CategoryDomain,
    CellDomain,
    GridDomain,
    domain_from_config,
)
from streams.records.field_formats import Reason
from streams.records.field_parsing import REASONS, RecordError, parse_time
from streams.records.formats import load_schema
from streams.records.report_parsing import parse_reports
from streams.records.requirement_parsing import (
    DynamicRequirement,
    FixedRequirement,
    RequirementRemoval,
    parse_requirement,
)


def validator(key: str) -> Draft202012Validator:
    schema = load_schema(key)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def test_every_topic_has_a_valid_schema() -> None:
    for key in TOPIC_KEYS:
        validator(key)


def test_reason_enum_is_fixed() -> None:
    assert REASONS == (
        "malformed_json",
        "missing_field",
        "bad_type",
        "out_of_domain",
        "duplicate_in_slot",
        "late",
        "future",
        "unregistered_user",
        "invalid_requirement",
        "missing_key",
        "wrong_partition",
        "unauthenticated_control",
        "malformed_avro",
        "unknown_schema",
        "schema_unavailable",
        "unsupported_schema",
        "too_deep",
        "too_large",
        "unprocessable",
        "malformed",
        "wrong_key",
        "wrong_protocol",
        "wrong_domain",
        "wrong_requirement",
        "wrong_oracle",
        "schedule",
        "not_after_last",
        "over_budget",
        "unasked_round",
    )
    assert validator("dead-letters").schema["properties"]["reason"]["enum"] == list(REASONS)


# -- reports ------------------------------------------------------------------------------------

GOOD_REPORTS = [
    {"user": "alice", "time": 1_700_000_000_000, "value": 3},
    {"user": 42, "time": "2024-03-01T12:00:00Z", "value": 0},
    {"user": "bob", "time": "2024-03-01T12:00:00.250+02:00", "value": 7, "extra": True},
]


def test_good_reports_match_schema_and_parse() -> None:
    v = validator("reports")
    for doc in GOOD_REPORTS:
        v.validate(doc)
    batch = parse_reports([orjson.dumps(d) for d in GOOD_REPORTS], CellDomain(8))
    assert batch.rejected == []
    assert batch.index.tolist() == [0, 1, 2]
    assert batch.users.tolist() == ["alice", "42", "bob"]
    assert batch.times.tolist() == [1_700_000_000_000, 1_709_294_400_000, 1_709_287_200_250]
    assert batch.cells.tolist() == [3, 0, 7]
    assert batch.times.dtype == np.int64 and batch.cells.dtype == np.int64


BAD_REPORTS: list[tuple[bytes | None, str, bool]] = [
    # raw bytes, reason, whether the JSON Schema also rejects it (schema-level)
    (b"{not json", "malformed_json", False),
    (b"", "malformed_json", False),
    (None, "malformed_json", False),
    (b"[1, 2]", "bad_type", True),
    (b'{"time": 1, "value": 1}', "missing_field", True),
    (b'{"user": "a", "value": 1}', "missing_field", True),
    (b'{"user": "a", "time": 1}', "missing_field", True),
    (b'{"user": "", "time": 1, "value": 1}', "bad_type", True),
    (b'{"user": true, "time": 1, "value": 1}', "bad_type", True),
    (b'{"user": -3, "time": 1, "value": 1}', "bad_type", True),
    (b'{"user": "a", "time": 1.5, "value": 1}', "bad_type", True),
    (b'{"user": "a", "time": -1, "value": 1}', "bad_type", True),
    (b'{"user": "a", "time": "yesterday", "value": 1}', "bad_type", True),
    (b'{"user": "a", "time": "2024-03-01T12:00:00", "value": 1}', "bad_type", True),
    (b'{"user": "a", "time": 1, "value": "x"}', "bad_type", False),
    (b'{"user": "a", "time": 1, "value": 2.0}', "bad_type", False),
    (b'{"user": "a", "time": 1, "value": true}', "bad_type", True),
    (b'{"user": "a", "time": 1, "value": 8}', "out_of_domain", False),
    (b'{"user": "a", "time": 1, "value": -1}', "out_of_domain", False),
]


@pytest.mark.parametrize(("raw", "reason", "schema_rejects"), BAD_REPORTS)
def test_bad_reports_are_rejected_with_their_reason(
    raw: bytes | None, reason: str, schema_rejects: bool
) -> None:
    good = orjson.dumps(GOOD_REPORTS[0])
    batch = parse_reports([good, raw, good], CellDomain(8))
    assert batch.index.tolist() == [0, 2]
    assert [(r.index, r.reason.value) for r in batch.rejected] == [(1, reason)]
    assert batch.rejected[0].detail
    if schema_rejects:
        assert not validator("reports").is_valid(orjson.loads(raw))  # type: ignore[arg-type]


def test_key_must_match_user() -> None:
    docs = [orjson.dumps({"user": u, "time": 5, "value": 1}) for u in ("a", "b", 7)]
    batch = parse_reports(docs, CellDomain(2), keys=[b"a", b"x", b"7"])
    assert batch.users.tolist() == ["a", "7"]
    assert [(r.index, r.reason) for r in batch.rejected] == [(1, Reason.BAD_TYPE)]
    # a keyless report could be counted on a partition other than its user's
    keyless = parse_reports(docs, CellDomain(2), keys=[None, None, None]).rejected
    assert [r.reason for r in keyless] == [Reason.MISSING_KEY] * 3


def test_iso_times() -> None:
    assert parse_time("1970-01-01T00:00:01Z") == 1000
    assert parse_time("1970-01-01T01:00:00+01:00") == 0
    with pytest.raises(RecordError) as err:
        parse_time("1969-12-31T23:59:59Z")
    assert err.value.reason is Reason.BAD_TYPE


def test_mixed_batch_keeps_input_order() -> None:
    raws = [
        orjson.dumps({"user": f"u{i}", "time": i, "value": i % 5}) if i % 3 else b"oops"
        for i in range(30)
    ]
    batch = parse_reports(raws, CellDomain(4))  # value 4 is out of the domain
    expected_ok = [i for i in range(30) if i % 3 and i % 5 != 4]
    assert batch.index.tolist() == expected_ok
    assert batch.users.tolist() == [f"u{i}" for i in expected_ok]
    assert [r.index for r in batch.rejected] == sorted(set(range(30)) - set(expected_ok))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.text(min_size=1, max_size=20), st.integers(0, 10**9)),
            st.integers(0, 2**53 - 1),
            st.integers(-5, 20),
        ),
        max_size=40,
    )
)
def test_property_parse_agrees_with_schema_and_domain(rows: list[tuple]) -> None:
    domain = CellDomain(16)
    v = validator("reports")
    raws = [orjson.dumps({"user": u, "time": t, "value": c}) for u, t, c in rows]
    batch = parse_reports(raws, domain)
    accepted = set(batch.index.tolist())
    for i, (_user, _time, c) in enumerate(rows):
        v.validate(orjson.loads(raws[i]))
        assert (i in accepted) == (0 <= c < 16)
    for r in batch.rejected:
        assert r.reason is Reason.OUT_OF_DOMAIN
    assert batch.cells.tolist() == [c for _, _, c in rows if 0 <= c < 16]
    assert batch.users.tolist() == [str(u) for u, _, c in rows if 0 <= c < 16]


# -- domains ------------------------------------------------------------------------------------


def test_grid_domain() -> None:
    grid = GridDomain(-10.0, 10.0, 40.0, 50.0, cols=4, rows=2)
    assert grid.size == 8
    cells, rejected = grid.map_values(
        [[-10, 40], [9.99, 49.99], [10, 50], [0, 45], [-5.0, 44.9], [11, 45], [0], "x", [0, "a"]]
    )
    assert cells.tolist()[:5] == [0, 7, 7, 6, 1]
    assert [(r.index, r.reason) for r in rejected] == [
        (5, Reason.OUT_OF_DOMAIN),
        (6, Reason.BAD_TYPE),
        (7, Reason.BAD_TYPE),
        (8, Reason.BAD_TYPE),
    ]
    assert cells.tolist()[5:] == [-1, -1, -1, -1]
    assert domain_from_config(grid.to_config()) == grid


def test_grid_domain_in_a_report_batch() -> None:
    grid = GridDomain(0.0, 1.0, 0.0, 1.0, cols=2, rows=2)
    raws = [
        orjson.dumps({"user": "a", "time": 1, "value": [0.75, 0.25]}),
        orjson.dumps({"user": "b", "time": 1, "value": [2.0, 0.25]}),
        orjson.dumps({"user": "c", "time": 1, "value": 3}),
    ]
    batch = parse_reports(raws, grid)
    assert batch.cells.tolist() == [1]
    assert [(r.index, r.reason.value) for r in batch.rejected] == [
        (1, "out_of_domain"),
        (2, "bad_type"),
    ]


def test_bin_and_category_domains() -> None:
    bins = BinDomain(0.0, 100.0, 10)
    cells, rejected = bins.map_values([0, 9.99, 10, 100, 100.5, math.nan, "7", True])
    assert cells.tolist() == [0, 0, 1, 9, -1, -1, -1, -1]
    assert [(r.index, r.reason.value) for r in rejected] == [
        (4, "out_of_domain"),
        (5, "bad_type"),
        (6, "bad_type"),
        (7, "bad_type"),
    ]
    labels = CategoryDomain(("DE", "FR", "IT"))
    cells, rejected = labels.map_values(["FR", "ES", 1])
    assert cells.tolist() == [1, -1, -1]
    assert [r.reason.value for r in rejected] == ["out_of_domain", "bad_type"]
    for domain in (bins, labels, CellDomain(3)):
        assert domain_from_config(domain.to_config()) == domain
    assert CellDomain(3).cell(2) == 2
    with pytest.raises(RecordError):
        CellDomain(3).cell(3)


def test_cell_domain_handles_huge_integers() -> None:
    cells, rejected = CellDomain(4).map_values([1, 2**70])
    assert cells.tolist() == [1, -1]
    assert rejected[0].reason is Reason.OUT_OF_DOMAIN


# -- requirements -------------------------------------------------------------------------------


def test_requirements_parse_and_match_schema() -> None:
    v = validator("requirements")
    fixed = {"user": "a", "w": 3, "E": 1.5}
    dynamic = {"user": 9, "wB": 2, "EB": 1, "wF": 4, "EF": 2.5}
    v.validate(fixed)
    v.validate(dynamic)
    assert parse_requirement(orjson.dumps(fixed), b"a") == FixedRequirement("a", 3, 1.5)
    assert parse_requirement(orjson.dumps(dynamic)) == DynamicRequirement("9", 2, 1.0, 4, 2.5)
    assert parse_requirement(None, b"a") == RequirementRemoval("a")


BAD_REQUIREMENTS = [
    (b"{", "malformed_json"),
    (b"3", "bad_type"),
    (b'{"w": 3, "E": 1}', "missing_field"),
    (b'{"user": "a"}', "missing_field"),
    (b'{"user": "a", "w": 3}', "missing_field"),
    (b'{"user": "a", "wB": 3, "EB": 1, "wF": 2}', "missing_field"),
    (b'{"user": "a", "w": 3, "E": 1, "wB": 3}', "invalid_requirement"),
    (b'{"user": "a", "w": 0, "E": 1}', "invalid_requirement"),
    (b'{"user": "a", "w": 3, "E": 0}', "invalid_requirement"),
    (b'{"user": "a", "w": 3, "E": -1}', "invalid_requirement"),
    (b'{"user": "a", "w": 2.5, "E": 1}', "bad_type"),
    (b'{"user": "a", "w": 3, "E": "1"}', "bad_type"),
    (b'{"user": "a", "wB": 1, "EB": 1, "wF": 0, "EF": 1}', "invalid_requirement"),
]


@pytest.mark.parametrize(("raw", "reason"), BAD_REQUIREMENTS)
def test_bad_requirements(raw: bytes, reason: str) -> None:
    with pytest.raises(RecordError) as err:
        parse_requirement(raw)
    assert err.value.reason.value == reason
    if reason != "malformed_json":
        assert not validator("requirements").is_valid(orjson.loads(raw))


def test_requirement_key_must_match() -> None:
    with pytest.raises(RecordError) as err:
        parse_requirement(b'{"user": "a", "w": 1, "E": 1}', b"b")
    assert err.value.reason is Reason.BAD_TYPE


# -- other topics -------------------------------------------------------------------------------


def test_dead_letter_round_trip_and_schema() -> None:
    raw = b"\xff{not json"
    encoded = dead_letter("pwevent.reports", 2, 17, b"u1", raw, "malformed_json", "bad byte")
    doc = orjson.loads(encoded)
    validator("dead-letters").validate(doc)
    decoded = decode_dead_letter(encoded)
    assert decoded["value"] == raw and decoded["key"] == b"u1"
    assert decoded["reason"] == "malformed_json"
    validator("dead-letters").validate(
        orjson.loads(dead_letter("t", 0, 0, None, None, Reason.LATE, ""))
    )
    with pytest.raises(ValueError):
        dead_letter("t", 0, 0, None, b"x", "clipped", "")


def test_what_the_job_writes_matches_the_schemas() -> None:
    from streams.job.config import JobConfig
    from streams.job.pipeline import InProcessJob

    cfg = JobConfig(mechanism="pba", domain={"kind": "cells", "size": 3}, slot_ms=100,
                    partitions=2, secret="s", event_time="history")
    job = InProcessJob(cfg)
    users = [f"u{i}" for i in range(12)]
    job.register((u.encode(), orjson.dumps({"user": u, "w": 2 + i % 3, "E": 1.0}))
                 for i, u in enumerate(users))
    partials = spy_deliveries(job)
    for t in range(6):
        job.feed((u.encode(), orjson.dumps({"user": u, "time": t * 100 + i, "value": i % 3}))
                 for i, u in enumerate(users))
    job.feed([(b"u1", b"{broken")])
    job.finish()
    assert len(job.releases) == 6 and partials
    for release in job.releases:
        validator("releases").validate(orjson.loads(release))
    for message in partials:
        validator("slot-partials").validate(orjson.loads(orjson.dumps(message)))
    # every partial says when its partition closed the slots, on the worker's clock
    assert all(type(m["closed_at_ms"]) is int and m["closed_at_ms"] > 0 for m in partials)
    for decision in job.coordinator.decisions.values():
        validator("decisions").validate(orjson.loads(decision))
    assert not validator("releases").is_valid({"stream": "taxi", "slot": 1, "published": "maybe"})


def test_iso_time_must_have_the_schema_form() -> None:
    """A time string the schema's pattern rejects is bad_type, even if Python could read it."""
    raws = [orjson.dumps({"user": "a", "time": t, "value": 1})
            for t in ("2024-03-01T12:00:00+02:00", "20240301T120000Z", "2024-03-01T12:00:00+02")]
    batch = parse_reports(raws, CellDomain(2))
    assert batch.index.tolist() == [0]
    assert [(r.index, r.reason) for r in batch.rejected] == [(1, Reason.BAD_TYPE),
                                                              (2, Reason.BAD_TYPE)]
    v = validator("reports")
    assert [v.is_valid(orjson.loads(raw)) for raw in raws] == [True, False, False]


def test_schemas_are_versioned() -> None:
    for key in TOPIC_KEYS:
        schema = load_schema(key)
        assert schema["$id"].endswith(f"/v{schema['x-schema-version']}/{key}.json")
