"""One-sided Clopper-Pearson bounds of a binomial proportion, from the regularised incomplete
beta function (numpy and the standard library only)."""


from __future__ import annotations

import math

import numpy as np


def _beta_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz's method)."""
    tiny, eps = 1e-300, 1e-15
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, dd = 1.0, 1.0 - qab * x / qap
    dd = 1.0 / (dd if abs(dd) > tiny else tiny)
    h = dd
    for m in range(1, 100_000):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        dd = 1.0 + aa * dd
        dd = 1.0 / (dd if abs(dd) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= dd * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        dd = 1.0 + aa * dd
        dd = 1.0 / (dd if abs(dd) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = dd * c
        h *= delta
        if abs(delta - 1.0) < eps:
            return h
    raise ArithmeticError(f"incomplete beta did not converge (x={x}, a={a}, b={b})")


def regularized_beta(x: float, a: float, b: float) -> float:
    """The regularised incomplete beta function I_x(a, b) for a, b > 0 and x in [0, 1]."""
    if not (a > 0 and b > 0):
        raise ValueError(f"a and b must be > 0, got {a}, {b}")
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def _beta_quantile(q: float, a: float, b: float, upper: bool) -> float:
    """x with I_x(a, b) = q by bisection; the bracket's upper end when ``upper``, else its lower
    end (so that a lower bound errs low and an upper bound errs high)."""
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            break
        if regularized_beta(mid, a, b) < q:
            lo = mid
        else:
            hi = mid
    return hi if upper else lo


#: relative widening of every Clopper-Pearson bound, so that rounding never makes one narrower
_MARGIN = 1e-9


def clopper_pearson(successes: int, trials: int, alpha: float) -> tuple[float, float]:
    """One-sided Clopper-Pearson bounds of a binomial probability: (lower, upper), each valid
    with probability at least ``1 - alpha`` (so the pair is a 1 - 2 alpha interval). The
    quantiles of the beta distribution are found by bisection on the regularised incomplete
    beta function (:func:`regularized_beta`), pure Python.

    >>> lo, hi = clopper_pearson(0, 100, 0.05)
    >>> lo, round(hi, 6)  # 1 - 0.05 ** (1 / 100)
    (0.0, 0.029513)
    """
    k, n = int(successes), int(trials)
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= successes <= trials and trials >= 1, got {k}/{n}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    lower = 0.0 if k == 0 else _beta_quantile(alpha, k, n - k + 1, upper=False)
    upper = 1.0 if k == n else _beta_quantile(1.0 - alpha, k + 1, n - k, upper=True)
    # widened by far more than the incomplete beta's numerical error (about 1e-11 relative)
    return lower * (1.0 - _MARGIN), min(upper * (1.0 + _MARGIN), 1.0)


def wilson_bounds(k: np.ndarray, n: float, z: float) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score bounds (lower, upper) of k successes in n trials, vectorised: the
    selection's cheap stand-in for Clopper-Pearson (the final bounds are exact)."""
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2.0 * n)) / denom
    half = z * np.sqrt(p * (1.0 - p) / n + z * z / (4.0 * n * n)) / denom
    return np.maximum(centre - half, 0.0), np.minimum(centre + half, 1.0)
