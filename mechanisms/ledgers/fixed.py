"""Per-level budget ledgers of the fixed mechanisms (papers/000 section 4.5; Kellaris et al.).

A ledger *plans* a slot (each level's dissimilarity budget eps1 and publication budget eps2, and
whether the slot is nullified) and then *commits* the release rule's decision. Its state depends
only on requirements and past publish/approximate decisions, which are public (docs/design.md,
decision 2), so users with the same requirement share one row: memory is O(levels x max w).

Slots are numbered from 1 as in the paper.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

from mechanisms.ledgers.plan import Charge, SlotPlan


class BudgetLedger(ABC):
    """A ledger over levels with windows ``w`` and budgets ``E``."""

    name: str = ""
    adaptive: bool = True

    def __init__(self, w: np.ndarray, E: np.ndarray) -> None:
        self.w = np.asarray(w, dtype=np.int64).copy()
        self.E = np.asarray(E, dtype=np.float64).copy()
        if self.w.shape != self.E.shape or self.w.ndim != 1:
            raise ValueError("w and E must be one-dimensional arrays of equal length")
        self.slot = 1
        self._pending: SlotPlan | None = None

    @property
    def levels(self) -> int:
        """Number of levels."""
        return int(self.w.shape[0])

    def plan(self) -> SlotPlan:
        """Plan the next slot without changing the ledger; repeated calls agree."""
        if self._pending is None or self._pending.slot != self.slot:
            self._pending = self._plan()
        return self._pending

    def commit(self, published: bool) -> Charge:
        """Record the decision for the planned slot and advance to the next slot."""
        plan = self.plan()
        published = bool(published) and not plan.nullified
        eps2 = plan.eps2.copy() if published else np.zeros_like(plan.eps2)
        self._commit(plan, published)
        self.slot += 1
        self._pending = None
        return Charge(plan.slot, plan.eps1.copy(), eps2, published, plan.nullified)

    def add_level(self, w: int, E: float) -> int:
        """Append a level with no history; returns its index."""
        self.w = np.append(self.w, np.int64(w))
        self.E = np.append(self.E, np.float64(E))
        self._grow()
        self._pending = None
        return self.levels - 1

    def strictest_level(self, w: int, E: float) -> int:
        """For homogeneous mechanisms: level 0, tightened to cover (w, E) too."""
        if self.levels == 0:
            return self.add_level(w, E)
        self.tighten_level(0, max(int(w), int(self.w[0])), min(float(E), float(self.E[0])))
        return 0

    def tighten_level(self, level: int, w: int, E: float) -> None:
        """Make a level's requirement stricter (larger window, smaller budget)."""
        if w < self.w[level] or self.E[level] < E:
            raise ValueError("a level's requirement can only be tightened")
        self.w[level] = w
        self.E[level] = E
        self._grow()
        self._pending = None

    def state(self) -> dict:
        """A JSON-able snapshot of the ledger."""
        return {"name": self.name, "slot": self.slot, "w": self.w.tolist(), "E": self.E.tolist()}

    def load_state(self, state: dict) -> None:
        """Restore from :meth:`state`."""
        if state.get("name") != self.name:
            raise ValueError(f"state of ledger {state.get('name')!r} given to {self.name!r}")
        self.slot = int(state["slot"])
        self.w = np.asarray(state["w"], dtype=np.int64)
        self.E = np.asarray(state["E"], dtype=np.float64)
        self._grow()
        self._pending = None

    @abstractmethod
    def _plan(self) -> SlotPlan: ...

    @abstractmethod
    def _commit(self, plan: SlotPlan, published: bool) -> None: ...

    def _grow(self) -> None:  # noqa: B027 - optional hook, most ledgers keep no extra state
        """Resize per-level state after levels were added or windows widened."""


def _padded(values: np.ndarray, levels: int) -> np.ndarray:
    """Per-level integers, with zeros for the levels added since."""
    extra = levels - values.shape[0]
    return np.concatenate([values, np.zeros(extra, dtype=np.int64)]) if extra > 0 else values


class _History(BudgetLedger):
    """A ledger that remembers each level's eps2 over the last ``max w`` slots (age order)."""

    def __init__(self, w: np.ndarray, E: np.ndarray) -> None:
        self.recent = np.zeros((0, 0))
        super().__init__(w, E)
        self._grow()

    def _grow(self) -> None:
        width = int(self.w.max(initial=1))
        old = self.recent
        self.recent = np.zeros((self.levels, width))
        rows, cols = min(old.shape[0], self.levels), min(old.shape[1], width)
        self.recent[:rows, :cols] = old[:rows, :cols]
        # mask of the previous w_l - 1 slots (ages 1 .. w_l - 1 at columns 0 .. w_l - 2)
        self._prev_mask = np.arange(width)[None, :] < (self.w - 1)[:, None]

    def _spent_before(self) -> np.ndarray:
        """eps2 charged over each level's previous w_l - 1 slots."""
        return np.where(self._prev_mask, self.recent, 0.0).sum(axis=1)

    def _push(self, eps2: np.ndarray) -> None:
        if self.recent.shape[1] > 1:
            self.recent[:, 1:] = self.recent[:, :-1].copy()
        self.recent[:, 0] = eps2

    def state(self) -> dict:
        return super().state() | {"recent": self.recent.tolist()}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        recent = np.asarray(state["recent"], dtype=np.float64)
        # a ledger without levels yet stores [] (no row to infer the width from)
        self.recent = recent.reshape(self.levels, -1) if recent.size else np.zeros(
            (self.levels, 0))
        self._grow()


class DistributionLedger(_History):
    """PBD (Algorithm 4) and BD: half the remaining window budget for each publication."""

    name = "distribution"

    def _plan(self) -> SlotPlan:
        eps1 = self.E / (2.0 * self.w)
        remaining = np.maximum(self.E / 2.0 - self._spent_before(), 0.0)
        return SlotPlan(self.slot, eps1, remaining / 2.0, nullified=False)

    def _commit(self, plan: SlotPlan, published: bool) -> None:
        self._push(plan.eps2 if published else np.zeros(self.levels))


class UniformLedger(BudgetLedger):
    """Uniform: E/w at every slot, no dissimilarity test."""

    name = "uniform"
    adaptive = False

    def _plan(self) -> SlotPlan:
        zero = np.zeros(self.levels)
        return SlotPlan(self.slot, zero, self.E / self.w, nullified=False, adaptive=False)

    def _commit(self, plan: SlotPlan, published: bool) -> None:
        pass


class SampleLedger(BudgetLedger):
    """Sample: a level publishes with its whole E once at least w slots passed since it last did.

    A slot where no level is due is nullified. Levels not due at a publication are charged 0.
    """

    name = "sample"
    adaptive = False

    def __init__(self, w: np.ndarray, E: np.ndarray) -> None:
        self.last = np.zeros(0, dtype=np.int64)
        super().__init__(w, E)
        self._grow()

    def _grow(self) -> None:
        self.last = _padded(self.last, self.levels)

    def _due(self) -> np.ndarray:
        return (self.last == 0) | (self.slot - self.last >= self.w)

    def _plan(self) -> SlotPlan:
        due = self._due()
        return SlotPlan(
            self.slot,
            np.zeros(self.levels),
            np.where(due, self.E, 0.0),
            nullified=not bool(due.any()),
            adaptive=False,
        )

    def _commit(self, plan: SlotPlan, published: bool) -> None:
        if published:
            self.last = np.where(plan.eps2 > 0, self.slot, self.last)

    def state(self) -> dict:
        return super().state() | {"last": self.last.tolist()}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.last = np.asarray(state["last"], dtype=np.int64)


class AbsorptionLedger(BudgetLedger):
    """PBA (Algorithm 5) and BA: absorb unused shares E/(2w), then nullify what was borrowed.

    A publication at slot t using k shares of a level nullifies the next k - 1 slots for that
    level (Definition 15); the slot is nullified when it lies within the largest such span over
    all levels. A level whose own span ended earlier absorbs the slots since then.
    """

    name = "absorption"

    def __init__(self, w: np.ndarray, E: np.ndarray) -> None:
        self.shares = np.zeros(0, dtype=np.int64)
        self.last_published = 0
        super().__init__(w, E)
        self._grow()

    def _grow(self) -> None:
        self.shares = _padded(self.shares, self.levels)

    def nullified_spans(self) -> np.ndarray:
        """t_{i,N}: slots after the last publication that each level's publication borrowed."""
        return np.maximum(self.shares - 1, 0)

    def _plan(self) -> SlotPlan:
        share = self.E / (2.0 * self.w)
        spans = self.nullified_spans()
        since = self.slot - self.last_published
        bound = int(spans.max(initial=0))
        nullified = self.last_published > 0 and since <= bound
        absorbed = np.maximum(since - spans, 0)
        eps2 = share * np.minimum(absorbed, self.w)
        return SlotPlan(self.slot, share, eps2, nullified=nullified)

    def _commit(self, plan: SlotPlan, published: bool) -> None:
        if published:
            since = self.slot - self.last_published
            absorbed = np.maximum(since - self.nullified_spans(), 0)
            self.shares = np.minimum(absorbed, self.w)
            self.last_published = self.slot

    def state(self) -> dict:
        return super().state() | {
            "shares": self.shares.tolist(),
            "last_published": self.last_published,
        }

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.shares = np.asarray(state["shares"], dtype=np.int64)
        self.last_published = int(state["last_published"])
