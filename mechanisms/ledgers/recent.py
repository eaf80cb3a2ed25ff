"""The values of the last slots, kept without copying them at every slot."""

from __future__ import annotations

import numpy as np


class RecentSlots:
    """Per run and row, the values of the last ``width`` slots in age order (column 0: the last
    slot). Writing moves a window over a wider buffer, so a slot costs no copy of the history.

    >>> recent = RecentSlots(runs=1, rows=1, width=3)
    >>> for value in (1.0, 2.0, 3.0, 4.0):
    ...     recent.push(np.array([[value]]))
    >>> recent.view()[0, 0].tolist()
    [4.0, 3.0, 2.0]
    """

    def __init__(self, runs: int, rows: int, width: int) -> None:
        self.width = width
        self.spare = width + 64
        self.buffer = np.zeros((runs, rows, width + self.spare))
        self.pos = self.spare

    def view(self) -> np.ndarray:
        """(runs, rows, width), age order."""
        return self.buffer[:, :, self.pos : self.pos + self.width]

    def push(self, values: np.ndarray) -> None:
        """Record a slot's (runs, rows) values: they become age 1."""
        if self.pos == 0:
            self.buffer[:, :, self.spare :] = self.buffer[:, :, : self.width].copy()
            self.pos = self.spare
        self.pos -= 1
        self.buffer[:, :, self.pos] = values


def width_groups(widths: np.ndarray) -> tuple[np.ndarray, np.ndarray | None, list[tuple]]:
    """Runs in order of width, for sums whose length is a run's own, whatever its batch.

    Returns ``order`` (row i of a width-ordered array holds run order[i]), ``inverse`` (to
    bring width-ordered rows back to run order; None when the order is the runs' own) and
    ``(lo, hi, width)`` per distinct width, the slice of ordered rows that have it.

    >>> order, inverse, groups = width_groups(np.array([3, 1, 3]))
    >>> order.tolist(), inverse.tolist(), groups
    ([1, 0, 2], [1, 0, 2], [(0, 1, 1), (1, 3, 3)])
    """
    order = np.argsort(widths, kind="stable")
    inverse = None if (order == np.arange(order.size)).all() else np.argsort(order)
    values, starts = np.unique(widths[order], return_index=True)
    ends = np.append(starts[1:], widths.size)
    return order, inverse, [(int(lo), int(hi), int(w)) for w, lo, hi in
                            zip(values.tolist(), starts.tolist(), ends.tolist(), strict=True)]
