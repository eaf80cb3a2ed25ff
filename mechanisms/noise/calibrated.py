"""Noise for the release rule: continuous Laplace (the paper's) and the discrete Laplace.

Both are calibrated to L1 sensitivity 1 (one user's report moves one count by one). The
discrete Laplace (two-sided geometric) returns integers drawn by an exact sampler with no
floating point in the distribution (:mod:`mechanisms.noise.discrete_laplace`), so released
counts carry no floating-point artefacts (docs/design.md, privacy decision 6). Its bits come
from the generator's secure stream when it has one (the live job's
:class:`~mechanisms.noise.slot_randomness.SlotGenerator`), else from the numpy generator itself
(seeded evaluation and tests). The
continuous Laplace is numpy's floating-point sampler: it is kept for fidelity to the paper's
experiments and is not for live use.
"""

from __future__ import annotations

import math

import numpy as np

from mechanisms.noise.bits import GeneratorBits
from mechanisms.noise.discrete_laplace import exact_discrete_laplace, rational_scale

NOISE_KINDS = ("laplace", "discrete")
#: The budgets the exact discrete Laplace sampler serves at sensitivity 1
#: (:func:`~mechanisms.noise.discrete_laplace.rational_scale`): 2**-30 <= eps <= 2**20.
DISCRETE_MIN_EPS = 2.0**-30
DISCRETE_MAX_EPS = 2.0**20


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


def noise_std(eps: float, kind: str = "laplace") -> float:
    """Standard deviation of one draw of :func:`draw_noise` at ``eps``.

    Laplace(1/eps): sqrt(2)/eps. Discrete Laplace: the sampler first rounds eps down to a
    rational eps' (:func:`~mechanisms.noise.discrete_laplace.rational_scale`) and draws k with
    probability proportional to exp(-eps'|k|), whose variance is 2a/(1-a)^2 with
    a = exp(-eps').
    """
    _check(kind)
    if not eps > 0 or not math.isfinite(eps):
        raise ValueError(f"noise budget must be finite and > 0, got {eps!r}")
    if kind == "laplace":
        return math.sqrt(2.0) / eps
    t, s = rational_scale(eps)
    return math.sqrt(float(noise_variance(s / t, "discrete")))


def noise_stds(eps: np.ndarray, kind: str = "laplace") -> np.ndarray:
    """:func:`noise_std` of each budget of ``eps`` (the same values; Laplace's at once)."""
    e = np.asarray(eps, dtype=np.float64)
    if kind == "laplace" and bool(np.all((e > 0) & np.isfinite(e))):
        return math.sqrt(2.0) / e
    return np.array([noise_std(x, kind) for x in e.ravel().tolist()],
                    dtype=np.float64).reshape(e.shape)


def draw_noise(
    eps: float, size: int | tuple[int, ...], rng: np.random.Generator, kind: str = "laplace"
) -> np.ndarray:
    """Noise for ``eps``-DP of sensitivity-1 counts: Laplace(1/eps) or two-sided geometric."""
    _check(kind)
    if not eps > 0 or not np.isfinite(eps):
        raise ValueError(f"noise budget must be finite and > 0, got {eps!r}")
    if kind == "laplace":
        return rng.laplace(0.0, 1.0 / eps, size)
    bits = getattr(rng, "bits", None) or GeneratorBits(rng)
    shape = (size,) if isinstance(size, int) else tuple(size)
    count = int(np.prod(shape, dtype=np.int64))
    return exact_discrete_laplace(float(eps), count, bits).reshape(shape)
