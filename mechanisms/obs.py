"""Optimal Budget Selection (papers/000, Algorithm 1) and the reporting error it minimises."""

from __future__ import annotations

import numpy as np

from mechanisms.noise import noise_variance


def reporting_errors(
    values: np.ndarray, counts: np.ndarray, noise: str = "laplace"
) -> tuple[np.ndarray, np.ndarray]:
    """Sampling plus noise error for every distinct positive budget taken as the threshold.

    ``values`` are distinct budgets sorted ascending (zeros allowed first), ``counts`` their
    multiplicities. Returns ``(candidates, errors)`` over the positive values, in O(m) using
    prefix sums of n_j, n_j a_j and n_j a_j^2 with a_j = e^{eps_j} - 1 (Definition 12).
    """
    a = np.expm1(values)
    n = counts.astype(np.float64)
    # prefix sums over the values strictly below each candidate
    pn = np.concatenate(([0.0], np.cumsum(n)))[:-1]
    pa = np.concatenate(([0.0], np.cumsum(n * a)))[:-1]
    pa2 = np.concatenate(([0.0], np.cumsum(n * a * a)))[:-1]
    positive = values > 0
    b = a[positive]
    variance = pa[positive] / b - pa2[positive] / (b * b)
    bias = pn[positive] - pa[positive] / b
    errors = variance + bias * bias + noise_variance(values[positive], noise)
    return values[positive], errors


def optimal_budget(
    budgets: np.ndarray,
    counts: np.ndarray | None = None,
    noise: str = "laplace",
) -> tuple[float, float]:
    """OBS: the threshold among the budgets that minimises sampling plus noise error.

    ``budgets`` is either one budget per user, or distinct budget values with their
    multiplicities in ``counts``. Users with a zero budget are never sampled and never the
    threshold; if no budget is positive the result is ``(0.0, inf)``. Ties go to the smaller
    threshold, as Algorithm 1's strict comparison does.

    The paper's Example 2 (its printed error for 0.8 is an arithmetic slip; the choice holds):

    >>> theta, err = optimal_budget([0.1, 0.4, 0.4, 0.1, 0.4, 0.4, 0.8, 0.8, 0.8, 0.4])
    >>> theta, round(err, 3)
    (0.4, 15.308)
    """
    b = np.asarray(budgets, dtype=np.float64).reshape(-1)
    c = np.ones_like(b) if counts is None else np.asarray(counts, dtype=np.float64).reshape(-1)
    if c.shape != b.shape:
        raise ValueError(f"budgets and counts differ in length: {b.shape[0]} vs {c.shape[0]}")
    if not np.all(np.isfinite(b)) or np.any(b < 0):
        raise ValueError("budgets must be finite and >= 0")
    if np.any(c < 0):
        raise ValueError("counts must be >= 0")
    keep = c > 0
    values, inverse = np.unique(b[keep], return_inverse=True)
    mult = np.bincount(inverse.reshape(-1), weights=c[keep], minlength=values.shape[0])
    if values.size == 0 or values[-1] <= 0:
        return 0.0, float("inf")
    candidates, errors = reporting_errors(values, mult, noise)
    k = int(np.argmin(errors))
    return float(candidates[k]), float(errors[k])
