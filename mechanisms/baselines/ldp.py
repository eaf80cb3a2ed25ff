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

from mechanisms import compiled
from mechanisms.mechanism import BatchRelease, first_run
from mechanisms.requirements import FixedRequirements, class_levels


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
    groups, d = c.shape
    n = c.sum(axis=1)
    if d == 1:
        out = c / np.maximum(n, 1)[:, None]
        return out.reshape(np.shape(counts))
    p = (np.exp(e) / (np.exp(e) + d - 1))[:, None]
    q = (1.0 / (np.exp(e) + d - 1))[:, None]
    kept = rng.binomial(c, p)
    if d == 2:  # one other cell takes every moved report (a one-cell multinomial draws nothing)
        moved = (c - kept)[:, :, None]
    else:
        moved = rng.multinomial(c - kept, np.full(d - 1, 1.0 / (d - 1)))  # (groups, d, d-1)
    # a report moved from cell j by offset k (1..d-1) lands on cell (j + k) mod d
    target = (np.arange(d)[:, None] + np.arange(1, d)[None, :]) % d
    flat = (np.arange(groups)[:, None, None] * d + target[None, :, :]).ravel()
    landed = np.bincount(flat, weights=moved.ravel(), minlength=groups * d).reshape(groups, d)
    safe = np.maximum(n, 1)[:, None]
    out = np.where(n[:, None] > 0, ((kept + landed) / safe - q) / (p - q), 0.0)
    return out.reshape(np.shape(counts))


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
        with np.errstate(divide="ignore"):  # padded groups: budget 0, no users
            var = np.where(self.grr, grr_variance(self.eps, d, kept_n),
                           oue_variance(self.eps, kept_n))
        weights = np.where(sizes > 0, 1.0 / var, 0.0)
        live = sizes > 0
        oue = live & ~self.grr
        # GRR over two cells, the sweep's case: the kept reports are drawn with OUE's, and the
        # estimates of the whole batch computed at once
        fast = self.grr & live if d == 2 else np.zeros(sizes.shape, dtype=bool)
        ones, kept = self._draw(counts, sizes, oue, fast)
        freq = np.zeros(counts.shape)
        if oue.any():
            n = sizes[:, :, None]
            q = self._q_oue[:, :, None]
            with np.errstate(divide="ignore", invalid="ignore"):
                freq = np.where(oue[:, :, None], (ones - n * q) / (n * (0.5 - q)), 0.0)
        if fast.any():
            landed = (counts - kept)[:, :, ::-1].astype(np.float64)  # the other cell's moved
            safe = np.maximum(sizes, 1)[:, :, None]
            p, q = self._p[:, :, None], self._q[:, :, None]
            with np.errstate(divide="ignore", invalid="ignore"):
                freq = np.where(fast[:, :, None], ((kept + landed) / safe - q) / (p - q), freq)
        histogram = np.zeros((self.runs, d))
        for b, m in enumerate(self.mechanisms):
            G = self.groups[b]
            grr = np.flatnonzero(live[b, :G] & m.use_grr) if d != 2 else ()
            if len(grr):  # after the run's OUE draws, as alone
                freq[b, grr] = grr_frequencies(counts[b, grr], m.group_eps[grr], m.rng)
            total = int(sizes[b].sum())
            if total:
                w = weights[b, :G]
                histogram[b] = total * (w @ np.array(freq[b, :G])) / w.sum()
        return histogram

    def _draw(self, counts: np.ndarray, sizes: np.ndarray, oue: np.ndarray,
              fast: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each run's simulated reports, drawn as alone: the 1-bits of its OUE groups
        (Binomial(c, 1/2) + Binomial(n - c, q) per cell) and the kept reports of its two-cell
        GRR groups, (runs, groups, d) each; compiled for a batch where numba is installed."""
        if compiled.available(self.runs):
            return compiled.plbu_draws([m.rng for m in self.mechanisms], counts, sizes, oue,
                                       self._q_oue, fast, self._p)
        ones = np.zeros(counts.shape, dtype=np.int64)
        kept = np.zeros(counts.shape, dtype=np.int64)
        for b, m in enumerate(self.mechanisms):
            rng = m.rng
            groups = np.flatnonzero(oue[b])
            if groups.size:  # every OUE group at once
                c = counts[b, groups]
                ones[b, groups] = rng.binomial(c, 0.5) + rng.binomial(
                    sizes[b, groups][:, None] - c, self._q_oue[b, groups][:, None])
            if fast[b].any():  # value by value: a tenth of an array call's cost
                binomial = rng.binomial
                for g, (row, pg) in enumerate(zip(counts[b].tolist(), self._p[b].tolist(),
                                                  strict=True)):
                    if fast[b, g]:
                        kept[b, g] = (binomial(row[0], pg), binomial(row[1], pg))
        return ones, kept
