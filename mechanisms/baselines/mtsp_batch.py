"""Runs of MTSP-LDP stepped together; a run alone (:class:`~mechanisms.baselines.mtsp_ldp.
MtspLdp`) is a batch of one.

Every deterministic step of a slot is computed for all runs at once over arrays with a leading
run axis: the tree estimates from the simulated reports, the dissimilarities, the thresholds,
the adaptive partitions (level by level), their variance factors, OBA over each run's window
(windows of different lengths padded) and the released trees. Only the draws stay per run:
each run draws from its own generator, in this order, per level a multivariate hypergeometric
group and the two OUE binomials of its reports, then the two binomials of a publication.

A run's releases do not depend on the batch it is in: every floating-point operation is
elementwise or over a row of the run's own length (a mean over a variable number of nodes is
taken over the runs sharing that number), and the remaining budgets are sums left to right
(:func:`window_totals`). They are those of the one-tree functions of
:mod:`~mechanisms.baselines.private_tree` and :func:`~mechanisms.baselines.mtsp_ldp.allocate`
applied run by run, which the tests check bit for bit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from mechanisms.baselines.ldp import oue_variance
from mechanisms.baselines.private_tree import build_tree, level_slice, node_bounds, real_nodes
from mechanisms.run.mechanism import BatchRelease, first_run


class MtspRun(Protocol):
    """What the batch reads of a run (:class:`~mechanisms.baselines.mtsp_ldp.MtspLdp`)."""

    w: int
    E: float
    n: int
    d: int
    h: int
    split: float
    slot: int
    rng: np.random.Generator

EXHAUSTED = 1e-12  # remaining budget at or below this fraction of E counts as none


def window_totals(values: np.ndarray) -> np.ndarray:
    """Each row's sum, left to right (a row padded with zeros in front sums as the row alone:
    that is how windows of different lengths share one array)."""
    values = np.asarray(values, dtype=np.float64)
    if not values.shape[1]:
        return np.zeros(values.shape[0])
    return np.cumsum(values, axis=1)[:, -1]


@dataclass(frozen=True)
class _Layout:
    """What a tree of height h over d cells looks like, node by node and leaf by leaf."""

    level: np.ndarray  # each node's level
    first: np.ndarray  # each node's first leaf
    real: np.ndarray  # the nodes covering a cell of [0, d)
    ancestors: np.ndarray  # (h + 1, leaves): each leaf's node at every level
    cell: np.ndarray  # 1.0 at the leaves of [0, d), 0.0 in the padding


@lru_cache(maxsize=64)
def _layout(h: int, d: int) -> _Layout:
    level, first, _ = node_bounds(np.arange(2 ** (h + 1) - 1), h)
    leaf = np.arange(2**h)
    ancestors = (2 ** np.arange(h + 1) - 1)[:, None] + (
        leaf[None, :] >> (h - np.arange(h + 1))[:, None])
    return _Layout(level, first, real_nodes(h, d), ancestors, (leaf < d).astype(np.float64))


@dataclass(frozen=True)
class Partitions:
    """The adaptive partitions of a batch of runs, leaf by leaf ((runs, 2**h) arrays).

    ``labels`` are the positions of the leaves' intervals in each run's intervals ordered left
    to right (-1 for padding no interval holds), ``share`` the leaves' shares of their interval,
    ``level`` the level of the interval holding each leaf (0 where none does), ``starts`` marks
    the first leaf of every interval and ``count`` is each run's number of intervals: as
    :class:`~mechanisms.baselines.private_tree.Partition` gives them run by run.
    """

    labels: np.ndarray
    share: np.ndarray
    level: np.ndarray
    starts: np.ndarray
    count: np.ndarray


def adaptive_partitions(freq: np.ndarray, h: int, d: int, threshold: np.ndarray) -> Partitions:
    """:func:`~mechanisms.baselines.private_tree.adaptive_partition` of every run: ``freq`` is
    (runs, nodes), ``threshold`` (runs,)."""
    freq = np.asarray(freq, dtype=np.float64)
    runs, leaves = freq.shape[0], 2**h
    layout = _layout(h, d)
    real = layout.real
    chosen = np.zeros(freq.shape, dtype=bool)
    reached = np.ones((runs, 1), dtype=bool)  # every ancestor split
    limit = np.asarray(threshold, dtype=np.float64)[:, None]
    for level in range(h + 1):
        nodes = level_slice(level)
        reached = reached & real[nodes]
        if level == h:
            chosen[:, nodes] = reached
            break
        split = freq[:, nodes] > limit
        chosen[:, nodes] = reached & ~split
        reached = np.repeat(reached & split, 2, axis=1)
    leaf = np.arange(leaves)
    ancestors = layout.ancestors
    covers = chosen[:, ancestors]  # (runs, h + 1, leaves): the chosen ancestor of each leaf
    held = covers.any(axis=1)
    level = np.where(held, np.argmax(covers, axis=1), 0)
    owner = ancestors[level, leaf[None, :]]
    starts = held & (layout.first[owner] == leaf[None, :])
    labels = np.where(held, np.cumsum(starts, axis=1) - 1, -1)
    cell = layout.cell
    weight = np.clip(freq[:, level_slice(h)], 0.0, None) * cell
    flat = (np.arange(runs)[:, None] * leaves + labels)[held]
    total = np.bincount(flat, weights=weight[held], minlength=runs * leaves)[flat]
    cells = np.bincount(flat, weights=np.broadcast_to(cell, held.shape)[held],
                        minlength=runs * leaves)[flat]
    share = np.zeros(freq.shape[:1] + (leaves,))
    share[held] = np.where(total > 0, weight[held] / np.where(total > 0, total, 1.0),
                           np.broadcast_to(cell, held.shape)[held] / cells)
    return Partitions(labels, share, level, starts, starts.sum(axis=1))


def variance_factors(parts: Partitions, h: int) -> np.ndarray:
    """:func:`~mechanisms.baselines.private_tree.variance_factors` of every run, (runs, nodes)."""
    layout = _layout(h, max(1, parts.share.shape[1]))  # the nodes' bounds do not depend on d
    inside = parts.level[:, layout.first] <= layout.level
    return np.where(inside, np.square(build_tree(parts.share)),
                    build_tree(parts.starts.astype(np.float64)))


def node_estimates(ones: np.ndarray, groups: np.ndarray, active: np.ndarray, q: np.ndarray,
                   gap: np.ndarray, top: np.ndarray, bottom: np.ndarray,
                   level_group: np.ndarray, reported: np.ndarray,
                   levels: Sequence[tuple[int, int, int]]
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """M1's node estimates of runs from their reports: ``ones`` (runs, nodes) the 1-bits per
    node, ``groups`` (runs, h) the reporters of each level, ``active`` (runs,) all of them;
    per run OUE's ``q``, ``gap`` = (1/2 - q)^2 and the variance's ``top``/``bottom``
    (a = top/(m bottom)); ``level_group`` the group of each node (the root: level 1's),
    ``reported`` the real nodes below the root, ``levels`` (leaves per node, first node, real
    nodes) of levels 1..h. Returns the estimates, their variance estimates and the observed
    nodes (:func:`~mechanisms.baselines.private_tree.estimate_tree`)."""
    q, gap = np.asarray(q)[:, None], np.asarray(gap)[:, None]
    top, bottom = np.asarray(top)[:, None], np.asarray(bottom)[:, None]
    total = np.asarray(active)[:, None]
    m = groups[:, level_group]
    has = m > 0
    ms = np.where(has, m, 1)
    f = (ones - ms * q) / (ms * (0.5 - q))
    a = top / (ms * bottom)
    b = (0.25 - q * (1.0 - q)) / (ms * gap)
    c = np.where(total > 1, (total - ms) / (ms * np.maximum(total - 1, 1)), 0.0)
    observed = has & (c < 1.0) & reported
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = (a + b * f + c * (f - f * f)) / (1.0 - c)
    var = np.where(observed, estimate, 0.0)
    observed[:, 0] = True
    freq = np.where(has & reported, f, 0.0)
    freq[:, 0] = 1.0
    if not has.all():  # a level nobody reports takes its parent's estimate halved
        for level, (_, start, real) in enumerate(levels, start=1):
            nodes = slice(start, start + real)
            parent = np.repeat(freq[:, level_slice(level - 1)] / 2.0, 2, axis=1)[:, :real]
            freq[:, nodes] = np.where(has[:, start : start + 1], freq[:, nodes], parent)
    return freq, var, observed


def dissimilarities(diff: np.ndarray, var: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """Each run's mean over its observed nodes of diff^2 - var (M1's dissimilarity), taken over
    the runs with the same number of observed nodes at once (a mean over a row of that
    length)."""
    gap = np.square(diff) - var
    sizes = observed.sum(axis=1)
    out = np.empty(diff.shape[0])
    for size in sorted(set(sizes.tolist())):
        same = sizes == size
        out[same] = gap[same][observed[same]].reshape(-1, size).mean(axis=1)
    return out


def oba(window: np.ndarray, in_window: np.ndarray, variance: np.ndarray, E: np.ndarray,
        remaining: np.ndarray, exhausted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OBA of runs (:func:`~mechanisms.baselines.mtsp_ldp.allocate`): ``window`` (runs, W) the
    last W dissimilarities, the current last, NaN before a run's window or where nobody held a
    value; ``in_window`` (runs, W) the k = 1..W within each run's w; ``variance`` (runs, W) the
    publication error at E/(2k). Returns k* and eps2 (0: approximate)."""
    R, W = window.shape
    k = np.arange(1, W + 1)
    missing = np.isnan(window)
    # tail[k] sums the dissimilarities ranked below k, from the smallest up (padding: zeros)
    ordered = np.sort(np.where(missing, -np.inf, window), axis=1)
    ordered[np.arange(W)[None, :] < missing.sum(axis=1)[:, None]] = 0.0
    tail = np.concatenate([np.cumsum(ordered, axis=1)[:, ::-1], np.zeros((R, 1))], axis=1)
    errors = np.empty((R, W + 1))
    errors[:, 0] = tail[:, 0]
    errors[:, 1:] = np.where(in_window, k * variance + tail[:, 1:], np.inf)
    best = np.argmin(errors, axis=1)
    among = np.count_nonzero(window[:, :-1] > window[:, -1:], axis=1) < best
    go = (best > 0) & among & ~(remaining <= exhausted)
    eps2 = np.where(go, np.minimum(E / (2.0 * np.maximum(best, 1)), remaining), 0.0)
    return best, eps2


def interval_trees(ones: np.ndarray, active: np.ndarray, q: np.ndarray, labels: np.ndarray,
                   share: np.ndarray) -> np.ndarray:
    """M3's released trees from each run's 1-bits per interval ``ones`` (runs, leaves), its
    reporters ``active`` and OUE's ``q``: each leaf takes its ``share`` of its interval's
    estimate (``labels``: -1 where no interval holds it), every other node sums its leaves
    (:func:`~mechanisms.baselines.private_tree.publish_tree`)."""
    held = labels >= 0
    n, q = np.asarray(active)[:, None], np.asarray(q)[:, None]
    f = (ones - n * q) / (n * (0.5 - q))
    spread = share * np.take_along_axis(f, np.where(held, labels, 0), axis=1)
    return build_tree(np.where(held, spread, 0.0))


@dataclass(frozen=True)
class MtspSlot(BatchRelease):
    """One slot of every run: besides the histograms, each run's publication budget ``eps2``,
    ``dissimilarity`` (NaN where nobody held a value), OBA's ``k``, the number of users holding
    a value (``active``), the released trees (``trees``, (runs, nodes) frequencies) and the
    size of each run's partition (``intervals``, 0 where nobody held a value)."""

    eps2: np.ndarray
    dissimilarity: np.ndarray
    k: np.ndarray
    active: np.ndarray
    trees: np.ndarray
    intervals: np.ndarray


class BatchedMtsp:
    """Fresh runs of :class:`~mechanisms.baselines.mtsp_ldp.MtspLdp` over the same users and
    cells (each with its w, E, split and generator) stepped by one call per slot (module doc);
    it holds their state."""

    def __init__(self, mechanisms: Sequence[MtspRun]) -> None:
        first = first_run(mechanisms, lambda m: (m.n, m.d), "number of users and domain",
                          fresh=lambda m: m.slot == 1)
        self.mechanisms = list(mechanisms)
        self.runs, self.n, self.d, self.h = len(self.mechanisms), first.n, first.d, first.h
        self.rngs = [m.rng for m in self.mechanisms]
        self.w = np.array([m.w for m in self.mechanisms], dtype=np.int64)
        self.E = np.array([m.E for m in self.mechanisms])
        self.split = np.array([m.split for m in self.mechanisms])
        self.half = self.E / 2.0
        self.exhausted = EXHAUSTED * self.E
        W = int(self.w.max())
        # M1 with eps1 = E/(2w): OUE's q, (p - q)^2 and the pieces of its variance, per run,
        # computed as a run alone computes them
        eps1 = [m.E / (2.0 * m.w) for m in self.mechanisms]
        self.q1 = np.array([1.0 / (np.exp(e) + 1.0) for e in eps1])
        self.gap1 = np.square(0.5 - self.q1)
        self.var1_top = np.array([float(4.0 * np.exp(np.asarray(e, dtype=np.float64)))
                                  for e in eps1])
        self.var1_bottom = np.array([float(np.square(np.expm1(np.asarray(e, dtype=np.float64))))
                                     for e in eps1])
        # OBA: the pieces of var(E/(2k)), k = 1..w, of each run (1 beyond its w, masked)
        self.k = np.arange(1, W + 1)
        self.in_window = self.k[None, :] <= self.w[:, None]
        self.oba_top = np.ones((self.runs, W))
        self.oba_bottom = np.ones((self.runs, W))
        for b, m in enumerate(self.mechanisms):
            eps = m.E / (2.0 * np.arange(1, m.w + 1))
            self.oba_top[b, : m.w] = 4.0 * np.exp(eps)
            self.oba_bottom[b, : m.w] = np.square(np.expm1(eps))
        # the last w dissimilarities (NaN: none) and the last w - 1 eps2 of each run, oldest
        # first, right-aligned: what lies before a run's window stays NaN and 0
        self.recent = self.k[None, :] > W - self.w[:, None]
        self.window = np.full((self.runs, W), np.nan)
        self.spent = np.zeros((self.runs, W - 1))
        self.last = np.zeros((self.runs, 2 ** (self.h + 1) - 1))
        self.real = real_nodes(self.h, self.d)
        # M1's levels below the root: (leaves per node, first node, real nodes); each node's
        # group (its level's, the root taking level 1's) and the real nodes below the root
        h = self.h
        self.levels = [(2 ** (h - level), 2**level - 1, -(-self.d // 2 ** (h - level)))
                       for level in range(1, h + 1)]
        node_level = _layout(h, self.d).level
        self.level_group = np.maximum(node_level - 1, 0)
        self.reported = self.real & (node_level > 0)
        self.slot = 1

    def step(self, cells: Sequence[np.ndarray] | np.ndarray) -> MtspSlot:
        """Release the next slot of every run from its cells, (runs, users) (-1: no value)."""
        cells = np.asarray(cells)
        if cells.shape != (self.runs, self.n) or cells.dtype.kind not in "iu":
            raise ValueError(f"expected {self.runs} runs of {self.n} integer cells, got "
                             f"{cells.dtype} {cells.shape}")
        if cells.min() < -1 or cells.max() >= self.d:
            raise ValueError(f"cells must lie in [0, {self.d}) or be -1 (no value)")
        width = self.d + 1
        flat = cells.astype(np.int64) + 1 + (np.arange(self.runs) * width)[:, None]
        table = np.bincount(flat.ravel(), minlength=self.runs * width)
        return self.step_counts(table.reshape(self.runs, width)[:, 1:])

    def step_classes(self, class_counts: Sequence[np.ndarray],
                     classes: Sequence[np.ndarray]) -> MtspSlot:
        """Release the next slot of every run from its reports per (class, cell)."""
        return self.step_counts(np.stack([np.asarray(cc).sum(axis=0) for cc in class_counts]))

    def step_counts(self, counts: np.ndarray) -> MtspSlot:
        """Release the next slot of every run from the number of users holding each cell,
        (runs, d)."""
        counts = np.asarray(counts)
        if (counts.shape != (self.runs, self.d) or counts.dtype.kind not in "iu"
                or counts.min() < 0):
            raise ValueError(f"expected {self.runs} runs of {self.d} counts of users >= 0, got "
                             f"{counts.dtype} {counts.shape}")
        counts = counts.astype(np.int64, copy=False)
        t = self.slot
        self.slot += 1
        active = counts.sum(axis=1)
        remaining = self.half - window_totals(self.spent)
        rows = np.flatnonzero(active > 0)
        dis = np.full(self.runs, np.nan)
        freq = var = observed = None
        if rows.size:
            freq, var, observed = self._estimate(rows, counts[rows], active[rows])
            dis[rows] = dissimilarities(freq - self.last[rows], var, observed)
        self.window[:, :-1] = self.window[:, 1:]
        self.window[:, -1] = dis
        self.window[~self.recent] = np.nan
        eps2 = np.zeros(self.runs)
        k = np.zeros(self.runs, dtype=np.int64)
        intervals = np.zeros(self.runs, dtype=np.int64)
        if rows.size:
            k[rows], eps2[rows], intervals[rows] = self._publish(rows, counts[rows], active[rows],
                                                remaining[rows], freq)
        if self.spent.shape[1]:
            self.spent[:, :-1] = self.spent[:, 1:]
            self.spent[:, -1] = eps2
            self.spent[~self.recent[:, :-1]] = 0.0
        leaves = level_slice(self.h)
        histogram = self.last[:, leaves.start : leaves.start + self.d] * active[:, None]
        histogram[active == 0] = 0.0  # as alone: zeros, whatever the last tree holds
        return MtspSlot(t, histogram, eps2 > 0, eps2, dis, k, active, self.last, intervals)

    def _estimate(self, rows: np.ndarray, counts: np.ndarray, active: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """M1 of the runs ``rows`` (all with users): every run's reports drawn as alone, then
        the node estimates, their variance estimates and which nodes are observed
        (:func:`~mechanisms.baselines.private_tree.estimate_tree`)."""
        h, d, R = self.h, self.d, rows.size
        leaves = 2**h
        padded = np.zeros((R, leaves), dtype=np.int64)
        padded[:, :d] = counts
        groups = active[:, None] // h + (np.arange(h)[None, :] < active[:, None] % h)
        levels = self.levels
        ones = np.zeros((R, 2 ** (h + 1) - 1), dtype=np.int64)
        sizes = groups.tolist()
        for i, b in enumerate(rows.tolist()):
            rng, q, remaining = self.rngs[b], self.q1[b], padded[i]
            hypergeometric, binomial = rng.multivariate_hypergeometric, rng.binomial
            for (width, start, real), m in zip(levels, sizes[i], strict=True):
                if m == 0:  # as every later level: nobody reports
                    break
                group = hypergeometric(remaining, m)
                remaining = remaining - group
                c = group.reshape(-1, width).sum(axis=1)[:real]
                ones[i, start : start + real] = binomial(c, 0.5) + binomial(m - c, q)
        return node_estimates(ones, groups, active, self.q1[rows], self.gap1[rows],
                              self.var1_top[rows], self.var1_bottom[rows], self.level_group,
                              self.reported, levels)

    def _publish(self, rows: np.ndarray, counts: np.ndarray, active: np.ndarray,
                 remaining: np.ndarray, freq: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """M2 and M3 of the runs ``rows``: the thresholds, partitions and OBA of every run, then
        each publishing run's OUE round over its intervals. Returns k*, eps2 and the number of
        intervals."""
        half, exhausted = self.half[rows], self.exhausted[rows]
        cap = np.minimum(half, remaining)
        reference = np.where(cap > exhausted, cap, half)
        threshold = self.split[rows] * np.sqrt(oue_variance(reference, active))
        parts = adaptive_partitions(freq, self.h, self.d, threshold)
        factor = variance_factors(parts, self.h)[:, self.real].mean(axis=1)
        variance = self.oba_top[rows] / (active[:, None] * self.oba_bottom[rows]) * factor[:, None]
        best, eps2 = oba(self.window[rows], self.in_window[rows], variance, self.E[rows],
                         remaining, exhausted)
        publishing = np.flatnonzero(eps2 > 0)
        if publishing.size:
            self._release(rows[publishing], counts[publishing], active[publishing],
                          eps2[publishing], parts, publishing)
        return best, eps2, parts.count

    def _release(self, rows: np.ndarray, counts: np.ndarray, active: np.ndarray,
                 eps2: np.ndarray, parts: Partitions, which: np.ndarray) -> None:
        """One OUE round over the intervals of each of the runs ``rows`` (their partitions are
        ``which`` in ``parts``); their released trees replace their last ones
        (:func:`~mechanisms.baselines.private_tree.publish_tree`)."""
        h, d, P = self.h, self.d, rows.size
        leaves = 2**h
        labels, share = parts.labels[which], parts.share[which]
        held = labels >= 0
        padded = np.zeros((P, leaves), dtype=np.int64)
        padded[:, :d] = counts
        flat = (np.arange(P)[:, None] * leaves + labels)[held]
        interval_counts = np.bincount(flat, weights=padded[held], minlength=P * leaves).reshape(
            P, leaves).astype(np.int64)
        q = 1.0 / (np.exp(eps2) + 1.0)
        ones = np.zeros((P, leaves), dtype=np.int64)
        sizes = parts.count[which].tolist()
        for i, (b, size) in enumerate(zip(rows.tolist(), sizes, strict=True)):
            rng, c = self.rngs[b], interval_counts[i, :size]
            ones[i, :size] = rng.binomial(c, 0.5) + rng.binomial(int(c.sum()) - c, q[i])
        self.last = self.last.copy()  # trees already handed out keep their values
        self.last[rows] = interval_trees(ones, active, q, labels, share)
