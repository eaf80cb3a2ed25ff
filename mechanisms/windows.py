"""A sliding-window sum over one series, for ledgers with a single requirement."""

from __future__ import annotations

import numpy as np


class WindowSum:
    """Remembers the last ``w`` values of a series and sums any suffix of them exactly."""

    def __init__(self, w: int) -> None:
        if w < 1:
            raise ValueError(f"window must be >= 1, got {w}")
        self.w = int(w)
        self.values = np.zeros(self.w)
        self.count = 0

    def previous(self, k: int) -> float:
        """Sum of the last ``k`` values pushed (k <= w)."""
        k = min(k, self.w, self.count)
        if k <= 0:
            return 0.0
        idx = (self.count - 1 - np.arange(k)) % self.w
        return float(self.values[idx].sum())

    def push(self, value: float) -> None:
        """Append the value of the slot just finished."""
        self.values[self.count % self.w] = value
        self.count += 1
