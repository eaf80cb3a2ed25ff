"""The Sampling Mechanism (Jorgensen et al., ICDE 2015; papers/000 section 4.2).

Users whose budget reaches the threshold theta are always kept; a user with budget eps < theta
is kept with probability (e^eps - 1)/(e^theta - 1). On aggregates, the count of one
(budget level, cell) pair is thinned binomially with its level's probability, which has the
same distribution as one coin per user (docs/design.md, ledger and release rule).
"""

from __future__ import annotations

import numpy as np

#: a partial level set with at most this many (level, cell) draws is drawn value by value: the
#: same calls of the generator's binomial sampler as one array call, at a fraction of its cost
_SCALAR_DRAWS = 24


def inclusion_probabilities(budgets: np.ndarray, threshold: float | np.ndarray) -> np.ndarray:
    """Probability of keeping a user with each budget, for threshold ``threshold``.

    For a batch of runs, ``budgets`` is (runs, levels) and ``threshold`` one value per run.
    """
    b = np.asarray(budgets, dtype=np.float64)
    if np.ndim(threshold) == 0:
        if not threshold > 0:
            return np.zeros_like(b)
        p = np.expm1(b) / np.expm1(threshold)
        return np.clip(np.where(b >= threshold, 1.0, p), 0.0, 1.0)
    th = np.asarray(threshold, dtype=np.float64)[:, None]
    live = th > 0
    p = np.expm1(b) / np.expm1(np.where(live, th, 1.0))  # a run without threshold keeps none
    p = np.minimum(np.maximum(np.where(b >= th, 1.0, p), 0.0), 1.0)
    return np.where(live, p, 0.0)


def draw_binomial(
    rng: np.random.Generator, counts: np.ndarray | list, p: np.ndarray | list
) -> np.ndarray | list[int]:
    """``rng.binomial(counts, p[:, None]).sum(axis=0)``: the sampled counts of partly kept
    levels, a (levels, d) matrix of counts and a probability per level (an array, or a list of
    exact integers).

    Small sets are drawn one value at a time, in the same order: the generator makes the same
    draws either way, and a scalar call costs a tenth of an array call.
    """
    rows = counts.tolist() if isinstance(counts, np.ndarray) else counts
    probs = p.tolist() if isinstance(p, np.ndarray) else p
    if not rows:
        return []
    if len(rows) * len(rows[0]) > _SCALAR_DRAWS:
        drawn = rng.binomial(np.array(rows, dtype=np.int64), np.array(probs)[:, None])
        return drawn.sum(axis=0)
    binomial = rng.binomial
    out = [0] * len(rows[0])
    for row, q in zip(rows, probs, strict=True):
        for j, c in enumerate(row):
            out[j] += binomial(c, q)
    return out


def sample_users(budgets: np.ndarray, threshold: float, rng: np.random.Generator) -> np.ndarray:
    """One coin per user: a boolean mask of the users kept."""
    p = inclusion_probabilities(budgets, threshold)
    return rng.random(p.shape) < p


def sample_counts(
    counts: np.ndarray, level_budgets: np.ndarray, threshold: float, rng: np.random.Generator
) -> np.ndarray:
    """Thin a (levels, d) count matrix level by level; returns the sampled histogram (d,)."""
    p = inclusion_probabilities(level_budgets, threshold)
    full = p >= 1.0
    out = counts[full].sum(axis=0, dtype=np.int64)
    partial = (p > 0.0) & ~full
    if partial.any():
        out = out + draw_binomial(rng, counts[partial], p[partial])
    return out.astype(np.int64)


def thinned(budgets: np.ndarray, sizes: np.ndarray, threshold: float | np.ndarray) -> np.ndarray:
    """Whether a publication at ``threshold`` sampled some users away: a level with users whose
    (scaled) budget is below the threshold is kept with probability < 1. ``budgets`` and
    ``sizes`` are (levels,) or (runs, levels) with one threshold per run. A function of public
    parameters only (the level budgets and sizes and the threshold OBS derives from them).
    Such a publication's error bars, which describe its noise, do not hold the true count at
    their confidence (docs/results.md, coverage), so none are given for it."""
    b = np.asarray(budgets, dtype=np.float64)
    th = np.asarray(threshold, dtype=np.float64)
    below = (np.asarray(sizes) > 0) & (b < (th[..., None] if th.ndim else th))
    return below.any(axis=-1)
