"""LBU, LSP, LBD, LBA, LPU, LPD, LPA (papers/002 2.6): privacy accounting, decisions, estimates."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms.baselines.ldp import oue_variance
from mechanisms.baselines.ldp_ids import BUDGET_DIVISION, LDP_IDS, POPULATION_DIVISION, LdpIds
from mechanisms.evaluation.experiments import paper_requirements
from mechanisms.evaluation.runs import (
    KNOWN,
    make_step,
    run_stream,
    synthetic_cells,
    true_histograms,
)

from support import local_stream as stream
from support import window_sums


@pytest.mark.parametrize("name", BUDGET_DIVISION)
@settings(max_examples=25, deadline=None)
@given(
    w=st.integers(1, 40),
    E=st.floats(0.05, 5.0),
    T=st.integers(1, 120),
    seed=st.integers(0, 2**32 - 1),
    jumpy=st.booleans(),
)
def test_budget_division_every_window_within_budget(name, w, E, T, seed, jumpy):
    rng = np.random.default_rng(seed)
    mech = LdpIds(name, w, E, 300, 4, rng)
    spent = []
    for cells in stream(rng, 300, 4, T, jumpy):
        rel = mech.step(cells)
        assert rel.eps1 >= 0 and rel.eps2 >= 0
        assert rel.eps2 > 0 if rel.published else True
        if rel.nullified:
            assert rel.eps1 == rel.eps2 == 0
        spent.append(rel.eps1 + rel.eps2)
    assert window_sums(np.array(spent)[:, None], np.array([w]))[0] <= E + 1e-9


@pytest.mark.parametrize("name", POPULATION_DIVISION)
@settings(max_examples=25, deadline=None)
@given(
    w=st.integers(1, 30),
    n=st.integers(1, 400),
    T=st.integers(1, 120),
    seed=st.integers(0, 2**32 - 1),
    jumpy=st.booleans(),
)
def test_population_division_asks_each_user_once_per_window(name, w, n, T, seed, jumpy):
    rng = np.random.default_rng(seed)
    mech = LdpIds(name, w, 1.0, n, 4, rng)
    last = np.full(n, -(10**9))
    for t, cells in enumerate(stream(rng, n, 4, T, jumpy), start=1):
        rel = mech.step(cells)
        assert rel.eps1 == rel.eps2 == 0  # every report uses the whole budget
        assert np.intersect1d(rel.round1, rel.round2).size == 0
        asked = np.concatenate([rel.round1, rel.round2])
        assert np.unique(asked).size == asked.size
        assert (t - last[asked] >= w).all(), f"slot {t}: a user asked twice within {w} slots"
        last[asked] = t
        if name != "lpu" and rel.round1.size:
            assert rel.round1.size == int(np.floor(n / (2 * w) + 1e-9))
        if name == "lpu":
            assert rel.round1.size == 0 and rel.round2.size == int(np.floor(n / w + 1e-9))


def test_lbu_publishes_every_slot_with_E_over_w():
    rng = np.random.default_rng(1)
    mech = LdpIds("lbu", 5, 2.0, 1000, 3, rng)
    for cells in stream(rng, 1000, 3, 12, True):
        rel = mech.step(cells)
        assert rel.published and rel.eps1 == 0 and rel.eps2 == pytest.approx(0.4)


def test_lsp_publishes_once_per_window_with_the_whole_budget():
    rng = np.random.default_rng(2)
    mech = LdpIds("lsp", 4, 1.5, 1000, 3, rng)
    published = [mech.step(c).eps2 for c in stream(rng, 1000, 3, 13, True)]
    assert published == [1.5, 0, 0, 0] * 3 + [1.5]


@pytest.mark.parametrize("name", ["lbd", "lba", "lpd", "lpa"])
def test_adaptive_ones_publish_exactly_when_dissimilarity_exceeds_the_error(name):
    rng = np.random.default_rng(3)
    mech = LdpIds(name, 5, 2.0, 5000, 8, rng)
    decided = 0
    for cells in stream(rng, 5000, 8, 80, True):
        rel = mech.step(cells)
        ran = rel.eps2 > 0 or rel.round2.size > 0
        if rel.nullified:
            assert not ran and rel.dissimilarity is None
        elif rel.dissimilarity is not None and rel.threshold is not None:
            assert ran == (rel.dissimilarity > rel.threshold)
            decided += 1
    assert decided >= 40


@pytest.mark.parametrize("name", ["lbd", "lba"])
def test_budget_division_publishes_more_when_the_stream_changes(name):
    counts = {}
    for jumpy in (False, True):
        rng = np.random.default_rng(3)
        mech = LdpIds(name, 4, 8.0, 50_000, 32, rng)
        counts[jumpy] = sum(mech.step(c).published for c in stream(rng, 50_000, 32, 60, jumpy))
    assert counts[True] >= 2 * counts[False]


def test_lpd_halves_the_remaining_population_and_lpa_absorbs_shares():
    n, w = 20_000, 10
    rng = np.random.default_rng(4)
    lpd = LdpIds("lpd", w, 4.0, n, 6, rng)
    sizes = [lpd.step(c).round2.size for c in stream(rng, n, 6, 3, True)]
    assert sizes == [n // 4, n // 8, n // 16]  # half of the n/2 left, then half of the rest
    lpa = LdpIds("lpa", w, 4.0, n, 6, rng)
    first = lpa.step(stream(rng, n, 6, 1, True)[0])
    assert first.round1.size == n // (2 * w) and first.round2.size == n // (2 * w)


@pytest.mark.parametrize("name", ["lbd", "lpd"])
def test_dissimilarity_estimates_the_distance_to_the_last_release(name):
    # the mean squared distance between the current frequencies and the last release; the
    # paper's OUE variance leaves out a term in f_j (and LPD's sampling of users), small here
    d, n = 5, 4000
    cells = np.repeat(np.arange(d), [2000, 1000, 500, 300, 200])
    true = np.bincount(cells, minlength=d) / n
    last = np.array([0.2, 0.2, 0.2, 0.2, 0.2])
    target = float(np.mean(np.square(true - last)))
    rng = np.random.default_rng(5)
    estimates = []
    for _ in range(400):
        mech = LdpIds(name, 4, 4.0, n, d, rng)
        mech.last = last.copy()
        estimates.append(mech.step(cells).dissimilarity)
    spread = np.std(estimates) / np.sqrt(len(estimates))
    assert abs(np.mean(estimates) - target) < 4 * spread


def test_publication_estimates_are_unbiased_counts():
    d, n = 4, 5000
    cells = np.repeat(np.arange(d), [2500, 1500, 1000, 0])
    cells[:500] = -1  # 500 users hold no value: counts are over the 4500 who do
    true = np.bincount(cells[cells >= 0], minlength=d)
    rng = np.random.default_rng(6)
    releases = np.array([LdpIds("lbu", 2, 2.0, n, d, rng).step(cells).histogram
                         for _ in range(300)])
    spread = np.sqrt(n * n * oue_variance(1.0, 4500) / 300)  # per-cell standard error
    assert np.all(np.abs(releases.mean(axis=0) - true) < 4 * spread)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="unknown mechanism"):
        LdpIds("lxx", 3, 1.0, 10, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="w >= 1"):
        LdpIds("lbd", 0, 1.0, 10, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="E > 0"):
        LdpIds("lbd", 3, float("nan"), 10, 2, np.random.default_rng(0))
    mech = LdpIds("lbd", 3, 1.0, 10, 2, np.random.default_rng(0))
    with pytest.raises(ValueError, match="10 integer cells"):
        mech.step(np.zeros(9, dtype=np.int64))
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        mech.step(np.full(10, 2))
    assert mech.slot == 1  # nothing was charged


@pytest.mark.parametrize("name", LDP_IDS)
def test_every_one_runs_in_the_evaluation(name):
    assert name in KNOWN
    rng = np.random.default_rng(2)
    cells = synthetic_cells(np.full(60, 0.3), 3000, rng)
    true = true_histograms(cells, 2)
    reqs = paper_requirements(3000, 1.0, 20, np.random.default_rng(3))
    res = run_stream(make_step(name, reqs, 2, np.random.default_rng(4)), cells, true)
    assert np.isfinite(res.amre) and res.fresh >= 1
