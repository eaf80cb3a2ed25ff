"""MTSP-LDP's budget-free queries over the collector's releases (streams/releases/ldp.py,
``pwevent releases --range``): a range's count is the released tree's minimum cover, its bars
are the whole intervals' and hold the truth, periods sum the slots, events follow the paper's
monitor on the same trees."""

from __future__ import annotations

import numpy as np
import pytest
from ldp_collector_kit import drifting_cells, rounds_in_process

from mechanisms.baselines.private_tree import build_tree, height, range_answer
from mechanisms.baselines.stream_queries import event_monitor
from streams.releases.ldp import range_queries

D, W, E = 7, 3, 4.0


@pytest.fixture(scope="module")
def run() -> tuple[list[dict], list]:
    cells = drifting_cells(1200, 10, D, seed=4)
    _, releases, _, second = rounds_in_process("mtsp", cells, D, W, E,
                                               [f"q{i}" for i in range(1200)])
    return releases, second


def trees_of(releases: list[dict]) -> np.ndarray:
    h = height(D + 1)
    leaves = np.zeros((len(releases), 2**h))
    for i, r in enumerate(releases):
        leaves[i, :D] = r["counts"]
        leaves[i, D] = r["no_value"]
    return build_tree(leaves)


def test_counts_are_the_trees_minimum_cover_and_periods_sum_them(run) -> None:
    releases, _ = run
    trees = trees_of(releases)
    for a, b in [(0, 0), (1, 4), (0, D - 1), (3, 6)]:
        docs = range_queries([dict(r) for r in releases], a, b, delta=3, ratio=1.2)
        counts = [d["range"]["count"] for d in docs]
        np.testing.assert_allclose(counts, range_answer(trees, a, b), rtol=0, atol=1e-9)
        periods = [d["range"]["period"] for d in docs]
        assert periods[:2] == [None, None]
        np.testing.assert_allclose(periods[2:], np.convolve(counts, np.ones(3), "valid"),
                                   rtol=0, atol=1e-9)
        assert [d["range"]["event"] for d in docs] == event_monitor(trees, a, b, 3, 1.2).tolist()


def test_bars_cover_whole_intervals_only_and_hold_the_truth(run) -> None:
    releases, second = run
    barred = 0
    for t, release in enumerate(releases):
        if not release["published"]:
            continue
        starts = release["intervals"]["starts"]
        truth = np.bincount([s.cell for s in second[t]], minlength=D + 1)
        for a in range(D):
            for b in range(a, D):
                (doc,) = range_queries([dict(release)], a, b)
                whole = a in starts and b + 1 in starts
                assert (doc["range"]["std"] is not None) == whole
                if whole:
                    barred += 1
                    gap = abs(doc["range"]["count"] - truth[a : b + 1].sum())
                    assert gap <= 4 * doc["range"]["std"]
    assert barred >= 3


def test_a_range_outside_the_cells_is_refused(run) -> None:
    releases, _ = run
    with pytest.raises(ValueError, match="range"):
        range_queries([dict(r) for r in releases], 2, D)
    with pytest.raises(ValueError, match="delta"):
        range_queries([dict(r) for r in releases], 0, 1, delta=len(releases) + 1)
