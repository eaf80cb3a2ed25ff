"""Each run's random draws for one slot of the release rule: the Sampling Mechanism's binomial
thinning of its partly kept levels, then its noise, from the run's own generator.

A run of a batch draws exactly the values it draws alone, so the draws cannot be merged across
runs: a batch of B runs makes B sets of generator calls per slot. A batch of Laplace runs makes
them in one compiled call where numba is installed (:mod:`mechanisms.kernels.compiled`); a run
alone, as the job runs, and integer noise draw with numpy, one generator call after another.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mechanisms.kernels import compiled
from mechanisms.noise.calibrated import draw_noise
from mechanisms.release.sampling import draw_binomial


def draw_runs(
    rngs: Sequence[np.random.Generator],
    who: np.ndarray,
    rows: np.ndarray,
    probs: np.ndarray,
    begin: np.ndarray,
    end: np.ndarray,
    eps: np.ndarray,
    count: int,
    kind: str,
    compile_ok: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """For each item i, run ``who[i]``'s generator draws, in this order:

    - the binomial thinning of the levels ``rows[begin[i]:end[i]]`` (a (levels, d) count
      matrix) with probabilities ``probs[begin[i]:end[i]]``, summed over the levels
      (:func:`~mechanisms.release.sampling.draw_binomial`);
    - ``count`` noise values for ``eps[i]``-DP (:func:`~mechanisms.noise.calibrated.draw_noise`).

    Returns the thinned counts (items, d) and the noise (items, count): float for Laplace
    noise, integers for discrete noise. ``compile_ok=False`` keeps the numpy calls.
    """
    items, d = who.size, rows.shape[1]
    if compile_ok and kind == "laplace" and items and compiled.available(len(rngs)):
        return compiled.draw_runs(rngs, who, rows, probs, begin, end, 1.0 / eps, count)
    thinned = np.zeros((items, d), dtype=np.int64)
    values = rows.tolist()
    p = probs.tolist()
    los, his, epsilons = begin.tolist(), end.tolist(), eps.tolist()
    drawn = []
    for i, b in enumerate(who.tolist()):
        rng = rngs[b]
        lo, hi = los[i], his[i]
        if hi > lo:
            thinned[i] = draw_binomial(rng, values[lo:hi], p[lo:hi])
        if kind == "laplace" and count == 1:  # a scalar call draws what a call of size 1 does
            drawn.append([rng.laplace(0.0, 1.0 / epsilons[i])])
        else:
            drawn.append(draw_noise(epsilons[i], count, rng, kind))
    dtype = np.float64 if kind == "laplace" else np.int64
    return thinned, np.array(drawn, dtype=dtype).reshape(items, count)
