"""Batches (``offer_all``) against records offered one by one (``offer``): the same dead letters in
the same order with the same reasons, byte-identical releases and the same ledgers, over
hypothesis-drawn mixes of client-made reports, resends, reports out of order, and records that
are malformed, belong elsewhere or are read only the slow way; and the pieces the batches use."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ldp_collector_kit import LPU_KEY, ORIGIN_MS, SLOT_MS, Sent, client_reports

from mechanisms.local import ClientLedger, CounterWords, LedgerRefusal, parse_report
from mechanisms.local.collector import estimate_slot
from streams.ldp_client import LdpClient, ReportConfig
from streams.ldp_collector import LdpCollector
from streams.ldp_collector.checks import Refusal, Stream, read_record
from streams.ldp_collector.keeping import ledger_regime, previous_max
from streams.ldp_collector.reading import read_batch
from streams.ldp_collector.slots import OpenSlot

START, SLOTS, USERS = 3, 6, 8
SETTINGS = settings(max_examples=40, deadline=None)


def cells(d: int, seed: int) -> np.ndarray:
    """Users' cells per slot, a fifth of them without a value (-1)."""
    rng = np.random.default_rng(seed)
    return np.where(rng.random((USERS, SLOTS)) < 0.2, -1, rng.integers(0, d, (USERS, SLOTS)))


def rotating_lpu(d: int, w: int) -> list[Sent]:
    """LPU reports with groups drawn anew every block (rotation 1), users in order per slot."""
    values = cells(d, 9)
    clients = [LdpClient(ReportConfig("lpu", f"u{i}", d=d, w=w, E=1.0, start=START,
                                      lpu_key=LPU_KEY, rotate=1), words=CounterWords(f"r/u{i}"))
               for i in range(USERS)]
    sent = []
    for t in range(SLOTS):
        for i, client in enumerate(clients):
            value = client.report(START + t, None if values[i, t] < 0 else int(values[i, t]))
            if value is not None:
                sent.append(Sent(f"u{i}", START + t, int(values[i, t]), f"u{i}".encode(), value,
                                 ORIGIN_MS + (START + t) * SLOT_MS + i))
    return sent


PLBU_REQUIREMENTS = [(4, 1.0), (2, 1.0), (1, 1.0), (1, 2.0), (3, 1.0), (2_000_000, 1.0), (2, 0.1),
                     (5, 2.5)]
#: Per stream: the collector's parameters and its records, several streams of the same users
#: (resends of their slots with other words, and for plbu changed requirements).
STREAMS: dict[str, tuple[dict, list[Sent]]] = {
    "lbu": ({"protocol": "lbu", "d": 8, "E": 1.0, "w": 3},
            client_reports("lbu", cells(8, 1), d=8, start=START, requirements=[(3, 1.0)] * USERS)
            + client_reports("lbu", cells(8, 2), d=8, start=START,
                             requirements=[(3, 1.0)] * USERS, seed="again")),
    "lsp": ({"protocol": "lsp", "d": 4, "E": 1.0, "w": 2},
            client_reports("lsp", cells(4, 3), d=4, start=START, requirements=[(2, 1.0)] * USERS)
            + client_reports("lsp", cells(4, 4), d=4, start=START,
                             requirements=[(2, 1.0)] * USERS, seed="again")),
    "lpu": ({"protocol": "lpu", "d": 4, "E": 1.0, "w": 2, "lpu_key": LPU_KEY, "lpu_rotate": 1},
            rotating_lpu(4, 2) + client_reports("lpu", cells(4, 5), d=4, start=START,
                                                requirements=[(2, 1.0)] * USERS)),
    "plbu": ({"protocol": "plbu", "d": 8},
             client_reports("plbu", cells(8, 6), d=8, start=START, requirements=PLBU_REQUIREMENTS)
             + client_reports("plbu", cells(8, 7), d=8, start=START,
                              requirements=PLBU_REQUIREMENTS[::-1], seed="changed")),
}


def dumps(doc: dict) -> bytes:
    """A JSON object without spaces (``json``'s own, not the wire's number format)."""
    return json.dumps(doc, separators=(",", ":")).encode()


def variants(s: Sent) -> list[tuple[object, object]]:
    """(key, value) records made from one report: refused for every reason the reader has, or
    accepted but not in the clients' own form (read the slow way)."""
    v, k = s.value, s.key
    doc = json.loads(v)
    payload = "bits" if "bits" in doc else "cell"
    per_slot = doc["protocol"] in ("lbu", "plbu")
    other = {"protocol": "lsp" if per_slot else "lbu",
             "eps": doc["E"] if per_slot else doc["E"] / doc["w"]}
    wider = {"w": doc["w"] + 1, "eps": doc["E"] / (doc["w"] + 1) if per_slot else doc["E"]}
    richer = {"E": 2 * doc["E"], "eps": 2 * doc["E"] / doc["w"] if per_slot else 2 * doc["E"]}
    more = {"d": doc["d"] + 1,
            **({"bits": doc["bits"] + "00"} if payload == "bits" and doc["d"] % 8 == 0 else {})}
    out: list[tuple[object, object]] = [
        (b"u-other", v), (None, v), (k, None), (k, v.decode()), (k, bytearray(v)),
        (k, v + b" "), (k, b" " + v), (k, v.replace(b",", b" ,", 1)), (k, v[:-1]),
        (k, b"\xef\xbb\xbf" + v), (k, v.decode().encode("utf-16")), (k, b"[]"), (k, b"null"),
        (k, dumps(dict(reversed(list(doc.items()))))), (k, dumps({**doc, "extra": 1})),
        (k, v.replace(b'"eps":', b'"eps":NaN,"x":')), (k, dumps({**doc, "v": True})),
        (k, dumps({**doc, "v": 1.0})), (k, dumps({**doc, "slot": float(doc["slot"])})),
        (k, dumps({**doc, "slot": 2**64 + doc["slot"]})), (k, dumps({**doc, "slot": -1})),
        (k, dumps({**doc, "slot": 2**63})), (k, dumps({**doc, "E": 2**64 - 1})),
        (k, dumps({**doc, "eps": 2**64 - 1})), (k, dumps({**doc, "slot": 2**53})),
        (k, dumps({**doc, "slot": 0})), (k, dumps({**doc, "eps": float(doc["eps"]) * 1.0})),
        (k, dumps({**doc, "E": 2**64})), (k, dumps({**doc, "E": doc["E"] * 2})),
        (k, dumps({**doc, "w": doc["w"] + 1})), (k, dumps({**doc, "d": doc["d"] + 1})),
        (k, dumps({**doc, "w": True})), (k, dumps({**doc, "protocol": "lsp"})),
        (k, dumps({**doc, **other})), (k, dumps({**doc, **wider})), (k, dumps({**doc, **more})),
        (k, dumps({**doc, **richer})),
        (k, dumps({**doc, "protocol": "lbu"})), (k, dumps({**doc, "user": "u\ud800"})),
        (k, dumps({**doc, "client": ""})), (k, dumps({**doc, "client": "c" * 300})),
        (k, dumps({**doc, "client": 7})), (k, dumps({**doc, "user": ""})),
        (b"\xc3\xa9", dumps({**doc, "user": "\u00e9"})),
        (k, dumps({"v": 1, **{key: val for key, val in doc.items() if key != "v"}})),
        (k, dumps({key: val for key, val in doc.items() if key != payload})),
        (k, dumps({**{key: val for key, val in doc.items() if key != payload},
                   "oracle": "grr", "cell": 0, "client": doc["client"]})),
    ]
    if payload == "bits":
        bits = doc["bits"]
        out += [(k, dumps({**doc, "bits": value})) for value in
                (bits.upper() if bits.upper() != bits else "A" + bits[1:], bits[:-1],
                 bits + "00", "g" + bits[1:], " " + bits[1:], "\u00e9" + bits[1:], 5,
                 bits[:-2] + "f" + bits[-1] if doc["d"] % 8 else bits[:-2] + "0f")]
        out.append((k, dumps({**doc, "oracle": "grr"})))
    else:
        out += [(k, dumps({**doc, "cell": value})) for value in
                (doc["d"], -1, True, 1.0, "1", 2**64)]
        out.append((k, dumps({**doc, "oracle": "oue"})))
    return out


def run(params: dict, steps: list[tuple[str, object]], batched: bool
        ) -> tuple[list[tuple[str, object]], str, dict, int | None]:
    """Follow ``steps`` (offer a list of records, or close up to a slot) on a fresh collector:
    its dead letters, releases (as JSON), ledgers and watermark."""
    c = LdpCollector(**params, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=START)
    dead, releases = [], []
    for what, arg in steps:
        if what == "close":
            releases += [c.close(s) for s in range(c.next_slot, arg + 1)]  # type: ignore[operator]
        elif batched:
            dead += c.offer_all(iter(arg))  # type: ignore[arg-type]
        else:
            dead += [x for x in (c.offer(*r) for r in arg) if x is not None]  # type: ignore
    releases += [c.close(s) for s in range(c.next_slot, START + SLOTS)]
    ledgers = c.ledgers.dump()
    return [(x.reason, x.value) for x in dead], json.dumps(releases), ledgers, c.watermark


@st.composite
def mixes(draw: st.DrawFn, name: str) -> list[tuple[str, object]]:
    """Steps over one stream's records: in their order or shuffled, some records replaced by or
    joined with variants or random bytes, cut into batches, slots closed between some."""
    sent = STREAMS[name][1]
    chosen = draw(st.lists(st.integers(0, len(sent) - 1), max_size=len(sent)))
    records: list[tuple] = [s.record for s in sent] if draw(st.booleans()) else \
        [sent[i].record for i in chosen]
    if draw(st.booleans()):
        records = draw(st.permutations(records))
    extra = st.one_of(
        st.tuples(st.integers(0, len(sent) - 1), st.integers(0, 60)).map(
            lambda pair: (*(variants(sent[pair[0]])[pair[1] % len(variants(sent[pair[0]]))]),
                          sent[pair[0]].timestamp_ms)),
        st.tuples(st.just(b"u1"), st.binary(max_size=40), st.none()),
        st.tuples(st.integers(0, len(sent) - 1), st.integers(0, 400), st.integers(0, 255)).map(
            lambda t: (sent[t[0]].key, flip(sent[t[0]].value, t[1], t[2]), None)))
    for at, record in draw(st.lists(st.tuples(st.integers(0, len(records)), extra),
                                    max_size=30)):
        records.insert(at, record)
    cuts = sorted(draw(st.lists(st.integers(0, len(records)), max_size=6)))
    closes = draw(st.lists(st.integers(START, START + SLOTS - 1), min_size=len(cuts),
                           max_size=len(cuts)))
    steps: list[tuple[str, object]] = []
    for a, b, close in zip([0, *cuts], cuts, closes, strict=False):
        steps += [("offer", records[a:b]), ("close", close)]
    steps.append(("offer", records[cuts[-1] if cuts else 0:]))
    return steps


def flip(value: bytes, at: int, byte: int) -> bytes:
    """``value`` with its byte at ``at`` (modulo its length) replaced by ``byte``."""
    at %= len(value)
    return value[:at] + bytes([byte]) + value[at + 1:]


@pytest.mark.parametrize("name", list(STREAMS))
def test_the_streams_hold_what_the_mixes_need(name: str) -> None:
    params, sent = STREAMS[name]
    dead = run(params, [("offer", [s.record for s in sent])], batched=False)[0]
    assert "duplicate_in_slot" in {reason for reason, _ in dead}
    oracles = {parse_report(s.value).oracle for s in sent}
    assert oracles == ({"oue", "grr"} if name == "plbu" else {"oue"})


@pytest.mark.parametrize("name", list(STREAMS))
def test_client_streams_batched_match_one_by_one(name: str) -> None:
    params, sent = STREAMS[name]
    steps = [("offer", [s.record for s in sent])]
    one, batch = run(params, steps, batched=False), run(params, steps, batched=True)
    assert batch == one
    assert json.loads(one[1])[0]["reporters"] > 0


@pytest.mark.parametrize("name", list(STREAMS))
def test_every_variant_gets_the_same_verdict(name: str) -> None:
    params, sent = STREAMS[name]
    records = [(*kv, None) for s in sent[:USERS] for kv in variants(s)]
    steps = [("offer", [s.record for s in sent[USERS:]] + records)]
    one, batch = run(params, steps, batched=False), run(params, steps, batched=True)
    assert batch == one
    reasons = {reason for reason, _ in one[0]}
    assert {"malformed", "wrong_key", "wrong_protocol", "wrong_domain", "schedule",
            "duplicate_in_slot", "not_after_last"} <= reasons
    assert ("wrong_requirement" in reasons) == (name != "plbu")


@pytest.mark.parametrize("name", list(STREAMS))
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_mixes_batched_match_one_by_one(name: str, data: st.DataObject) -> None:
    params = STREAMS[name][0]
    steps = data.draw(mixes(name))
    assert run(params, steps, batched=True) == run(params, steps, batched=False)


def test_a_changed_requirement_counts_in_later_batches() -> None:
    """A plbu user whose E and w changed keeps its history under the new requirement, also
    when its next reports come in other batches: with E = 3, w = 3 after spending 2 at slot 3,
    the report at 5 would make (2, 5] spend 4."""
    before = LdpClient(ReportConfig("plbu", "ann", d=8, w=1, E=2.0, start=START),
                       words=CounterWords("ann"))
    after = LdpClient(ReportConfig("plbu", "ann", d=8, w=3, E=3.0, start=START),
                      words=CounterWords("ann/2"))  # its kept state lost
    records = [(b"ann", before.report(3, 1), None), (b"ann", after.report(4, 1), None),
               (b"ann", after.report(5, 1), None), (b"ann", after.report(7, 1), None)]
    outcomes = []
    for batched in (False, True):
        c = LdpCollector("plbu", 8, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=START)
        dead = [c.offer_all([r]) if batched else [x for x in [c.offer(*r)] if x is not None]
                for r in records]
        outcomes.append(([[x.reason for x in d] for d in dead], c.ledgers.dump()["ann"],
                         json.dumps([c.close(s) for s in range(START, START + SLOTS)])))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0] == [[], [], ["over_budget"], []]
    assert outcomes[0][1] == [[7, 1.0]]


def test_small_batches_match_one_by_one() -> None:
    params, sent = STREAMS["plbu"]
    records = [s.record for s in sent]
    one = run(params, [("offer", records)], batched=False)
    c = LdpCollector(**params, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=START)
    c.batch_cells = 3 * c.stream.d  # batches of 3 records
    dead = c.offer_all(records)
    releases = [c.close(s) for s in range(START, START + SLOTS)]
    assert [(x.reason, x.value) for x in dead] == one[0]
    assert json.dumps(releases) == one[1]


@pytest.mark.parametrize("bad", [("x", TypeError), (float("inf"), OverflowError)])
def test_a_bad_timestamp_raises_after_the_records_before(bad: tuple) -> None:
    timestamp, error = bad
    params, sent = STREAMS["lbu"]
    records = [s.record for s in sent[:20]]
    records.insert(12, (sent[30].key, sent[30].value, timestamp))
    batch = LdpCollector(**params, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=START)
    with pytest.raises(error):
        batch.offer_all(records)
    one = LdpCollector(**params, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=START)
    for record in records[:12]:
        one.offer(*record)
    with pytest.raises(error):
        one.offer(*records[12])
    assert batch.watermark == one.watermark == sent[11].timestamp_ms
    assert json.dumps(batch.close(START)) == json.dumps(one.close(START))
    assert batch.ledgers.dump() == one.ledgers.dump()


@pytest.mark.parametrize("name", list(STREAMS))
@SETTINGS
@given(data=st.data())
def test_the_batch_reader_reads_as_read_record(name: str, data: st.DataObject) -> None:
    params, sent = STREAMS[name]
    stream = Stream(params["protocol"], params["d"], START, params.get("E"), params.get("w"),
                    params.get("lpu_key", ""), params.get("lpu_rotate", 0))
    picks = data.draw(st.lists(st.tuples(st.integers(0, len(sent) - 1), st.integers(0, 60)),
                               max_size=40))
    records = [variants(sent[i])[j % len(variants(sent[i]))] if j < 50 else sent[i].record[:2]
               for i, j in picks]
    keys, values = [k for k, _ in records], [v for _, v in records]
    reports, refused = read_batch(stream, keys, values)
    expected_refused, expected = [], []
    for i, (key, value) in enumerate(records):
        try:
            expected.append((i, read_record(stream, key, value)))  # type: ignore[arg-type]
        except Refusal as refusal:
            expected_refused.append((i, refusal.reason))
    assert refused == expected_refused
    assert reports.index.tolist() == [i for i, _ in expected]
    for row, (_, want) in enumerate(expected):
        got = reports.report(row, stream.protocol)
        assert (got.user, got.slot, got.eps, got.E, got.w, got.d, got.oracle, got.cell,
                got.client) == (want.user, want.slot, want.eps, want.E, want.w, want.d,
                                want.oracle, want.cell, want.client)
        assert np.array_equal(np.asarray(got.bits), np.asarray(want.bits)) \
            if want.oracle == "oue" else got.bits is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.1, 0.5, 1.0, 2.0]), st.integers(0, 5)),
                min_size=1, max_size=30), st.data())
def test_counts_estimate_as_the_reports_arrays(reports: list, data: st.DataObject) -> None:
    """A slot counted per (oracle, budget) group estimates what estimate_slot makes of the
    stacked reports."""
    d = 6
    slot = OpenSlot(d)
    oue_eps, oue_bits, grr_eps, grr_cells = [], [], [], []
    for n, (eps, cell) in enumerate(reports):
        if data.draw(st.booleans()):
            bits = np.array(data.draw(st.lists(st.booleans(), min_size=d, max_size=d)))
            oue_eps.append(eps)
            oue_bits.append(bits)
            slot.add(parse_like(f"u{n}", eps, "oue", bits, None))
        else:
            grr_eps.append(eps)
            grr_cells.append(cell)
            slot.add(parse_like(f"u{n}", eps, "grr", None, cell))
    want = estimate_slot(d, oue_eps=np.array(oue_eps), oue_bits=np.array(oue_bits).reshape(-1, d),
                         grr_eps=np.array(grr_eps), grr_cells=np.array(grr_cells, dtype=int))
    got = slot.estimate()
    assert got.reporters == want.reporters == len(reports)
    assert got.frequency.tobytes() == want.frequency.tobytes()
    assert got.variance.tobytes() == want.variance.tobytes()
    assert [(g.oracle, g.eps, g.reporters) for g in got.groups] == \
        [(g.oracle, g.eps, g.reporters) for g in want.groups]


def parse_like(user: str, eps: float, oracle: str, bits: np.ndarray | None, cell: int | None):
    """A report as parse_report gives one (of a plbu stream over 6 cells)."""
    from mechanisms.local import ParsedReport

    return ParsedReport("plbu", user, 1, eps, eps, 1, 6, oracle, bits, cell, "c")


@pytest.mark.parametrize("w, E", [(1, 1.0), (3, 1.0), (10, 1.0), (10, 0.7), (7, 0.3),
                                  (200, 2.0), (49, 0.1), (2, 5.0)])
@pytest.mark.parametrize("whole", [False, True])
def test_the_ledger_regime_is_what_the_ledger_does(w: int, E: float, whole: bool) -> None:
    """``free``: the ledger refuses no report of one a slot; ``spaced``: it allows a report
    exactly w slots or more after the last."""
    eps = E if whole else E / w
    regime = ledger_regime(w, E, eps)
    ledger = ClientLedger(w, E)
    allowed = []
    for slot in range(3 * w + 3):
        try:
            ledger.commit(slot, eps)
            allowed.append(slot)
        except LedgerRefusal as refusal:
            assert refusal.code == "over_budget"
    if regime == "free":
        assert allowed == list(range(3 * w + 3))
    else:
        assert regime == "spaced" and w > 1
        assert allowed == list(range(0, 3 * w + 3, w))


def test_a_long_window_takes_the_slow_way() -> None:
    assert ledger_regime(2_000_000, 1.0, 1.0 / 2_000_000) is None
    assert ledger_regime(2_000_000, 1.0, 1.0) == "spaced"


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 30)), max_size=40),
       st.lists(st.integers(-1, 30), min_size=5, max_size=5))
def test_previous_max_is_the_running_max_of_each_group(items: list, initial: list) -> None:
    items = sorted(items, key=lambda item: item[0])  # groups in order, items kept in order
    groups = np.array([g for g, _ in items], dtype=np.int64)
    values = np.array([v for _, v in items], dtype=np.int64)
    got = previous_max(groups, values, np.array(initial, dtype=np.int64)).tolist()
    want = []
    for n, (g, _) in enumerate(items):
        want.append(max([initial[g]] + [v for h, v in items[:n] if h == g]))
    assert got == want


def test_an_iteration_error_raises_after_the_records_before() -> None:
    params, sent = STREAMS["plbu"]
    records = [s.record for s in sent[:30]]

    def broken():  # noqa: ANN202 - a generator that fails part way
        yield from records
        raise RuntimeError("the source broke")

    batch = LdpCollector(**params, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=START)
    batch.batch_cells = 8 * batch.stream.d  # the error comes in the fourth batch
    with pytest.raises(RuntimeError, match="the source broke"):
        batch.offer_all(broken())
    one = run(params, [("offer", records)], batched=False)
    assert json.dumps([batch.close(s) for s in range(START, START + SLOTS)]) == one[1]
    assert batch.ledgers.dump() == one[2]
    assert batch.watermark == one[3]
