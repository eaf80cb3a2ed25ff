"""The Python client (streams/ldp_client) and the wire format (mechanisms/local/wire.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mechanisms.local import CounterWords, ReportConfig, Reporter, format_number, parse_report
from mechanisms.local.wire import format_string
from streams.ldp_client import (
    CLIENT_NAME,
    LdpClient,
    LedgerRefusal,
    SystemWords,
    slot_of,
    topic_name,
)


def test_system_words_look_uniform() -> None:
    words = SystemWords().take(200_000)
    assert words.dtype == np.uint32 and words.size == 200_000
    assert abs(float(np.mean(words < 2**31)) - 0.5) < 0.01


def test_a_report_per_slot_refusals_and_the_kept_state() -> None:
    client = LdpClient(ReportConfig("plbu", "alice", d=4, w=2, E=1.0))
    data = client.report(7, 3)
    assert data is not None
    report = parse_report(data)
    assert (report.user, report.slot, report.eps, report.client) == ("alice", 7, 0.5, CLIENT_NAME)
    nothing = client.report(8, None)  # no value: still a report, at the same budget
    assert nothing is not None
    assert (parse_report(nothing).slot, parse_report(nothing).eps) == (8, 0.5)
    assert client.state()["spends"] == [[7, 0.5], [8, 0.5]]
    with pytest.raises(LedgerRefusal) as refused:
        client.report(7, 1)
    assert refused.value.code == "not_after_last"
    kept = json.loads(json.dumps(client.state()))
    again = LdpClient(ReportConfig("plbu", "alice", d=4, w=2, E=0.5), state=kept)
    with pytest.raises(LedgerRefusal, match="over E"):
        again.report(9, None)
    assert again.report(10, 1) is not None
    with pytest.raises(LedgerRefusal):
        LdpClient(ReportConfig("plbu", "bob", d=4, w=2, E=1.0), state=kept)
    for slot, value in ((9, 4), (9, 5), (-1, 0), (9, True), (1.0, 0)):
        with pytest.raises(ValueError):
            client.report(slot, value)


def test_a_client_reports_only_where_its_protocol_says() -> None:
    client = LdpClient(ReportConfig("lsp", "u", d=3, w=4, E=1.0, start=10))
    made = [s for s in range(30) if client.report(s, 1) is not None]
    assert made == [10, 14, 18, 22, 26]
    assert [s for s in range(30) if client.due(s)] == made
    numpy_made = LdpClient(ReportConfig("lsp", "u", d=np.int64(3), w=np.int32(4), E=np.float64(1),
                                        start=10)).report(np.int64(10), np.int16(2))
    assert numpy_made is not None and parse_report(numpy_made).slot == 10


def test_slots_and_topic() -> None:
    assert slot_of(1_000_999, 1_000_000, 500) == 1
    assert slot_of(999_999, 1_000_000, 500) == -1
    assert topic_name("pwevent") == "pwevent.ldp-reports"


@given(st.floats(min_value=5e-324, max_value=1e300, allow_nan=False))
def test_numbers_read_back_exactly(x: float) -> None:
    text = format_number(x)
    assert float(text) == x and float(json.loads(text)) == x  # read as a double


@given(st.text(min_size=1, max_size=30).filter(lambda s: len(s.encode("utf-8",
                                                                        "surrogatepass")) <= 256)
       .filter(lambda s: not any(0xD800 <= ord(c) <= 0xDFFF for c in s)))
def test_every_user_id_survives_the_wire(user: str) -> None:
    assert json.loads(format_string(user)) == user
    data = Reporter(ReportConfig("lbu", user, 5, 2, 1.0), CounterWords("u"), "t").report(0, 4)
    assert data is not None and parse_report(data).user == user


def test_the_collector_refuses_what_no_client_writes() -> None:
    good = json.loads(Reporter(ReportConfig("lbu", "u", 10, 2, 1.0), CounterWords("x"),
                               "t").report(0, 4))
    parse_report(json.dumps(good).encode())
    for change in ({"eps": 0.6}, {"v": 1}, {"protocol": "lbd"}, {"bits": "ff"},
                   {"bits": "ff0f"}, {"bits": "FF03"}, {"extra": 1}, {"slot": -1},
                   {"d": 0}, {"user": ""}, {"oracle": "grr"}):
        with pytest.raises(ValueError):
            parse_report(json.dumps(good | change).encode())
    grr = json.loads(Reporter(ReportConfig("plbu", "u", 3, 1, 3.0), CounterWords("x"),
                              "t").report(0, 2))
    assert parse_report(json.dumps(grr).encode()).cell == grr["cell"]
    with pytest.raises(ValueError):
        parse_report(json.dumps(grr | {"cell": 4}).encode())
    assert parse_report(json.dumps(grr | {"cell": 3}).encode()).cell == 3  # no value
