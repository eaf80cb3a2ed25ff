"""SPAS (Li et al., PACMMOD 2025) as a homogeneous w-event baseline.

Its paper is not at hand; this follows what public re-implementations agree on, with each
choice made explicit so that the window budget is provably respected:

- The budget E is split: eps_s = E/2 drives the sampling decisions, eps_p = E/2 publications.
- Sampling decisions are a sparse-vector test on q_t = mean_j |x_t[j] - r_{t-1}[j]|, whose
  sensitivity is 1/d. The threshold noise rho ~ Lap((1/d) / (eps_s/2)) is drawn once; each
  query gets Lap(2 c (1/d) / (eps_s/2)). A query fires when q_t + noise > c/eps_p + rho,
  c/eps_p being the mean absolute error of a publication with budget eps_p/c.
- c, the predicted number of samples per window, is max(1, floor(eps_p sqrt(3 E_dis) / 6)),
  capped at w, with E_dis the variance of consecutive released differences over the last 2w
  slots (count sensitivity 1).
- Accounting, per slot and per window of w slots: the threshold noise costs eps_s/2 once per
  window, charged as eps_s/(2w) at every slot; each firing query costs (eps_s/2)/c and is only
  asked while the window's query shares leave room for it; each publication spends eps_p/c and
  is only made while the window's publications leave room for it. At the last slot of each
  block of w slots, a publication budget still unused in the sliding window is spent on a
  forced publication (a data-independent decision, no query cost).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mechanisms.noise import draw_noise
from mechanisms.windows import WindowSum

_TOL = 1e-12


@dataclass(frozen=True)
class SpasRelease:
    """One slot of SPAS: the release and the budget every user was charged."""

    slot: int
    histogram: np.ndarray
    published: bool
    charged: float
    samples_per_window: int


class Spas:
    """SPAS over the total histogram of all users, under one requirement (w, E)."""

    def __init__(
        self, w: int, E: float, d: int, rng: np.random.Generator, noise: str = "laplace"
    ) -> None:
        if w < 1 or not E > 0 or not np.isfinite(E) or d < 1:
            raise ValueError(f"SPAS needs w >= 1, finite E > 0 and d >= 1 (w={w}, E={E}, d={d})")
        self.w, self.E, self.d, self.rng, self.noise = int(w), float(E), int(d), rng, noise
        self.eps_s = self.eps_p = self.E / 2.0
        self.slot = 1
        self.rho: float | None = None
        self.published_budget = WindowSum(self.w)
        self.query_budget = WindowSum(self.w)
        dtype = np.float64 if noise == "laplace" else np.int64
        self.last = np.zeros(self.d, dtype=dtype)
        self.recent = np.zeros((0, self.d))

    def samples_per_window(self) -> int:
        """c*: from the variance of consecutive released differences over the last 2w slots."""
        if self.recent.shape[0] < 2:
            return 1
        e_dis = float(np.diff(self.recent, axis=0).var())
        c = int(np.floor(self.eps_p * np.sqrt(3.0 * e_dis) / 6.0))
        return int(min(max(1, c), self.w))

    def step(self, counts: np.ndarray) -> SpasRelease:
        """Release the next slot from the true histogram ``counts`` (d,)."""
        counts = np.asarray(counts)
        if counts.shape != (self.d,):
            raise ValueError(f"SPAS expects a histogram of {self.d} cells, got {counts.shape}")
        dq = 1.0 / self.d
        if self.rho is None:
            self.rho = float(self.rng.laplace(0.0, dq / (self.eps_s / 2.0)))
        c = self.samples_per_window()
        share_p, share_q = self.eps_p / c, (self.eps_s / 2.0) / c
        room_p = self.eps_p - self.published_budget.previous(self.w - 1)
        room_q = self.eps_s / 2.0 - self.query_budget.previous(self.w - 1)
        spend_p = spend_q = 0.0
        if room_p >= share_p - _TOL and room_q >= share_q - _TOL:
            spend_q = share_q
            q = float(np.abs(counts - self.last).mean())
            q += float(self.rng.laplace(0.0, 2.0 * c * dq / (self.eps_s / 2.0)))
            if q > c / self.eps_p + self.rho:
                spend_p = share_p
            else:
                spend_q = 0.0  # a query that does not fire costs nothing beyond the threshold
        if spend_p == 0.0 and self.slot % self.w == 0 and room_p >= share_p - _TOL:
            spend_p = room_p
        published = spend_p > 0.0
        if published:
            self.last = counts + draw_noise(spend_p, self.d, self.rng, self.noise)
        self.published_budget.push(spend_p)
        self.query_budget.push(spend_q)
        self.recent = np.vstack([self.recent, self.last[None, :]])[-2 * self.w :]
        charged = self.eps_s / (2.0 * self.w) + spend_q + spend_p
        release = SpasRelease(self.slot, self.last, published, charged, c)
        self.slot += 1
        return release
