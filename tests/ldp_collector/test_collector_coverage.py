"""The error bars: over many seeded slots, simulated as the clients draw (uniform 32-bit words
against the integer thresholds), count +- 1.96 std holds the reporters' true count 95% of the
time, for OUE, GRR and PLBU's combination of both."""

from __future__ import annotations

import numpy as np
import pytest

from mechanisms.local import HALF_WORD, grr_keep_threshold, oue_threshold
from mechanisms.local.collector import estimate_slot, grr_estimate, oue_estimate

RUNS, USERS, D = 2000, 400, 8
TRUE = np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.05, 0.0, 0.0])


def true_cells(rng: np.random.Generator, runs: int, users: int) -> np.ndarray:
    """(runs, users) cells drawn from :data:`TRUE`."""
    return rng.choice(D, size=(runs, users), p=TRUE)


def oue_draw(rng: np.random.Generator, cells: np.ndarray, eps: float) -> np.ndarray:
    """OUE bits (..., D) as the clients draw them: word j < T, the own cell's word < 2^31."""
    words = rng.integers(0, 2**32, size=cells.shape + (D,), dtype=np.uint32)
    own = np.arange(D) == cells[..., None]
    return np.where(own, words < HALF_WORD, words < np.uint32(oue_threshold(eps)))


def grr_draw(rng: np.random.Generator, cells: np.ndarray, eps: float) -> np.ndarray:
    """GRR cells as the clients draw them: kept when the word is below T, else one of the other
    cells, uniformly."""
    keep = rng.integers(0, 2**32, size=cells.shape, dtype=np.uint32) < grr_keep_threshold(eps, D)
    other = (cells + 1 + rng.integers(0, D - 1, size=cells.shape)) % D
    return np.where(keep, cells, other)


def covered(counts: np.ndarray, std: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Whether each count's 95% interval holds the true count, (runs, D)."""
    truth = (cells[..., None] == np.arange(D)).sum(axis=-2)
    return np.abs(counts - truth) <= 1.96 * std


@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_oue_coverage(eps: float) -> None:
    rng = np.random.default_rng(11)
    cells = true_cells(rng, RUNS, USERS)
    bits = oue_draw(rng, cells, eps)
    estimates = [oue_estimate(b, eps) for b in bits]
    counts = np.array([e.frequency * USERS for e in estimates])
    std = np.array([USERS * np.sqrt(e.variance) for e in estimates])
    coverage = covered(counts, std, cells).mean()
    assert abs(coverage - 0.95) <= 0.01, coverage
    assert abs(counts.mean(axis=0) / USERS - TRUE).max() < 0.01  # unbiased


@pytest.mark.parametrize("eps", [1.0, 3.0])
def test_grr_coverage(eps: float) -> None:
    rng = np.random.default_rng(12)
    cells = true_cells(rng, RUNS, USERS)
    reported = grr_draw(rng, cells, eps)
    estimates = [grr_estimate(r, eps, D) for r in reported]
    counts = np.array([e.frequency * USERS for e in estimates])
    std = np.array([USERS * np.sqrt(e.variance) for e in estimates])
    coverage = covered(counts, std, cells).mean()
    assert abs(coverage - 0.95) <= 0.01, coverage
    assert abs(counts.mean(axis=0) / USERS - TRUE).max() < 0.01


def test_plbu_combination_coverage() -> None:
    """Two OUE budgets and two GRR budgets (GRR where e^eps > 2 over 8 cells). The combination
    estimates sum_g f_g/N_g / sum_g 1/N_g (f_g: group g's true frequencies), which its bars
    hold 95% of the time; the reporters' own count differs from it by how the groups' draws
    differ, which the bars do not hold."""
    rng = np.random.default_rng(13)
    budgets = np.repeat([0.25, 0.5, 1.0, 2.0], USERS // 4)
    grr = budgets > np.log(2)
    cells = true_cells(rng, RUNS, USERS)
    bits = np.zeros(cells.shape + (D,), dtype=bool)
    reported = np.zeros(cells.shape, dtype=np.int64)
    for eps in np.unique(budgets).tolist():
        at = budgets == eps
        if eps > np.log(2):
            reported[:, at] = grr_draw(rng, cells[:, at], eps)
        else:
            bits[:, at] = oue_draw(rng, cells[:, at], eps)
    estimates = [estimate_slot(D, oue_eps=budgets[~grr], oue_bits=b[~grr], grr_eps=budgets[grr],
                               grr_cells=r[grr]) for b, r in zip(bits, reported, strict=True)]
    groups = estimates[0].groups
    assert [(g.oracle, g.eps, g.reporters) for g in groups] == [
        ("oue", 0.25, 100), ("oue", 0.5, 100), ("grr", 1.0, 100), ("grr", 2.0, 100)]
    weights = np.array([1 / g.noise for g in groups])
    members = [budgets == g.eps for g in groups]
    group_truth = np.stack([(cells[:, m, None] == np.arange(D)).mean(axis=1) for m in members],
                           axis=1)  # (runs, groups, D)
    estimand = USERS * np.einsum("g,rgd->rd", weights, group_truth) / weights.sum()
    counts = np.array([e.counts for e in estimates])
    std = np.array([e.count_std for e in estimates])
    coverage = float((np.abs(counts - estimand) <= 1.96 * std).mean())
    assert abs(coverage - 0.95) <= 0.01, coverage
