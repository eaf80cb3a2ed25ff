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
