"""The local randomisation's math (mechanisms/local): portable exp, thresholds, OUE and GRR
frequencies, the ledger's invariant, the schedules against the evaluation's protocols."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms.baselines.ldp import Plbu
from mechanisms.baselines.ldp_ids import LdpIds
from mechanisms.local import (
    WORD,
    ClientLedger,
    CounterWords,
    LedgerRefusal,
    grr_cell,
    grr_keep_threshold,
    lpu_phase,
    oue_bits,
    oue_threshold,
    pack_bits,
    plbu_uses_grr,
    portable_exp,
    report_budget,
    reports_at,
    unpack_bits,
)
from mechanisms.local.ledger import SLACK
from mechanisms.requirements import FixedRequirements


@given(st.floats(0.0, 500.0))
def test_portable_exp_is_within_a_few_ulp_of_exp(x: float) -> None:
    assert portable_exp(x) == pytest.approx(math.exp(x), rel=4e-16)


def test_portable_exp_refuses_what_it_does_not_cover() -> None:
    for x in (-1e-300, 500.1, math.nan, math.inf):
        with pytest.raises(ValueError):
            portable_exp(x)


@given(st.floats(1e-9, 60.0), st.integers(2, 4096))
def test_thresholds_never_raise_the_effective_epsilon(eps: float, d: int) -> None:
    """OUE's q rounded up and GRR's p rounded down: the ratio the words realise is at most
    e^eps (up to the rounding of e^eps itself)."""
    q = oue_threshold(eps) / WORD
    assert q >= 1.0 / (math.exp(eps) + 1.0) * (1 - 1e-12)
    assert math.log((1 - q) / q) <= eps * (1 + 1e-9) + 1e-12
    p = grr_keep_threshold(eps, d) / WORD
    assert p <= math.exp(eps) / (math.exp(eps) + d - 1) * (1 + 1e-12)
    assert 1 <= oue_threshold(eps) <= 2**31


def test_oue_keeps_bits_with_its_probabilities() -> None:
    d, eps, n = 6, 1.0, 40_000
    words = CounterWords("oue-frequencies")
    threshold = oue_threshold(eps)
    bits = np.array([oue_bits(2, d, threshold, words.take(d)) for _ in range(n)])
    q = threshold / WORD
    expected = np.where(np.arange(d) == 2, 0.5, q)
    sd = np.sqrt(expected * (1 - expected) / n)
    assert np.all(np.abs(bits.mean(axis=0) - expected) < 5 * sd)


def test_grr_keeps_with_p_and_moves_uniformly() -> None:
    d, eps, n = 5, 1.0, 40_000
    words = CounterWords("grr-frequencies")
    keep = grr_keep_threshold(eps, d)
    out = np.array([grr_cell(3, d, keep, lambda: int(words.take(1)[0])) for _ in range(n)])
    p = keep / WORD
    expected = np.where(np.arange(d) == 3, p, (1 - p) / (d - 1))
    freq = np.bincount(out, minlength=d) / n
    assert np.all(np.abs(freq - expected) < 5 * np.sqrt(expected * (1 - expected) / n))


def test_grr_rejects_words_past_the_last_whole_multiple() -> None:
    words = iter([2**32 - 1, 2**32 - 1, 4])  # kept? no; 2^32 - 1 >= 2^32 - (2^32 mod 3)
    assert grr_cell(0, 4, 0, lambda: next(words)) == 1 + 4 % 3


@given(st.integers(1, 300), st.data())
def test_packed_bits_round_trip(d: int, data: st.DataObject) -> None:
    bits = np.array(data.draw(st.lists(st.booleans(), min_size=d, max_size=d)))
    packed = pack_bits(bits)
    assert len(packed) == (d + 7) // 8
    assert np.array_equal(unpack_bits(packed, d), bits)
    if d % 8:
        with pytest.raises(ValueError):
            unpack_bits(packed[:-1] + bytes([packed[-1] | 0x80]), d)


@settings(max_examples=200)
@given(st.integers(1, 12), st.floats(0.01, 20.0),
       st.lists(st.tuples(st.integers(0, 5), st.floats(0.001, 20.0)), max_size=40))
def test_the_ledger_never_lets_a_window_spend_more_than_E(
        w: int, E: float, attempts: list[tuple[int, float]]) -> None:  # noqa: N803
    ledger = ClientLedger(w, E)
    slot, committed = 0, []
    for gap, eps in attempts:
        slot += gap
        before = ledger.spent(slot)
        try:
            ledger.commit(slot, eps)
            committed.append((slot, eps))
        except LedgerRefusal as refusal:
            if refusal.code == "over_budget":
                assert before + eps > E * SLACK
            else:
                assert committed and slot <= committed[-1][0]
    for end in range(slot + w + 1):
        window = [e for s, e in committed if end - w < s <= end]
        assert sum(window) <= E * SLACK + 1e-12


def test_a_kept_history_over_a_lowered_E_holds_reports_back() -> None:
    ledger = ClientLedger(3, 1.0)
    ledger.load([[3, 1.0], [5, 0.5]])
    with pytest.raises(LedgerRefusal, match="over E"):
        ledger.commit(7, 0.6)
    ledger.commit(8, 0.6)
    for bad in ([[1, 0.5], [1, 0.5]], [[-1, 0.5]], [[1, 0.0]], [[1, 501.0]], "x", [[1.5, 1]]):
        with pytest.raises(LedgerRefusal):
            ledger.load(bad)


@pytest.mark.parametrize("name", ["lbu", "lsp"])
def test_budget_division_schedules_follow_the_evaluation(name: str) -> None:
    """LdpIds charges every user the round budget at its slots: the client reports exactly
    there, with that budget (the evaluation's slot 1 is the stream's first slot)."""
    w, E, start = 4, 2.0, 7
    ids = LdpIds(name, w, E, n=3, d=4, rng=np.random.default_rng(0))
    for t in range(1, 4 * w + 1):
        release = ids.step(np.array([0, 1, 2]))
        slot = start + t - 1
        due = reports_at(name, slot, start=start, w=w)
        assert due == (release.eps2 > 0)
        if due:
            assert release.eps2 == report_budget(name, w, E)
    assert not reports_at(name, start - 1, start=start, w=w)


def test_lpu_settles_where_the_client_starts() -> None:
    """The evaluation's LPU over n = k w users settles at every user reporting every w slots
    at a fixed phase, about n/w users a slot, with the whole E; so does the client."""
    w, n = 5, 15
    ids = LdpIds("lpu", w, 1.0, n=n, d=3, rng=np.random.default_rng(1))
    asked: dict[int, list[int]] = {}
    for t in range(1, 6 * w + 1):
        for user in ids.step(np.zeros(n, dtype=np.int64)).round2.tolist():
            asked.setdefault(user, []).append(t)
    assert all(np.all(np.diff(slots) == w) for slots in asked.values())
    users = [f"user-{i}" for i in range(2000)]
    groups = np.bincount([lpu_phase("key", u, w, 0) for u in users], minlength=w)
    assert np.all(np.abs(groups - len(users) / w) < 5 * np.sqrt(len(users) / w))
    for u in users[:50]:
        slots = [s for s in range(3 * w) if reports_at("lpu", s, start=0, w=w, key="key", user=u)]
        assert np.all(np.diff(slots) == w) and len(slots) == 3


@settings(max_examples=60)
@given(st.text(min_size=1, max_size=8), st.integers(1, 9), st.integers(1, 4),
       st.integers(0, 5))
def test_lpu_never_puts_two_reports_in_a_window(user: str, w: int, rotate: int,
                                                start: int) -> None:
    slots = [s for s in range(start + 12 * w * rotate) if reports_at(
        "lpu", s, start=start, w=w, key="k", user=user, rotate=rotate)]
    assert np.all(np.diff(slots) >= w)
    assert slots  # the first block never skips


def test_lpu_group_is_the_documented_hmac() -> None:
    import hashlib
    import hmac
    msg = b"pwevent-lpu-v1" + b"".join(len(p).to_bytes(4, "big") + p for p in
                                       (b"alice", b"10", b"3"))
    tag = hmac.new(b"public", msg, hashlib.sha256).digest()
    assert lpu_phase("public", "alice", 10, 3) == int.from_bytes(tag[:8], "big") % 10


@pytest.mark.parametrize("d", [1, 2, 3, 4, 8, 16, 64, 1000])
def test_plbu_chooses_the_oracle_the_evaluation_chooses(d: int) -> None:
    E = np.array([0.05, 0.3, 1.0, 2.0, 3.0, 4.0, 6.0, 10.0])
    users = [f"u{i}" for i in range(E.size)]
    plbu = Plbu(FixedRequirements.from_arrays(users, np.full(E.size, 1), E), d,
                np.random.default_rng(0))
    assert plbu.use_grr.tolist() == [plbu_uses_grr(float(e), d) for e in plbu.group_eps]
