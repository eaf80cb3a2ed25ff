"""DPBA (Algorithm 7 of papers/000) at exact ties: slot t is nullified when t <= R_FN.

The ledger keeps budgets in integer units, rounded down, so a border that is exactly t in exact
arithmetic may come out a few units below t. These tests drive the ledger and an exact-rational
reference, written per user from Algorithm 7's text, with the same requirements and schedules,
and check that both nullify and publish at the same slots.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mechanisms.requirements import DynamicRequirements
from mechanisms.run.dynamic import plan_dynamic

# decl[t - 1][i]: user i's (wB, EB, wF, EF) in force at slot t, or None before it declares
Decl = list[list[tuple[int, Fraction, int, Fraction] | None]]
ZERO = Fraction(0)


def exact_dpba(decl: Decl, bits: list[bool]) -> list[tuple[bool, bool, list[Fraction], Fraction]]:
    """Algorithm 7 in exact rationals: per slot (nullified, published, eps2 charged, R_FN).

    Besides Algorithm 7 it applies the repository's two backward rules (as the ledger does): a
    budget already overspent in the backward window is projected to what was spent, and the
    backward bounds are clamped at zero and never exceed what is left of the window's budget.
    """
    T, n = len(bits), len(decl[0])
    e1 = [[ZERO] * n for _ in range(T + 1)]  # e1[t][i]: eps1 charged at slot t
    e2 = [[ZERO] * n for _ in range(T + 1)]
    # c1[t][i], c2[t][i]: e1, e2 summed over slots 1..t; a sum over slots a..t-1 is
    # c[t - 1][i] - c[a - 1][i], exactly (rationals)
    c1 = [[ZERO] * n for _ in range(T + 1)]
    c2 = [[ZERO] * n for _ in range(T + 1)]
    out = []
    for t in range(1, T + 1):
        border = None  # the largest R_FN,i (Line 11)
        absorb, remain, bound2 = [ZERO] * n, [ZERO] * n, [ZERO] * n
        for i in range(n):
            if decl[t - 1][i] is None:
                continue
            wB, EB, _, _ = decl[t - 1][i]
            # Line 2: the slots whose forward window covers t
            taus = [
                tau
                for tau in range(1, t + 1)
                if decl[tau - 1][i] is not None and t <= tau + decl[tau - 1][i][2] - 1
            ]
            share = {tau: decl[tau - 1][i][3] / (2 * decl[tau - 1][i][2]) for tau in taus}
            spent = {tau: c2[t - 1][i] - c2[tau - 1][i] for tau in taus}
            # Lines 3-5, with the projection of an overspent backward budget
            lo = max(1, t - wB + 1)
            s1 = c1[t - 1][i] - c1[lo - 1][i]
            s2 = c2[t - 1][i] - c2[lo - 1][i]
            budget = max(EB, s1 + s2)
            left = budget - s1 - s2
            e1[t][i] = min(min(share.values()), max(ZERO, min(budget / 2 - s1, left)))
            # Lines 6-8: t_FN,i,tau and R_FN,i
            t_fn = {tau: spent[tau] / share[tau] + tau - 1 for tau in taus}
            r_i = max(t_fn.values())
            border = r_i if border is None else max(border, r_i)
            # Lines 16-19
            absorb[i] = max((t - t_fn[tau]) * share[tau] for tau in taus)
            remain[i] = max(ZERO, min(decl[tau - 1][i][3] / 2 - spent[tau] for tau in taus))
            bound2[i] = max(ZERO, min(budget / 2 - s2, left - e1[t][i]))
        nullified = border is not None and t <= border  # Line 12
        published = bits[t - 1] and not nullified
        if published:  # Lines 18 and 20
            e2[t] = [min(max(absorb[i], ZERO), remain[i], bound2[i]) for i in range(n)]
        c1[t] = [c1[t - 1][i] + e1[t][i] for i in range(n)]
        c2[t] = [c2[t - 1][i] + e2[t][i] for i in range(n)]
        out.append((nullified, published, e2[t], border if border is not None else ZERO))
    return out


def requirements(decl: Decl) -> DynamicRequirements:
    """The declarations behind ``decl``: a row whenever a user's requirement changes."""
    rows = []
    for i in range(len(decl[0])):
        before = None
        for t, row in enumerate(decl, start=1):
            req = row[i]
            if req is not None and req != before:
                wB, EB, wF, EF = req
                rows.append((t, f"u{i}", wB, float(EB), wF, float(EF)))
            before = req
    return DynamicRequirements.from_rows(rows)


def check_agrees(decl: Decl, bits: list[bool]) -> list[Fraction]:
    """Drive the ledger (via :func:`plan_dynamic`) and the reference; returns the borders."""
    expected = exact_dpba(decl, bits)
    schedule = "".join("1" if b else "0" for b in bits)
    got = list(plan_dynamic("dpba", requirements(decl), schedule))
    for t, (slot, (nullified, published, eps2, border)) in enumerate(
        zip(got, expected, strict=True), start=1
    ):
        assert slot["nullified"] == nullified, f"slot {t}: R_FN = {border} (exact)"
        assert slot["published"] == published, f"slot {t}"
        for i, want in enumerate(eps2):
            charged = slot["eps2"].get(f"u{i}", 0.0)
            assert abs(charged - float(want)) <= 1e-9, f"slot {t}, u{i}: {charged} vs {want}"
    return [border for _, _, _, border in expected]


@st.composite
def decimal_cases(draw, max_users: int = 4, max_slots: int = 80, max_window: int = 12):
    """Requirements with budgets on a grid of tenths (so that exact ties are common) and a
    forced publish/approximate schedule; each user changes with probability 0.2 per slot."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n = int(rng.integers(1, max_users + 1))
    T = int(rng.integers(10, max_slots + 1))
    W = int(rng.integers(2, max_window + 1))
    first = sorted(int(x) for x in rng.integers(1, T + 1, n))
    first[0] = 1
    decl: Decl = [[None] * n for _ in range(T)]
    for i in range(n):
        req = None
        for t in range(first[i], T + 1):
            if t == first[i] or rng.random() < 0.2:
                req = (
                    int(rng.integers(1, W + 1)),
                    Fraction(int(rng.integers(1, 50)), 10),
                    int(rng.integers(1, W + 1)),
                    Fraction(int(rng.integers(1, 50)), 10),
                )
            decl[t - 1][i] = req
    bits = (rng.random(T) < rng.uniform(0.2, 1.0)).tolist()
    return decl, bits


@given(case=decimal_cases())
@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
def test_nullification_matches_exact_arithmetic(case) -> None:
    decl, bits = case
    check_agrees(decl, bits)


@given(case=decimal_cases(max_users=2, max_slots=200, max_window=60))
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
def test_nullification_matches_exact_arithmetic_wide_windows(case) -> None:
    decl, bits = case
    check_agrees(decl, bits)


@given(seed=st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None, derandomize=True)
def test_nullification_matches_exact_arithmetic_on_random_floats(seed) -> None:
    # budgets as arbitrary floats, read exactly (Fraction of the float): ties are rare here
    rng = np.random.default_rng(seed)
    n, T, W = int(rng.integers(1, 4)), int(rng.integers(5, 60)), int(rng.integers(1, 12))
    decl: Decl = [[None] * n for _ in range(T)]
    for i in range(n):
        req = None
        for t in range(1, T + 1):
            if t == 1 or rng.random() < 0.2:
                req = (
                    int(rng.integers(1, W + 1)),
                    Fraction(float(rng.uniform(0.01, 5.0))),
                    int(rng.integers(1, W + 1)),
                    Fraction(float(rng.uniform(0.01, 5.0))),
                )
            decl[t - 1][i] = req
    check_agrees(decl, (rng.random(T) < 0.6).tolist())


def constant(req: tuple[int, str, int, str], T: int) -> Decl:
    """One user holding ``req`` (budgets as decimal strings) for T slots."""
    wB, EB, wF, EF = req
    return [[(wB, Fraction(EB), wF, Fraction(EF))] for _ in range(T)]


def test_constructed_tie_between_two_declarations() -> None:
    # (wF=7, EF=1.6) then (wF=2, EF=1.6): EF/2 = 0.8 is 7 shares of 0.8/7 and 2 shares of
    # 0.4. The publication at slot 30 spends the first run's remaining 0.8 (7 shares, rounded
    # down per share), which is exactly the 2 shares of 0.4 of the second run's slot 29: the
    # border R_FN of slot 31 is exactly 31, and slot 31 is nullified.
    decl = constant((3, "3.2", 7, "0.8"), 21)
    decl += constant((7, "2.7", 7, "1.6"), 3)
    decl += constant((10, "4.4", 2, "1.6"), 7)
    bits = [False] * 29 + [True, True]
    borders = check_agrees(decl, bits)
    assert borders[30] == 31
    assert exact_dpba(decl, bits)[30][0]


def test_constructed_tie_after_an_absorbed_publication() -> None:
    # share 0.1: skipping slots 1 and 2 lets slot 3 absorb three shares, so slots 4 and 5 are
    # nullified, the border of slot 5 being exactly 5; slot 6 absorbs two, which nullifies 7
    decl = constant((1, "0.6", 5, "1.0"), 8)
    bits = [False, False, True, True, True, True, True, True]
    borders = check_agrees(decl, bits)
    assert borders[3:7] == [5, 5, 5, 7]
    assert [x[0] for x in exact_dpba(decl, bits)] == [False] * 3 + [True, True, False, True, False]


@pytest.mark.parametrize(("a", "b"), [(a, b) for b in (2, 3) for a in range(2 * b - 1, 10)])
def test_constructed_ties_across_declarations(a: int, b: int) -> None:
    # slots 1..b-1 declare (wF=a, EF), later slots (wF=b, EF). At slot a the oldest live slot of
    # the first run lends its a shares: EF/2 is charged, which is exactly b shares of the second
    # run (a >= 2b - 1 leaves it b slots before slot a), so the border R_FN of slot a + b - 1 is
    # exactly a + b - 1. Units round the two shares EF/(2a) and EF/(2b) down differently: the
    # charge may come out a few units below b shares.
    T = a + b + 1
    tie = a + b - 1
    for tenths in range(1, 50):
        EF = Fraction(tenths, 10)
        decl: Decl = [[(1, Fraction(10), a if t < b else b, EF)] for t in range(1, T + 1)]
        bits = [t in (a, tie, T) for t in range(1, T + 1)]
        borders = check_agrees(decl, bits)
        assert borders[tie - 1] == tie, f"EF = {EF}"
        assert exact_dpba(decl, bits)[tie - 1][:2] == (True, False)
