"""Noise for the release rule: continuous Laplace (the paper's) and the two-sided geometric.

Both are calibrated to L1 sensitivity 1 (one user's report moves one count by one). The
geometric ("discrete Laplace") returns integers, so released counts carry no floating-point
low-order bits (DESIGN.md, decision 6).
"""

from __future__ import annotations

import numpy as np

NOISE_KINDS = ("laplace", "discrete")


def _check(kind: str) -> None:
    if kind not in NOISE_KINDS:
        raise ValueError(f"noise must be one of {NOISE_KINDS}, got {kind!r}")


def noise_variance(eps: np.ndarray | float, kind: str = "laplace") -> np.ndarray:
    """Variance of the noise that gives ``eps``-DP for a sensitivity-1 count."""
    _check(kind)
    e = np.asarray(eps, dtype=np.float64)
    with np.errstate(divide="ignore"):
        if kind == "laplace":
            return 2.0 / (e * e)
        alpha = np.exp(-e)
        return 2.0 * alpha / np.square(-np.expm1(-e))


def draw_noise(
    eps: float, size: int | tuple[int, ...], rng: np.random.Generator, kind: str = "laplace"
) -> np.ndarray:
    """Noise for ``eps``-DP of sensitivity-1 counts: Laplace(1/eps) or two-sided geometric."""
    _check(kind)
    if not eps > 0 or not np.isfinite(eps):
        raise ValueError(f"noise budget must be finite and > 0, got {eps!r}")
    if kind == "laplace":
        return rng.laplace(0.0, 1.0 / eps, size)
    p = -np.expm1(-eps)  # success probability 1 - e^{-eps}
    return rng.geometric(p, size).astype(np.int64) - rng.geometric(p, size).astype(np.int64)
