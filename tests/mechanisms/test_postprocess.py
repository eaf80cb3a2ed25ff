"""Post-processing of releases (mechanisms/postprocess.py): a function of released values and
public parameters only, causal, the same slot by slot as over a whole run, and it leaves the
ledgers' charges alone."""

from __future__ import annotations

import importlib.util

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms import postprocess as pp
from mechanisms.build import build
from mechanisms.evaluation.runs import replay_batch, run_batch, synthetic_cells, true_histograms
from mechanisms.requirements import FixedRequirements


def releases(seed: int, T: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random released histograms, publication flags and noise scales (nan: approximated)."""
    rng = np.random.default_rng(seed)
    published = rng.random(T) < 0.4
    std = np.where(published, rng.uniform(0.5, 200.0, T), np.nan)
    hist = np.zeros((T, d))
    last = np.zeros(d)
    for t in range(T):
        if published[t]:
            last = rng.normal(100.0, 80.0, d)
        hist[t] = last
    return hist, published, std


#: numba (the evaluation extra) looked up without importing it: collecting this file in every test
#: process should not pay its import
NO_NUMBA = importlib.util.find_spec("numba") is None
FILTERS = pytest.mark.parametrize("method", ["kalman", "kalman_bank", "kalman_split"])


@FILTERS
@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 40), st.integers(1, 5), st.integers(1, 10**6))
def test_filters_are_causal_and_the_same_slot_by_slot(method, seed, T, d, users):
    hist, published, std = releases(seed, T, d)
    whole = pp.postprocess(method, hist, published, std, users, d)
    one = pp.Postprocessor(method, d)
    steps = [one.step(hist[t], bool(published[t]), None if np.isnan(std[t])
                      else np.full(d, std[t]), users) for t in range(T)]
    assert np.array_equal(np.array(steps, dtype=np.float64), whole)
    assert (whole >= 0).all() and np.array_equal(whole, np.rint(whole))
    # later releases never change an earlier estimate
    cut = T // 2
    changed = hist.copy()
    changed[cut:] += 1000.0
    assert np.array_equal(pp.postprocess(method, changed, published, std, users, d)[:cut],
                          whole[:cut])


@FILTERS
@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.integers(2, 30))
def test_state_survives_a_restart(method, seed, T):
    hist, published, std = releases(seed, T, 3)
    cut = T // 2
    a = pp.Postprocessor(method, 3)
    first = [a.step(hist[t], bool(published[t]), None if np.isnan(std[t]) else [std[t]] * 3, 50)
             for t in range(cut)]
    b = pp.Postprocessor(method, 3)
    b.load(orjson.loads(orjson.dumps(a.state())))
    rest = [b.step(hist[t], bool(published[t]), None if np.isnan(std[t]) else [std[t]] * 3, 50)
            for t in range(cut, T)]
    again = pp.Postprocessor(method, 3)
    assert first + rest == [again.step(hist[t], bool(published[t]),
                                       None if np.isnan(std[t]) else [std[t]] * 3, 50)
                            for t in range(T)]


def test_projection_and_unknown_method():
    assert pp.project(np.array([-3.2, 0.4, 2.5, 7.6])).tolist() == [0.0, 0.0, 2.0, 8.0]
    with pytest.raises(ValueError, match="unknown post-processing"):
        pp.postprocess("smooth", np.zeros((1, 1)), np.ones(1, bool), np.ones(1), 1, 1)
    with pytest.raises(ValueError, match="unknown post-processing"):
        pp.Postprocessor("smooth", 2)


def test_an_approximated_slot_is_no_measurement():
    """A slot that repeats a publication does not pull the estimate again."""
    hist = np.array([[100.0], [100.0], [100.0], [40.0]])
    published = np.array([True, False, False, True])
    std = np.array([10.0, np.nan, np.nan, 10.0])
    est, var = pp.kalman(hist, published, std, 1.0)
    assert est[:3, 0].tolist() == [100.0, 100.0, 100.0]
    assert var[:3, 0].tolist() == [100.0, 101.0, 102.0]
    # the second publication weighs as its variance says: gain 103 / 203
    assert est[3, 0] == pytest.approx(100.0 + 103.0 / 203.0 * (40.0 - 100.0))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 30), st.integers(1, 4))
def test_a_batch_of_runs_filters_as_each_run_alone(seed, T, d):
    runs = [releases(seed + b, T, d) for b in range(3)]
    users = np.array([10, 5_000, 10**6])
    hist, published, std = (np.stack(x) for x in zip(*runs, strict=True))
    for bank in (pp.kalman_bank, pp.kalman_split):
        together = bank(hist, published, std, users, d)
        for b, (h, p, s) in enumerate(runs):
            assert np.array_equal(together[b], bank(h, p, s, int(users[b]), d))


def test_the_bank_follows_its_best_filter_per_cell():
    """Cell 0 holds still, cell 1 climbs fast: after enough publications each cell takes the
    estimate of the filter that predicted it best, the smallest drift for the still cell and a
    large one for the climbing cell, and the bank beats the single filter on both."""
    rng = np.random.default_rng(8)
    T, users, d = 400, 2_000, 2
    truth = np.stack([np.full(T, 500.0), 200.0 + 4.0 * np.arange(T)], axis=1)
    std = np.full(T, 30.0)
    hist = truth + rng.normal(0.0, 30.0, (T, d))
    published = np.ones(T, dtype=bool)
    bank = pp.KalmanBank.fresh((d,))
    for t in range(T):
        bank.step(hist[t], published[t], std[t], users, d)
    best = np.argmin(bank.score, axis=0)
    assert best[0] == 0 and pp.BANK_DRIFTS[best[1]] >= 0.003
    error = {m: ((pp.postprocess(m, hist, published, std, users, d) - truth)[100:] ** 2).mean(
        axis=0) for m in ("kalman", "kalman_bank")}
    assert (error["kalman_bank"] < error["kalman"]).all(), error


def noisy_cells(seed: int, T: int, still_total: bool) -> tuple[np.ndarray, np.ndarray]:
    """(truth, releases) of 3 cells seen through noise of deviation 300: 10,000 users over
    cells whose shares step now and then (``still_total``: every user in some cell, so the
    total holds still), or each cell's count on its own random walk."""
    rng = np.random.default_rng(seed)
    if still_total:
        p1 = np.clip(0.3 + 0.01 * np.cumsum(rng.choice([-1, 0, 0, 0, 0, 1], T)), 0.05, 0.6)
        p = np.stack([1.0 - p1 - 0.2, p1, np.full(T, 0.2)], axis=1)
        truth = 10_000.0 * p
    else:
        truth = 3_000.0 + np.cumsum(rng.normal(0.0, 30.0, (T, 3)), axis=0)
    return truth, truth + rng.normal(0.0, 300.0, truth.shape)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_split_filters_a_still_total_to_its_cells_deviations(seed):
    """Every user in one of the cells: the total holds still, so the split's error is that of
    the deviations, whose noise variance is 2/3 of a cell's: a random walk filter's error,
    about sqrt(q r), falls to sqrt(2/3) = 0.82 of the plain bank's; where each cell moves on
    its own, the split keeps the plain bank's error."""
    T, published, std = 3_000, np.ones(3_000, dtype=bool), np.full(3_000, 300.0)
    errors = {}
    for still in (True, False):
        truth, hist = noisy_cells(seed, T, still)
        for m in ("kalman_bank", "kalman_split"):
            est = pp.postprocess(m, hist, published, std, 10_000, 3)
            errors[still, m] = float(((est - truth)[300:] ** 2).mean())
    assert errors[True, "kalman_split"] < 0.88 * errors[True, "kalman_bank"], errors
    assert errors[False, "kalman_split"] < 1.05 * errors[False, "kalman_bank"], errors


def test_process_variance_is_public():
    assert pp.process_variance(10_000, 2).tolist() == pytest.approx((pp.DRIFT * 5000) ** 2)
    assert pp.process_variance(3, 100).tolist() == 1.0


def run(name: str, cells: np.ndarray, reqs: FixedRequirements, seed: int):
    mech = build(name, reqs, 2, np.random.default_rng(seed))
    return replay_batch([mech], [cells], d=2, T=cells.shape[0])


@pytest.mark.parametrize("name", ["pbd", "pba", "bd", "ba", "uniform"])
def test_estimates_depend_on_the_releases_only(name):
    """Two different exact streams under the same seeds: wherever the releases agree slot for
    slot the estimates agree, and the estimates are those of the releases alone."""
    rng = np.random.default_rng(5)
    reqs = FixedRequirements.from_arrays([f"u{i}" for i in range(300)],
                                         rng.choice([4, 8], 300), rng.choice([1.0, 2.0], 300))
    probs = np.linspace(0.2, 0.8, 60)
    a = synthetic_cells(probs, 300, np.random.default_rng(1))
    b = synthetic_cells(probs[::-1], 300, np.random.default_rng(2))
    ra, rb = run(name, a, reqs, 9), run(name, b, reqs, 9)
    ea = pp.postprocess("kalman", ra.released[0], ra.published[0], ra.std[0], 300, 2)
    eb = pp.postprocess("kalman", rb.released[0], rb.published[0], rb.std[0], 300, 2)
    same = np.all(ra.released[0] == rb.released[0], axis=1) & (ra.published[0] ==
                                                                 rb.published[0])
    prefix = int(np.argmin(same)) if not same.all() else same.size
    assert np.array_equal(ea[:prefix], eb[:prefix])
    # run_batch scores exactly these estimates
    res = run_batch([build(name, reqs, 2, np.random.default_rng(9))], [a],
                    [true_histograms(a, 2)], postprocess=("kalman",), users=[300])[0]
    assert res.post["kalman"][0] == pytest.approx(np.mean((ea - true_histograms(a, 2)) ** 2))


@pytest.mark.parametrize("name", ["pbd", "pba", "dpbd", "dpba"])
def test_postprocessing_leaves_the_releases_and_charges_alone(name):
    """The evaluation's raw columns and every release do not depend on post-processing."""
    from mechanisms.evaluation.runs import make_step

    rng = np.random.default_rng(3)
    reqs = FixedRequirements.from_arrays([f"u{i}" for i in range(200)],
                                         rng.choice([4, 8], 200), rng.choice([1.0, 2.0], 200))
    cells = synthetic_cells(np.linspace(0.3, 0.6, 40), 200, np.random.default_rng(4))
    true = true_histograms(cells, 2)

    def results(post):
        mech = make_step(name, reqs, 2, np.random.default_rng(11))
        return run_batch([mech], [cells], [true], postprocess=post, users=[200])[0]

    plain, post = results(()), results(("round", "kalman", "kalman_bank"))
    assert (plain.amre, plain.ajsd, plain.mae, plain.fresh) == (post.amre, post.ajsd,
                                                                 post.mae, post.fresh)
    assert set(post.post) == {"round", "kalman", "kalman_bank"} and plain.post == {}


@pytest.mark.skipif(NO_NUMBA, reason="numba is not installed")
def test_a_long_run_alone_takes_the_compiled_filters_and_their_values(monkeypatch):
    """A run alone of LONG_RUN slots (the evaluation at --repeat 1) is filtered by the compiled
    kernels, with the numpy code's values; a shorter one keeps numpy."""
    long = pp.compiled_filters.LONG_RUN
    assert pp.compiled_filters.available(1, long)
    assert not pp.compiled_filters.available(1, long - 1)
    hist, published, std = releases(11, long, 3)
    calls = []
    compiled_bank = pp.compiled_filters.kalman_bank

    def counted(*args, **kwargs):
        calls.append(1)
        return compiled_bank(*args, **kwargs)

    monkeypatch.setattr(pp.compiled_filters, "kalman_bank", counted)
    got = pp.kalman_split(hist, published, std, 4_000, 3)
    assert len(calls) == 3  # the cells', the mean's and the deviations' banks
    monkeypatch.setattr(pp.compiled_filters, "available", lambda runs, slots=0: False)
    np.testing.assert_array_equal(got, pp.kalman_split(hist, published, std, 4_000, 3))
    assert len(calls) == 3


@pytest.mark.skipif(NO_NUMBA, reason="numba is not installed")
@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 60), st.integers(1, 4), st.booleans())
def test_compiled_filters_equal_the_numpy_ones(seed, T, d, per_cell):
    """A batch takes the compiled filters; they give the numpy code's values bit for bit,
    restarts, approximated slots and per-cell noise scales included."""
    rng = np.random.default_rng(seed)
    runs = [releases(seed + b, T, d) for b in range(3)]
    hist, published, std = (np.stack(x) for x in zip(*runs, strict=True))
    hist[:, ::7] += rng.normal(0.0, 5_000.0, hist[:, ::7].shape)  # jumps that restart
    if per_cell:
        std = std[..., None] * rng.uniform(0.5, 2.0, (1, 1, d))
    users = np.array([3, 4_000, 10**6])
    q = pp.process_variance(users, d)
    compiled = (pp.kalman(hist, published, std, q), pp.kalman_bank(hist, published, std,
                                                                     users, d),
                pp.kalman_split(hist, published, std, users, d))
    real = pp.compiled_filters.available
    try:
        pp.compiled_filters.available = lambda runs, slots=0: False
        reference = (pp.kalman(hist, published, std, q), pp.kalman_bank(hist, published, std,
                                                                          users, d),
                     pp.kalman_split(hist, published, std, users, d))
    finally:
        pp.compiled_filters.available = real
    np.testing.assert_array_equal(compiled[2], reference[2])
    np.testing.assert_array_equal(compiled[0][0], reference[0][0])
    np.testing.assert_array_equal(compiled[0][1], reference[0][1])
    np.testing.assert_array_equal(compiled[1], reference[1])
