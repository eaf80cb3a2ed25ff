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

from dataclasses import dataclass

import numpy as np

from mechanisms.noise import draw_noise
from mechanisms.registry import histogram_dtype
from mechanisms.windows import WindowSum

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


@dataclass(frozen=True)
class _Instance:
    """One AboveThreshold instance: its threshold noise and budgets (threshold, queries)."""

    rho: float
    eps_threshold: float
    eps_query: float

    @property
    def cost(self) -> float:
        return self.eps_threshold + self.eps_query


class Spas:
    """SPAS over the total histogram of all users, under one requirement (w, E).

    ``c0`` is the number of samples per window assumed before two samples are known.
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
        self.slot = 1
        self.instance: _Instance | None = None
        self.published_budget = WindowSum(self.w)
        self.query_budget = WindowSum(self.w)
        dtype = histogram_dtype(noise)
        self.last = np.zeros(self.d, dtype=dtype)
        # fresh publications of the last 2w slots: their slots and histograms
        self.sample_slots = np.zeros(0, dtype=np.int64)
        self.samples = np.zeros((0, self.d))

    def samples_per_window(self) -> int:
        """c*: from the variance of the differences between consecutive samples."""
        recent = self.samples[self.sample_slots >= self.slot - 2 * self.w]
        if recent.shape[0] < 2:
            return self.c0
        e_dis = float(np.diff(recent, axis=0).var())
        c = int(np.floor(self.eps_p * np.sqrt(3.0 * e_dis) / 6.0))
        return int(min(max(1, c), self.w))

    def _open(self, c: int) -> _Instance | None:
        """The open instance, or a new one if its cost fits the sampling room (else None)."""
        if self.instance is None:
            eps_i = self.eps_s / (c + 1)
            if self.query_budget.previous(self.w - 1) + eps_i <= self.eps_s + _TOL:
                scale = (1.0 / self.d) / (eps_i / 2.0)
                rho = float(self.rng.laplace(0.0, scale))
                self.instance = _Instance(rho, eps_i / 2.0, eps_i / 2.0)
        return self.instance

    def step(self, cells: np.ndarray) -> SpasRelease:
        """Release the next slot from one cell per user (-1: no report)."""
        cells = np.asarray(cells)
        return self.step_counts(np.bincount(cells[cells >= 0], minlength=self.d))

    def step_classes(self, class_counts: np.ndarray, classes: np.ndarray) -> SpasRelease:
        """Release the next slot from reports per (class of users, cell): SPAS needs only
        their total (the batched evaluation's count path)."""
        return self.step_counts(np.asarray(class_counts).sum(axis=0))

    def step_counts(self, counts: np.ndarray) -> SpasRelease:
        """Release the next slot from the true histogram ``counts`` (d,)."""
        counts = np.asarray(counts)
        if counts.shape != (self.d,):
            raise ValueError(f"SPAS expects a histogram of {self.d} cells, got {counts.shape}")
        c = self.samples_per_window()
        share_p = self.eps_p / c
        room_p = self.eps_p - self.published_budget.previous(self.w - 1)
        spend_p = spend_q = 0.0
        # a query is asked only when a positive answer could be published
        if room_p >= share_p - _TOL and (inst := self._open(c)) is not None:
            q = float(np.abs(counts - self.last).mean())
            q += float(self.rng.laplace(0.0, 2.0 * (1.0 / self.d) / inst.eps_query))
            if q > c / self.eps_p + inst.rho:
                spend_p, spend_q = share_p, inst.cost
                self.instance = None  # the next query draws a fresh threshold noise
        if spend_p == 0.0 and self.slot % self.w == 0 and room_p >= share_p - _TOL:
            spend_p = room_p
        published = spend_p > 0.0
        if published:
            self.last = counts + draw_noise(spend_p, self.d, self.rng, self.noise)
            keep = self.sample_slots > self.slot - 2 * self.w  # those needed from the next slot on
            self.sample_slots = np.append(self.sample_slots[keep], self.slot)
            self.samples = np.vstack([self.samples[keep], self.last[None, :]])
        self.published_budget.push(spend_p)
        self.query_budget.push(spend_q)
        reserved = 0.0 if self.instance is None else self.instance.cost
        release = SpasRelease(self.slot, self.last, published, spend_q + spend_p, c, reserved)
        self.slot += 1
        return release
