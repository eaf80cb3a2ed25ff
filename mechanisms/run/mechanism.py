"""The one mechanism interface: a budget ledger, the release rule and the last publication.

Every mechanism of the product steps one slot at a time through :class:`Stepper`: one cell per
user (-1: no report) in, one :class:`Released` slot out. The mechanisms of the papers are a
:class:`Ledger` that plans each level's budgets and commits the rule's decision, plus the
release rule (:mod:`mechanisms.release`); :class:`Mechanism` holds the two with the last
publication, and is what the library (:mod:`mechanisms.run.fixed`,
:mod:`mechanisms.run.dynamic`), the evaluation and the job's coordinator all run. Where the
ledger lives differs (per level in the coordinator for fixed requirements, per user in the
partitions for dynamic ones); the release does not.

A ledger is anything that plans and commits; here one level of window 2 and budget 1 under
PBD, stepped twice on 3 users who all report cell 0:

>>> import numpy as np
>>> from mechanisms.ledgers.fixed import DistributionLedger
>>> from mechanisms.release.rule import ReleaseRule
>>> mech = Mechanism(DistributionLedger(np.array([2]), np.array([1.0])), ReleaseRule(2, "discrete"))
>>> rng = np.random.default_rng(0)
>>> decision, charge = mech.release(np.array([[3, 0]]), np.array([3]), rng)
>>> charge.slot, charge.eps1.tolist(), charge.published == decision.published
(1, [0.25], True)
>>> mech.slot
2
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from mechanisms.ledgers.plan import Charge, RunsPlan, SlotPlan
from mechanisms.registry import histogram_dtype
from mechanisms.release.rule import Decision, ReleaseRule, Sampling
from mechanisms.release.sampling import thinned

T = TypeVar("T")


@runtime_checkable
class Ledger(Protocol):
    """Plans a slot's budgets per level and commits the release rule's decision.

    The fixed ledgers (:mod:`mechanisms.ledgers.fixed`) hold one level per requirement; the dynamic
    ones (:mod:`mechanisms.ledgers.dynamic`) one per user, grouped into levels of equal budgets
    by :class:`mechanisms.ledgers.grid_levels.GridLevels`.
    """

    @property
    def slot(self) -> int:
        """The slot the next :meth:`plan` is for (from 1)."""
        ...

    def plan(self) -> SlotPlan:
        """Each level's eps1 and eps2 for the next slot, and whether it is nullified."""
        ...

    def commit(self, published: bool) -> Charge:
        """Record the decision for the planned slot; returns what it charged."""
        ...


@dataclass(frozen=True)
class Release:
    """One slot's release and what it charged.

    Charges are held per level; ``eps1`` and ``eps2`` expand them to one entry per registered
    user (in registration order) on access.
    """

    slot: int
    histogram: np.ndarray
    published: bool
    nullified: bool
    threshold: float
    dissimilarity: float | None
    level_eps1: np.ndarray
    level_eps2: np.ndarray
    level_of_user: np.ndarray
    reports: int
    projected: int = 0  # dynamic mechanisms: users whose backward budget was projected

    @classmethod
    def of(cls, decision: Decision, charge: Charge, level_of_user: np.ndarray, reports: int,
           projected: int = 0) -> Release:
        """The release of a slot from the rule's decision and the ledger's charge."""
        return cls(charge.slot, decision.histogram, charge.published, charge.nullified,
                   decision.threshold, decision.dissimilarity, charge.eps1, charge.eps2,
                   level_of_user, reports, projected)

    @property
    def eps1(self) -> np.ndarray:
        """Each user's dissimilarity budget charged at this slot."""
        return self.level_eps1[self.level_of_user]

    @property
    def eps2(self) -> np.ndarray:
        """Each user's publication budget charged at this slot (0 unless published)."""
        return self.level_eps2[self.level_of_user]


@dataclass(frozen=True)
class BatchRelease:
    """One slot of every run of a batch: ``histogram`` is (runs, d), ``published`` (runs,)."""

    slot: int
    histogram: np.ndarray
    published: np.ndarray


@dataclass(frozen=True)
class RuleRelease(BatchRelease):
    """A batch slot released by the release rule, with each run's per-cell noise standard
    deviation ``std`` (runs,): public (from the publication threshold), nan where the run did
    not publish. Post-processing (:mod:`mechanisms.postprocess`) reads it."""

    std: np.ndarray
    #: (runs,) whether the run's publication thinned a level (:func:`mechanisms.release.sampling.
    #: thinned`): it gets no error bars; None: no run did
    thinned: np.ndarray | None = None


def release_std(published: np.ndarray, threshold: np.ndarray, rule: ReleaseRule,
                own: np.ndarray | None = None) -> np.ndarray:
    """Per run, the standard deviation of the noise a published slot added per cell
    (:meth:`ReleaseRule.noise_std` of its threshold, or the decision's ``own`` where the rule
    set it); nan where the run did not publish."""
    if own is not None:
        return np.where(published, own, np.nan)
    out = np.full(np.shape(published), np.nan)
    pub = np.flatnonzero(published)
    if pub.size:
        out[pub] = rule.noise_stds(np.asarray(threshold)[pub])
    return out


@runtime_checkable
class RunsLedger(Protocol):
    """A ledger of a batch of runs: plans and commits every run at once."""

    @property
    def slot(self) -> int:
        """The slot the next plan is for (from 1)."""
        ...

    def plan_runs(self) -> RunsPlan:
        """Each run's and level's eps1 and eps2 for the next slot, and which runs are nullified."""
        ...

    def commit_runs(self, published: np.ndarray) -> np.ndarray:
        """Record each run's decision; returns which runs published."""
        ...


@dataclass(frozen=True)
class SlotRelease:
    """A slot's release with only what every release has (a run stepped from counts)."""

    slot: int
    histogram: np.ndarray
    published: bool
    threshold: float | None = None  # the rule's publication threshold, where one decided


@runtime_checkable
class Released(Protocol):
    """What every mechanism releases for a slot (its release types add their own details)."""

    slot: int
    histogram: np.ndarray
    published: bool


@runtime_checkable
class Stepper(Protocol):
    """The step interface every mechanism implements: one slot's cells to its release."""

    def step(self, cells: np.ndarray) -> Released:
        """Release the next slot from one cell per user (-1: no report)."""
        ...


class PlannedLedger:
    """A ledger kept elsewhere: the plan is handed in, the commit only reports its charge.

    The job's coordinator under dynamic requirements uses it: the partitions hold the users'
    ledgers and send each slot's plan; they commit the decision when they read it back.
    """

    def __init__(self) -> None:
        self._plan: SlotPlan | None = None

    @property
    def slot(self) -> int:
        """The slot of the plan handed in."""
        if self._plan is None:
            raise ValueError("no plan was handed in")
        return self._plan.slot

    def hand_in(self, plan: SlotPlan) -> None:
        """The plan of the next slot."""
        self._plan = plan

    def plan(self) -> SlotPlan:
        """The plan handed in."""
        if self._plan is None:
            raise ValueError("no plan was handed in")
        return self._plan

    def commit(self, published: bool) -> Charge:
        """What the slot charged; the plan is used up."""
        plan = self.plan()
        published = bool(published) and not plan.nullified
        eps2 = plan.eps2.copy() if published else np.zeros_like(plan.eps2)
        self._plan = None
        return Charge(plan.slot, plan.eps1.copy(), eps2, published, plan.nullified)


class Mechanism:
    """A ledger, the release rule and the last publication: releases one slot at a time.

    :meth:`release` runs the rule on a (levels, d) count matrix under the ledger's plan (or a
    plan given, such as the ledger's plan restricted to the levels that have users), commits
    the decision and keeps the histogram when it was published: an approximated slot releases
    the last publication again.

    Over a ledger of a batch of runs (:class:`RunsLedger`), :meth:`release_runs` does the same
    for every run with one call: counts and sizes carry a leading run axis, each run draws from
    its own generator and keeps its own last publication (``lasts``, one row per run).
    """

    def __init__(self, ledger: Ledger | RunsLedger, rule: ReleaseRule, runs: int = 1) -> None:
        self.ledger = ledger
        self.rule = rule
        self.lasts = np.zeros((runs, rule.d), dtype=histogram_dtype(rule.noise))

    @property
    def last(self) -> np.ndarray:
        """The last published histogram (zeros before the first publication) of the one run."""
        if self.lasts.shape[0] != 1:
            raise ValueError(f"a mechanism of {self.lasts.shape[0]} runs: use lasts")
        return self.lasts[0]

    @last.setter
    def last(self, histogram: np.ndarray) -> None:
        self.lasts = np.asarray(histogram, dtype=self.lasts.dtype)[None, :]

    @property
    def slot(self) -> int:
        """The next slot to be released (from 1)."""
        return self.ledger.slot

    def release(
        self,
        counts: np.ndarray,
        sizes: np.ndarray,
        rng: np.random.Generator,
        plan: SlotPlan | None = None,
    ) -> tuple[Decision, Charge]:
        """Release the next slot from reports per (level, cell) and users per level."""
        plan = self.ledger.plan() if plan is None else plan
        decision = self.rule.decide(plan, counts, sizes, self.last, rng)
        charge = self.ledger.commit(decision.published)
        if charge.published:
            self.last = decision.histogram
        return decision, charge

    def release_runs(
        self,
        counts: np.ndarray,
        sizes: np.ndarray,
        rngs: Sequence[np.random.Generator],
        first: Sampling | None = None,
    ) -> BatchRelease:
        """Release the next slot of every run from reports per (run, level, cell) and users per
        (run, level); ``first`` is the rule's sampling of eps1 where the caller keeps it."""
        plan = self.ledger.plan_runs()
        decision = self.rule.decide_runs(plan.eps1, plan.eps2, plan.nullified, plan.adaptive,
                                         counts, sizes, self.lasts, rngs, first)
        published = self.ledger.commit_runs(decision.published)
        self.lasts = decision.histogram  # a run that did not publish holds its last
        return RuleRelease(plan.slot, decision.histogram, published,
                           release_std(published, decision.threshold, self.rule, decision.std),
                           published & thinned(self.rule.scaled(plan.eps2), sizes,
                                               decision.threshold))

    def adopt(self, published: bool, histogram: np.ndarray | list) -> Charge:
        """Advance through a slot already released elsewhere (its decision and histogram)."""
        charge = self.ledger.commit(published)
        if charge.published:
            self.last = np.asarray(histogram, dtype=self.last.dtype)
        return charge

    def load_last(self, histogram: np.ndarray | list) -> None:
        """Restore the last publication (from a saved state)."""
        self.last = np.asarray(histogram, dtype=self.last.dtype)


def first_run(runs: Sequence[T], kind: Callable[[T], object], what: str,
              fresh: Callable[[T], bool] | None = None) -> T:
    """The first of a batch's runs, after checking there is one, that every run is of its
    ``kind`` and, with ``fresh``, that every run is fresh; ``ValueError`` otherwise."""
    if not runs:
        raise ValueError("a batch needs at least one run")
    first = kind(runs[0])
    if any(kind(r) != first for r in runs):
        raise ValueError(f"a batch holds runs of one {what}")
    if fresh is not None and not all(fresh(r) for r in runs):
        raise ValueError("a batch starts from fresh runs (slot 1)")
    return runs[0]


class RunsAlone:
    """What a mechanism that runs as a batch of one (``self._batch``) shows of it."""

    _batch: Any

    @property
    def slot(self) -> int:
        """The next slot to be released (from 1)."""
        return int(self._batch.slot)

    @property
    def last(self) -> np.ndarray:
        """The last publication."""
        return self._batch.last[0]

    @last.setter
    def last(self, histogram: np.ndarray) -> None:
        self._batch.last = self._batch.last.copy()  # releases already handed out keep theirs
        self._batch.last[0] = histogram


class HistogramSteps:
    """``step`` and ``step_classes`` of a run that needs only the slot's histogram: both count
    the reports per cell and hand them to ``step_counts(counts)``, (d,)."""

    d: int

    def step(self, cells: np.ndarray):
        """Release the next slot from one cell per user (-1: no report)."""
        cells = np.asarray(cells)
        if cells.ndim != 1 or cells.dtype.kind not in "iu":
            raise ValueError(f"expected one integer cell per user, got {cells.dtype} "
                             f"{cells.shape}")
        if cells.size and (cells.min() < -1 or cells.max() >= self.d):
            raise ValueError(f"cells must lie in [0, {self.d}) or be -1 (no report)")
        return self.step_counts(np.bincount(cells[cells >= 0], minlength=self.d))

    def step_classes(self, class_counts: np.ndarray, classes: np.ndarray):
        """Release the next slot from reports per (class of users, cell): only their total
        counts (the batched evaluation's count path)."""
        return self.step_counts(np.asarray(class_counts).sum(axis=0))

    def step_counts(self, counts: np.ndarray):  # pragma: no cover - every user defines it
        raise NotImplementedError


class HoldsMechanism:
    """What a wrapper that keeps a :class:`Mechanism` as ``self.mechanism`` shows of it."""

    mechanism: Mechanism

    @property
    def rule(self) -> ReleaseRule:
        """The release rule."""
        return self.mechanism.rule

    @property
    def last(self) -> np.ndarray:
        """The last published histogram (zeros before the first publication)."""
        return self.mechanism.last
