"""DPBD and DPBA (papers/000 section 5): worked examples, consistency, properties, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from dynamic_reference import DYNAMIC_LEDGERS as REFERENCE_LEDGERS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mechanisms import FixedRequirements, ledger_for
from mechanisms.ledgers.columns import MAX_BUDGET, grid_table
from mechanisms.ledgers.kinds import DYNAMIC_LEDGERS
from mechanisms.requirements import DynamicRequirements
from mechanisms.run.dynamic import DynamicMechanism, dynamic_ledger, plan_dynamic

NULL = (1, MAX_BUDGET, 1, 0.0)  # the requirement a suspended user holds

# Table 3 of papers/000: per slot, (wB, EB, wF, EF) of u1, u2, u3
TABLE3 = {
    1: [(1, 1.0, 4, 2.4), (1, 0.6, 2, 1.6), (1, 2.0, 3, 1.2)],
    2: [(2, 2.4, 4, 3.2), (2, 1.6, 2, 2.4), (2, 1.2, 3, 3.0)],
    3: [(2, 2.8, 3, 4.2), (2, 3.2, 2, 2.8), (3, 1.8, 2, 1.2)],
    4: [(2, 2.4, 3, 2.4), (3, 4.2, 2, 2.8), (2, 3.2, 3, 0.6)],
    5: [(5, 3.0, 2, 0.8), (3, 3.6, 2, 2.0), (4, 2.4, 3, 1.8)],
}
USERS = ("u1", "u2", "u3")


def table3() -> DynamicRequirements:
    return DynamicRequirements.from_rows(
        (t, USERS[i], *req) for t, reqs in TABLE3.items() for i, req in enumerate(reqs)
    )


def values(d: dict) -> list[float]:
    return [d[u] for u in USERS]


# --------------------------------------------------------------------------- worked examples
def test_example7_dpba() -> None:
    slots = list(plan_dynamic("dpba", table3(), "1011"))
    assert values(slots[0]["eps2"]) == pytest.approx([0.3, 0.3, 0.2], abs=1e-9)
    assert not slots[1]["published"] and values(slots[1]["eps2"]) == [0.0, 0.0, 0.0]
    # u3's forward window from t=1 (wF=3, EF=1.2) leaves 0.6 - 0.2 = 0.4, not 0.6
    assert values(slots[2]["eps2"]) == pytest.approx([0.8, 1.2, 0.4], abs=1e-9)
    assert not slots[3]["nullified"] and slots[3]["published"]


def test_example7_nullification_borders_at_t4() -> None:
    req, ledger = table3(), dynamic_ledger("dpba", 5)
    index = {u: i for i, u in enumerate(USERS)}
    for t, bit in zip(range(1, 5), "1011", strict=True):
        users, wB, EB, wF, EF = req.at(t)
        ledger.declare(np.array([index[u] for u in users]), wB, EB, wF, EF)
        if t == 4:
            assert ledger.borders() == pytest.approx([11 / 3, 2 + 1.2 / 0.7, 2 + 0.4 / 0.3])
            assert np.round(ledger.borders(), 2).tolist() == [3.67, 3.71, 3.33]
            assert not ledger.plan().nullified
        ledger.commit(bit == "1")


def test_example6_dpbd() -> None:
    slots = list(plan_dynamic("dpbd", table3(), "10100"))
    assert slots[0]["eps1"]["u1"] == pytest.approx(0.3, abs=1e-9)
    assert slots[0]["eps2"]["u1"] == pytest.approx(0.5, abs=1e-9)
    assert slots[1]["eps1"]["u1"] == pytest.approx(0.3, abs=1e-9)
    assert slots[1]["eps2"]["u1"] == 0.0


def test_plan_output_shape() -> None:
    rows = [(1, "a", 2, 1.0, 2, 1.0), (3, "b", 1, 1.0, 3, 0.9)]
    slots = list(plan_dynamic("dpbd", DynamicRequirements.from_rows(rows), "111"))
    assert [sorted(s) for s in slots] == [
        ["eps1", "eps2", "nullified", "projected", "published", "slot"]
    ] * 3
    assert [list(s["eps1"]) for s in slots] == [["a"], ["a"], ["a", "b"]]
    assert [s["slot"] for s in slots] == [1, 2, 3]


# --------------------------------------------------------------------------- Proposition 1
@st.composite
def fixed_cases(draw):
    n = draw(st.integers(1, 5))
    w = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    E = draw(st.lists(st.floats(0.01, 5.0), min_size=n, max_size=n))
    bits = draw(st.lists(st.booleans(), min_size=1, max_size=80))
    return w, E, bits


@given(fixed_cases())
@settings(max_examples=40, deadline=None)
def test_dpbd_matches_pbd_with_inactive_backward(case) -> None:
    w, E, bits = case
    n = len(w)
    users = [f"u{i}" for i in range(n)]
    pbd, level = ledger_for("pbd", FixedRequirements.from_arrays(users, w, E))
    rows = [(1, u, 1, 10.0, w[i], E[i]) for i, u in enumerate(users)]
    plan = plan_dynamic("dpbd", DynamicRequirements.from_rows(rows), "".join("01"[b] for b in bits))
    # equal up to the ledger's unit of 2**-40 (charges are rounded down to whole units)
    for bit, slot in zip(bits, plan, strict=True):
        charge = pbd.commit(bit)
        assert slot["published"] == charge.published
        assert values_of(slot["eps1"], users) == pytest.approx(charge.eps1[level], abs=1e-10)
        assert values_of(slot["eps2"], users) == pytest.approx(charge.eps2[level], abs=1e-10)
        assert slot["projected"] == 0


def values_of(d: dict, users: list[str]) -> list[float]:
    return [d[u] for u in users]


# --------------------------------------------------------------------------- reference
def reference(name: str, decl: np.ndarray, bits: list[bool]) -> list[tuple]:
    """Algorithms 6 and 7 written out per user and per tau (with the projection rule).

    ``decl`` is (T, n, 4): each user's (wB, EB, wF, EF) in force at each slot (NaN before the
    user appears, ``NULL`` while it is suspended: charged nothing, nullifying nothing). Returns
    per slot (eps1, eps2, nullified, published).
    """
    T, n, _ = decl.shape
    e1, e2, out = np.zeros((T + 1, n)), np.zeros((T + 1, n)), []
    for t in range(1, T + 1):
        eps1, eps2 = np.zeros(n), np.zeros(n)
        absorb, remain, bound2, border = np.zeros(n), np.zeros(n), np.zeros(n), -np.inf
        for i in range(n):
            if np.isnan(decl[t - 1, i, 0]) or decl[t - 1, i, 3] == 0:
                continue  # not yet declared, or suspended
            wB, EB = int(decl[t - 1, i, 0]), decl[t - 1, i, 1]
            taus = [
                tau
                for tau in range(1, t + 1)
                if not np.isnan(decl[tau - 1, i, 0]) and t <= tau + decl[tau - 1, i, 2] - 1
            ]
            share = {tau: decl[tau - 1, i, 3] / (2 * decl[tau - 1, i, 2]) for tau in taus}
            spent = {tau: e2[tau:t, i].sum() for tau in taus}
            lo = max(t - wB + 1, 1)
            s1, s2 = e1[lo:t, i].sum(), e2[lo:t, i].sum()
            budget = max(EB, s1 + s2)
            left = budget - s1 - s2
            b1 = max(0.0, min(budget / 2 - s1, left))
            eps1[i] = min(min(share.values()), b1)
            bound2[i] = max(0.0, min(budget / 2 - s2, left - eps1[i]))
            remain[i] = max(0.0, min(decl[tau - 1, i, 3] / 2 - spent[tau] for tau in taus))
            t_fn = {tau: spent[tau] / share[tau] + tau - 1 for tau in taus}
            border = max(border, max(t_fn.values()))
            absorb[i] = max((t - t_fn[tau]) * share[tau] for tau in taus)
        nullified = name == "dpba" and t <= border + 1e-9
        if name == "dpbd":
            eps2 = np.minimum(remain / 2, bound2)
        elif not nullified:
            eps2 = np.minimum(np.minimum(np.maximum(absorb, 0), remain), bound2)
        published = bits[t - 1] and not nullified
        e1[t], e2[t] = eps1, eps2 if published else 0.0
        out.append((eps1, e2[t].copy(), nullified, published))
    return out


# --------------------------------------------------------------------------- random cases
@st.composite
def dynamic_cases(draw, max_slots: int = 200, max_users: int = 5):
    """(requirements, requirement in force per slot and user, schedule, suspensions by slot):
    each user changes with probability 0.2 per slot and is suspended with probability 0.03
    (until its next change)."""
    n = draw(st.integers(1, max_users))
    T = draw(st.integers(1, max_slots))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    first = np.ones(n, dtype=np.int64)
    if n > 1:
        first[1:] = rng.integers(1, T + 1, n - 1)
    decl = np.full((T, n, 4), np.nan)
    rows, suspended = [], {}
    for i in range(n):
        for t in range(first[i], T + 1):
            if t == first[i] or rng.random() < 0.2:
                req = (
                    int(rng.integers(1, 51)),
                    float(rng.uniform(0.0, 5.0)) or 5.0,
                    int(rng.integers(1, 51)),
                    float(rng.uniform(0.0, 5.0)) or 5.0,
                )
                rows.append((t, f"u{i}", *req))
            elif req != NULL and rng.random() < 0.03:
                req = NULL
                suspended.setdefault(t, []).append(f"u{i}")
            decl[t - 1, i] = req
    bits = (rng.random(T) < rng.uniform(0.2, 1.0)).tolist()
    return DynamicRequirements.from_rows(rows), decl, bits, suspended


def run_ledger(
    name: str,
    req: DynamicRequirements,
    bits: list[bool],
    grid_bits: int | None,
    suspended: dict[int, list[str]] | None = None,
):
    """Drive a ledger over users u0, u1, ...: (eps1, eps2) as (T, n), plans, charges, indices."""
    ledger = dynamic_ledger(name, req.max_window, grid_bits)
    index: dict[str, int] = {}
    n = len(req.users)
    e1, e2 = np.zeros((len(bits), n)), np.zeros((len(bits), n))
    plans, charges = [], []
    for t, bit in enumerate(bits, start=1):
        users, wB, EB, wF, EF = req.at(t)
        for u in users:
            index.setdefault(u, len(index))
        ledger.declare(np.array([index[u] for u in users], dtype=np.int64), wB, EB, wF, EF)
        gone = (suspended or {}).get(t, [])
        ledger.suspend(np.array([index[u] for u in gone], dtype=np.int64))
        plans.append(ledger.plan())
        charge = ledger.commit(bit)
        e1[t - 1, : len(index)], e2[t - 1, : len(index)] = charge.eps1, charge.eps2
        charges.append(charge)
    where = [index[f"u{i}"] for i in range(n)]
    return e1[:, where], e2[:, where], plans, charges, where


def check_feasible(decl: np.ndarray, e1, e2, plans, charges, bits, where) -> None:
    T, n, _ = decl.shape
    total = e1 + e2
    assert (e1 >= 0).all() and (e2 >= 0).all()
    for t in range(1, T + 1):
        charge, plan = charges[t - 1], plans[t - 1]
        assert charge.published == (bits[t - 1] and not charge.nullified)
        if not charge.published:
            assert (charge.eps2 == 0).all()
        assert charge.extra["projected"] == plan.projected == int(plan.projected_users.sum())
        for i in range(n):
            if np.isnan(decl[t - 1, i, 0]):
                assert total[t - 1, i] == 0
                continue
            k = where[i]
            wB, EB, wF, EF = decl[t - 1, i]
            before = total[max(t - int(wB), 0) : t - 1, i].sum()
            projected_budget = plan.backward_budget[k]
            if plan.projected_users[k]:
                assert before > EB
                assert projected_budget == pytest.approx(before, abs=1e-9)
                assert total[t - 1, i] == 0
            else:
                assert projected_budget == pytest.approx(EB, abs=1e-9)
            assert before + total[t - 1, i] <= projected_budget + 1e-9
            assert total[t - 1 : t - 1 + int(wF), i].sum() <= EF + 1e-9


@pytest.mark.parametrize("name", ["dpbd", "dpba"])
@pytest.mark.parametrize("grid_bits", [None, 3])
@given(case=dynamic_cases())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_window_within_its_budget(name, grid_bits, case) -> None:
    req, decl, bits, suspended = case
    e1, e2, plans, charges, where = run_ledger(name, req, bits, grid_bits, suspended)
    check_feasible(decl, e1, e2, plans, charges, bits, where)
    if grid_bits is not None:
        grid = grid_table(grid_bits) * 2.0**-40
        for charged in (e1, e2):
            assert np.isin(charged, grid).all()


@pytest.mark.parametrize("name", ["dpbd", "dpba"])
@given(case=dynamic_cases(max_slots=100, max_users=4))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_ledger_matches_reference(name, case) -> None:
    req, decl, bits, suspended = case
    e1, e2, _, charges, _ = run_ledger(name, req, bits, None, suspended)
    expected = reference(name, decl, bits)
    for t, (x1, x2, nullified, published) in enumerate(expected, start=1):
        assert charges[t - 1].nullified == nullified, f"slot {t}"
        assert charges[t - 1].published == published
        np.testing.assert_allclose(e1[t - 1], x1, rtol=0, atol=1e-9, err_msg=f"eps1 slot {t}")
        np.testing.assert_allclose(e2[t - 1], x2, rtol=0, atol=1e-9, err_msg=f"eps2 slot {t}")


def test_projection_of_a_backward_budget_already_spent() -> None:
    rows = [(1, "a", 3, 4.0, 1, 4.0), (3, "a", 3, 0.5, 1, 4.0)]
    slots = list(plan_dynamic("dpbd", DynamicRequirements.from_rows(rows), "1111"))
    spent = sum(slots[k]["eps1"]["a"] + slots[k]["eps2"]["a"] for k in range(2))
    assert spent > 0.5
    assert slots[2]["projected"] == 1
    assert slots[2]["eps1"]["a"] == 0 and slots[2]["eps2"]["a"] == 0
    assert slots[3]["projected"] == 1  # the window ending at 4 still holds slot 2
    assert [s["projected"] for s in slots[:2]] == [0, 0]
    # the mechanism's releases count the projected requests too
    mech = DynamicMechanism("dpbd", DynamicRequirements.from_rows(rows), d=2,
                            rng=np.random.default_rng(0))
    assert [mech.step(np.array([0])).projected for _ in range(4)] == [0, 0, 1, 1]


# --------------------------------------------------------------------------- the mechanism
def test_mechanism_steps_on_grid_levels() -> None:
    rng = np.random.default_rng(7)
    rows = [(1, f"u{i}", 5, 2.0, 10, 3.0 + 0.01 * i) for i in range(300)]
    rows += [(4, "late", 2, 1.0, 3, 1.0), (6, "u1", 20, 0.2, 20, 0.5)]
    req = DynamicRequirements.from_rows(rows)
    for name in ("dpbd", "dpba"):
        mech = DynamicMechanism(name, req, d=8, rng=np.random.default_rng(1))
        grid = grid_table(3) * 2.0**-40
        sums = np.zeros(301)
        for t in range(1, 21):
            n = 300 if t < 4 else 301
            if t == 10:
                mech.declare(["u2"], [3], [0.3], [4], [0.4])
            cells = rng.integers(-1, 8, n)
            rel = mech.step(cells)
            assert rel.slot == t and rel.histogram.shape == (8,)
            assert rel.reports == int((cells >= 0).sum())
            assert rel.eps1.shape == (n,) and np.isin(rel.eps1, grid).all()
            assert np.isin(rel.eps2, grid).all()
            assert rel.published or (rel.eps2 == 0).all()
            sums[:n] += rel.eps1 + rel.eps2
        assert mech.n == 301 and mech.users[300] == "late"
        assert (sums > 0).all()


def test_mechanism_counts_levels() -> None:
    rows = [(1, f"u{i}", 1, 4.0, 1, 1.0 + (i % 3)) for i in range(9)]
    mech = DynamicMechanism("dpbd", DynamicRequirements.from_rows(rows), d=3)
    cells = np.array([0, 1, 2, 0, 1, 2, -1, -1, 0])
    counts, codes, level = mech.level_counts(cells)
    assert counts.shape == (codes.shape[1], 3) and counts.sum() == 7
    for k in range(codes.shape[1]):
        np.testing.assert_array_equal(
            counts[k], np.bincount(cells[(level == k) & (cells >= 0)], minlength=3)
        )
    assert codes.shape[1] == 3  # three distinct requirements, three (eps1, eps2) levels


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("row", "field"),
    [
        ((1, "bob", 2, 0.0, 2, 1.0), "EB"),
        ((1, "bob", 2, 1.0, 2, -1.0), "EF"),
        ((1, "bob", 2, float("nan"), 2, 1.0), "EB"),
        ((1, "bob", 2, 1.0, 2, float("inf")), "EF"),
        ((1, "bob", 0, 1.0, 2, 1.0), "wB"),
        ((1, "bob", 2, 1.0, 1.5, 1.0), "wF"),
        ((0, "bob", 2, 1.0, 2, 1.0), "slot"),
    ],
)
def test_bad_requirements_name_user_and_field(row, field) -> None:
    with pytest.raises(ValueError, match=rf"user 'bob'.*field {field}"):
        DynamicRequirements.from_rows([(1, "ann", 1, 1.0, 1, 1.0), row])


def test_bad_requirements_other() -> None:
    with pytest.raises(ValueError, match="two declarations"):
        DynamicRequirements.from_rows([(1, "a", 1, 1.0, 1, 1.0), (1, "a", 2, 1.0, 1, 1.0)])
    with pytest.raises(ValueError, match="row 1"):
        DynamicRequirements.from_rows([(1, "a", 1, 1.0)])
    with pytest.raises(ValueError, match="schedule"):
        list(plan_dynamic("dpbd", DynamicRequirements.from_rows([]), "10x"))
    with pytest.raises(ValueError, match="unknown mechanism"):
        list(plan_dynamic("pbd", DynamicRequirements.from_rows([]), "1"))


def test_bad_input_to_the_mechanism_changes_nothing() -> None:
    req = DynamicRequirements.from_rows([(1, "a", 2, 1.0, 2, 1.0), (1, "b", 2, 1.0, 2, 1.0)])
    mech = DynamicMechanism("dpba", req, d=4, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="one cell per declared user"):
        mech.step(np.array([0, 1, 2]))
    with pytest.raises(ValueError, match=r"user 'b': field cell=4"):
        mech.step(np.array([0, 4]))
    with pytest.raises(ValueError, match="integers"):
        mech.step(np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"user 'c'.*field EB"):
        mech.declare(["a", "c"], [1, 1], [1.0, 0.0], [1, 1], [1.0, 1.0])
    with pytest.raises(ValueError, match=r"field wF=9 exceeds"):
        mech.ledger.declare(np.array([0]), [1], [1.0], [9], [1.0])
    assert mech.slot == 1 and mech.n == 2
    rel = mech.step(np.array([0, 1]))
    assert rel.slot == 1 and rel.eps1.shape == (2,)
    assert rel.eps1[0] == pytest.approx(0.25, rel=0.13)  # E/(2 wF) rounded down onto the grid


# --------------------------------------------------------------------------- grouped state
@st.composite
def shared_histories(draw):
    """Declarations drawn from a few requirements, so that many users share a history."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(1, 14))
    T = draw(st.integers(1, 90))
    wide = draw(st.sampled_from([4, 8, 30]))
    options = [
        (int(rng.integers(1, wide + 1)), float(rng.choice([0.3, 1.0, 2.5])),
         int(rng.integers(1, wide + 1)), float(rng.choice([0.4, 1.2, 3.0])))
        for _ in range(draw(st.integers(1, 4)))
    ]
    change = draw(st.sampled_from([0.0, 0.05, 0.3]))
    first = rng.integers(1, max(T // 3, 1) + 1, n)
    first[0] = 1
    rows, suspended = [], {}
    for i in range(n):
        for t in range(int(first[i]), T + 1):
            if t == first[i] or rng.random() < change:
                rows.append((t, f"u{i}", *options[int(rng.integers(len(options)))]))
            elif rng.random() < change / 2:
                suspended.setdefault(t, []).append(f"u{i}")
    bits = (rng.random(T) < rng.uniform(0.1, 1.0)).tolist()
    max_window = wide + int(rng.integers(0, 3))
    merge_every = draw(st.sampled_from([1, 3, None]))
    return DynamicRequirements.from_rows(rows), bits, max_window, merge_every, suspended


@pytest.mark.parametrize("name", ["dpbd", "dpba"])
@pytest.mark.parametrize("grid_bits", [None, 3])
@given(case=shared_histories())
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_grouped_ledger_matches_per_user_oracle(name, grid_bits, case) -> None:
    req, bits, max_window, merge_every, suspended = case
    ledger = DYNAMIC_LEDGERS[name](max_window, grid_bits, merge_every)
    oracle = REFERENCE_LEDGERS[name](max_window, grid_bits)
    index: dict[str, int] = {}
    for t, bit in enumerate(bits, start=1):
        users, wB, EB, wF, EF = req.at(t)
        for u in users:
            index.setdefault(u, len(index))
        idx = np.array([index[u] for u in users], dtype=np.int64)
        ledger.declare(idx, wB, EB, wF, EF)
        oracle.declare(idx, wB, EB, wF, EF)
        gone = np.array([index[u] for u in suspended.get(t, [])], dtype=np.int64)
        ledger.suspend(gone)
        oracle.suspend(gone)
        got, want = ledger.plan(), oracle.plan()
        assert got.nullified == want.nullified, f"slot {t}"
        assert got.projected == want.projected
        for field in ("eps1", "eps2", "backward_budget", "projected_users"):
            np.testing.assert_array_equal(getattr(got, field), getattr(want, field), field)
        if name == "dpba":
            np.testing.assert_array_equal(ledger.borders(), oracle.borders())
        c_got, c_want = ledger.commit(bit), oracle.commit(bit)
        assert (c_got.published, c_got.nullified) == (c_want.published, c_want.nullified)
        assert c_got.extra == c_want.extra
        np.testing.assert_array_equal(c_got.eps1, c_want.eps1, f"eps1 slot {t}")
        np.testing.assert_array_equal(c_got.eps2, c_want.eps2, f"eps2 slot {t}")
        assert ledger.groups <= len(index)


def test_groups_share_and_merge() -> None:
    # 40 users in 4 declarations (backward inactive); u0..u9 change at slot 3 and return to
    # their first declaration at slot 6
    rows = [(1, f"u{i}", 1, 10.0, 3, 1.0 + (i % 4)) for i in range(40)]
    rows += [(3, f"u{i}", 3, 2.0, 2, 0.5) for i in range(10)]
    rows += [(6, f"u{i}", 1, 10.0, 3, 1.0 + (i % 4)) for i in range(10)]
    req = DynamicRequirements.from_rows(rows)
    for name in ("dpbd", "dpba"):
        ledger = DYNAMIC_LEDGERS[name](4, 3, merge_every=1)
        oracle = REFERENCE_LEDGERS[name](4, 3)
        seen = []
        for t in range(1, 30):
            users, wB, EB, wF, EF = req.at(t)
            idx = np.array([int(u[1:]) for u in users], dtype=np.int64)
            ledger.declare(idx, wB, EB, wF, EF)
            oracle.declare(idx, wB, EB, wF, EF)
            seen.append(ledger.groups)
            bit = t % 3 != 0
            np.testing.assert_array_equal(ledger.commit(bit).eps2, oracle.commit(bit).eps2)
        assert seen[0] == 4 and max(seen) == 8
        assert seen[-1] == 4  # the detour left every window: merged back into 4 groups
        assert ledger.k <= 8


def test_suspended_users_are_charged_nothing_and_end_in_one_column() -> None:
    # 30 users on three requirements; u0..u19 are removed (suspended) at slot 4
    rows = [(1, f"u{i}", 3, 2.0, 4, 1.0 + (i % 3)) for i in range(30)]
    req = DynamicRequirements.from_rows(rows)
    for name in ("dpbd", "dpba"):
        ledger = DYNAMIC_LEDGERS[name](6, 3, merge_every=1)
        oracle = REFERENCE_LEDGERS[name](6, 3)
        users, wB, EB, wF, EF = req.at(1)
        for led in (ledger, oracle):
            led.declare(np.arange(30), wB, EB, wF, EF)
        seen = []
        for t in range(1, 21):
            if t == 4:
                ledger.suspend(np.arange(20))
                oracle.suspend(np.arange(20))
            got, want = ledger.commit(t % 2 == 0), oracle.commit(t % 2 == 0)
            np.testing.assert_array_equal(got.eps1, want.eps1)
            np.testing.assert_array_equal(got.eps2, want.eps2)
            if t >= 4:
                assert not got.eps1[:20].any() and not got.eps2[:20].any()
                assert (got.eps1[20:] > 0).all()
            seen.append(ledger.groups)
        assert seen[2] == 3 and seen[3] == 6
        # once the windows they used have passed, the suspended users share one column
        assert seen[-1] == 4 and ledger.group[:20].tolist() == [ledger.group[0]] * 20


def test_a_suspended_user_nullifies_nothing() -> None:
    # u0 publishes with two absorbed shares at slot 2, which nullifies slot 3 on its account;
    # suspended at slot 3, it no longer does, and u1 (arrived at slot 3) publishes
    outcome = {}
    for suspend in (False, True):
        ledger = DYNAMIC_LEDGERS["dpba"](6, 3)
        ledger.declare(np.array([0]), [1], [10.0], [4], [2.0])
        ledger.commit(False)
        assert ledger.commit(True).eps2.tolist() == [0.5]
        ledger.declare(np.array([1]), [1], [10.0], [4], [2.0])
        if suspend:
            ledger.suspend(np.array([0]))
        assert (ledger.borders()[0] == -np.inf) == suspend
        charge = ledger.commit(True)
        outcome[suspend] = (charge.nullified, charge.eps2.tolist())
    assert outcome == {False: (True, [0.0, 0.0]), True: (False, [0.0, 0.25])}


def test_only_registered_users_can_be_suspended() -> None:
    ledger = DYNAMIC_LEDGERS["dpbd"](4, 3)
    ledger.declare(np.array([0]), [1], [1.0], [2], [1.0])
    with pytest.raises(ValueError, match="only registered users"):
        ledger.suspend(np.array([1]))


def test_mechanism_matches_per_user_oracle() -> None:
    rng = np.random.default_rng(3)
    rows = [(1, f"u{i}", 5, 2.0, 10, 3.0 + (i % 3)) for i in range(60)]
    rows += [(4, "late", 2, 1.0, 3, 1.0)]
    req = DynamicRequirements.from_rows(rows)
    for name in ("dpbd", "dpba"):
        mech = DynamicMechanism(name, req, d=5, rng=np.random.default_rng(1), max_window=12)
        oracle = REFERENCE_LEDGERS[name](12, 3)
        oracle.declare(np.arange(60), *(np.array([r[c] for r in rows[:60]]) for c in range(2, 6)))
        for t in range(1, 40):
            if t == 4:
                oracle.declare(np.array([60]), [2], [1.0], [3], [1.0])
            if t > 4:
                changed = rng.choice(61, 3, replace=False)
                reqs = (rng.integers(1, 13, 3), rng.uniform(0.2, 3, 3),
                        rng.integers(1, 13, 3), rng.uniform(0.2, 3, 3))
                mech.declare_indices(changed, *reqs)
                oracle.declare(changed, *reqs)
            n = 61 if t >= 4 else 60
            rel = mech.step(rng.integers(-1, 5, n))
            want = oracle.commit(rel.published)
            assert rel.nullified == want.nullified
            np.testing.assert_array_equal(rel.eps1, want.eps1)
            np.testing.assert_array_equal(rel.eps2, want.eps2)


def test_rescans_in_chunks_match_the_oracle(monkeypatch) -> None:
    # a scan matrix of at most 8 entries: DPBA's rescans run over one run at a time
    import mechanisms.ledgers.dpba as dl

    monkeypatch.setattr(dl, "_SCAN_CELLS", 8)
    rng = np.random.default_rng(2)
    n, T, W = 6, 120, 12
    ledger = DYNAMIC_LEDGERS["dpba"](W, 3, merge_every=5)
    oracle = REFERENCE_LEDGERS["dpba"](W, 3)
    published = 0
    for t in range(1, T + 1):
        idx = np.arange(n) if t == 1 else rng.choice(n, 1)
        reqs = (rng.integers(1, W + 1, idx.size), rng.uniform(0.5, 4, idx.size),
                rng.integers(1, W + 1, idx.size), rng.uniform(0.5, 4, idx.size))
        ledger.declare(idx, *reqs)
        oracle.declare(idx, *reqs)
        got, want = ledger.plan(), oracle.plan()
        assert got.nullified == want.nullified, f"slot {t}"
        np.testing.assert_array_equal(got.eps2, want.eps2, f"slot {t}")
        bit = bool(rng.random() < 0.7)
        published += ledger.commit(bit).published
        oracle.commit(bit)
    assert 0 < published < T  # both charged and nullified slots were met


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from("abcdefgh"), max_size=6), max_size=5))
def test_user_directory_numbers_users_in_order_of_first_declaration(declarations):
    from mechanisms.run.dynamic import UserDirectory

    directory, seen = UserDirectory(), []
    for users in declarations:
        idx = directory.indices(users)
        new = []
        for u in users:  # the next free index for each new user, at its first appearance
            if u not in seen and u not in new:
                new.append(u)
        assert idx.tolist() == [(seen + new).index(u) for u in users]
        directory.add(users, idx)
        seen += new
        assert directory.users == seen
        assert directory.index == {u: i for i, u in enumerate(seen)}
