"""What lets the collector decide on many reports of one user at once, as its ledger would one
by one (:class:`mechanisms.local.ClientLedger`).

When every spend a user's ledger holds is one budget ``x`` (its requirement unchanged), the
window ending at a new report's slot sums ``k + 1`` copies of ``x``, ``k`` the earlier reports
in it, and these sums only grow with ``k``. So if ``w`` copies fit in ``E`` (with the ledger's
slack), no report is ever over budget and the ledger refuses only a slot not after the last
(``free``); if one fits and two do not, a report is allowed exactly when it lies ``w`` slots or
more after the last (``spaced``: LSP and LPU, whose reports spend all of E). The collector takes
its quick way for users in either case and reads every other report one by one.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final

import numpy as np

from mechanisms.local.ledger import SLACK

#: The longest window whose sum of w copies is worked out (longer ones take the slow way).
MAX_SUMMED_WINDOW: Final = 1_000_000


@lru_cache(maxsize=4096)
def ledger_regime(w: int, E: float, eps: float) -> str | None:  # noqa: N803 - the papers' name
    """``free``, ``spaced`` (the module's docstring) or None for a ledger of (w, E) whose
    spends are all ``eps``; sums as the ledger sums, oldest first from 0."""
    limit, total = E * SLACK, 0.0
    for n in range(1, w + 1):
        total += eps
        if not total <= limit:
            return "spaced" if n == 2 else None
        if n == MAX_SUMMED_WINDOW:
            return None
    return "free"


def previous_max(groups: np.ndarray, values: np.ndarray, initial: np.ndarray) -> np.ndarray:
    """For each item (``groups`` nondecreasing), the largest of its group's ``initial`` (indexed
    by group) and the ``values`` before it in its group."""
    n = values.size
    if n == 0:
        return values.copy()
    levels, rank = np.unique(np.concatenate([values, initial]), return_inverse=True)
    size = levels.size
    key = groups * size + rank[:n]
    running = np.maximum.accumulate(key)
    before = np.full(n, -1, dtype=np.int64)
    same = groups[1:] == groups[:-1]
    before[1:] = np.where(same, running[:-1] - groups[1:] * size, -1)
    return levels[np.maximum(before, rank[n:][groups])]
