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

from collections.abc import Sequence
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
from mechanisms.run.mechanism import BatchRelease, RunsAlone, first_run

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


class LdpIds(RunsAlone):
    """One of :data:`LDP_IDS` over ``n`` users and ``d`` cells, stepping one slot at a time (a
    batch of one: :class:`BatchedLdpIds`)."""

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
        self._batch = BatchedLdpIds([self])

    def step(self, cells: np.ndarray) -> LdpRelease:
        """Release the next slot from one cell per user (-1: no value)."""
        out = self._batch.step([cells])
        return LdpRelease(
            slot=out.slot,
            histogram=out.histogram[0],
            published=bool(out.published[0]),
            nullified=bool(out.nullified[0]),
            eps1=float(out.eps1[0]),
            eps2=float(out.eps2[0]),
            round1=out.round1[0],
            round2=out.round2[0],
            dissimilarity=None if np.isnan(out.dissimilarity[0]) else float(out.dissimilarity[0]),
            threshold=None if np.isnan(out.threshold[0]) else float(out.threshold[0]),
        )


@dataclass(frozen=True)
class LdpSlot(BatchRelease):
    """One slot of every run of a batch: what :class:`LdpRelease` holds, per run (nan where a
    run did not test, an empty array where a round asked nobody)."""

    nullified: np.ndarray
    eps1: np.ndarray
    eps2: np.ndarray
    round1: list[np.ndarray]
    round2: list[np.ndarray]
    dissimilarity: np.ndarray
    threshold: np.ndarray


class BatchedLdpIds:
    """Runs of one of :data:`LDP_IDS` stepped together: their single-level ledgers stacked into
    one ledger of many runs, the test's arithmetic over the runs; each run's rounds draw from
    its own generator what they draw alone. Built from fresh runs (not stepped themselves)."""

    def __init__(self, mechanisms: Sequence[LdpIds]) -> None:
        first = first_run(mechanisms, lambda m: (m.name, m.d), "mechanism over one domain")
        self.runs, self.d, self.population = len(mechanisms), first.d, first.population
        self.rngs = [m.rng for m in mechanisms]
        self.w = np.array([m.w for m in mechanisms], dtype=np.int64)
        self.E = np.array([m.E for m in mechanisms])
        self.n = [m.n for m in mechanisms]
        self.ledger = type(first.ledger).stack([m.ledger for m in mechanisms])
        self.last = np.zeros((self.runs, self.d))  # last released frequencies
        # each run's users: the slot of their last round
        self.used = [np.full(m.n, -m.w, dtype=np.int64) for m in mechanisms]

    @property
    def slot(self) -> int:
        """The next slot to be released (from 1)."""
        return self.ledger.slot

    def step(self, cells: Sequence[np.ndarray]) -> LdpSlot:
        """Release the next slot of every run from its cells (-1: no value)."""
        cells = [np.asarray(c) for c in cells]
        for c, n in zip(cells, self.n, strict=True):
            if c.shape != (n,) or c.dtype.kind not in "iu":
                raise ValueError(f"expected {n} integer cells, got {c.dtype} {c.shape}")
            if n and (c.min() < -1 or c.max() >= self.d):
                raise ValueError(f"cells must lie in [0, {self.d}) or be -1 (no value)")
        plan = self.ledger.plan_runs()
        t, runs = plan.slot, self.runs
        active = np.array([np.count_nonzero(c >= 0) for c in cells])
        eps1 = np.where(~plan.nullified, plan.eps1[:, 0], 0.0) if plan.adaptive else np.zeros(runs)
        eps2 = np.where(plan.nullified, 0.0, plan.eps2[:, 0])
        round1, round2 = [_NONE] * runs, [_NONE] * runs
        dis = np.full(runs, np.nan)
        for b in [b for b, e in enumerate(eps1.tolist()) if e > 0]:
            estimate, variance, round1[b] = self._round(b, cells[b], float(eps1[b]), t)
            if estimate is not None:
                dis[b] = float(np.mean(np.square(estimate - self.last[b])) - variance)
        bar = np.full(runs, np.nan)
        asking = eps2 > 0
        if asking.any():
            bar[asking] = self._variance(eps2[asking], active[asking], self.E[asking])
        test = ~np.isnan(dis) & (dis > bar) if plan.adaptive else np.ones(runs, dtype=bool)
        ran = (eps2 > 0) & test
        published = np.zeros(runs, dtype=bool)
        for b in [b for b, r in enumerate(ran.tolist()) if r]:
            fresh, _, round2[b] = self._round(b, cells[b], float(eps2[b]), t)
            if fresh is not None:
                if not published.any():
                    self.last = self.last.copy()  # releases already handed out keep theirs
                self.last[b] = fresh
                published[b] = True
        # a round that ran is charged even if nobody held a value (its users were asked)
        self.ledger.commit_runs(ran)
        charged = not self.population
        return LdpSlot(
            slot=t,
            histogram=self.last * active[:, None],
            published=published,
            nullified=plan.nullified.copy(),
            eps1=eps1 if charged else np.zeros(runs),
            eps2=np.where(ran, eps2, 0.0) if charged else np.zeros(runs),
            round1=round1,
            round2=round2,
            dissimilarity=dis,
            threshold=bar,
        )

    def _variance(self, amount: np.ndarray, active: np.ndarray, E: np.ndarray) -> np.ndarray:
        """Variance of a round's frequency estimate, per run: budget ``amount`` (> 0) over the
        active users, or ``amount`` users (rounded down) at budget ``E`` (inf when that is
        nobody)."""
        if self.population:
            asked = np.floor(amount + 1e-9)
            return np.where(asked >= 1, oue_variance(E, np.maximum(asked, 1)), np.inf)
        return oue_variance(amount, np.maximum(active, 1))

    def _round(
        self, b: int, cells: np.ndarray, amount: float, t: int
    ) -> tuple[np.ndarray | None, float, np.ndarray]:
        """Run one collection round of run ``b``: (estimated frequencies or None, their
        variance, users asked). Budget division asks every user with ``amount``; population
        division asks ``amount`` users (rounded down) who took no part in the last w - 1
        slots."""
        rng, d = self.rngs[b], self.d
        if self.population:
            budget, used = float(self.E[b]), self.used[b]
            asked_count = int(np.floor(amount + 1e-9))
            free = np.flatnonzero(used <= t - self.w[b])
            if asked_count > free.size:  # the ledger keeps every window within n users
                raise RuntimeError(f"slot {t}: {asked_count} users needed, {free.size} free")
            asked = np.sort(rng.choice(free, asked_count, replace=False))
            used[asked] = t
            values = cells[asked]
        else:
            budget, asked, values = amount, _NONE, cells
        counts = np.bincount(values[values >= 0], minlength=d)
        reporters = int(counts.sum())
        if reporters == 0:
            return None, 0.0, asked
        freq = oue_frequencies(counts, budget, rng)
        return freq, float(oue_variance(budget, reporters)), asked
