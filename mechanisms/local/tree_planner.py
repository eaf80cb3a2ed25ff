"""The collector's side of MTSP-LDP on devices (docs/ldp-reports.md, "Tree rounds").

Slot t runs M1, M2 and M3 of the evaluation (:mod:`mechanisms.baselines.mtsp_ldp`) with the
devices' reports in place of simulated ones, through the evaluation's own functions
(:mod:`mechanisms.baselines.mtsp_batch` over a batch of one):

1. round 1's reports give each level's reporters and 1-bits per node; :meth:`TreePlanner.decide`
   estimates the tree (OUE read with the oracle's effective probabilities), its dissimilarity
   to the last released tree, the adaptive partition and OBA's publication budget eps2, and
   names the partition by its intervals' first cells;
2. round 2's reports over those intervals give :meth:`TreePlanner.publish` the released tree:
   each leaf its share of its interval's estimate.

The planner's ``d`` is the oracle's cells (the stream's value cells and "no value"): the tree's
frequencies are over every reporter. OBA's window and remaining budget follow the evaluation's,
so any w consecutive slots' publications spend at most E/2; a publication a user who answers
every round could not afford (a rounding) is not asked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mechanisms.baselines.ldp import oue_variance
from mechanisms.baselines.mtsp_batch import (
    EXHAUSTED,
    adaptive_partitions,
    dissimilarities,
    interval_trees,
    node_estimates,
    oba,
    variance_factors,
    window_totals,
)
from mechanisms.baselines.private_tree import level_slice, node_bounds, real_nodes
from mechanisms.local.collector import frequency_variance, oue_probabilities
from mechanisms.local.ledger import ClientLedger
from mechanisms.local.rounds import Outcome, dissimilarity_budget, virtual_slot
from mechanisms.local.tree import level_cells, tree_height

__all__ = ["IntervalEstimate", "TreePlanner", "TreeReports"]


@dataclass(frozen=True)
class TreeReports:
    """Round 1 of a slot counted: ``groups[l - 1]`` reporters at level l, ``ones`` the 1-bits
    of every node in heap order (the root's 0)."""

    groups: np.ndarray
    ones: np.ndarray


@dataclass(frozen=True)
class IntervalEstimate:
    """The last publication's intervals: their first cells, estimated frequencies and their
    variance (over round 2's reporters)."""

    starts: tuple[int, ...]
    frequency: np.ndarray
    variance: np.ndarray


class TreePlanner:
    """The collector's side of an mtsp stream over ``d`` oracle cells: the evaluation's state
    (the window's dissimilarities and publication budgets, the last released tree), the
    decisions and the releases, slot after slot from ``start``; the interface of
    :class:`~mechanisms.local.rounds.RoundPlanner`, with :class:`TreeReports` for round 1."""

    def __init__(self, w: int, E: float, d: int, start: int, split: float = 1.0) -> None:  # noqa: N803
        """A planner whose first slot is ``start``; ``split`` is the evaluation's (a node of the
        partition splits while its estimate exceeds that many interval deviations)."""
        self.protocol, self.w, self.E, self.d = "mtsp", int(w), float(E), int(d)
        self.h = h = tree_height(self.d)
        self.split = float(split)
        self.slot = int(start)
        self.asked = dissimilarity_budget(self.w, self.E)
        _, self.q1 = oue_probabilities(self.asked)
        self.gap1 = (0.5 - self.q1) ** 2
        #: (leaves per node, first node, real nodes) of levels 1..h; each node's group
        self.levels = [(1 << (h - level), (1 << level) - 1, level_cells(self.d, h, level))
                       for level in range(1, h + 1)]
        node_level = node_bounds(np.arange(2 ** (h + 1) - 1), h)[0]
        self.level_group = np.maximum(node_level - 1, 0)
        self.real = real_nodes(h, self.d)
        self.reported = self.real & (node_level > 0)
        # OBA's var(E/(2k)), k = 1..w, as the evaluation computes it
        eps = self.E / (2.0 * np.arange(1, self.w + 1))
        self.oba_top, self.oba_bottom = 4.0 * np.exp(eps), np.square(np.expm1(eps))
        self.window = np.full((1, self.w), np.nan)
        self.spent = np.zeros((1, self.w - 1))
        #: the last released tree (node frequencies over every reporter) and its leaves
        self.tree = np.zeros(2 ** (h + 1) - 1)
        self.last = np.zeros(self.d)
        self.last_variance = np.full(self.d, np.inf)
        self.estimated_at: int | None = None
        #: the last publication's intervals (None before the first)
        self.intervals: IntervalEstimate | None = None
        self._pending: tuple[np.ndarray, np.ndarray, tuple[int, ...], float] | None = None
        self.everyone = ClientLedger(2 * self.w, self.E)

    def decide(self, round1: TreeReports) -> Outcome:
        """Decide :attr:`slot` from its round 1 and charge the window: the outcome's ``eps`` is
        round 2's budget (0: none), ``next`` the next slot's round 1 budget (always asked),
        ``starts`` the partition."""
        groups = np.asarray(round1.groups, dtype=np.int64)
        active = int(groups.sum())
        self.everyone.commit(virtual_slot(self.slot, 1), self.asked)
        remaining = float(self.E / 2.0 - window_totals(self.spent)[0])
        dis = math.nan
        freq = None
        if active:
            freq, var, observed = node_estimates(
                np.asarray(round1.ones, dtype=np.int64)[None], groups[None],
                np.array([active]), np.array([self.q1]), np.array([self.gap1]),
                np.array([self.q1 * (1.0 - self.q1)]), np.array([self.gap1]),
                self.level_group, self.reported, self.levels)
            dis = float(dissimilarities(freq - self.tree[None], var, observed)[0])
        self.window[:, :-1] = self.window[:, 1:]
        self.window[0, -1] = dis
        eps2, starts = 0.0, ()
        if freq is not None:
            eps2, starts = self._allocate(freq, active, remaining)
        if self.spent.shape[1]:
            self.spent[:, :-1] = self.spent[:, 1:]
            self.spent[0, -1] = eps2
        self.slot += 1
        return Outcome(eps2, self.asked, dis, math.nan, starts=starts)

    def _allocate(self, freq: np.ndarray, active: int, remaining: float
                  ) -> tuple[float, tuple[int, ...]]:
        """M2: the partition and OBA's budget, as the evaluation's ``_publish`` takes them."""
        half, exhausted = self.E / 2.0, EXHAUSTED * self.E
        cap = min(half, remaining)
        reference = cap if cap > exhausted else half
        threshold = self.split * np.sqrt(oue_variance(reference, active))
        parts = adaptive_partitions(freq, self.h, self.d, np.array([threshold]))
        factor = variance_factors(parts, self.h)[:, self.real].mean(axis=1)
        variance = self.oba_top / (active * self.oba_bottom) * factor[:, None]
        _, eps2 = oba(self.window, np.ones((1, self.w), dtype=bool), variance,
                      np.array([self.E]), np.array([remaining]), np.array([exhausted]))
        eps = float(eps2[0])
        if eps > 0:
            try:
                self.everyone.commit(virtual_slot(self.slot, 2), eps)
            except ValueError:
                eps = 0.0
        if eps == 0:
            return 0.0, ()
        starts = tuple(np.flatnonzero(parts.starts[0]).tolist())
        self._pending = (parts.labels[0], parts.share[0], starts, eps)
        return eps, starts

    def publish(self, slot: int, reporters: int, ones: np.ndarray) -> None:
        """M3 of ``slot``: round 2's ``reporters`` and 1-bits per interval give the released
        tree (a round nobody answered leaves the last one, charged all the same)."""
        pending, self._pending = self._pending, None
        if pending is None or reporters <= 0:
            return
        labels, share, starts, eps = pending
        p, q = oue_probabilities(eps)
        padded = np.zeros(1 << self.h, dtype=np.int64)
        padded[: len(starts)] = np.asarray(ones, dtype=np.int64)
        self.tree = interval_trees(padded[None], np.array([reporters]), np.array([q]),
                                   labels[None], share[None])[0]
        f = (padded[: len(starts)] - reporters * q) / (reporters * (p - q))
        v = frequency_variance(f, reporters, p, q)
        held = labels[: self.d]
        self.last = self.tree[level_slice(self.h)][: self.d]
        self.last_variance = np.square(share[: self.d]) * v[held]
        self.intervals = IntervalEstimate(starts, f, v)
        self.estimated_at = int(slot)
