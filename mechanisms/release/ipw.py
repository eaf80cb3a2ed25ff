"""The unbiased (inverse-probability weighted) release of a slot under the Sampling Mechanism:
the release rule's estimator ``"ipw"`` (:class:`mechanisms.release.rule.ReleaseRule`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from mechanisms.kernels import compiled
from mechanisms.noise.calibrated import draw_noise, noise_std


def ipw_release(rng: np.random.Generator, counts: np.ndarray, p: np.ndarray,
                theta: float, noise: str = "laplace") -> tuple[np.ndarray, float]:
    """An unbiased release of one slot under the Sampling Mechanism (inverse-probability
    weighting); returns the histogram (d,) and its per-cell noise standard deviation.

    Levels kept whole (p_l = 1) are summed and get one theta-DP noise draw per cell (``noise``,
    variance s^2: 2/theta^2 for Laplace); each partly kept level l (0 < p_l < 1) is thinned,
    gets its own draws, and is divided by p_l (the rule rounds it under integer noise, which
    adds at most 0.5 per cell). A user is in one level, so the release is theta-DP on the
    sampled users (parallel composition over levels) and each level's sampling amplifies theta
    to that level's budget as in the paper; dividing by p_l is post-processing.

    With S_l ~ Bin(c_l, p_l), the release r = W + N_0 + sum_l (S_l + N_l) / p_l has
    E[r] = W + sum_l c_l, the true count (the paper's W + N + sum_l S_l has W + sum_l p_l c_l),
    and per cell Var[r] = s^2 (1 + sum_l 1/p_l^2) + sum_l c_l (1 - p_l) / p_l. The returned
    std is the noise term only, a function of public parameters (the threshold and the
    inclusion probabilities); the sampling term depends on
    the exact counts and is not returned.
    """
    d = counts.shape[-1]
    full = p >= 1.0
    partial = np.flatnonzero((p > 0.0) & ~full)
    whole = counts[full].sum(axis=0, dtype=np.int64).astype(np.float64)
    q = p[partial][:, None]
    thinned = rng.binomial(counts[partial].astype(np.int64), q) if partial.size else np.zeros(
        (0, d))
    drawn = draw_noise(theta, (partial.size + 1) * d, rng, noise).reshape(partial.size + 1, d)
    estimate = whole + drawn[0] + ((thinned + drawn[1:]) / q).sum(axis=0)
    var = noise_std(theta, noise) ** 2 * (1.0 + float((1.0 / q[:, 0] ** 2).sum()))
    return estimate, float(np.sqrt(var))


def ipw_runs(rngs: Sequence[np.random.Generator], who: np.ndarray, counts: np.ndarray,
             p: np.ndarray, theta: np.ndarray, noise: str = "laplace",
             compile_ok: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """:func:`ipw_release` of each item i: run ``who[i]``'s generator releases ``counts[i]``
    (levels, d) with inclusion probabilities ``p[i]`` at threshold ``theta[i]``. Returns the
    estimates (items, d) and their noise standard deviations (items,).

    A batch of Laplace runs over d >= 2 cells and at most 128 levels draws in one compiled
    call where numba is installed (:func:`mechanisms.kernels.compiled.ipw_runs`: the same draws and
    sums); a run alone, integer noise and ``compile_ok=False`` call :func:`ipw_release` run
    by run (so does one cell, whose level sum numpy adds pairwise)."""
    levels, d = counts.shape[-2:]
    if (compile_ok and noise == "laplace" and d > 1 and levels <= 128 and who.size
            and compiled.available(len(rngs)) and bool(np.all((theta > 0) & np.isfinite(theta)))):
        estimates, inverse = compiled.ipw_runs(rngs, who, counts, p, 1.0 / theta)
        # the noise's std as ipw_release computes it from the same sum
        std = [math.sqrt(noise_std(t, noise) ** 2 * (1.0 + s))
               for t, s in zip(theta.tolist(), inverse.tolist(), strict=True)]
        return estimates, np.array(std, dtype=np.float64)
    estimates = np.empty((who.size, d))
    std = np.empty(who.size)
    for i, b in enumerate(who.tolist()):
        estimates[i], std[i] = ipw_release(rngs[b], counts[i], p[i], float(theta[i]), noise)
    return estimates, std
