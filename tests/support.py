"""Helpers shared by the tests."""

from __future__ import annotations

import numpy as np


def window_sums(charges: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Largest sum over any w_i consecutive slots, per user; ``charges`` is (T, n)."""
    T, n = charges.shape
    csum = np.vstack([np.zeros((1, n)), np.cumsum(charges, axis=0)])
    worst = np.zeros(n)
    for i in range(n):
        k = min(int(w[i]), T)
        worst[i] = (csum[k:, i] - csum[:-k, i]).max() if T else 0.0
        worst[i] = max(worst[i], csum[k, i])
    return worst


def local_stream(
    rng: np.random.Generator, n: int, d: int, T: int, jumpy: bool, every: int = 3
) -> list[np.ndarray]:
    """T slots of n cells for the local-DP tests: a stable distribution, or one whose mode moves
    every ``every`` slots; about 10% of the users hold no value (-1) at each slot."""
    out = []
    for t in range(T):
        p = np.ones(d)
        p[(t // every) % d if jumpy else 0] += 4 * d
        cells = rng.choice(d, n, p=p / p.sum())
        cells[rng.random(n) < 0.1] = -1
        out.append(cells)
    return out
