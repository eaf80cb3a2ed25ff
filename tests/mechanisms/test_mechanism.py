"""Stepping mechanisms slot by slot: releases, charges, aggregates, registration, bad input."""

import numpy as np
import pytest

from mechanisms import FIXED_MECHANISMS, FixedRequirements
from mechanisms.build import build

USERS = [f"u{i}" for i in range(6)]
REQS = FixedRequirements.from_arrays(USERS, [4, 2, 3, 4, 2, 3], [1.0, 0.5, 2.0, 1.0, 0.5, 2.0])


def test_level_counts_group_reports_by_requirement():
    mech = build("pbd", REQS, 3, np.random.default_rng(0))
    counts = mech.level_counts(np.array([0, 1, 2, 0, -1, 2]))
    assert counts.shape == (3, 3)
    assert counts.sum() == 5
    # users u0 and u3 share (4, 1.0) and both report cell 0
    assert counts[mech.level_of_user[0], 0] == 2


@pytest.mark.parametrize("name", FIXED_MECHANISMS)
def test_step_returns_release_with_per_user_charges(name):
    mech = build(name, REQS, 3, np.random.default_rng(1))
    cells = np.array([0, 1, 2, 0, -1, 2])
    rel = mech.step(cells)
    assert rel.slot == 1 and mech.slot == 2
    assert rel.histogram.shape == (3,)
    assert rel.eps1.shape == rel.eps2.shape == (6,)
    assert rel.reports == 5
    if not rel.published:
        assert (rel.eps2 == 0).all()
    else:
        assert rel.threshold > 0 and (rel.eps2 > 0).any()


def test_same_seed_same_releases():
    def releases(seed):
        mech = build("pba", REQS, 3, np.random.default_rng(seed))
        rng = np.random.default_rng(99)
        return [mech.step(rng.integers(-1, 3, 6)).histogram.tolist() for _ in range(30)]

    assert releases(4) == releases(4)
    assert releases(4) != releases(5)


def test_discrete_noise_gives_integer_histograms():
    mech = build("uniform", REQS, 3, np.random.default_rng(2), noise="discrete")
    rel = mech.step(np.array([0, 1, 2, 0, 1, 2]))
    assert rel.published and rel.histogram.dtype == np.int64


def test_large_population_publishes_close_to_truth():
    n, d = 20_000, 4
    reqs = FixedRequirements.from_arrays(
        [str(i) for i in range(n)], np.full(n, 10), np.full(n, 2.0)
    )
    mech = build("uniform", reqs, d, np.random.default_rng(3))
    cells = np.arange(n) % d
    rel = mech.step(cells)
    assert rel.histogram == pytest.approx(np.full(d, n / d), abs=200)


def test_pbd_publishes_on_change_and_approximates_when_still():
    # publication noise at slot 1 has scale 4/E, the test's bar at slot 2 is sqrt(2) * 8/E
    n, d = 50_000, 20
    reqs = FixedRequirements.from_arrays([str(i) for i in range(n)], np.full(n, 5), np.full(n, 5.0))
    mech = build("pbd", reqs, d, np.random.default_rng(8))
    still = np.zeros(n, dtype=np.int64)
    first = mech.step(still)
    assert first.published  # differs from the initial all-zero estimate
    assert not mech.step(still).published
    moved = np.ones(n, dtype=np.int64)
    assert mech.step(moved).published


def test_later_registration_joins_levels():
    mech = build("pba", REQS, 3, np.random.default_rng(0))
    mech.step(np.zeros(6, dtype=np.int64))
    levels = mech.ledger.levels
    mech.register(["new1", "new2"], [4, 7], [1.0, 1.0])
    assert mech.ledger.levels == levels + 1
    assert mech.level_of_user[6] == mech.level_of_user[0]
    rel = mech.step(np.zeros(8, dtype=np.int64))
    assert rel.eps1.shape == (8,)
    assert rel.eps1[7] == pytest.approx(1.0 / 14)


def test_baseline_tightens_to_new_strictest():
    mech = build("bd", REQS, 3, np.random.default_rng(0))
    mech.register(["strict"], [10], [0.1])
    rel = mech.step(np.zeros(7, dtype=np.int64))
    assert rel.eps1 == pytest.approx(np.full(7, 0.1 / 20))


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        (np.array([0, 1, 3, 0, 0, 0]), r"user 'u2': field cell=3 outside \[0, 3\)"),
        (np.array([0, 1, -2, 0, 0, 0]), r"user 'u2': field cell=-2"),
        (np.array([0, 1, 2]), "one cell per registered user"),
        (np.array([0.0, 1, 2, 0, 0, 0]), "must be integers"),
    ],
)
def test_bad_cells_raise_and_leave_ledger_unchanged(cells, message):
    mech = build("pba", REQS, 3, np.random.default_rng(0))
    mech.step(np.zeros(6, dtype=np.int64))
    before = (mech.slot, mech.ledger.state())
    with pytest.raises(ValueError, match=message):
        mech.step(cells)
    assert (mech.slot, mech.ledger.state()) == before


@pytest.mark.parametrize(
    ("w", "E", "message"),
    [
        ([1, 0], [1.0, 1.0], r"user 'b': field w=0 must be >= 1"),
        ([1, 2], [1.0, 0.0], r"user 'b': field E=0.0 must be finite and > 0"),
        ([1, 2], [-1.0, 1.0], r"user 'a': field E=-1.0"),
        ([1, 2], [1.0, float("nan")], r"user 'b': field E=nan"),
        ([1, 2], [float("inf"), 1.0], r"user 'a': field E=inf"),
        ([1.5, 2], [1.0, 1.0], r"user 'a': field w=1.5 is not an integer"),
    ],
)
def test_bad_requirements_raise_naming_user_and_field(w, E, message):
    with pytest.raises(ValueError, match=message):
        FixedRequirements.from_arrays(["a", "b"], w, E)
    mech = build("pbd", REQS, 3, np.random.default_rng(0))
    before = (list(mech.users), mech.ledger.state())
    with pytest.raises(ValueError, match=message):
        mech.register(["a", "b"], w, E)
    assert (list(mech.users), mech.ledger.state()) == before


def test_duplicate_users_rejected():
    with pytest.raises(ValueError, match="user 'a': duplicate"):
        FixedRequirements.from_arrays(["a", "a"], [1, 1], [1.0, 1.0])
    mech = build("pbd", REQS, 3)
    with pytest.raises(ValueError, match="user 'u1': already registered"):
        mech.register(["u1"], [1], [1.0])


def test_ledger_state_round_trip():
    mech = build("pba", REQS, 3, np.random.default_rng(0))
    for _ in range(5):
        mech.step(np.zeros(6, dtype=np.int64))
    other = build("pba", REQS, 3)
    other.ledger.load_state(mech.ledger.state())
    a, b = mech.ledger.plan(), other.ledger.plan()
    assert (a.slot, a.nullified) == (b.slot, b.nullified)
    assert np.array_equal(a.eps2, b.eps2)


@pytest.mark.parametrize("name", ["pbd", "pba", "bd", "ba", "uniform", "sample"])
def test_an_engine_without_levels_round_trips(name: str):
    """The job's coordinator stores its engine before any level exists (a partition closed
    slots before a requirement arrived); that state must load again."""
    from mechanisms.run.named_levels import LevelEngine

    engine = LevelEngine(name, 3, "discrete", 1.0)
    state = engine.state()
    again = LevelEngine(name, 3, "discrete", 1.0)
    again.load_state(state)
    assert again.state() == state
