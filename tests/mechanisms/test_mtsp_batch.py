"""MTSP-LDP runs stepped together (BatchedMtsp, of which a run alone is a batch of one): every
run releases exactly, bit for bit, what the run-by-run reference (tests/mtsp_reference.py)
releases, and leaves its generator where the reference leaves it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mtsp_reference import ReferenceMtsp

from mechanisms.baselines.mtsp_batch import (
    BatchedMtsp,
    adaptive_partitions,
    variance_factors,
    window_totals,
)
from mechanisms.baselines.mtsp_ldp import MtspLdp
from mechanisms.baselines.private_tree import (
    adaptive_partition,
    height,
    node_bounds,
)
from mechanisms.baselines.private_tree import (
    variance_factors as tree_variance_factors,
)
from mechanisms.build import BatchedSteppers, batch, build
from mechanisms.requirements import FixedRequirements

# (w, E, seed) of the runs of a batch: w = 1 and longer windows, small and large budgets
RUNS = ((1, 1.0, 0), (3, 0.4, 1), (7, 2.0, 2), (2, 6.0, 3), (5, 0.05, 4), (1, 3.0, 5))


def cells_of(rng: np.random.Generator, runs: int, n: int, d: int, T: int) -> np.ndarray:
    """(T, runs, n) cells whose distribution jumps now and then; some users hold no value, at
    some slots nobody in a run does, at some slots nobody in any run."""
    cells = np.empty((T, runs, n), dtype=np.int64)
    for t in range(T):
        mode = (t // 4) % d
        p = np.ones(d)
        p[mode] += 3 * d
        cells[t] = rng.choice(d, (runs, n), p=p / p.sum())
        cells[t][rng.random((runs, n)) < rng.uniform(0.0, 0.6)] = -1
        cells[t][rng.random(runs) < 0.1] = -1  # a run without any value
    cells[[2, T // 2]] = -1  # nobody anywhere
    return cells


def compare(runs, n: int, d: int, cells: np.ndarray, counts: bool = False) -> list:
    """Step the runs by the reference, alone (a batch of one each) and as one batch over
    ``cells``; assert they agree exactly and return the reference's releases, (T, runs)."""
    alone = [ReferenceMtsp(w, E, n, d, np.random.default_rng(seed)) for w, E, seed in runs]
    ones = [MtspLdp(w, E, n, d, np.random.default_rng(seed)) for w, E, seed in runs]
    together = BatchedMtsp([MtspLdp(w, E, n, d, np.random.default_rng(seed))
                            for w, E, seed in runs])
    out = []
    for t in range(cells.shape[0]):
        if counts:
            table = np.stack([np.bincount(c[c >= 0], minlength=d) for c in cells[t]])
            got = together.step_counts(table)
        else:
            got = together.step(cells[t])
        assert got.slot == t + 1 and got.histogram.shape == (len(runs), d)
        assert got.histogram.dtype == np.float64 and got.published.dtype == bool
        row = []
        for b, mech in enumerate(alone):
            want = mech.step(cells[t, b])
            assert np.array_equal(got.histogram[b], want.histogram), (t, b)
            assert np.signbit(got.histogram[b]).tolist() == np.signbit(want.histogram).tolist()
            assert bool(got.published[b]) == want.published, (t, b)
            assert got.eps2[b] == want.eps2 and got.k[b] == want.k, (t, b)
            if want.dissimilarity is None:
                assert np.isnan(got.dissimilarity[b]) and got.active[b] == 0
            else:
                assert got.dissimilarity[b] == want.dissimilarity, (t, b)
            assert got.active[b] == want.active
            assert np.array_equal(got.trees[b], want.tree), (t, b)
            one = ones[b].step(cells[t, b])
            assert (one.slot, one.published, one.eps1, one.eps2, one.dissimilarity, one.k,
                    one.intervals, one.active) == (
                want.slot, want.published, want.eps1, want.eps2, want.dissimilarity, want.k,
                want.intervals, want.active), (t, b)
            assert np.array_equal(one.histogram, want.histogram)
            assert np.array_equal(one.tree, want.tree)
            assert got.intervals[b] == want.intervals
            row.append(want)
        out.append(row)
    for b, mech in enumerate(alone):
        assert together.rngs[b].bit_generator.state == mech.rng.bit_generator.state, b
    return out


@pytest.mark.parametrize("d", [2, 5, 16])
@pytest.mark.parametrize("n", [3, 40, 400])
def test_every_run_releases_what_it_releases_alone(d, n):
    T = 3 * max(w for w, _, _ in RUNS) + 4
    cells = cells_of(np.random.default_rng([d, n]), len(RUNS), n, d, T)
    releases = compare(RUNS, n, d, cells)
    h = height(d)
    flat = [r for row in releases for r in row]
    assert any(r.published for r in flat)
    assert all(not r.published and r.active == 0 for r in releases[2])  # nobody anywhere
    # the remaining budget binds: some slot has less left than OBA's share E/(2k*)
    capped = 0
    for b, (w, E, _) in enumerate(RUNS):
        spent = [row[b].eps2 for row in releases]
        for t, row in enumerate(releases):
            remaining = E / 2.0 - sum(spent[max(0, t - w + 1) : t])
            capped += row[b].k >= 1 and remaining < E / (2.0 * row[b].k) - 1e-12
    assert capped
    if h > 1 and n < 20:  # fewer users holding a value than levels: levels without reporter
        assert any(0 < r.active < h for r in flat)


@pytest.mark.parametrize("d", [2, 5, 16])
def test_the_count_path_releases_what_the_cells_do(d):
    n = 30
    cells = cells_of(np.random.default_rng([d, 7]), len(RUNS), n, d, 25)
    compare(RUNS, n, d, cells, counts=True)


@settings(max_examples=40, deadline=None)
@given(
    windows=st.lists(st.tuples(st.integers(1, 9), st.floats(0.01, 8.0)), min_size=1,
                     max_size=5),
    n=st.integers(1, 60),
    d=st.integers(1, 20),
    seed=st.integers(0, 2**32 - 1),
    split=st.sampled_from([0.0, 1.0, 2.5]),
)
def test_any_batch_releases_what_its_runs_release_alone(windows, n, d, seed, split):
    rng = np.random.default_rng(seed)
    T = 3 * max(w for w, _ in windows) + 2
    cells = cells_of(rng, len(windows), n, d, T)
    runs = [(w, E, [seed, b]) for b, (w, E) in enumerate(windows)]
    alone = [ReferenceMtsp(w, E, n, d, np.random.default_rng(s), split) for w, E, s in runs]
    together = BatchedMtsp([MtspLdp(w, E, n, d, np.random.default_rng(s), split)
                            for w, E, s in runs])
    for t in range(T):
        got = together.step(cells[t])
        for b, mech in enumerate(alone):
            want = mech.step(cells[t, b])
            assert np.array_equal(got.histogram[b], want.histogram)
            assert bool(got.published[b]) == want.published
            assert got.eps2[b] == want.eps2
    for b, mech in enumerate(alone):
        assert together.rngs[b].bit_generator.state == mech.rng.bit_generator.state


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.one_of(st.floats(0.0, 10.0), st.sampled_from([0.0, 0.1, 1 / 3, 1e-17,
                                                                           1e16])),
                         min_size=0, max_size=8), min_size=1, max_size=6))
def test_window_totals_add_left_to_right_whatever_the_padding(rows):
    width = max(len(r) for r in rows)
    padded = np.zeros((len(rows), width))
    for i, r in enumerate(rows):
        padded[i, width - len(r):] = r  # leading zeros
    totals = window_totals(padded)
    for i, r in enumerate(rows):
        plain = 0.0
        for x in r:
            plain += x
        assert totals[i] == plain


@settings(max_examples=100, deadline=None)
@given(d=st.integers(1, 20), seed=st.integers(0, 2**32 - 1), runs=st.integers(1, 5))
def test_partitions_and_variance_factors_are_those_of_each_run(d, seed, runs):
    rng = np.random.default_rng(seed)
    h = height(d)
    freq = rng.normal(0.2, 0.3, (runs, 2 ** (h + 1) - 1))
    freq[:, rng.random(freq.shape[1]) < 0.2] = 0.0  # intervals whose leaves are all 0
    threshold = rng.choice([-1.0, 0.0, 0.1, 0.3, 10.0], runs)
    parts = adaptive_partitions(freq, h, d, threshold)
    factors = variance_factors(parts, h)
    for b in range(runs):
        want = adaptive_partition(freq[b], h, d, float(threshold[b]))
        assert parts.labels[b].tolist() == want.labels.tolist()
        assert np.array_equal(parts.share[b], want.share)
        assert parts.count[b] == want.nodes.size
        first = node_bounds(want.nodes, h)[1]
        assert np.flatnonzero(parts.starts[b]).tolist() == first.tolist()
        assert np.array_equal(factors[b], tree_variance_factors(want, h))


def test_batch_builds_batched_mtsp_and_step_classes_agrees():
    reqs = FixedRequirements.from_arrays([f"u{i}" for i in range(12)], np.full(12, 3),
                                         np.full(12, 1.0))
    runs = batch([build("mtsp", reqs, 4, np.random.default_rng(s)) for s in range(3)])
    assert isinstance(runs, BatchedMtsp)
    alone = build("mtsp", reqs, 4, np.random.default_rng(1))
    steppers = BatchedSteppers([build("mtsp", reqs, 4, np.random.default_rng(s))
                                for s in range(3)])
    classes = np.arange(12) % 3
    rng = np.random.default_rng(9)
    for _ in range(10):
        cells = rng.integers(-1, 4, (3, 12))
        class_counts = [np.stack([np.bincount(c[(classes == k) & (c >= 0)], minlength=4)
                                  for k in range(3)]) for c in cells]
        got = runs.step_classes(class_counts, [classes] * 3)
        old = steppers.step_classes(class_counts, [classes] * 3)
        want = alone.step_classes(class_counts[1], classes)
        assert np.array_equal(got.histogram, old.histogram)
        assert got.published.tolist() == old.published.tolist()
        assert np.array_equal(got.histogram[1], want.histogram)


def test_mixed_or_used_runs_are_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="one number of users and domain"):
        BatchedMtsp([MtspLdp(2, 1.0, 10, 3, rng), MtspLdp(2, 1.0, 11, 3, rng)])
    with pytest.raises(ValueError, match="one number of users and domain"):
        BatchedMtsp([MtspLdp(2, 1.0, 10, 3, rng), MtspLdp(2, 1.0, 10, 4, rng)])
    with pytest.raises(ValueError, match="at least one run"):
        BatchedMtsp([])
    used = MtspLdp(2, 1.0, 10, 3, rng)
    used.step(np.zeros(10, dtype=np.int64))
    with pytest.raises(ValueError, match="fresh"):
        BatchedMtsp([used])
    runs = BatchedMtsp([MtspLdp(2, 1.0, 10, 3, rng), MtspLdp(4, 2.0, 10, 3, rng)])
    with pytest.raises(ValueError, match="2 runs of 10 integer cells"):
        runs.step(np.zeros((2, 9), dtype=np.int64))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        runs.step(np.full((2, 10), 3))
    with pytest.raises(ValueError, match="counts of users"):
        runs.step_counts(np.full((2, 3), -1))
    with pytest.raises(ValueError, match="counts of users"):
        MtspLdp(2, 1.0, 10, 3, rng).step_counts(np.ones(3))
    assert runs.slot == 1  # nothing was released
