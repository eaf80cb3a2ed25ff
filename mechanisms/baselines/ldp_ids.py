"""The w-event local-DP baselines of papers/002 (section 2.6): LBU, LSP, LBD, LBA and their
population-division versions LPU, LPD, LPA.

They are homogeneous: one window ``w`` and budget ``E`` for every user (the evaluation gives them
the strictest requirement, as it does BD, BA and SPAS). Each is the split of docs/design.md: a
budget ledger of :mod:`mechanisms.ledgers.fixed` with a single level, and a local release rule.

- Budget division (LBU, LSP, LBD, LBA): a collection *round* asks every user holding a value to
  report with the round's budget through OUE (papers/002 2.3). The ledger is that of Uniform,
  Sample, BD and BA with budget E, so in any w consecutive slots a user's rounds cost at most E.
- Population division (LPU, LPD, LPA): a round asks a random subset of users, each reporting
  with the whole budget E. The same ledgers run over a *population budget* of n users: what they
  would charge in budget they charge here in users (rounded down), and a user takes part in at
  most one round in any w consecutive slots (the ledger keeps every window's users within n;
  users who took part in the last w - 1 slots are not asked).

The adaptive ones (LBD, LBA, LPD, LPA) first run a dissimilarity round (budget E/(2w), or
n/(2w) users) estimating the current frequencies f: dis = mean_j (f_j - r_j)^2 - Var(f_j), an
unbiased estimate of the mean squared distance to the last released frequencies r. A
publication round of budget eps2 (or m2 users) is run when dis > Var(eps2, m2), the variance its
estimate would have; otherwise r is released again. Frequencies are released as counts
(frequency times the number of users holding a value at the slot).

Reports are simulated on aggregates: over m reporters the number of 1-bits at cell j is
Binomial(c_j, 1/2) + Binomial(m - c_j, q), exactly the sum of their perturbed bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mechanisms.baselines.ldp import oue_frequencies, oue_variance
from mechanisms.ledgers.fixed import (
    AbsorptionLedger,
    BudgetLedger,
    DistributionLedger,
    SampleLedger,
    UniformLedger,
)

BUDGET_DIVISION = ("lbu", "lsp", "lbd", "lba")
POPULATION_DIVISION = ("lpu", "lpd", "lpa")
LDP_IDS = (*BUDGET_DIVISION, *POPULATION_DIVISION)
_LEDGERS: dict[str, type[BudgetLedger]] = {
    "lbu": UniformLedger,
    "lsp": SampleLedger,
    "lbd": DistributionLedger,
    "lba": AbsorptionLedger,
    "lpu": UniformLedger,
    "lpd": DistributionLedger,
    "lpa": AbsorptionLedger,
}


@dataclass(frozen=True)
class LdpRelease:
    """One slot: the released counts and what the slot's rounds used.

    ``eps1``/``eps2`` are the budgets every user spent in the dissimilarity and publication
    rounds (budget division; 0 when a round did not run). ``round1``/``round2`` are the users
    asked in each round (population division; empty otherwise). ``published`` says whether a
    fresh estimate was released: a publication round in which nobody held a value is charged
    but releases the last estimate again. ``dissimilarity`` and
    ``threshold`` are the test's two sides (None when the mechanism does not test).
    """

    slot: int
    histogram: np.ndarray
    published: bool
    nullified: bool
    eps1: float
    eps2: float
    round1: np.ndarray
    round2: np.ndarray
    dissimilarity: float | None
    threshold: float | None


_NONE = np.zeros(0, dtype=np.int64)


class LdpIds:
    """One of :data:`LDP_IDS` over ``n`` users and ``d`` cells, stepping one slot at a time."""

    def __init__(
        self, name: str, w: int, E: float, n: int, d: int, rng: np.random.Generator
    ) -> None:
        key = name.lower()
        if key not in _LEDGERS:
            raise ValueError(f"unknown mechanism {name!r}; choose from {LDP_IDS}")
        if int(w) < 1 or not np.isfinite(E) or E <= 0:
            raise ValueError(f"need w >= 1 and a finite E > 0, got w={w}, E={E}")
        if int(n) < 1 or int(d) < 1:
            raise ValueError(f"need n >= 1 users and d >= 1 cells, got n={n}, d={d}")
        self.name, self.w, self.E = key, int(w), float(E)
        self.n, self.d, self.rng = int(n), int(d), rng
        self.population = key in POPULATION_DIVISION
        budget = float(self.n) if self.population else self.E
        self.ledger = _LEDGERS[key](np.array([self.w]), np.array([budget]))
        self.last = np.zeros(self.d)  # last released frequencies
        self.used = np.full(self.n, -self.w, dtype=np.int64)  # slot of each user's last round

    @property
    def slot(self) -> int:
        """The next slot to be released (from 1)."""
        return self.ledger.slot

    def step(self, cells: np.ndarray) -> LdpRelease:
        """Release the next slot from one cell per user (-1: no value)."""
        cells = np.asarray(cells)
        if cells.shape != (self.n,) or cells.dtype.kind not in "iu":
            raise ValueError(f"expected {self.n} integer cells, got {cells.dtype} {cells.shape}")
        if self.n and (cells.min() < -1 or cells.max() >= self.d):
            raise ValueError(f"cells must lie in [0, {self.d}) or be -1 (no value)")
        plan = self.ledger.plan()
        t = plan.slot
        active = int(np.count_nonzero(cells >= 0))
        eps1 = float(plan.eps1[0]) if plan.adaptive and not plan.nullified else 0.0
        eps2 = 0.0 if plan.nullified else float(plan.eps2[0])
        round1 = round2 = _NONE
        dis = bar = None
        fresh, ran = None, False
        if eps1 > 0:
            estimate, variance, round1 = self._round(cells, eps1, t)
            if estimate is not None:
                dis = float(np.mean(np.square(estimate - self.last)) - variance)
        if eps2 > 0:
            bar = self._variance(eps2, active)
            if not plan.adaptive or (dis is not None and dis > bar):
                fresh, _, round2 = self._round(cells, eps2, t)
                ran = True
        published = fresh is not None
        if published:
            self.last = fresh
        # a round that ran is charged even if nobody held a value (its users were asked)
        self.ledger.commit(ran)
        spent2 = eps2 if ran else 0.0
        return LdpRelease(
            slot=t,
            histogram=self.last * active,
            published=published,
            nullified=plan.nullified,
            eps1=0.0 if self.population else eps1,
            eps2=0.0 if self.population else spent2,
            round1=round1,
            round2=round2,
            dissimilarity=dis,
            threshold=bar,
        )

    def _variance(self, amount: float, active: int) -> float:
        """Variance of a round's frequency estimate: budget ``amount`` over the active users,
        or ``amount`` users (rounded down) at budget E."""
        if self.population:
            asked = int(np.floor(amount + 1e-9))
            return float(oue_variance(self.E, max(asked, 1))) if asked else float("inf")
        return float(oue_variance(amount, max(active, 1)))

    def _round(
        self, cells: np.ndarray, amount: float, t: int
    ) -> tuple[np.ndarray | None, float, np.ndarray]:
        """Run one collection round: (estimated frequencies or None, their variance, users
        asked). Budget division asks every user with ``amount``; population division asks
        ``amount`` users (rounded down) who took no part in the last w - 1 slots."""
        if not self.population:
            counts = np.bincount(cells[cells >= 0], minlength=self.d)
            reporters = int(counts.sum())
            if reporters == 0:
                return None, 0.0, _NONE
            freq = oue_frequencies(counts, amount, self.rng)
            return freq, float(oue_variance(amount, reporters)), _NONE
        asked_count = int(np.floor(amount + 1e-9))
        free = np.flatnonzero(self.used <= t - self.w)
        if asked_count > free.size:  # the ledger keeps every window within n users
            raise RuntimeError(f"slot {t}: {asked_count} users needed, {free.size} free")
        asked = np.sort(self.rng.choice(free, asked_count, replace=False))
        self.used[asked] = t
        values = cells[asked]
        counts = np.bincount(values[values >= 0], minlength=self.d)
        reporters = int(counts.sum())
        if reporters == 0:
            return None, 0.0, asked
        freq = oue_frequencies(counts, self.E, self.rng)
        return freq, float(oue_variance(self.E, reporters)), asked
