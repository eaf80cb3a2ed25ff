"""The reports topic's typed batch parsing gives what parsing each report whole gives.

:func:`~streams.records.report_parsing.parse_reports` decodes reports of the common shape into
columns with msgspec and leaves every other one to the per-record parser (``typed=False``
sends all of them there); on any batch, the two give the same accepted reports, cells, source
positions and rejections."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from streams.records.domains import CategoryDomain, CellDomain, GridDomain
from streams.records.report_parsing import parse_reports

USERS = st.sampled_from(["a", "b", "u1", "", "x" * 257, "é"])
LEAF = st.one_of(
    USERS, st.integers(-3, 5), st.integers(2**62, 2**66), st.integers(-(2**66), -(2**62)),
    st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(),
    st.sampled_from(["DE", "FR", "other"]), st.integers(0, 2**53 + 5),
    st.lists(st.one_of(st.floats(-1, 11), st.integers(0, 12), st.integers(2**63, 2**65),
                       st.lists(st.integers(0, 2), max_size=2)), max_size=3),
    st.dictionaries(st.sampled_from("ab"), st.integers(), max_size=1),
)
SOURCE = st.one_of(st.none(), st.lists(st.integers(-1, 2**41), min_size=3, max_size=3),
                   st.lists(st.integers(0, 3), max_size=4), st.just([0, 1, 2**70]), LEAF)


@st.composite
def report(draw: st.DrawFn) -> tuple[bytes | None, bytes | None]:
    """A record's (key, value): mostly well-formed reports, with every kind of flaw."""
    kind = draw(st.sampled_from(["good"] * 5 + ["odd", "garbage", "none", "array", "dup"]))
    user = draw(USERS)
    key = draw(st.sampled_from([user.encode(), None, b"zz"])) if kind != "good" \
        else user.encode()
    if kind == "none":
        return key, None
    if kind == "garbage":
        return key, draw(st.binary(max_size=16))
    if kind == "array":
        return key, b"[1,2,3]"
    doc: dict = {"user": user if kind == "good" else draw(st.one_of(USERS, LEAF)),
                 "time": draw(st.integers(0, 2**53 - 1)) if kind == "good" else draw(LEAF),
                 "value": draw(LEAF)}
    if draw(st.booleans()):
        doc["source"] = draw(SOURCE)
    if kind == "odd":
        for field in draw(st.lists(st.sampled_from(["user", "time", "value"]), max_size=2)):
            doc.pop(field, None)
        doc["extra"] = draw(LEAF)
    raw = json.dumps(doc, ensure_ascii=draw(st.booleans())).encode()
    if kind == "dup":
        raw = raw[:-1] + b',"user":"b","time":5}'
    return key, raw


DOMAINS = [CellDomain(4), CategoryDomain(("DE", "FR", "other")),
           GridDomain(0.0, 10.0, 0.0, 10.0, 2, 2)]


@settings(max_examples=400, deadline=None)
@given(st.lists(report(), max_size=30), st.sampled_from(range(len(DOMAINS))), st.booleans())
def test_typed_report_parsing_equals_parsing_each_report_whole(records: list, which: int,
                                                                keyed: bool) -> None:
    values = [v for _k, v in records]
    keys = [k for k, _v in records] if keyed else None
    fast = parse_reports(values, DOMAINS[which], keys)
    whole = parse_reports(values, DOMAINS[which], keys, typed=False)
    assert fast.index.tolist() == whole.index.tolist()
    assert fast.users.tolist() == whole.users.tolist()
    assert fast.times.tolist() == whole.times.tolist()
    assert fast.cells.tolist() == whole.cells.tolist()
    assert fast.sources.tolist() == whole.sources.tolist()
    assert fast.rejected == whole.rejected
