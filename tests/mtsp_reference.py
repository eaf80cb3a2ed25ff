"""Reference oracle: MTSP-LDP stepped run by run from the one-tree functions.

A frozen copy of the per-run step that :class:`mechanisms.baselines.mtsp_batch.BatchedMtsp`
replaced (a run alone is now a batch of one): M1 by
:func:`~mechanisms.baselines.private_tree.estimate_tree` and
:func:`~mechanisms.baselines.private_tree.dissimilarity`, M2 by
:func:`~mechanisms.baselines.mtsp_ldp.allocate`, M3 by
:func:`~mechanisms.baselines.private_tree.adaptive_partition` and
:func:`~mechanisms.baselines.private_tree.publish_tree`. The tests check that the batch
releases exactly what this releases, run by run. The remaining budget sums the last w - 1
eps2 left to right, as the batch does.
"""

from __future__ import annotations

from collections import deque

import numpy as np

from mechanisms.baselines.ldp import oue_variance
from mechanisms.baselines.mtsp_batch import EXHAUSTED
from mechanisms.baselines.mtsp_ldp import MtspRelease, allocate
from mechanisms.baselines.private_tree import (
    adaptive_partition,
    dissimilarity,
    estimate_tree,
    height,
    level_slice,
    publish_tree,
    real_nodes,
    variance_factors,
)


class ReferenceMtsp:
    """One run of MTSP-LDP over ``n`` users and ``d`` cells, window ``w``, budget ``E``."""

    def __init__(self, w: int, E: float, n: int, d: int, rng: np.random.Generator,
                 split: float = 1.0) -> None:
        self.w, self.E, self.n, self.d = int(w), float(E), int(n), int(d)
        self.rng, self.split = rng, float(split)
        self.h = height(self.d)
        self.real = real_nodes(self.h, self.d)
        self.last = np.zeros(2 ** (self.h + 1) - 1)
        self.window: deque[float] = deque(maxlen=self.w)  # dissimilarities, NaN: none
        self.spent: deque[float] = deque(maxlen=self.w - 1)  # eps2 of the last w - 1 slots
        self.slot = 1

    def step(self, cells: np.ndarray) -> MtspRelease:
        """Release the next slot from one cell per user (-1: no value)."""
        cells = np.asarray(cells)
        return self.step_counts(np.bincount(cells[cells >= 0], minlength=self.d))

    def step_counts(self, counts: np.ndarray) -> MtspRelease:
        """Release the next slot from the number of users holding each cell."""
        counts = np.asarray(counts).astype(np.int64)
        t = self.slot
        self.slot += 1
        active = int(counts.sum())
        total = 0.0
        for x in self.spent:
            total += x
        remaining = self.E / 2.0 - total
        if active == 0:  # nobody to ask
            self.window.append(np.nan)
            self.spent.append(0.0)
            return MtspRelease(t, np.zeros(self.d), False, 0.0, 0.0, None, 0, self.last, 0, 0)
        eps1 = self.E / (2.0 * self.w)
        estimate = estimate_tree(counts, eps1, self.h, self.rng)
        dis = dissimilarity(estimate, self.last)
        self.window.append(dis)
        cap = min(self.E / 2.0, remaining)
        reference = cap if cap > EXHAUSTED * self.E else self.E / 2.0
        threshold = self.split * float(np.sqrt(oue_variance(reference, active)))
        partition = adaptive_partition(estimate.freq, self.h, self.d, threshold)
        factor = float(np.mean(variance_factors(partition, self.h)[self.real]))

        def variance(eps: np.ndarray) -> np.ndarray:
            return oue_variance(eps, active) * factor

        window = np.array([x for x in self.window if not np.isnan(x)])
        alloc = allocate(window, self.E, self.w, remaining, variance)
        if alloc.eps2 > 0:
            self.last = publish_tree(partition, counts, alloc.eps2, self.rng)
        self.spent.append(alloc.eps2)
        return MtspRelease(t, self.last[level_slice(self.h)][: self.d] * active,
                           alloc.eps2 > 0, eps1, alloc.eps2, dis, alloc.k, self.last,
                           int(partition.nodes.size), active)
