"""Optimal Budget Selection (papers/000, Algorithm 1) and the reporting error it minimises."""

from __future__ import annotations

import numpy as np

from mechanisms.kernels import compiled
from mechanisms.noise.calibrated import noise_variance


def candidate_errors(
    values: np.ndarray, counts: np.ndarray, real: np.ndarray, noise: str = "laplace"
) -> np.ndarray:
    """Sampling plus noise error of every budget taken as the threshold, row by row.

    ``values`` are each row's distinct budgets in ascending order (zeros allowed first, then
    padding where ``real`` is false), ``counts`` their multiplicities. The error of a candidate
    is inf unless it is a real, positive value. O(levels) per row, from prefix sums of n_j,
    n_j a_j and n_j a_j^2 with a_j = e^{eps_j} - 1 (Definition 12).
    """
    n = np.asarray(counts, dtype=np.float64)
    a = np.expm1(values)
    # prefix sums over the values strictly below each candidate
    pn, pa, pa2 = (np.zeros(values.shape) for _ in range(3))
    np.cumsum(n[:, :-1], axis=1, out=pn[:, 1:])
    np.cumsum((n * a)[:, :-1], axis=1, out=pa[:, 1:])
    np.cumsum((n * a * a)[:, :-1], axis=1, out=pa2[:, 1:])
    positive = real & (values > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        variance = pa / a - pa2 / (a * a)
        bias = pn - pa / a
        errors = variance + bias * bias + noise_variance(values, noise)
    return np.where(positive, errors, np.inf)


def reporting_errors(
    values: np.ndarray, counts: np.ndarray, noise: str = "laplace"
) -> tuple[np.ndarray, np.ndarray]:
    """The positive ones among distinct ascending budgets ``values`` (multiplicities
    ``counts``), and the error of each taken as the threshold."""
    values = np.asarray(values, dtype=np.float64)
    errors = candidate_errors(values[None, :], np.asarray(counts)[None, :],
                              np.ones((1, values.size), dtype=bool), noise)[0]
    positive = values > 0
    return values[positive], errors[positive]


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
    theta, err = batch_optimal_budget(values[None, :], mult[None, :], noise)
    return float(theta[0]), float(err[0])


def batch_optimal_budget(
    budgets: np.ndarray, sizes: np.ndarray, noise: str = "laplace", compile_ok: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """OBS of each row of a batch of runs: (threshold, error) per run, ``(0, inf)`` for a row
    without a positive budget.

    ``budgets`` and ``sizes`` are (runs, levels): each level's budget and its number of users
    (a level of size 0 does not count). Each row goes through the same operations as a run
    alone (distinct budgets in ascending order, their multiplicities, sequential prefix sums of
    n_j, n_j a_j and n_j a_j^2 with a_j = e^{eps_j} - 1, Definition 12), so a run's threshold
    does not depend on the batch it is in. A batch of several runs computes it compiled where
    it can (:mod:`mechanisms.kernels.compiled`, the same values); ``compile_ok=False`` keeps numpy.
    """
    budgets = np.asarray(budgets, dtype=np.float64)
    B, L = budgets.shape
    keep = sizes > 0
    if L == 1:  # one value: no prefix sums, the error is the noise variance alone
        theta = np.where(keep[:, 0] & (budgets[:, 0] > 0), budgets[:, 0], 0.0)
        with np.errstate(divide="ignore"):
            err = np.where(theta > 0, noise_variance(theta, noise), np.inf)
        return theta, err
    if compile_ok and compiled.available(B):
        with np.errstate(divide="ignore"):
            return compiled.optimal_budgets(budgets, sizes, np.expm1(budgets),
                                            noise_variance(budgets, noise))
    vals = np.where(keep, budgets, np.inf)
    order = np.argsort(vals, axis=1, kind="stable")
    rows = np.arange(B)[:, None]
    sv = vals[rows, order]
    new = np.ones((B, L), dtype=bool)
    np.not_equal(sv[:, 1:], sv[:, :-1], out=new[:, 1:])
    flat = (np.cumsum(new, axis=1) - 1 + rows * L).ravel()  # each distinct value's place
    finite = np.isfinite(sv).ravel()
    values = np.zeros(B * L)
    values[flat] = np.where(finite, sv.ravel(), 0.0)
    real = np.zeros(B * L, dtype=bool)
    real[flat] = finite
    # multiplicities: sums of integers, exact in any order
    sc = np.where(keep, sizes, 0).astype(np.float64)[rows, order]
    n = np.bincount(flat, weights=sc.ravel(), minlength=B * L).reshape(B, L)
    values, real = values.reshape(B, L), real.reshape(B, L)
    errors = candidate_errors(values, n, real, noise)
    k = np.argmin(errors, axis=1)
    idx = np.arange(B)
    any_positive = (real & (values > 0)).any(axis=1)
    theta = np.where(any_positive, values[idx, k], 0.0)
    err = np.where(any_positive, errors[idx, k], np.inf)
    return theta, err
