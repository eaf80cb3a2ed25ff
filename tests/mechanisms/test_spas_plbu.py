"""SPAS and PLBU: window budgets, estimates, and the oracles' statistics."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms import FixedRequirements
from mechanisms.baselines.ldp import (
    Plbu,
    combine,
    grr_frequencies,
    grr_variance,
    oue_frequencies,
    oue_variance,
    runs_by_groups,
)
from mechanisms.baselines.spas import Spas

from support import window_sums


@settings(max_examples=80, deadline=None)
@given(
    w=st.integers(1, 200),
    E=st.floats(0.01, 5.0),
    T=st.integers(1, 400),
    seed=st.integers(0, 2**32 - 1),
    jumpy=st.booleans(),
)
def test_spas_every_window_within_budget(w, E, T, seed, jumpy):
    rng = np.random.default_rng(seed)
    spas = Spas(w, E, 4, rng)
    charges = []
    for t in range(T):
        base = 1000 * (t % 7) if jumpy else 50
        counts = rng.poisson(base + 1, 4)
        rel = spas.step_counts(counts)
        assert rel.charged >= 0
        assert 1 <= rel.samples_per_window <= w
        charges.append(rel.charged)
    total = np.array(charges)[:, None]
    assert window_sums(total, np.array([w]))[0] <= E + 1e-9


def test_spas_publishes_on_jumps_and_tracks_them():
    rng = np.random.default_rng(4)
    spas = Spas(10, 5.0, 2, rng)
    released = []
    for t in range(200):
        level = 5000 if (t // 50) % 2 else 100
        released.append(spas.step_counts(np.array([level, level])).histogram.copy())
    released = np.array(released)
    # each flat stretch ends close to its level
    assert abs(released[49, 0] - 100) < 200
    assert abs(released[99, 0] - 5000) < 200


def test_spas_rejects_bad_parameters():
    with pytest.raises(ValueError, match="SPAS needs"):
        Spas(0, 1.0, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="histogram of 2 cells"):
        Spas(5, 1.0, 2, np.random.default_rng(0)).step_counts(np.array([1, 2, 3]))


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_oue_unbiased_with_its_variance(eps):
    rng = np.random.default_rng(1)
    counts = np.array([600, 300, 100, 0])
    est = np.array([oue_frequencies(counts, eps, rng) for _ in range(4000)])
    sd = np.sqrt(oue_variance(eps, 1000) / 4000)
    assert est.mean(axis=0) == pytest.approx(counts / 1000, abs=5 * sd)
    # the formula is exact for cells nobody holds
    assert est[:, 3].var() == pytest.approx(float(oue_variance(eps, 1000)), rel=0.1)


def test_grr_unbiased():
    rng = np.random.default_rng(2)
    counts = np.array([700, 300])
    est = np.array([grr_frequencies(counts, 1.0, rng) for _ in range(4000)])
    assert est.mean(axis=0) == pytest.approx([0.7, 0.3], abs=0.005)
    assert est.var(axis=0)[0] == pytest.approx(float(grr_variance(1.0, 2, 1000)), rel=0.15)


def test_plbu_groups_charge_e_over_w_and_estimate_counts():
    n = 6000
    reqs = FixedRequirements.from_arrays(
        [str(i) for i in range(n)], np.where(np.arange(n) % 2, 10, 20), np.full(n, 4.0)
    )
    plbu = Plbu(reqs, 2, np.random.default_rng(3))
    assert plbu.user_eps[:2].tolist() == [0.2, 0.4]
    cells = (np.arange(n) % 3 == 0).astype(np.int64)
    est = np.array([plbu.step(cells).histogram for _ in range(300)])
    assert est.mean(axis=0) == pytest.approx([4000, 2000], rel=0.05)
    # per user, any window of w_i slots costs w_i * E_i / w_i = E_i
    assert (plbu.user_eps * reqs.w == pytest.approx(reqs.E))


def test_spas_refuses_cells_outside_the_domain():
    spas = Spas(5, 1.0, 3, np.random.default_rng(0))
    for bad in (np.array([0, 3]), np.array([-2, 1]), np.array([[0, 1]]), np.array([0.0, 1.0])):
        with pytest.raises(ValueError, match="cell"):
            spas.step(bad)
    assert spas.step(np.array([0, 2, -1])).slot == 1  # nothing was released before


@pytest.mark.parametrize("seed", range(40))
def test_plbu_combines_a_batch_as_each_run_alone(seed):
    """The runs' estimates, taken together by their number of groups, are those of the
    product and sum of each run alone."""
    rng = np.random.default_rng(seed)
    runs, widest = int(rng.integers(1, 40)), int(rng.integers(1, 12))
    d = int(rng.choice([2, 3, 100]))
    groups = rng.integers(1, widest + 1, runs)
    sizes = rng.integers(0, 3000, (runs, widest)) * (rng.random((runs, widest)) < 0.8)
    sizes[np.arange(widest)[None, :] >= groups[:, None]] = 0
    weights = np.where(sizes > 0, rng.random((runs, widest)) * 10.0 ** rng.uniform(-3, 6), 0.0)
    freq = rng.normal(0.3, 1.0, (runs, widest, d)) * 10.0 ** rng.uniform(-2, 2, (runs, widest, 1))
    want = np.zeros((runs, d))
    for b in range(runs):
        G, total = groups[b], int(sizes[b].sum())
        if total:
            w = weights[b, :G]
            want[b] = total * (w @ np.array(freq[b, :G])) / w.sum()
    got = combine(weights, freq, sizes, runs_by_groups(groups.tolist()))
    assert np.array_equal(got, want)
