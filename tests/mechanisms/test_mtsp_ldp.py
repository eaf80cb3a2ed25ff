"""MTSP-LDP (papers/002 section 3): private trees, dissimilarity, OBA, adaptive publication,
streaming queries, privacy accounting and accuracy."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms.baselines.ldp_ids import LdpIds
from mechanisms.baselines.mtsp_ldp import MtspLdp, allocate
from mechanisms.baselines.private_tree import (
    Partition,
    adaptive_partition,
    build_tree,
    dissimilarity,
    estimate_tree,
    height,
    level_slice,
    minimum_cover,
    node_bounds,
    node_frequencies,
    publish_tree,
    range_answer,
    real_nodes,
    variance_factors,
)
from mechanisms.baselines.stream_queries import (
    counting_query,
    event_monitor,
    period_counts,
    range_query,
)
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


def covered_cells(partition: Partition, h: int, d: int) -> np.ndarray:
    """Every real cell the partition's intervals cover, in order, with repeats."""
    _, first, last = node_bounds(partition.nodes, h)
    cells = np.concatenate([np.arange(a, b + 1) for a, b in zip(first, last, strict=True)])
    return cells[cells < d]


# --- privacy accounting ---------------------------------------------------------------------


@settings(max_examples=30, deadline=None)
@given(
    w=st.integers(1, 30),
    E=st.floats(0.05, 5.0),
    d=st.integers(1, 12),
    T=st.integers(1, 80),
    seed=st.integers(0, 2**32 - 1),
    jumpy=st.booleans(),
)
def test_every_window_of_w_slots_costs_at_most_E(w, E, d, T, seed, jumpy):
    rng = np.random.default_rng(seed)
    mech = MtspLdp(w, E, 300, d, rng)
    spent = []
    for cells in stream(rng, 300, d, T, jumpy):
        if rng.random() < 0.05:
            cells[:] = -1  # now and then nobody holds a value
        rel = mech.step(cells)
        if (cells >= 0).any():
            assert rel.eps1 == E / (2 * w)
        else:
            assert rel.eps1 == rel.eps2 == 0 and not rel.published
        assert (rel.eps2 > 0) == rel.published
        assert rel.eps2 <= E / 2 + 1e-12
        spent.append(rel.eps1 + rel.eps2)
    assert window_sums(np.array(spent)[:, None], np.array([w]))[0] <= E + 1e-9


def test_the_remaining_budget_caps_publication():
    # slot 1 has a single dissimilarity, so k* = 1 and it spends E/2 at once: the next w - 1
    # slots have nothing left and must approximate however much the stream jumps
    w, E, n, d = 3, 2.0, 20_000, 8
    rng = np.random.default_rng(11)
    mech = MtspLdp(w, E, n, d, rng)
    releases = [mech.step(c) for c in stream(rng, n, d, 4, True, every=1)]
    assert releases[0].eps2 == pytest.approx(E / 2) and releases[0].k == 1
    for rel in releases[1:3]:
        assert rel.k >= 1 and rel.dissimilarity > 0.05  # the jump is seen ...
        assert not rel.published and rel.eps2 == 0  # ... but no budget remains
        assert rel.tree is releases[0].tree  # the previous tree is released again
    assert releases[3].published and releases[3].eps2 > 0


# --- trees ----------------------------------------------------------------------------------


def test_node_frequencies_of_a_small_histogram():
    counts = np.array([3, 1, 0, 2, 4])  # d = 5, padded to 8 leaves
    assert height(5) == 3 and height(1) == 1 and height(2) == 1 and height(8) == 3
    expected = np.array([10, 6, 4, 4, 2, 4, 0, 3, 1, 0, 2, 4, 0, 0, 0]) / 10
    np.testing.assert_allclose(node_frequencies(counts, 3), expected)
    real = [1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 0, 0, 0]
    np.testing.assert_array_equal(real_nodes(3, 5), np.array(real, dtype=bool))
    level, first, last = node_bounds(np.array([0, 2, 5, 12]), 3)
    np.testing.assert_array_equal(level, [0, 1, 2, 3])
    np.testing.assert_array_equal(first, [0, 4, 4, 5])
    np.testing.assert_array_equal(last, [7, 7, 5, 5])


@pytest.mark.parametrize(
    ("a", "b", "nodes"),
    [
        (0, 6, [1, 5, 13]),  # the paper's {0, ..., 6}: {0..3}, {4, 5}, {6}
        (0, 7, [0]),
        (3, 3, [10]),
        (1, 6, [8, 4, 5, 13]),
        (2, 5, [4, 5]),
        (4, 7, [2]),
        (1, 2, [8, 9]),
    ],
)
def test_minimum_cover_by_hand(a, b, nodes):
    np.testing.assert_array_equal(minimum_cover(a, b, 3), nodes)


def test_minimum_cover_partitions_every_range_and_answers_it_exactly():
    rng = np.random.default_rng(0)
    counts = rng.integers(0, 50, 13)
    h = height(13)
    tree = build_tree(np.concatenate([counts, np.zeros(2**h - 13)]))
    for a in range(13):
        for b in range(a, 13):
            cover = minimum_cover(a, b, h)
            _, first, last = node_bounds(cover, h)
            assert first[0] == a and last[-1] == b and np.all(first[1:] == last[:-1] + 1)
            assert cover.size <= 2 * h  # at most two nodes per level
            assert range_answer(tree, a, b) == counts[a : b + 1].sum()


def test_estimated_levels_and_their_variances():
    counts = np.array([5000, 3000, 1000, 600, 400])
    rng = np.random.default_rng(1)
    est = estimate_tree(counts, 1.0, 3, rng)
    np.testing.assert_array_equal(est.groups, [3334, 3333, 3333])
    assert est.freq[0] == 1.0 and est.observed[0] and est.variance[0] == 0
    for level, m in zip((1, 2, 3), est.groups, strict=True):
        real = real_nodes(3, 5)[level_slice(level)]
        var = est.variance[level_slice(level)]
        np.testing.assert_allclose(var[real], 4 * np.e / (m * (np.e - 1) ** 2))
        assert np.all(var[~real] == 0) and np.all(est.freq[level_slice(level)][~real] == 0)
    truth = node_frequencies(counts, 3)
    assert np.all(np.abs(est.freq - truth) < 5 * np.sqrt(est.variance) + 1e-12)


def test_dissimilarity_is_unbiased_and_the_naive_one_is_not():
    counts = np.array([400, 250, 150, 100, 60, 40])
    h = height(6)
    real = real_nodes(h, 6)
    released = node_frequencies(np.ones(6), h)
    target = np.mean(np.square(node_frequencies(counts, h) - released)[real])
    rng = np.random.default_rng(7)
    corrected, naive, oue_only = [], [], []
    for _ in range(4000):
        est = estimate_tree(counts, 2.0, h, rng)
        keep = est.observed
        corrected.append(dissimilarity(est, released))
        naive.append(np.mean(np.square(est.freq - released)[keep]))
        oue_only.append(np.mean((np.square(est.freq - released) - est.variance)[keep]))
    se = np.std(corrected) / np.sqrt(len(corrected))
    assert abs(np.mean(corrected) - target) < 4 * se
    assert np.mean(naive) - target > 20 * se  # biased up by the variance
    # the OUE variance alone leaves out the terms in f and the choice of each level's group
    assert np.mean(oue_only) - target > 4 * se


# --- OBA ------------------------------------------------------------------------------------


def cubic(eps: np.ndarray) -> np.ndarray:
    """A publication error with k var(E/(2k)) = k^3 for E = 2."""
    return 1.0 / np.square(eps)


def test_oba_approximates_when_k_star_is_zero():
    # E(0) = 1.1, E(1) = 1 + 0.6, E(2) = 8 + 0.3, ...
    alloc = allocate(np.array([0.5, 0.2, 0.1, 0.3]), 2.0, 4, 1.0, cubic)
    np.testing.assert_allclose(alloc.errors, [1.1, 1.6, 8.3, 27.1, 64.0])
    assert alloc.k == 0 and alloc.eps2 == 0


def test_oba_publishes_the_top_k_with_an_equal_share():
    # sorted 12, 10, 9, 0.5: E = 31.5, 20.5, 17.5, 27.5, 64, so k* = 2 and eps2 = E/4
    alloc = allocate(np.array([10.0, 0.5, 9.0, 12.0]), 2.0, 4, 1.0, cubic)
    np.testing.assert_allclose(alloc.errors, [31.5, 20.5, 17.5, 27.5, 64.0])
    assert alloc.k == 2 and alloc.eps2 == 0.5
    # the same window with the current slot third largest: approximate
    alloc = allocate(np.array([10.0, 0.5, 12.0, 9.0]), 2.0, 4, 1.0, cubic)
    assert alloc.k == 2 and alloc.eps2 == 0


def test_oba_is_capped_by_the_remaining_budget():
    window = np.array([10.0, 0.5, 9.0, 12.0])
    assert allocate(window, 2.0, 4, 0.3, cubic).eps2 == 0.3
    assert allocate(window, 2.0, 4, 0.0, cubic).eps2 == 0
    assert allocate(window, 2.0, 4, -0.2, cubic).eps2 == 0


def test_oba_at_the_start_and_on_ties():
    alloc = allocate(np.array([5.0]), 2.0, 4, 1.0, cubic)  # one dissimilarity so far
    np.testing.assert_allclose(alloc.errors, [5.0, 1.0, 8.0, 27.0, 64.0])
    assert alloc.k == 1 and alloc.eps2 == 1.0
    assert allocate(np.array([1.0]), 2.0, 4, 1.0, cubic).k == 0  # E(0) = E(1): smallest k
    # tied dissimilarities: the current one is among the k* largest
    assert allocate(np.array([3.0, 3.0]), 2.0, 2, 1.0, cubic).eps2 == 1.0  # k* = 1


# --- adaptive publication -------------------------------------------------------------------


def skewed_counts(d: int) -> np.ndarray:
    counts = np.zeros(d, dtype=np.int64)
    counts[:4] = [40_000, 30_000, 20_000, 9_000]
    counts[4:16] = 50  # lukewarm
    return counts  # cells 16 ... d - 1 are cold


def test_adaptive_partition_is_fine_where_hot_and_coarse_where_cold():
    d, h = 64, 6
    counts = skewed_counts(d)
    est = estimate_tree(counts, 5.0, h, np.random.default_rng(3))
    part = adaptive_partition(est.freq, h, d, threshold=0.02)
    np.testing.assert_array_equal(covered_cells(part, h, d), np.arange(d))
    _, first, last = node_bounds(part.nodes, h)
    intervals = dict(zip(first.tolist(), last.tolist(), strict=True))
    for cell in range(4):
        assert intervals[cell] == cell  # hot cells are leaves
    assert intervals[32] == 63 and intervals[16] == 31  # cold halves are single intervals
    assert part.nodes.size <= 4 + 2 * h
    # leaves share their interval in proportion to the clipped estimate; shares sum to 1
    sums = np.bincount(part.labels[part.labels >= 0], weights=part.share[part.labels >= 0])
    np.testing.assert_allclose(sums, 1.0)


@settings(max_examples=60, deadline=None)
@given(
    d=st.integers(1, 40),
    seed=st.integers(0, 2**32 - 1),
    threshold=st.floats(-0.5, 1.5),
)
def test_every_partition_covers_the_domain_exactly_once(d, seed, threshold):
    h = height(d)
    rng = np.random.default_rng(seed)
    freq = rng.normal(0.1, 0.3, 2 ** (h + 1) - 1)
    part = adaptive_partition(freq, h, d, threshold)
    np.testing.assert_array_equal(covered_cells(part, h, d), np.arange(d))
    held = part.labels >= 0
    np.testing.assert_allclose(np.bincount(part.labels[held], weights=part.share[held]), 1.0)
    assert np.all(part.share[d:] == 0) and np.all(part.share >= 0)


def test_variance_factors_by_hand():
    # leaves {0, 1} one interval shared 1/4 : 3/4, leaves 2 and 3 alone
    part = Partition(
        nodes=np.array([1, 5, 6]),
        labels=np.array([0, 0, 1, 2]),
        share=np.array([0.25, 0.75, 1.0, 1.0]),
    )
    factors = variance_factors(part, 2)
    np.testing.assert_allclose(factors, [3, 1, 2, 0.0625, 0.5625, 1, 1])


def test_published_intervals_are_unbiased_and_nodes_sum_their_leaves():
    d, h = 16, 4
    counts = skewed_counts(d)
    est = estimate_tree(counts, 3.0, h, np.random.default_rng(4))
    part = adaptive_partition(est.freq, h, d, threshold=0.01)
    assert 4 <= part.nodes.size < d
    rng = np.random.default_rng(5)
    trees = np.array([publish_tree(part, counts, 1.0, rng) for _ in range(2000)])
    np.testing.assert_allclose(trees, build_tree(trees[:, level_slice(h)]), atol=1e-12)
    truth = node_frequencies(counts, h)[part.nodes]
    mean = trees[:, part.nodes].mean(axis=0)
    se = trees[:, part.nodes].std(axis=0) / np.sqrt(len(trees))
    assert np.all(np.abs(mean - truth) < 4 * se)


def test_a_skewed_stream_is_published_over_fewer_intervals_than_cells():
    d, n = 64, 20_000
    rng = np.random.default_rng(6)
    mech = MtspLdp(1, 10.0, n, d, rng)
    cells = np.repeat(np.arange(d), skewed_counts(d) * n // skewed_counts(d).sum())
    cells = np.concatenate([cells, np.full(n - cells.size, -1)])
    sizes = [mech.step(cells).intervals for _ in range(10)]
    assert max(sizes) < d / 2


# --- releases and queries -------------------------------------------------------------------


def test_releases_are_consistent_trees_and_approximations_repeat_them():
    n, d = 5000, 10
    rng = np.random.default_rng(8)
    mech = MtspLdp(4, 2.0, n, d, rng)
    previous = None
    for cells in stream(rng, n, d, 20, True):
        rel = mech.step(cells)
        assert rel.active == np.count_nonzero(cells >= 0)
        counts = rel.tree_counts
        np.testing.assert_allclose(rel.histogram, counts[level_slice(mech.h)][:d])
        np.testing.assert_allclose(range_query(counts[None], 2, 7), rel.histogram[2:8].sum())
        if not rel.published and previous is not None:
            assert rel.tree is previous.tree
        previous = rel


def test_nobody_holding_a_value_releases_zeros_and_spends_nothing():
    mech = MtspLdp(3, 1.0, 50, 4, np.random.default_rng(0))
    rel = mech.step(np.full(50, -1))
    assert not rel.published and rel.eps1 == rel.eps2 == 0 and rel.dissimilarity is None
    np.testing.assert_array_equal(rel.histogram, np.zeros(4))
    assert mech.slot == 2


def test_counting_range_and_event_queries_on_released_trees():
    histograms = np.array([[5, 1, 0, 2], [4, 2, 1, 2], [6, 0, 3, 1], [9, 1, 8, 0], [12, 2, 7, 1]])
    trees = build_tree(histograms)  # counts per node, one row per slot
    assert counting_query(trees, 0, 1) == 12
    assert counting_query(trees, 0, 3) == 6 + 9 + 12
    assert range_query(trees, 1, 2, 2) == 1 + 8 + 2 + 7
    assert range_query(trees, 0, 3, 5) == histograms.sum()
    alpha = period_counts(trees, 0, 0, 2)
    np.testing.assert_array_equal(alpha[1:], [9, 10, 15, 21])
    assert np.isnan(alpha[0])
    # beta_t = 1 iff alpha_t > 1.5 alpha_{t-2}: 15 > 13.5 at slot 4, 21 > 15 at slot 5
    np.testing.assert_array_equal(event_monitor(trees, 0, 0, 2, ratio=1.5), [0, 0, 0, 1, 1])
    np.testing.assert_array_equal(event_monitor(trees, 0, 0, 2, ratio=2.0), [0, 0, 0, 0, 1])
    assert event_monitor(trees, 0, 0, 2, ratio=1.5, margin=7).sum() == 0
    # a range: cells 1..2 give alpha 4, 6, 12, 18 for periods of 2
    np.testing.assert_array_equal(event_monitor(trees, 1, 2, 2, ratio=2.0), [0, 0, 0, 1, 1])


# --- accuracy and the evaluation ------------------------------------------------------------


def test_beats_lbu_on_a_jumpy_stream():
    # a stream whose mode moves every 3 slots, w = 20, E = 1, n = 20,000, d = 16, 100 slots:
    # MTSP-LDP's mean squared frequency error over seeds 0 to 11 was 0.53 to 0.71 of LBU's
    # (0.045 vs 0.084 on this seed), so 0.8 leaves a margin
    w, E, n, d = 20, 1.0, 20_000, 16
    errors = {}
    for name in ("mtsp", "lbu"):
        rng = np.random.default_rng(3)
        mech = MtspLdp(w, E, n, d, rng) if name == "mtsp" else LdpIds(name, w, E, n, d, rng)
        squared = []
        for cells in stream(rng, n, d, 100, True):
            active = np.count_nonzero(cells >= 0)
            true = np.bincount(cells[cells >= 0], minlength=d) / active
            squared.append(np.mean(np.square(mech.step(cells).histogram / active - true)))
        errors[name] = float(np.mean(squared))
    assert errors["mtsp"] < 0.8 * errors["lbu"]


def test_runs_in_the_evaluation():
    assert "mtsp" in KNOWN
    rng = np.random.default_rng(2)
    cells = synthetic_cells(np.full(60, 0.3), 3000, rng)
    true = true_histograms(cells, 2)
    reqs = paper_requirements(3000, 1.0, 20, np.random.default_rng(3))
    res = run_stream(make_step("mtsp", reqs, 2, np.random.default_rng(4)), cells, true)
    assert np.isfinite(res.amre) and res.fresh >= 1


# --- bad input ------------------------------------------------------------------------------


def test_bad_input_is_refused():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="w >= 1"):
        MtspLdp(0, 1.0, 10, 2, rng)
    with pytest.raises(ValueError, match="E > 0"):
        MtspLdp(3, float("nan"), 10, 2, rng)
    with pytest.raises(ValueError, match="E > 0"):
        MtspLdp(3, 0.0, 10, 2, rng)
    with pytest.raises(ValueError, match="n >= 1"):
        MtspLdp(3, 1.0, 0, 2, rng)
    with pytest.raises(ValueError, match="d >= 1"):
        MtspLdp(3, 1.0, 10, 0, rng)
    with pytest.raises(ValueError, match="split >= 0"):
        MtspLdp(3, 1.0, 10, 2, rng, split=-1.0)
    mech = MtspLdp(3, 1.0, 10, 2, rng)
    with pytest.raises(ValueError, match="10 integer cells"):
        mech.step(np.zeros(9, dtype=np.int64))
    with pytest.raises(ValueError, match="10 integer cells"):
        mech.step(np.zeros(10, dtype=np.float64))
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        mech.step(np.full(10, 2))
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        mech.step(np.full(10, -2))
    assert mech.slot == 1  # nothing was charged
    with pytest.raises(ValueError, match="a <= b"):
        minimum_cover(3, 2, 2)
    with pytest.raises(ValueError, match="a <= b"):
        minimum_cover(0, 4, 2)
    trees = build_tree(np.ones((3, 4)))
    with pytest.raises(ValueError, match="delta"):
        counting_query(trees, 0, 4)
    with pytest.raises(ValueError, match="delta"):
        range_query(trees, 0, 1, 0)
    with pytest.raises(ValueError, match="perfect binary tree"):
        counting_query(np.ones((2, 6)), 0)
    with pytest.raises(ValueError, match="ratio"):
        event_monitor(trees, 0, 0, 1, ratio=-1.0)
    with pytest.raises(ValueError, match="1 to w=2"):
        allocate(np.ones(3), 1.0, 2, 1.0, cubic)
