"""SPAS (Li et al., PACMMOD 2025) as a homogeneous w-event baseline.

Its paper is not at hand; this follows what public re-implementations agree on, with each
choice made explicit so that the window budget is provably respected (docs/spas.md):

- The budget E is split: eps_s = E/2 drives the sampling decisions, eps_p = E/2 publications.
- c, the predicted number of samples per window, is max(1, floor(eps_p sqrt(3 E_dis) / 6)),
  capped at w, with E_dis the variance of the differences between consecutive samples (fresh
  publications) over the last 2w slots; ``c0`` before two samples are known.
- Sampling decisions are the sparse vector technique (Dwork and Roth's AboveThreshold, as
  analysed by Lyu et al. 2017) on q_t = mean_j |x_t[j] - r_{t-1}[j]|, whose sensitivity is
  Delta = 1/d. An instance lasts until its first positive answer, after which the threshold
  noise is drawn afresh. Each instance gets eps_i = eps_s / (c + 1), split evenly: threshold
  noise rho ~ Lap(Delta / (eps_i/2)), query noise Lap(2 Delta / (eps_i/2)). A query is positive
  when q_t + noise > c / eps_p + rho, c / eps_p being the mean absolute error of a publication
  with budget eps_p / c; a positive query publishes with eps_p / c.
- Accounting, per window of w slots: an instance costs eps_i, charged at the slot of its
  positive answer; a window meets every instance that answers inside it and at most one more,
  the instance still open at its end, whose cost is reserved (``SpasRelease.reserved``). An
  instance is opened only when its cost fits the room left by the previous w - 1 slots, so
  sampling charges plus the reserve never exceed eps_s; publications are made only while they
  fit eps_p. At the last slot of each block of w slots, a publication budget still unused in the
  sliding window is spent on a forced publication (a data-independent decision, no query).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mechanisms.ledgers.recent import RecentSlots, width_groups
from mechanisms.noise.calibrated import draw_noise
from mechanisms.registry import histogram_dtype
from mechanisms.run.mechanism import BatchRelease, HistogramSteps, RunsAlone, first_run

_TOL = 1e-12


@dataclass(frozen=True)
class SpasRelease:
    """One slot of SPAS: the release, the budget every user was charged at this slot, and the
    cost of the sampling instance left open after it (charged when it answers positively)."""

    slot: int
    histogram: np.ndarray
    published: bool
    charged: float
    samples_per_window: int
    reserved: float = 0.0


class Spas(HistogramSteps, RunsAlone):
    """SPAS over the total histogram of all users, under one requirement (w, E).

    ``c0`` is the number of samples per window assumed before two samples are known. A run
    alone is a batch of one (:class:`BatchedSpas`).
    """

    def __init__(
        self,
        w: int,
        E: float,
        d: int,
        rng: np.random.Generator,
        noise: str = "laplace",
        c0: int = 1,
    ) -> None:
        if w < 1 or not E > 0 or not np.isfinite(E) or d < 1:
            raise ValueError(f"SPAS needs w >= 1, finite E > 0 and d >= 1 (w={w}, E={E}, d={d})")
        self.w, self.E, self.d, self.rng, self.noise = int(w), float(E), int(d), rng, noise
        self.c0 = int(min(max(1, c0), self.w))
        self.eps_s = self.eps_p = self.E / 2.0
        self._batch = BatchedSpas([self])

    def step_counts(self, counts: np.ndarray) -> SpasRelease:
        """Release the next slot from the true histogram ``counts`` (d,)."""
        counts = np.asarray(counts)
        if counts.shape != (self.d,):
            raise ValueError(f"SPAS expects a histogram of {self.d} cells, got {counts.shape}")
        out = self._batch.release(counts[None, :])
        return SpasRelease(out.slot, out.histogram[0], bool(out.published[0]),
                           float(out.charged[0]), int(out.samples_per_window[0]),
                           float(out.reserved[0]))


def samples_per_window(slots: np.ndarray, samples: np.ndarray, slot: int, w: int, eps_p: float,
                       c0: int) -> int:
    """c*: from the variance of the differences between consecutive samples (fresh
    publications) of the last 2w slots; ``c0`` before two are known."""
    recent = samples[slots >= slot - 2 * w]
    if recent.shape[0] < 2:
        return c0
    e_dis = float(np.diff(recent, axis=0).var())
    c = int(np.floor(eps_p * np.sqrt(3.0 * e_dis) / 6.0))
    return int(min(max(1, c), w))


@dataclass(frozen=True)
class SpasSlot(BatchRelease):
    """One slot of every run of a batch of SPAS, with each run's accounting (all (runs,))."""

    charged: np.ndarray
    samples_per_window: np.ndarray
    reserved: np.ndarray


class _Spent:
    """Each run's budget spent per slot over its last w slots (column 0: the last slot); a
    run's sum over its previous w - 1 slots runs over exactly w - 1 values, whatever the batch
    (runs are kept in order of w, so each w is a slice)."""

    def __init__(self, w: np.ndarray) -> None:
        self.order, inverse, groups = width_groups(w)
        self.inverse = np.arange(w.size) if inverse is None else inverse
        self.groups = [(lo, hi, width - 1) for lo, hi, width in groups]
        self.recent = RecentSlots(w.size, 1, int(w.max()))

    def previous(self) -> np.ndarray:
        """Per run, the sum over its previous w - 1 slots."""
        view = self.recent.view()[:, 0, :]
        out = np.empty(view.shape[0])
        for lo, hi, k in self.groups:
            out[lo:hi] = view[lo:hi, :k].sum(axis=1)
        return out[self.inverse]

    def push(self, spent: np.ndarray) -> None:
        """Record each run's spending at the slot just finished."""
        self.recent.push(spent[self.order][:, None])


class BatchedSpas:
    """Runs of SPAS (:class:`Spas`) stepped together, each with its (w, E), its generator and
    its state; the budgets, instances and tests are arrays over the runs, and each run draws
    from its own generator what it draws alone. A run's samples per window is recomputed only
    when its samples of the last 2w slots change."""

    def __init__(self, mechanisms: Sequence[Spas]) -> None:
        first = first_run(mechanisms, lambda m: (m.d, m.noise), "domain and noise",
                          fresh=lambda m: not hasattr(m, "_batch") or m.slot == 1)
        self.runs, self.d, self.noise = len(mechanisms), first.d, first.noise
        self.rngs = [m.rng for m in mechanisms]
        self.w = np.array([m.w for m in mechanisms], dtype=np.int64)
        self.eps_s = np.array([m.eps_s for m in mechanisms])
        self.eps_p = np.array([m.eps_p for m in mechanisms])
        self.c0 = [m.c0 for m in mechanisms]
        self.slot = 1
        self.last = np.zeros((self.runs, self.d), dtype=histogram_dtype(self.noise))
        # the open AboveThreshold instance of each run: threshold noise and budgets
        self.open = np.zeros(self.runs, dtype=bool)
        self.rho = np.zeros(self.runs)
        self.eps_threshold = np.zeros(self.runs)
        self.eps_query = np.zeros(self.runs)
        self.published_spent = _Spent(self.w)
        self.query_spent = _Spent(self.w)
        # fresh publications of each run's last 2w slots (slots and histograms), its c*, and
        # the slot from which its samples of the last 2w slots change
        self.sample_slots = [np.zeros(0, dtype=np.int64) for _ in mechanisms]
        self.samples = [np.zeros((0, self.d)) for _ in mechanisms]
        self.c = np.array(self.c0, dtype=np.int64)
        self.changes = np.full(self.runs, np.iinfo(np.int64).max)

    def _update_c(self) -> None:
        for b in np.flatnonzero(self.slot >= self.changes).tolist():
            w, slots = int(self.w[b]), self.sample_slots[b]
            self.c[b] = samples_per_window(slots, self.samples[b], self.slot, w,
                                           float(self.eps_p[b]), self.c0[b])
            recent = slots[slots >= self.slot - 2 * w]
            self.changes[b] = (int(recent.min()) + 2 * w + 1 if recent.size
                               else np.iinfo(np.int64).max)

    def release(self, counts: np.ndarray) -> SpasSlot:
        """Release the next slot of every run from its true histogram, (runs, d)."""
        d, rngs, slot = self.d, self.rngs, self.slot
        self._update_c()
        c = self.c
        share_p = self.eps_p / c
        room_p = self.eps_p - self.published_spent.previous()
        # a query is asked only when a positive answer could be published
        asking = room_p >= share_p - _TOL
        eps_i = self.eps_s / (c + 1)
        opening = asking & ~self.open
        if opening.any():
            opening &= self.query_spent.previous() + eps_i <= self.eps_s + _TOL
            for b in np.flatnonzero(opening).tolist():
                scale = (1.0 / d) / (float(eps_i[b]) / 2.0)
                self.rho[b] = float(rngs[b].laplace(0.0, scale))
            self.eps_threshold = np.where(opening, eps_i / 2.0, self.eps_threshold)
            self.eps_query = np.where(opening, eps_i / 2.0, self.eps_query)
            self.open |= opening
        querying = np.flatnonzero(asking & self.open)
        positive = np.zeros(self.runs, dtype=bool)
        if querying.size:
            q = np.abs(counts[querying] - self.last[querying]).mean(axis=1)
            eps_q = self.eps_query[querying].tolist()
            q += [float(rngs[b].laplace(0.0, 2.0 * (1.0 / d) / e))
                  for b, e in zip(querying.tolist(), eps_q, strict=True)]
            positive[querying] = q > c[querying] / self.eps_p[querying] + self.rho[querying]
        spend_p = np.where(positive, share_p, 0.0)
        spend_q = np.where(positive, self.eps_threshold + self.eps_query, 0.0)
        self.open &= ~positive  # the next query draws a fresh threshold noise
        # at the last slot of each block of w slots, a publication budget still unused
        forced = ~positive & (slot % self.w == 0) & asking
        spend_p = np.where(forced, room_p, spend_p)
        published = spend_p > 0.0
        if published.any():
            self.last = self.last.copy()  # releases already handed out keep their values
            for b in np.flatnonzero(published).tolist():
                self.last[b] = counts[b] + draw_noise(float(spend_p[b]), d, rngs[b], self.noise)
                w = int(self.w[b])
                keep = self.sample_slots[b] > slot - 2 * w  # those needed from the next slot
                self.sample_slots[b] = np.append(self.sample_slots[b][keep], slot)
                self.samples[b] = np.vstack([self.samples[b][keep], self.last[b][None, :]])
            self.changes = np.where(published, slot + 1, self.changes)
        self.published_spent.push(spend_p)
        self.query_spent.push(spend_q)
        reserved = np.where(self.open, self.eps_threshold + self.eps_query, 0.0)
        self.slot += 1
        return SpasSlot(slot, self.last, published, spend_q + spend_p, c.copy(), reserved)

    def step_classes(self, class_counts: Sequence[np.ndarray],
                     classes: Sequence[np.ndarray]) -> SpasSlot:
        """Release the next slot of every run from its reports per (class, cell)."""
        counts = [np.asarray(cc) for cc in class_counts]
        if len({c.shape for c in counts}) == 1:  # sums of integers: exact in any order
            return self.release(np.stack(counts).sum(axis=1))
        return self.release(np.stack([c.sum(axis=0) for c in counts]))

    def step(self, cells: Sequence[np.ndarray]) -> SpasSlot:
        """Release the next slot of every run from its cells (-1: no report)."""
        return self.release(np.stack([np.bincount(np.asarray(c)[np.asarray(c) >= 0],
                                                  minlength=self.d) for c in cells]))
