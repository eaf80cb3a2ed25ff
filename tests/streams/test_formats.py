"""The record formats are defined once (streams.records.formats and the modules it names): the
committed JSON Schemas are generated from them, the job's validator (streams.records.field_parsing
and the parsers next to it) takes its constants from them, and the validator and the schemas agree
on which documents they accept."""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import datetime

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from streams.kafka.topics import TOPIC_KEYS
from streams.records import field_formats, format_nodes, formats, input_formats, output_formats
from streams.records import field_parsing as records
from streams.records.dead_letters import dead_letter, decode_dead_letter
from streams.records.domains import BinDomain, CategoryDomain, CellDomain, GridDomain
from streams.records.field_formats import TIME_LIMIT_MS, TIME_PATTERN, USER_MAX_LENGTH, Reason
from streams.records.field_parsing import REASONS, RecordError, parse_time
from streams.records.formats import FORMATS, SCHEMA_DIR, json_schema, load_schema, render
from streams.records.input_formats import (
    DEAD_LETTER_BYTES_FIELDS,
    DEAD_LETTER_FIELDS,
    DEAD_LETTER_REQUIRED,
    DYNAMIC_FIELDS,
    FIXED_FIELDS,
    REPORT_FIELDS,
)
from streams.records.report_parsing import parse_reports
from streams.records.requirement_parsing import (
    DynamicRequirement,
    FixedRequirement,
    parse_requirement,
)


def validator(topic: str) -> Draft202012Validator:
    """A validator of the committed schema file (what consumers read)."""
    return Draft202012Validator(load_schema(topic))


# -- the committed files are the generated ones -------------------------------------------------


def test_every_topic_has_a_format() -> None:
    assert tuple(FORMATS) == TOPIC_KEYS


@pytest.mark.parametrize("topic", TOPIC_KEYS)
def test_committed_schema_is_the_generated_one(topic: str) -> None:
    path = SCHEMA_DIR / f"{topic}.json"
    assert path.read_bytes() == render(topic).encode("utf-8"), (
        f"{path} is out of date: run python -m streams.records.formats --write"
    )
    assert json.loads(path.read_text(encoding="utf-8")) == json_schema(topic)
    assert load_schema(topic) == json_schema(topic)


@pytest.mark.parametrize("topic", TOPIC_KEYS)
def test_generated_schema_is_valid_and_versioned(topic: str) -> None:
    schema = json_schema(topic)
    Draft202012Validator.check_schema(schema)
    version = schema["x-schema-version"]
    assert type(version) is int and version >= 1
    assert schema["$id"] == f"{format_nodes.SCHEMA_BASE}/v{version}/{topic}.json"
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["title"] and schema["description"]


def test_check_and_write(tmp_path, capsys) -> None:
    assert formats.main(["--check"]) == 0
    assert formats.main(["--check", "--dir", str(tmp_path)]) == 1
    assert formats.main(["--write", "--dir", str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{t}.json" for t in TOPIC_KEYS)
    assert formats.main(["--check", "--dir", str(tmp_path)]) == 0
    (tmp_path / "releases.json").write_text("{}\n", encoding="utf-8")
    assert formats.stale(tmp_path) == ["releases"]
    assert formats.write(tmp_path) == ["releases"]
    assert formats.stale(tmp_path) == []
    capsys.readouterr()
    assert formats.main(["reports"]) == 0
    assert json.loads(capsys.readouterr().out) == json_schema("reports")


# -- open output records, strict where they were strict -----------------------------------------


V1_RELEASE = {"stream": "s", "slot": 3, "start": 300, "end": 400, "mechanism": "pba",
              "published": True, "nullified": False, "histogram": [1.5, -0.5],
              "threshold": 0.5, "users": 4}
RELEASE = {"schema_version": 2, **V1_RELEASE, "cells": ["a", "b"],
           "noise": {"distribution": "laplace", "scale": [2.83, 2.83]}, "approximates": None}


def test_output_records_allow_new_fields() -> None:
    release = RELEASE
    validator("releases").validate(release)
    validator("releases").validate({**release, "future_field": {"x": 1}, "schema_version": 3})
    validator("releases").validate({**release, "noise": {**release["noise"], "seed": None}})
    assert json_schema("releases")["additionalProperties"] is True
    decision = {"stream": "s", "slot": 3, "published": True, "nullified": False,
                "eps1": {"4:1.0": 0.1}, "eps2": {"4:1.0": 0.2}, "users": {"4:1.0": 4}}
    validator("decisions").validate({**decision, "future_field": [1]})
    start = {"stream": "s", "start": 0, "nonce": "5eed",
             "config": {"mechanism": "pba", "d": 4, "partitions": 1, "min_epsilon": 0.01,
                        "max_epsilon": 10.0, "max_window": 200, "neighbouring": "replace"}}
    validator("decisions").validate({**start, "future_field": 1})
    validator("decisions").validate({**start, "config": {**start["config"], "new_knob": 1}})
    for variant in json_schema("decisions")["oneOf"]:
        assert variant["additionalProperties"] is True
    # still typed: a known field with a wrong type, or a missing one, is rejected
    assert not validator("releases").is_valid({**release, "users": -1})
    assert not validator("decisions").is_valid({**start, "nonce": "XYZ"})
    assert not validator("decisions").is_valid({k: v for k, v in decision.items() if k != "eps1"})


def test_input_and_internal_records_stay_as_strict_as_before() -> None:
    # reports and requirements ignore extra fields (the validator does), nothing more
    validator("reports").validate({"user": "a", "time": 1, "value": 0, "extra": True})
    validator("requirements").validate({"user": "a", "w": 1, "E": 1, "note": "x"})
    assert not validator("reports").is_valid({"user": "a", "time": 1})
    assert not validator("requirements").is_valid({"user": "a", "w": 1, "E": 1, "wB": 1})
    # the internal slot partials stay closed
    for variant in json_schema("slot-partials")["oneOf"]:
        assert variant["additionalProperties"] is False
    closure = {"partition": 0, "closed_through": 3, "first": 0, "rejected": 0}
    assert not validator("slot-partials").is_valid({**closure, "extra": 1})


def test_closures_say_when_they_closed_and_older_ones_stay_valid() -> None:
    closure = {"partition": 0, "closed_through": 3, "first": 0, "rejected": 0}
    partial = {"partition": 1, "closed_through": 3, "slots": {}, "users": {}, "rejected": 0}
    for message in (closure, partial):
        validator("slot-partials").validate(message)  # written before closed_at_ms existed
        validator("slot-partials").validate({**message, "closed_at_ms": 1_700_000_000_000})
        assert not validator("slot-partials").is_valid({**message, "closed_at_ms": -1})
        assert not validator("slot-partials").is_valid({**message, "closed_at_ms": "now"})
    schema = json_schema("slot-partials")
    assert schema["x-schema-version"] == 1  # an optional member of an internal topic
    partial_schema, closure_schema, plan_schema = schema["oneOf"]
    for variant in (partial_schema, closure_schema):
        assert "closed_at_ms" in variant["properties"]
        assert "closed_at_ms" not in variant["required"]
    assert "closed_at_ms" not in plan_schema["properties"]


def test_dead_letters_are_version_2_and_open_to_new_fields() -> None:
    """Operators consume dead letters: version 2 lets the format gain fields, at the top and
    in ``truncated``, without breaking a consumer that validates; version 1 allowed none."""
    schema = json_schema("dead-letters")
    assert schema["x-schema-version"] == input_formats.DEAD_LETTER_VERSION == 2
    assert schema["$id"].endswith("/v2/dead-letters.json")
    assert schema["additionalProperties"] is True
    assert schema["properties"]["truncated"]["additionalProperties"] is True
    good = orjson.loads(dead_letter("t", 0, 0, None, None, Reason.LATE, ""))
    validator("dead-letters").validate({**good, "future_field": {"x": 1}})
    capped = orjson.loads(dead_letter("t", 0, 0, None, b"x" * 9000, Reason.LATE, ""))
    assert "truncated" in capped
    validator("dead-letters").validate({**capped, "truncated": {**capped["truncated"],
                                                                "encoding": "utf-8"}})
    # still typed: a known field with a wrong type, or a missing one, is rejected
    assert not validator("dead-letters").is_valid({**good, "offset": -1})
    assert not validator("dead-letters").is_valid({**good, "reason": "no such reason"})
    assert not validator("dead-letters").is_valid({k: v for k, v in good.items()
                                                   if k != "detail"})
    assert not validator("dead-letters").is_valid({**capped, "truncated": {"sha256": "x"}})


def test_releases_are_version_2_and_say_so() -> None:
    schema = json_schema("releases")
    assert schema["x-schema-version"] == output_formats.RELEASE_VERSION == 2
    assert schema["$id"].endswith("/v2/releases.json")
    assert schema["properties"]["schema_version"]["minimum"] == 2
    assert set(schema["required"]) == set(V1_RELEASE) | {"schema_version", "cells", "noise",
                                                         "approximates"}
    # version 2 requires its fields: a version-1 record is not a version-2 one
    assert not validator("releases").is_valid(V1_RELEASE)
    unpublished = {**RELEASE, "published": False, "noise": None, "approximates": 2}
    validator("releases").validate(unpublished)
    validator("releases").validate({**unpublished, "approximates": None})
    validator("releases").validate({**RELEASE, "cells": {"ref": "s/start", "size": 5000}})
    for bad in ({"cells": []}, {"cells": {"size": 3}}, {"noise": {"scale": [1.0]}},
                {"noise": {"distribution": "laplace", "scale": [0.0, 1.0]}},
                {"noise": {"distribution": "laplace", "scale": []}},
                {"approximates": "2"}, {"schema_version": 1}):
        assert not validator("releases").is_valid({**RELEASE, **bad}), bad
    scale = schema["properties"]["noise"]["oneOf"][0]["properties"]["scale"]
    assert "standard deviation" in scale["description"]
    assert output_formats.NOISE_DISTRIBUTIONS == {"discrete": "discrete_laplace",
                                                  "laplace": "laplace"}


# -- the validator takes its constants from the formats -----------------------------------------


def test_records_uses_the_format_definitions() -> None:
    assert records.Reason is field_formats.Reason
    assert tuple(r.value for r in field_formats.Reason) == REASONS
    assert json_schema("dead-letters")["properties"]["reason"]["enum"] == list(REASONS)
    assert REPORT_FIELDS == ("user", "time", "value")
    assert tuple(json_schema("reports")["required"]) == REPORT_FIELDS
    assert [f.name for f in dataclasses.fields(FixedRequirement)] == ["user", *FIXED_FIELDS]
    assert [f.name for f in dataclasses.fields(DynamicRequirement)] == ["user", *DYNAMIC_FIELDS]
    groups = [v["required"] for v in json_schema("requirements")["oneOf"]]
    assert groups == [list(FIXED_FIELDS), list(DYNAMIC_FIELDS)]
    encoded = orjson.loads(dead_letter("t", 1, 2, b"k", b"v", "late", "d"))
    required = tuple(json_schema("dead-letters")["required"])
    assert tuple(encoded) == DEAD_LETTER_REQUIRED == required
    assert (*required, "truncated") == DEAD_LETTER_FIELDS  # only on a capped payload
    assert DEAD_LETTER_BYTES_FIELDS == ("key", "value")
    assert decode_dead_letter(orjson.dumps(encoded))["key"] == b"k"


def test_limits_are_the_schemas_limits() -> None:
    user = json_schema("reports")["properties"]["user"]["oneOf"][0]
    assert user["maxLength"] == USER_MAX_LENGTH
    time_int, time_str = json_schema("reports")["properties"]["time"]["oneOf"]
    assert time_int["maximum"] == TIME_LIMIT_MS - 1 and time_str["pattern"] == TIME_PATTERN
    longest = "u" * USER_MAX_LENGTH
    for u, t, ok in [(longest, TIME_LIMIT_MS - 1, True), (longest + "u", 0, False),
                     ("a", TIME_LIMIT_MS, False)]:
        doc = {"user": u, "time": t, "value": 0}
        assert len(parse_reports([orjson.dumps(doc)], CellDomain(1))) == ok
        assert validator("reports").is_valid(doc) == ok


def test_other_modules_agree_with_the_formats() -> None:
    """Modules outside records.py that name format fields: the audit and the start record."""
    from streams.audit.release_checks import OPTIONAL_RELEASE_FIELDS, RELEASE_FIELDS
    from streams.job.config import NEIGHBOURING, JobConfig

    # the audit takes every release field for public, and only those; every field it requires
    # of a release the schema requires too (``estimate`` comes only with post-processing)
    releases = json_schema("releases")
    assert set(releases["properties"]) == RELEASE_FIELDS | OPTIONAL_RELEASE_FIELDS
    assert set(releases["required"]) >= RELEASE_FIELDS
    assert set(releases["required"]) - RELEASE_FIELDS == OPTIONAL_RELEASE_FIELDS - {"estimate"}
    config = json_schema("decisions")["oneOf"][1]["properties"]["config"]
    assert tuple(config["properties"]["neighbouring"]["enum"]) == NEIGHBOURING
    for noise in config["properties"]["noise"]["enum"]:
        JobConfig(noise=noise)
    for cfg in (JobConfig(), JobConfig(mechanism="dpba", neighbouring="replace",
                                       noise="laplace", origin_ms=-5)):
        validator("decisions").validate({"stream": "s", "start": 0, "nonce": "ab",
                                         "config": cfg.public()})
        # and the cell labels of a large domain, which its releases refer to
        assert set(cfg.public()) | {"cells"} == set(config["properties"])


# -- time strings -------------------------------------------------------------------------------

SCHEMA_TIMES = [
    ("2024-03-01T12:00Z", 1_709_294_400_000),
    ("2024-03-01 12:00:00Z", 1_709_294_400_000),
    ("2024-03-01T12:00:00.250+02:00", 1_709_287_200_250),
    ("2024-03-01T14:00:00.5+0200", 1_709_294_400_500),
    ("2024-03-01T12:00:00.1234567-00:00", 1_709_294_400_123),
]

# read by datetime.fromisoformat (3.11) but not of the documented form: rejected by both
OTHER_ISO_TIMES = [
    "20240301T120000Z",
    "2024-W10-5T12:00Z",
    "2024-03-01x12:00Z",
    "2024-03-01T12Z",
    "2024-03-01T12+02:00",
    "2024-03-01T12:00:00,5Z",
    "2024-03-01T12:00:00.Z",
    "2024-03-01T12:00:00 +02:00",
    "2024-03-01T12:00:00+02",
    "2024-03-01T12:00:00+02:00:30",
]


@pytest.mark.parametrize(("text", "ms"), SCHEMA_TIMES)
def test_times_of_the_documented_form_are_accepted(text: str, ms: int) -> None:
    assert parse_time(text) == ms
    assert validator("reports").is_valid({"user": "a", "time": text, "value": 0})


@pytest.mark.parametrize("text", OTHER_ISO_TIMES)
def test_other_iso_forms_are_rejected_like_the_schema_does(text: str) -> None:
    datetime.fromisoformat(text)  # Python reads it ...
    with pytest.raises(RecordError) as err:  # ... but it is not the format
        parse_time(text)
    assert err.value.reason is Reason.BAD_TYPE
    assert not validator("reports").is_valid({"user": "a", "time": text, "value": 0})


# -- validator and schema agree (property) ------------------------------------------------------

TEXT = st.characters(exclude_categories=("Cs",))
INT64 = st.integers(-(2**63), 2**64 - 1)  # what orjson encodes
FLOATS = st.floats(-1e300, 1e300, allow_nan=False)
INTEGRAL_FLOATS = st.sampled_from([0.0, 1.0, 3.0, 7.0, 1e15])
JUNK = st.none() | st.booleans() | st.lists(INT64, max_size=2) | st.just({"a": 1})

users = st.one_of(
    st.sampled_from(["a", "7", "Zoë"]),
    st.text(TEXT, max_size=6),
    st.text("ab", min_size=USER_MAX_LENGTH - 1, max_size=USER_MAX_LENGTH + 1),
    st.integers(-3, 10),
    INT64,
    INTEGRAL_FLOATS,
    FLOATS,
    JUNK,
)


@st.composite
def pattern_times(draw: st.DrawFn) -> str:
    """Strings of the pattern's shape, calendar-valid or not, before 1970 or not."""
    year = draw(st.sampled_from([0, 1, 1969, 1970, 2024, 9999]) | st.integers(0, 9999))
    date = f"{year:04d}-{draw(st.integers(0, 13)):02d}-{draw(st.integers(0, 32)):02d}"
    clock = f"{draw(st.integers(0, 25)):02d}:{draw(st.integers(0, 61)):02d}"
    if draw(st.booleans()):
        clock += f":{draw(st.integers(0, 61)):02d}"
        if draw(st.booleans()):
            clock += "." + draw(st.text("0123456789", min_size=1, max_size=9))
    zone = draw(st.one_of(
        st.just("Z"),
        st.just(""),  # naive
        st.builds("{}{:02d}{}{:02d}".format, st.sampled_from("+-"), st.integers(0, 25),
                  st.sampled_from([":", ""]), st.integers(0, 61)),
    ))
    return date + draw(st.sampled_from("T ")) + clock + zone + draw(st.sampled_from(["", "\n"]))


times = st.one_of(
    st.integers(-3, 3),
    st.integers(TIME_LIMIT_MS - 2, TIME_LIMIT_MS + 1),
    INT64,
    INTEGRAL_FLOATS,
    FLOATS,
    pattern_times(),
    st.sampled_from(OTHER_ISO_TIMES + [t for t, _ in SCHEMA_TIMES]),
    st.text(TEXT, max_size=12),
    JUNK,
)
values = st.one_of(
    st.integers(-3, 20),
    INT64,
    FLOATS,
    st.text(TEXT, max_size=4),
    st.lists(st.integers(-5, 5) | FLOATS | st.booleans() | st.text(max_size=1), max_size=3),
    JUNK,
)
good_users = st.sampled_from(["a", "7", "Zoë"]) | st.integers(0, 10**6)
good_times = st.integers(0, TIME_LIMIT_MS - 1) | st.sampled_from([t for t, _ in SCHEMA_TIMES])
good_values = st.integers(0, 20) | FLOATS | st.text(TEXT, min_size=1, max_size=3) | st.lists(
    FLOATS, min_size=2, max_size=2)


@st.composite
def near(draw: st.DrawFn, good: dict, anything: dict) -> dict:
    """A valid document, or one with one field replaced by anything or dropped."""
    doc = draw(st.fixed_dictionaries(good))
    name = draw(st.sampled_from(sorted(anything)))
    change = draw(st.sampled_from(["keep", "replace", "drop"]))
    if change == "replace":
        doc[name] = draw(anything[name])
    elif change == "drop":
        doc.pop(name, None)
    return doc


report_docs = st.one_of(
    near({"user": good_users, "time": good_times, "value": good_values},
         {"user": users, "time": times, "value": values}),
    st.fixed_dictionaries({"user": users, "time": times, "value": values},
                          optional={"extra": INT64}),
    st.fixed_dictionaries({}, optional={"user": users, "time": times, "value": values}),
    JUNK | INT64 | st.text(max_size=3),
)

#: Domains wide enough to take any number and any point: with a label domain holding the value,
#: "some stream's domain accepts the value" (the rule the schema leaves to the domain).
WIDE_DOMAINS = (BinDomain(-1e300, 1e300, 1), GridDomain(-1e300, 1e300, -1e300, 1e300, 1, 1))
_TIME_RE = re.compile(TIME_PATTERN)


def _integral_float(x: object) -> bool:
    return type(x) is float and x.is_integer()


def _job_accepts_report(doc: object) -> bool:
    raw = orjson.dumps(doc)
    domains = list(WIDE_DOMAINS)
    value = doc.get("value") if type(doc) is dict else None
    if type(value) is str and value:
        domains.append(CategoryDomain((value,)))
    return any(len(parse_reports([raw], d)) == 1 for d in domains)


def _beyond_the_schema(doc: dict, integer_fields: tuple[str, ...]) -> bool:
    """Whether ``doc`` breaks a rule the schema documents but cannot express."""
    if any(_integral_float(doc.get(f)) for f in integer_fields):
        return True  # 1.0 is an integer to JSON Schema, not to the job
    t = doc.get("time")
    if type(t) is str and _TIME_RE.search(t):  # python-jsonschema's search: "$" before "\n"
        try:
            moment = datetime.fromisoformat(t)
        except ValueError:
            return True  # not a calendar date and time
        return moment.timestamp() < 0  # before 1970
    return False


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(report_docs)
def test_property_reports_validator_and_schema_agree(doc: object) -> None:
    schema_ok = validator("reports").is_valid(doc)
    job_ok = _job_accepts_report(doc)
    if job_ok:
        assert schema_ok, doc  # everything the job accepts is a valid report
    elif schema_ok:
        assert type(doc) is dict and _beyond_the_schema(doc, ("user", "time")), doc


windows = st.one_of(st.integers(-2, 4), INT64, INTEGRAL_FLOATS, FLOATS, JUNK, st.text(max_size=2))
budgets = st.one_of(
    st.sampled_from([0, 0.0, -0.0, 5e-324, 1e-300, 1, 2.5, -1]),
    st.floats(-10, 10),
    INT64,
    FLOATS,
    JUNK,
    st.text(max_size=2),
)
FIELD_VALUES = {"user": users, "w": windows, "E": budgets, "wB": windows, "EB": budgets,
                "wF": windows, "EF": budgets}


def _requirement(required: tuple[str, ...]) -> st.SearchStrategy[dict]:
    optional = {k: v for k, v in FIELD_VALUES.items() if k not in required}
    return st.fixed_dictionaries({k: FIELD_VALUES[k] for k in required},
                                 optional={**optional, "note": st.text(max_size=2)})


good_windows = st.integers(1, 50)
good_budgets = st.floats(1e-3, 10) | st.integers(1, 5)
GOOD_FIXED = {"user": good_users, "w": good_windows, "E": good_budgets}
GOOD_DYNAMIC = {"user": good_users, "wB": good_windows, "EB": good_budgets, "wF": good_windows,
                "EF": good_budgets}

requirement_docs = st.one_of(
    near(GOOD_FIXED, FIELD_VALUES),
    near(GOOD_DYNAMIC, FIELD_VALUES),
    _requirement(("user", *FIXED_FIELDS)),
    _requirement(("user", *DYNAMIC_FIELDS)),
    st.fixed_dictionaries({"user": users, "w": windows, "E": budgets}),
    st.fixed_dictionaries({"user": users, "wB": windows, "EB": budgets, "wF": windows,
                           "EF": budgets}),
    _requirement(()),
    JUNK | INT64 | st.text(max_size=3),
)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requirement_docs)
def test_property_requirements_validator_and_schema_agree(doc: object) -> None:
    schema_ok = validator("requirements").is_valid(doc)
    try:
        parsed = parse_requirement(orjson.dumps(doc))
        job_ok = True
    except RecordError:
        job_ok = False
    if job_ok:
        assert schema_ok, doc
        assert isinstance(parsed, FixedRequirement | DynamicRequirement)
    elif schema_ok:
        assert type(doc) is dict and _beyond_the_schema(doc, ("user", "w", "wB", "wF")), doc


@settings(max_examples=100, deadline=None)
@given(
    topic=st.text(TEXT, min_size=1, max_size=10),
    partition=st.integers(0, 2**31),
    offset=st.integers(0, 2**63 - 1),
    key=st.none() | st.binary(max_size=10),
    value=st.none() | st.binary(max_size=40),
    reason=st.sampled_from(list(Reason)),
    detail=st.text(TEXT, max_size=20),
)
def test_property_every_dead_letter_is_valid(topic, partition, offset, key, value, reason,
                                             detail) -> None:
    encoded = dead_letter(topic, partition, offset, key, value, reason, detail)
    validator("dead-letters").validate(orjson.loads(encoded))
    decoded = decode_dead_letter(encoded)
    assert (decoded["key"], decoded["value"], decoded["reason"]) == (key, value, reason.value)


def test_what_the_sources_produce_is_accepted_and_valid() -> None:
    from streams.data.sources import make_source

    src = make_source("sin", 30, 3, seed=4, epsilon=0.6, window=120)
    reqs = src.requirement_records() + src.requirement_records(dynamic=True)
    assert len(reqs) == 60
    for key, raw in reqs:
        parse_requirement(raw, key)
        validator("requirements").validate(orjson.loads(raw))
    for batch in src.slot_records(0, 100):
        parsed = parse_reports([v for _, v in batch], CellDomain(src.d), [k for k, _ in batch])
        assert len(parsed) == len(batch)
        for _, raw in batch:
            validator("reports").validate(orjson.loads(raw))
