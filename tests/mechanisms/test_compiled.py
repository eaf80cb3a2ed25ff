"""The compiled loops of a batch compute what their numpy code computes, bit for bit.

numba is part of the test extra, so these run the compiled kernels, never skip them."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mechanisms.kernels import compiled
from mechanisms.ledgers.fixed import DistributionLedger
from mechanisms.release.ipw import ipw_runs
from mechanisms.release.obs import batch_optimal_budget
from mechanisms.release.run_draws import draw_runs

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def test_numba_is_installed_and_used_for_batches():
    assert compiled.available(2)
    assert not compiled.available(1)  # a run alone keeps numpy, as the job does


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), runs=st.integers(2, 6), levels=st.integers(1, 12),
       noise=st.sampled_from(["laplace", "discrete"]))
def test_obs_compiled_equals_numpy(seed, runs, levels, noise):
    rng = np.random.default_rng(seed)
    # few distinct values (ties), zeros, levels without users, tiny and large budgets
    values = np.concatenate(([0.0], rng.choice([1e-6, 0.01, 0.1, 0.5, 1.0, 3.0, 20.0], 4),
                             rng.random(3)))
    budgets = rng.choice(values, (runs, levels))
    sizes = rng.choice([0, 1, 2, 7, 100, 5000], (runs, levels))
    want = batch_optimal_budget(budgets, sizes, noise, compile_ok=False)
    got = batch_optimal_budget(budgets, sizes, noise)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), runs=st.integers(2, 5), levels=st.integers(1, 6),
       widest=st.sampled_from([1, 5, 8, 9, 64, 128, 129, 200, 300]), slots=st.integers(0, 400))
def test_window_sums_compiled_equal_numpy(seed, runs, levels, widest, slots):
    """Windows on both sides of numpy's summation blocks (8 values, 128), runs of different
    widths in one batch, and more slots than the history's buffer holds before it wraps."""
    rng = np.random.default_rng(seed)
    w = rng.integers(1, widest + 1, (runs, levels))
    ledger = DistributionLedger(w, rng.random((runs, levels)) + 0.5)
    for _ in range(slots):
        values = rng.random((runs, levels)) * 10.0 ** rng.integers(-9, 1, (runs, levels))
        ledger.history.push(np.where(rng.random((runs, levels)) < 0.4, values, 0.0))
    want = ledger._spent_before(compile_ok=False)
    got = ledger._spent_before()
    assert np.array_equal(got, want)


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), runs=st.integers(2, 6), d=st.integers(1, 4),
       count=st.integers(1, 3))
def test_draws_compiled_equal_numpy(seed, runs, d, count):
    """The same values from the same generators, which are left in the same state: both the
    value-by-value and the array binomial draws of numpy's code."""
    rng = np.random.default_rng(seed)
    levels = rng.integers(0, 20, runs)  # up to 80 draws a run: both of numpy's binomial paths
    end = np.cumsum(levels)
    begin = end - levels
    rows = rng.choice([0, 1, 3, 40, 900, 20000], (int(end[-1]) if runs else 0, d))
    probs = rng.uniform(0.001, 0.999, rows.shape[0])
    who = rng.permutation(runs)[: rng.integers(1, runs + 1)]
    eps = rng.uniform(0.01, 5.0, who.size)
    a = [np.random.default_rng([seed, b]) for b in range(runs)]
    b = [np.random.default_rng([seed, b]) for b in range(runs)]
    want = draw_runs(a, who, rows, probs, begin[who], end[who], eps, count, "laplace",
                     compile_ok=False)
    got = draw_runs(b, who, rows, probs, begin[who], end[who], eps, count, "laplace")
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert [g.bit_generator.state for g in a] == [g.bit_generator.state for g in b]


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), runs=st.integers(2, 6), levels=st.integers(1, 12),
       d=st.integers(1, 5))
def test_ipw_compiled_equals_numpy(seed, runs, levels, d):
    """The same estimates and standard deviations from the same generators, left in the same
    state: levels kept whole, sampled and dropped, more than eight sampled levels (numpy's
    pairwise sum), no level sampled; one cell takes the numpy code."""
    rng = np.random.default_rng(seed)
    who = rng.permutation(runs)[: rng.integers(1, runs + 1)]
    counts = rng.choice([0, 1, 3, 40, 900, 20000], (who.size, levels, d))
    p = rng.choice([0.0, 1.0, 0.001, 0.3, 0.999], (who.size, levels))
    p = np.where(rng.random((who.size, levels)) < 0.5, rng.uniform(0.001, 0.999, p.shape), p)
    theta = rng.uniform(0.01, 5.0, who.size)
    a = [np.random.default_rng([seed, b]) for b in range(runs)]
    b = [np.random.default_rng([seed, b]) for b in range(runs)]
    want = ipw_runs(a, who, counts, p, theta, compile_ok=False)
    got = ipw_runs(b, who, counts, p, theta)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])
    assert [g.bit_generator.state for g in a] == [g.bit_generator.state for g in b]

