"""MTSP-LDP (papers/002 section 3): a private binary tree released at every slot under w-event
local DP, with private dissimilarity estimation (M1), Optimal privacy Budget Allocation (OBA,
M2) and a data-adaptive tree publication (M3). The budget-free streaming queries (M4) over the
released trees are in :mod:`mechanisms.baselines.stream_queries`; trees are in
:mod:`mechanisms.baselines.private_tree`.

Homogeneous, like :mod:`mechanisms.baselines.ldp_ids`: one window ``w`` and budget ``E`` for all n
users, one cell per user per slot (-1: no value), reports simulated on aggregates. At slot t, with
N_t users holding a value and T^o_{t-1} the last released tree (all zeros before the first):

- M1: every user holding a value reports once into a tree estimate with eps1 = E/(2w),
  population division over the h levels (papers/002 2.4). dis_t is the mean over the observed
  nodes of (estimate - T^o_{t-1})^2 minus an unbiased estimate of the estimate's variance: an
  unbiased estimate of the mean squared node difference between the true tree and T^o_{t-1}
  (derivation in :func:`~mechanisms.baselines.private_tree.estimate_tree` and
  :func:`~mechanisms.baselines.private_tree.dissimilarity`).
- M2 (OBA): with the dissimilarities of the last w slots (the current one included; fewer at
  the start) in descending order, E_t(k) = k var(E/(2k)) + sum_{i>k} dis_(i) for k = 1..w and
  E_t(0) = sum_i dis_(i), as the prose spells out; k* minimises it (ties: the smallest k).
  Slot t publishes iff k* >= 1 and dis_t is among the k* largest, with eps2 = min(E/(2k*),
  remaining), remaining = E/2 minus the eps2 spent in the last w - 1 slots; otherwise, or if
  nothing remains, it approximates: T^o_{t-1} is released again (eps2 = 0).
- M3: a publication is one OUE round with eps2, by every user holding a value, over the
  intervals of a partition of the domain chosen from the M1 estimate (post-processing of
  reports already paid for, so free).

Privacy: the users holding a value at a slot report once in M1 (eps1) and at most once in M3
(eps2). Over any w consecutive slots the eps1 sum to at most E/2 and the eps2 to at most E/2
(the remaining-budget cap), so every window costs at most E: w-event LDP with budget E.

The excerpt of papers/002 available here has lost its equations and leaves out several
constructions. Where its prose fixes a formula (OBA's E_t(k) and decision, the unbiasedness
of dis_t, the tree by levels) this module derives it; where it does not, this module does not
reproduce the paper's construction and makes its own documented choice instead:

- Dissimilarity estimator: the paper's exact estimator is not in the excerpt. Here the
  variance subtracted is an unbiased estimate of each node estimate's full variance (OUE noise
  given the level's group, plus the random choice of that group), not only the OUE variance.
- var(eps) in E_t(k): the mean, over the tree's real nodes, of the variance of the tree M3
  would publish with budget eps and N_t users over this slot's partition (partition-aware).
- Adaptive tree (ATC): the excerpt names it but does not give it. Here a node is split, from
  the root down, while its M1 estimate exceeds ``split`` (default 1) standard deviations of an
  interval estimate at the largest budget a publication can get now, min(E/2, remaining)
  (E/2 when nothing remains, where no publication runs). Rough bias-variance balance: keeping a
  node whole saves up to one interval estimate's variance and costs at most a spreading error
  of the order of its frequency squared. Released leaves take their interval's estimate in
  proportion to the M1 leaf estimates clipped at 0 (equally when those are all 0); every other
  node sums its leaves. Released frequencies are not clipped, so intervals stay unbiased.
- Grouping and smoothing of the trees: named in the excerpt, not described; not implemented.
  The released tree is the latest published one.
- "Among the k* largest": dis_t counts as such when fewer than k* other dissimilarities of
  the window exceed it (ties publish). A slot where nobody holds a value asks nobody, spends
  nothing, records no dissimilarity and releases zeros.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mechanisms.baselines.mtsp_batch import EXHAUSTED, BatchedMtsp
from mechanisms.baselines.private_tree import height
from mechanisms.run.mechanism import HistogramSteps


@dataclass(frozen=True)
class Allocation:
    """OBA at one slot: k*, the publication budget (0: approximate) and E_t(0..w)."""

    k: int
    eps2: float
    errors: np.ndarray


def allocate(
    window: np.ndarray,
    E: float,
    w: int,
    remaining: float,
    variance: Callable[[np.ndarray], np.ndarray],
) -> Allocation:
    """Optimal privacy Budget Allocation over the window's dissimilarities (current last), for
    one window: :class:`~mechanisms.baselines.mtsp_batch.BatchedMtsp` computes the same over the
    padded windows of its runs, and the tests check it against this.

    ``variance(eps)`` is the publication error at budget ``eps`` (vectorised). Publishes with
    min(E/(2k*), remaining) iff k* >= 1, the current dissimilarity is among the k* largest and
    some budget remains.
    """
    window = np.asarray(window, dtype=np.float64)
    if not 1 <= window.size <= w:
        raise ValueError(f"need 1 to w={w} dissimilarities, got {window.size}")
    ordered = np.sort(window)[::-1]
    tail = np.zeros(w + 1)  # tail[k] = sum of the dissimilarities ranked below k
    tail[: ordered.size] = np.cumsum(ordered[::-1])[::-1]
    k = np.arange(1, w + 1)
    errors = np.concatenate(([tail[0]], k * variance(E / (2.0 * k)) + tail[1:]))
    best = int(np.argmin(errors))
    among = np.count_nonzero(window[:-1] > window[-1]) < best
    if best == 0 or not among or remaining <= EXHAUSTED * E:
        return Allocation(best, 0.0, errors)
    return Allocation(best, float(min(E / (2.0 * best), remaining)), errors)


@dataclass(frozen=True)
class MtspRelease:
    """One slot of MTSP-LDP.

    ``histogram`` are the released counts of the d cells (leaf frequency times ``active``, the
    number of users holding a value); ``tree`` the released node frequencies; ``eps1``/``eps2``
    what every user holding a value spent in M1 and M3; ``k`` OBA's k* (0 when OBA did not
    run); ``intervals`` the size of the slot's partition (0 when none was chosen).
    """

    slot: int
    histogram: np.ndarray
    published: bool
    eps1: float
    eps2: float
    dissimilarity: float | None
    k: int
    tree: np.ndarray
    intervals: int
    active: int

    @property
    def tree_counts(self) -> np.ndarray:
        """The released tree as counts of users (what the streaming queries read)."""
        return self.tree * self.active


class MtspLdp(HistogramSteps):
    """MTSP-LDP over ``n`` users and ``d`` cells with window ``w`` and budget ``E``: a run
    alone, stepped as a batch of one of :class:`~mechanisms.baselines.mtsp_batch.BatchedMtsp`,
    which holds its state (the window's dissimilarities and eps2, the last tree)."""

    def __init__(
        self,
        w: int,
        E: float,
        n: int,
        d: int,
        rng: np.random.Generator,
        split: float = 1.0,
    ) -> None:
        if int(w) < 1 or not np.isfinite(E) or E <= 0:
            raise ValueError(f"need w >= 1 and a finite E > 0, got w={w}, E={E}")
        if int(n) < 1 or int(d) < 1:
            raise ValueError(f"need n >= 1 users and d >= 1 cells, got n={n}, d={d}")
        if not np.isfinite(split) or split < 0:
            raise ValueError(f"need a finite split >= 0, got {split}")
        self.w, self.E, self.n, self.d = int(w), float(E), int(n), int(d)
        self.rng, self.split = rng, float(split)
        self.h = height(self.d)
        self.slot = 1  # the next slot to be released
        self.last = np.zeros(2 ** (self.h + 1) - 1)  # the last released tree
        self._runs: BatchedMtsp | None = None

    def step(self, cells: np.ndarray) -> MtspRelease:
        """Release the next slot from one cell per user (-1: no value)."""
        cells = np.asarray(cells)
        if cells.shape != (self.n,) or cells.dtype.kind not in "iu":
            raise ValueError(f"expected {self.n} integer cells, got {cells.dtype} {cells.shape}")
        return super().step(cells)

    def step_counts(self, counts: np.ndarray) -> MtspRelease:
        """Release the next slot from the number of users holding each cell, (d,)."""
        counts = np.asarray(counts)
        if counts.shape != (self.d,) or counts.dtype.kind not in "iu" or counts.min() < 0:
            raise ValueError(f"expected {self.d} counts of users >= 0, got {counts.dtype} "
                             f"{counts.shape}")
        if self._runs is None:  # a run alone is a batch of one, built on its first slot
            self._runs = BatchedMtsp([self])
        out = self._runs.step_counts(counts[None])
        self.slot += 1
        active = int(out.active[0])
        dis = float(out.dissimilarity[0])
        if out.published[0]:  # an approximation releases the very tree released before
            self.last = out.trees[0]
        return MtspRelease(
            slot=out.slot,
            histogram=out.histogram[0],
            published=bool(out.published[0]),
            eps1=self.E / (2.0 * self.w) if active else 0.0,
            eps2=float(out.eps2[0]),
            dissimilarity=None if np.isnan(dis) else dis,
            k=int(out.k[0]),
            tree=self.last,
            intervals=int(out.intervals[0]),
            active=active,
        )
