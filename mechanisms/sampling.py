"""The Sampling Mechanism (Jorgensen et al., ICDE 2015; papers/000 section 4.2).

Users whose budget reaches the threshold theta are always kept; a user with budget eps < theta
is kept with probability (e^eps - 1)/(e^theta - 1). On aggregates, the count of one
(budget level, cell) pair is thinned binomially with its level's probability, which has the
same distribution as one coin per user (docs/design.md, ledger and release rule).
"""

from __future__ import annotations

import numpy as np


def inclusion_probabilities(budgets: np.ndarray, threshold: float) -> np.ndarray:
    """Probability of keeping a user with each budget, for threshold ``threshold``."""
    b = np.asarray(budgets, dtype=np.float64)
    if not threshold > 0:
        return np.zeros_like(b)
    p = np.expm1(b) / np.expm1(threshold)
    return np.clip(np.where(b >= threshold, 1.0, p), 0.0, 1.0)


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
        out = out + rng.binomial(counts[partial], p[partial][:, None]).sum(axis=0)
    return out.astype(np.int64)
