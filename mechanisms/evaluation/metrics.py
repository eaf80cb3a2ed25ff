"""Utility measures of section 6.3 of the personalised w-event paper (equations 5 and 6).

All functions take the released and the true statistics as arrays shaped (T, d): one row per time
slot, one column per cell.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["ajsd", "amre", "coverage", "mae"]

#: the confidence of the error bars the evaluation scores (the job's default)
NOMINAL = 0.95


def _pair(released: ArrayLike, true: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Both inputs as float64 (T, d) arrays of equal, non-empty shape with finite entries."""
    r = np.asarray(released, dtype=np.float64)
    c = np.asarray(true, dtype=np.float64)
    for name, a in (("released", r), ("true", c)):
        if a.ndim != 2:
            raise ValueError(f"{name} must be 2-D (T, d), got shape {a.shape}")
        if a.size == 0:
            raise ValueError(f"{name} must have at least one slot and one cell, got {a.shape}")
        if not np.isfinite(a).all():
            raise ValueError(f"{name} contains NaN or infinite values")
    if r.shape != c.shape:
        raise ValueError(f"shape mismatch: released {r.shape} vs true {c.shape}")
    return r, c


def amre(released: ArrayLike, true: ArrayLike) -> float:
    """Average Mean Relative Error, paper eq. 5: (1/T) sum_t (1/d) ||r_t - c_t||_2^2.

    Despite its name the paper defines it as the mean of the per-cell squared errors (no division
    by the true value), so zero true counts need no special handling.
    """
    r, c = _pair(released, true)
    return float(np.mean(np.mean((r - c) ** 2, axis=1)))


def coverage(released: ArrayLike, true: ArrayLike, barred: ArrayLike, std: ArrayLike,
             confidence: float = NOMINAL) -> float:
    """Share of the (slot with bars, cell) pairs whose Laplace error bar at ``confidence``
    holds the true count: |r - c| <= b ln(1/(1 - confidence)) with b = std/sqrt(2), the bar
    the job's release records give (``streams.releases.error_bars``). ``barred`` and ``std``
    are (T,): whether a slot has bars, its per-cell noise standard deviation. nan when no
    slot has bars."""
    r, c = _pair(released, true)
    pub = np.asarray(barred, dtype=bool)
    if not pub.any():
        return float("nan")
    half = np.asarray(std, dtype=np.float64)[pub] / np.sqrt(2.0) * -np.log1p(-confidence)
    return float(np.mean(np.abs(r[pub] - c[pub]) <= half[:, None]))


def mae(released: ArrayLike, true: ArrayLike) -> float:
    """Mean absolute error over all slots and cells: (1/T) sum_t (1/d) ||r_t - c_t||_1."""
    r, c = _pair(released, true)
    return float(np.mean(np.mean(np.abs(r - c), axis=1)))


def _distributions(a: np.ndarray) -> np.ndarray:
    """Rows clipped at 0 and scaled to sum 1; a row with nothing positive becomes uniform."""
    a = np.maximum(a, 0.0)
    totals = a.sum(axis=1, keepdims=True)
    uniform = np.full_like(a, 1.0 / a.shape[1])
    return np.divide(a, totals, out=uniform, where=totals > 0)


def _kl_terms(a: np.ndarray, total: np.ndarray) -> np.ndarray:
    """a * ln(a / v) elementwise for v = total / 2, with 0 * ln(0 / v) = 0. Taken as
    ln(2a / total): halving a subnormal total could round it to 0 (and the term to infinity),
    while 2a / total lies in (0, 2] wherever a > 0."""
    out = np.zeros_like(a)
    positive = a > 0
    out[positive] = a[positive] * np.log(2.0 * a[positive] / total[positive])
    return out


def ajsd(released: ArrayLike, true: ArrayLike, *, normalize: bool = True) -> float:
    """Average Jensen-Shannon divergence, paper eq. 6, in nats:

    (1/(2T)) sum_t sum_j [r_t(j) ln(r_t(j) / v_t(j)) + c_t(j) ln(c_t(j) / v_t(j))],
    v_t = (r_t + c_t) / 2, with 0 ln 0 = 0.

    The paper applies it to distributions. With ``normalize`` (default) each row of both inputs
    is first clipped at 0 (noisy releases can be negative) and scaled to sum 1; a row with no
    positive entry is taken as uniform. Each slot then contributes a value in [0, ln 2]. With
    ``normalize=False`` the formula is applied to the values as given, which must be >= 0.
    """
    r, c = _pair(released, true)
    if normalize:
        r, c = _distributions(r), _distributions(c)
    elif (r < 0).any() or (c < 0).any():
        raise ValueError("ajsd without normalize needs non-negative values")
    total = r + c
    per_slot = (_kl_terms(r, total) + _kl_terms(c, total)).sum(axis=1)
    return float(np.sum(per_slot) / (2 * r.shape[0]))
