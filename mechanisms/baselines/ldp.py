"""Local frequency oracles (OUE, GRR) and PLBU, the paper's personalised LDP baseline.

PLBU (papers/000 section 6.2) extends LDP Budget Uniform: every user reports at every slot
through a local frequency oracle with budget E_i/w_i, so any w_i consecutive reports cost E_i.
The server debiases each budget group's reports and combines the groups' frequency estimates
with inverse-variance weights. Reports are simulated on aggregates: for OUE the number of 1-bits
at cell j is Binomial(c_j, 1/2) + Binomial(n - c_j, q), exactly the sum of the users' bits.
Users without a value at a slot send nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mechanisms.kernels import compiled
from mechanisms.requirements import FixedRequirements, class_levels
from mechanisms.run.mechanism import BatchRelease, first_run


def oue_variance(eps: np.ndarray, n: np.ndarray | float = 1.0) -> np.ndarray:
    """Variance of OUE's frequency estimate: 4 e^eps / (n (e^eps - 1)^2) (papers/002 2.3)."""
    eps = np.asarray(eps, dtype=np.float64)
    return 4.0 * np.exp(eps) / (np.asarray(n) * np.square(np.expm1(eps)))


def grr_variance(eps: np.ndarray, d: int, n: np.ndarray | float = 1.0) -> np.ndarray:
    """Variance of generalised randomised response: (e^eps + d - 2) / (n (e^eps - 1)^2)."""
    eps = np.asarray(eps, dtype=np.float64)
    return (np.exp(eps) + d - 2) / (np.asarray(n) * np.square(np.expm1(eps)))


def oue_frequencies(
    counts: np.ndarray, eps: float, rng: np.random.Generator
) -> np.ndarray:
    """Estimated frequencies from OUE reports of users whose true counts are ``counts``."""
    n = int(counts.sum())
    if n == 0:
        return np.zeros(counts.shape)
    q = 1.0 / (np.exp(eps) + 1.0)
    ones = rng.binomial(counts, 0.5) + rng.binomial(n - counts, q)
    return (ones - n * q) / (n * (0.5 - q))


def grr_frequencies(
    counts: np.ndarray, eps: float | np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Estimated frequencies from GRR reports: keep w.p. e^eps/(e^eps+d-1), else another cell.

    ``counts`` is (d,) for one group or (groups, d) with one budget per group.
    """
    c = np.atleast_2d(counts)
    e = np.broadcast_to(np.asarray(eps, dtype=np.float64), (c.shape[0],))
    d = c.shape[1]
    if d == 1:
        out = c / np.maximum(c.sum(axis=1), 1)[:, None]
        return out.reshape(np.shape(counts))
    p = (np.exp(e) / (np.exp(e) + d - 1))[:, None]
    q = (1.0 / (np.exp(e) + d - 1))[:, None]
    kept = rng.binomial(c, p)
    # one other cell takes every moved report of two cells (a one-cell multinomial draws
    # nothing); over more, each cell's moved reports spread over the d - 1 others
    moved = None if d == 2 else rng.multinomial(c - kept, np.full(d - 1, 1.0 / (d - 1)))
    return grr_estimate(c, kept, moved, p, q).reshape(np.shape(counts))


def grr_estimate(counts: np.ndarray, kept: np.ndarray, moved: np.ndarray | None,
                 p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """GRR's unbiased frequencies from the reports each cell kept and, over d > 2 cells, those
    it moved to each other cell ((..., d, d - 1): offset k lands on cell (j + k) mod d; None
    for two cells, where the other cell takes them all). ``p`` and ``q`` are the keep and move
    probabilities, broadcast against the (..., d) counts; a group without users estimates 0."""
    d = counts.shape[-1]
    n = counts.sum(axis=-1, keepdims=True)
    if moved is None:
        landed = (counts - kept)[..., ::-1].astype(np.float64)
    else:
        lead = int(np.prod(counts.shape[:-1], dtype=np.int64))
        target = (np.arange(d)[:, None] + np.arange(1, d)[None, :]) % d
        flat = (np.arange(lead)[:, None, None] * d + target[None, :, :]).ravel()
        landed = np.bincount(flat, weights=moved.reshape(-1), minlength=lead * d
                             ).reshape(counts.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(n > 0, ((kept + landed) / np.maximum(n, 1) - q) / (p - q), 0.0)


def runs_by_groups(groups: Sequence[int]) -> dict[int, np.ndarray]:
    """The runs of a batch by their number of budget groups: {groups: runs}."""
    g = np.asarray(groups, dtype=np.int64)
    return {int(G): np.flatnonzero(g == G) for G in np.unique(g)}


def combine(weights: np.ndarray, freq: np.ndarray, sizes: np.ndarray,
            runs_of: dict[int, np.ndarray]) -> np.ndarray:
    """Each run's estimate (runs, d): its reports times its groups' frequencies (runs,
    groups, d) averaged with ``weights`` (runs, groups), for a run b of G groups
    ``total * (w @ freq[b, :G]) / w.sum()`` with w = weights[b, :G] (zeros without reports).

    The runs of one G are taken together: ``np.matmul`` over their stack makes, run by run,
    the BLAS call the product of a run alone makes (a vector times a C-ordered matrix of the
    same shape), and a row's sum is the sum of that row alone."""
    runs, d = freq.shape[0], freq.shape[2]
    histogram = np.zeros((runs, d))
    totals = sizes.sum(axis=1)  # integers: exact in any order
    for G, members in runs_of.items():
        who = members[totals[members] > 0]
        if who.size:
            w = weights[who, :G]
            product = np.matmul(w[:, None, :], freq[who, :G])[:, 0]
            histogram[who] = totals[who, None] * product / w.sum(axis=1)[:, None]
    return histogram


@dataclass(frozen=True)
class PlbuRelease:
    """One slot of PLBU: the estimate and each group's budget."""

    slot: int
    histogram: np.ndarray
    published: bool
    group_eps: np.ndarray


class Plbu:
    """PLBU over users grouped by their per-slot budget E_i/w_i."""

    def __init__(self, requirements: FixedRequirements, d: int, rng: np.random.Generator):
        self.d, self.rng, self.slot = int(d), rng, 1
        eps = requirements.E / requirements.w
        self.group_eps, self.group_of_user = np.unique(eps, return_inverse=True)
        self.group_of_user = self.group_of_user.reshape(-1).astype(np.int64)
        self.use_grr = grr_variance(self.group_eps, self.d) < oue_variance(self.group_eps)
        self._keys = self.group_of_user * (self.d + 1) + 1
        self._class_map: tuple[np.ndarray, np.ndarray] | None = None
        self._batch = BatchedPlbu([self])  # the estimator, with a batch of one

    @property
    def user_eps(self) -> np.ndarray:
        """Each user's budget per slot."""
        return self.group_eps[self.group_of_user]

    def step(self, cells: np.ndarray) -> PlbuRelease:
        """Estimate the histogram of the users' cells (-1: no value) at the next slot."""
        groups = self.group_eps.shape[0]
        width = self.d + 1
        counts = np.bincount(self._keys + cells, minlength=groups * width)
        return self.step_counts(counts.reshape(groups, width)[:, 1:])

    def step_classes(self, class_counts: np.ndarray, classes: np.ndarray) -> PlbuRelease:
        """Estimate the next slot from reports per (class of users, cell), every user of a
        class being in one budget group (the batched evaluation's count path)."""
        if self._class_map is None or self._class_map[0] is not classes:
            self._class_map = (classes, class_levels(classes, self.group_of_user))
        counts = np.zeros((self.group_eps.shape[0], self.d), dtype=np.int64)
        np.add.at(counts, self._class_map[1], np.asarray(class_counts, dtype=np.int64))
        return self.step_counts(counts)

    def step_counts(self, counts: np.ndarray) -> PlbuRelease:
        """Estimate the next slot from the reports per (budget group, cell)."""
        histogram = self._batch.estimate(np.asarray(counts)[None])[0]
        release = PlbuRelease(self.slot, histogram, True, self.group_eps)
        self.slot += 1
        return release


class BatchedPlbu:
    """Runs of PLBU (:class:`Plbu`) stepped together: the variances
    and weights over the batch, each run's simulated reports drawn from its generator as alone
    (small sets value by value), each run's estimate combined as alone."""

    def __init__(self, mechanisms: Sequence[Plbu]) -> None:
        d = first_run(mechanisms, lambda m: m.d, "domain", fresh=lambda m: m.slot == 1).d
        self.mechanisms = list(mechanisms)
        self.runs, self.d = len(self.mechanisms), d
        self.groups = [m.group_eps.shape[0] for m in self.mechanisms]
        G = max(self.groups)
        self.eps = np.zeros((self.runs, G))
        self.grr = np.zeros((self.runs, G), dtype=bool)
        for b, m in enumerate(self.mechanisms):
            self.eps[b, : self.groups[b]] = m.group_eps
            self.grr[b, : self.groups[b]] = m.use_grr
        e = np.exp(self.eps)
        self._p = e / (e + d - 1)  # GRR: keep the true cell
        self._q = 1.0 / (e + d - 1)
        self._q_oue = 1.0 / (e + 1.0)  # OUE: report 1 for another cell
        self._class_rows: tuple | None = None  # each run's classes' rows, and their key
        self._runs_of = runs_by_groups(self.groups)
        self.slot = 1

    def step(self, cells: Sequence[np.ndarray]) -> BatchRelease:
        """Release the next slot of every run from its cells (-1: no value)."""
        counts = np.zeros((self.runs, self.eps.shape[1], self.d), dtype=np.int64)
        width = self.d + 1
        for b, (m, c) in enumerate(zip(self.mechanisms, cells, strict=True)):
            G = self.groups[b]
            flat = np.bincount(m._keys + np.asarray(c), minlength=G * width)
            counts[b, :G] = flat.reshape(G, width)[:, 1:]
        return self.step_counts(counts)

    def step_classes(self, class_counts: Sequence[np.ndarray],
                     classes: Sequence[np.ndarray]) -> BatchRelease:
        """Release the next slot of every run from its reports per (class, cell)."""
        G = self.eps.shape[1]
        key = tuple(map(id, classes))
        if self._class_rows is None or self._class_rows[0] != key:
            rows = [b * G + class_levels(cls, m.group_of_user)
                    for b, (m, cls) in enumerate(zip(self.mechanisms, classes, strict=True))]
            self._class_rows = (key, list(classes), np.concatenate(rows))
        counts = np.zeros((self.runs * G, self.d), dtype=np.int64)
        what = np.concatenate([np.asarray(cc, dtype=np.int64) for cc in class_counts])
        np.add.at(counts, self._class_rows[2], what)  # sums of integers: exact in any order
        return self.step_counts(counts.reshape(self.runs, G, self.d))

    def step_counts(self, counts: np.ndarray) -> BatchRelease:
        """Release the next slot of every run from its reports per (budget group, cell), a
        (runs, groups, d) array (a padded group counts 0)."""
        histogram = self.estimate(counts)
        slot = self.slot
        self.slot += 1
        return BatchRelease(slot, histogram, np.ones(self.runs, dtype=bool))

    def estimate(self, counts: np.ndarray) -> np.ndarray:
        """Every run's estimate (runs, d) from its reports per (budget group, cell)."""
        d = self.d
        sizes = counts.sum(axis=2)
        kept_n = np.maximum(sizes, 1)
        with np.errstate(divide="ignore", invalid="ignore"):  # padded groups: budget 0, no users
            var = np.where(self.grr, grr_variance(self.eps, d, kept_n),
                           oue_variance(self.eps, kept_n))
        weights = np.where(sizes > 0, 1.0 / var, 0.0)
        live = sizes > 0
        oue, grr = live & ~self.grr, live & self.grr
        ones, kept, moved = self._draw(counts, sizes, oue, grr)
        freq = np.zeros(counts.shape)
        n = sizes[:, :, None]
        with np.errstate(divide="ignore", invalid="ignore"):
            if oue.any():
                q = self._q_oue[:, :, None]
                freq = np.where(oue[:, :, None], (ones - n * q) / (n * (0.5 - q)), freq)
            if grr.any() and d == 1:  # every report stays: the frequency is exact
                freq = np.where(grr[:, :, None], counts / np.maximum(n, 1), freq)
            elif grr.any():
                estimate = grr_estimate(counts, kept, moved, self._p[:, :, None],
                                        self._q[:, :, None])
                freq = np.where(grr[:, :, None], estimate, freq)
        return combine(weights, freq, sizes, self._runs_of)

    def _draw(self, counts: np.ndarray, sizes: np.ndarray, oue: np.ndarray,
              grr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Each run's simulated reports, drawn as alone: the 1-bits of its OUE groups
        (Binomial(c, 1/2) + Binomial(n - c, q) per cell), then the kept reports of its GRR
        groups and, over more than two cells, where the others move (one multinomial per
        cell over the d - 1 other cells): (runs, groups, d) each, and (runs, groups, d, d - 1)
        or None. Compiled for a batch where numba is installed."""
        d = self.d
        if d == 1:
            grr = np.zeros_like(grr)  # GRR over one cell draws nothing
        if compiled.available(self.runs):
            return compiled.plbu_draws([m.rng for m in self.mechanisms], counts, sizes, oue,
                                       self._q_oue, grr, self._p)
        ones = np.zeros(counts.shape, dtype=np.int64)
        kept = np.zeros(counts.shape, dtype=np.int64)
        moved = np.zeros(counts.shape + (d - 1,), dtype=np.int64) if d > 2 else None
        for b, m in enumerate(self.mechanisms):
            rng = m.rng
            groups = np.flatnonzero(oue[b])
            if groups.size:  # every OUE group at once
                c = counts[b, groups]
                ones[b, groups] = rng.binomial(c, 0.5) + rng.binomial(
                    sizes[b, groups][:, None] - c, self._q_oue[b, groups][:, None])
            groups = np.flatnonzero(grr[b])
            if groups.size and moved is not None:
                c = counts[b, groups]
                kept[b, groups] = rng.binomial(c, self._p[b, groups][:, None])
                moved[b, groups] = rng.multinomial(c - kept[b, groups],
                                                   np.full(d - 1, 1.0 / (d - 1)))
            elif groups.size:  # two cells, value by value: a tenth of an array call's cost
                binomial = rng.binomial
                for g, (row, pg) in enumerate(zip(counts[b].tolist(), self._p[b].tolist(),
                                                  strict=True)):
                    if grr[b, g]:
                        kept[b, g] = (binomial(row[0], pg), binomial(row[1], pg))
        return ones, kept, moved
