"""Per-level budget ledgers of the fixed mechanisms (papers/000 section 4.5; Kellaris et al.).

A ledger *plans* a slot (each level's dissimilarity budget eps1 and publication budget eps2, and
whether the slot is nullified) and then *commits* the release rule's decision. Its state depends
only on requirements and past publish/approximate decisions, which are public (docs/design.md,
decision 2), so users with the same requirement share one row: memory is O(levels x max w).

Every ledger holds a batch of independent runs: its arrays carry a leading run axis
(:meth:`BudgetLedger.plan_runs`, :meth:`BudgetLedger.commit_runs`), so the evaluation steps many
runs with one call per slot. The job and the library hold one run and use :meth:`~BudgetLedger.
plan` and :meth:`~BudgetLedger.commit`, whose arrays are per level. :meth:`BudgetLedger.stack`
batches the ledgers of fresh runs, padding the runs with fewer levels (a padded level has
w = 1, E = 0 and is charged nothing).

Slots are numbered from 1 as in the paper.

Two runs of the distribution ledger, the second with half the budget, plan their first slot:

>>> ledger = DistributionLedger(np.array([[2, 4], [2, 4]]), np.array([[1.0, 2.0], [0.5, 1.0]]))
>>> ledger.plan_runs().eps2.tolist()
[[0.25, 0.5], [0.125, 0.25]]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from mechanisms.kernels import compiled
from mechanisms.ledgers.plan import Charge, RunsPlan, SlotPlan
from mechanisms.ledgers.recent import RecentSlots, width_groups

_TRUE, _FALSE = np.ones(1, dtype=bool), np.zeros(1, dtype=bool)


class BudgetLedger(ABC):
    """A ledger over levels with windows ``w`` and budgets ``E``: (levels,) arrays for one run,
    (runs, levels) for a batch."""

    name: str = ""
    adaptive: bool = True

    def __init__(self, w: np.ndarray, E: np.ndarray) -> None:
        w = np.asarray(w, dtype=np.int64)
        E = np.asarray(E, dtype=np.float64)
        if w.shape != E.shape or w.ndim not in (1, 2):
            raise ValueError("w and E must be arrays of equal shape, (levels,) or (runs, levels)")
        self.windows = np.atleast_2d(w).copy()
        self.budgets = np.atleast_2d(E).copy()
        self.valid = np.ones(self.windows.shape, dtype=bool)  # false: a padded level
        self.slot = 1
        self._pending: RunsPlan | None = None
        self._grow()

    @classmethod
    def stack(cls, ledgers: Sequence[BudgetLedger]) -> BudgetLedger:
        """One ledger over the runs of fresh one-run ledgers of this kind."""
        if not ledgers or any(type(x) is not cls for x in ledgers):
            raise ValueError(f"a batch holds runs of one ledger kind ({cls.__name__})")
        if any(x.slot != 1 or x.runs != 1 for x in ledgers):
            raise ValueError("a batch starts from fresh one-run ledgers (slot 1)")
        L = max(x.levels for x in ledgers)
        w = np.ones((len(ledgers), L), dtype=np.int64)
        E = np.zeros((len(ledgers), L))
        valid = np.zeros((len(ledgers), L), dtype=bool)
        for b, x in enumerate(ledgers):
            w[b, : x.levels], E[b, : x.levels], valid[b, : x.levels] = x.w, x.E, True
        out = cls(w, E)
        out.valid = valid
        return out

    @property
    def runs(self) -> int:
        """Number of runs in the batch (1 for the job and the library)."""
        return int(self.windows.shape[0])

    @property
    def levels(self) -> int:
        """Number of levels (of the run with the most, in a batch)."""
        return int(self.windows.shape[1])

    def _one(self, values: np.ndarray) -> np.ndarray:
        if self.runs != 1:
            raise ValueError(f"a ledger of {self.runs} runs: use its per-run arrays")
        return values[0]

    @property
    def w(self) -> np.ndarray:
        """Each level's window (one run)."""
        return self._one(self.windows)

    @property
    def E(self) -> np.ndarray:  # noqa: N802 - the papers' name
        """Each level's window budget (one run)."""
        return self._one(self.budgets)

    def plan_runs(self) -> RunsPlan:
        """Plan the next slot of every run without changing the ledger; repeated calls agree."""
        if self._pending is None or self._pending.slot != self.slot:
            eps2, nullified = self._plan()
            self._pending = RunsPlan(self.slot, self.eps1, eps2, nullified, self.adaptive)
            self._pending_one: SlotPlan | None = None
        return self._pending

    def plan(self) -> SlotPlan:
        """Plan the next slot of the one run."""
        pending = self.plan_runs()
        if self._pending_one is None:
            self._one(self.windows)
            self._pending_one = pending.run(0)
        return self._pending_one

    def commit_runs(self, published: np.ndarray) -> np.ndarray:
        """Record every run's decision for the planned slot and advance to the next slot;
        returns which runs published (a nullified run never does)."""
        plan = self.plan_runs()
        published = np.asarray(published, dtype=bool) & ~plan.nullified
        self._commit(plan, published)
        self.slot += 1
        self._pending = None
        return published

    def commit(self, published: bool) -> Charge:
        """Record the one run's decision for the planned slot and advance to the next slot."""
        plan = self.plan()
        done = bool(published) and not plan.nullified
        self.commit_runs(_TRUE if done else _FALSE)
        eps2 = plan.eps2.copy() if done else np.zeros_like(plan.eps2)
        return Charge(plan.slot, plan.eps1.copy(), eps2, done, plan.nullified)

    def add_level(self, w: int, E: float) -> int:
        """Append a level with no history to the one run; returns its index."""
        self._one(self.windows)
        self.windows = np.append(self.windows, [[np.int64(w)]], axis=1)
        self.budgets = np.append(self.budgets, [[np.float64(E)]], axis=1)
        self.valid = np.ones(self.windows.shape, dtype=bool)
        self._grow()
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
        self.windows[0, level] = w
        self.budgets[0, level] = E
        self._grow()

    def state(self) -> dict:
        """A JSON-able snapshot of the one run's ledger."""
        return {"name": self.name, "slot": self.slot, "w": self.w.tolist(), "E": self.E.tolist()}

    def load_state(self, state: dict) -> None:
        """Restore from :meth:`state`."""
        if state.get("name") != self.name:
            raise ValueError(f"state of ledger {state.get('name')!r} given to {self.name!r}")
        self.slot = int(state["slot"])
        self.windows = np.asarray(state["w"], dtype=np.int64).reshape(1, -1)
        self.budgets = np.asarray(state["E"], dtype=np.float64).reshape(1, -1)
        self.valid = np.ones(self.windows.shape, dtype=bool)
        self._grow()

    @abstractmethod
    def _plan(self) -> tuple[np.ndarray, np.ndarray]:
        """eps2 (runs, levels) and nullified (runs,) of the next slot."""

    @abstractmethod
    def _commit(self, plan: RunsPlan, published: np.ndarray) -> None: ...

    def _grow(self) -> None:
        """Resize per-level state after levels were added or windows widened."""
        self._pending = None
        self.eps1 = (self.budgets / (2.0 * self.windows) if self.adaptive
                     else np.zeros(self.budgets.shape))
        self.never = np.zeros(self.runs, dtype=bool)  # no run nullified (read only)
        self.never.setflags(write=False)


def _padded(values: np.ndarray, levels: int) -> np.ndarray:
    """Per-(run, level) integers, with zeros for the levels added since."""
    extra = levels - values.shape[1]
    return np.pad(values, ((0, 0), (0, extra))) if extra > 0 else values


class WindowHistoryLedger(BudgetLedger):
    """A ledger that remembers each level's eps2 over the last ``max w`` slots (age order)."""

    history: RecentSlots | None = None

    def _grow(self) -> None:
        super()._grow()
        self.half = self.budgets / 2.0
        # a run sums rows as wide as its largest window: runs are grouped by that width so
        # that a run's sums do not depend on the batch it is in; the history keeps the runs
        # in order of width (row i holds run order[i]), so each group is a slice of it
        self.widths = widths = self.windows.max(axis=1, initial=1)
        width = int(widths.max(initial=1))
        order, self.inverse, groups = width_groups(widths)
        old, old_order = self.history, getattr(self, "order", None)
        self.history = RecentSlots(self.runs, self.levels, width)
        if old is not None and old_order is not None and old_order.size == self.runs:
            rows, cols = min(old.view().shape[1], self.levels), min(old.width, width)
            runs_view = old.view()[np.argsort(old_order)]  # back in run order
            self.history.view()[:, :rows, :cols] = runs_view[order, :rows, :cols]
        self.order = order
        # the previous w_l - 1 slots: ages 1 .. w_l - 1 at columns 0 .. w_l - 2
        self.groups = [(lo, hi, w, np.arange(w)[None, None, :]
                        < (self.windows[order[lo:hi]] - 1)[:, :, None])
                       for lo, hi, w in groups]

    @property
    def recent(self) -> np.ndarray:
        """The one run's eps2 per level over the last ``max w`` slots (column 0: the last)."""
        assert self.history is not None
        return self._one(self.history.view())

    def _spent_before(self, compile_ok: bool = True) -> np.ndarray:
        """eps2 charged over each level's previous w_l - 1 slots, per run (compiled for a batch
        where it can be, :mod:`mechanisms.kernels.compiled`; ``compile_ok=False`` keeps numpy)."""
        assert self.history is not None
        if compile_ok and compiled.available(self.runs):
            return compiled.window_sums(self.history.buffer, self.history.pos, self.widths,
                                        self.windows, self.order)
        view = self.history.view()
        if len(self.groups) == 1:  # every run as wide (one run alone, among others)
            _, _, width, mask = self.groups[0]
            spent = np.where(mask, view[:, :, :width], 0.0).sum(axis=2)
        else:
            spent = np.empty(self.budgets.shape)
            for lo, hi, width, mask in self.groups:
                spent[lo:hi] = np.where(mask, view[lo:hi, :, :width], 0.0).sum(axis=2)
        return spent if self.inverse is None else spent[self.inverse]

    def _push(self, eps2: np.ndarray) -> None:
        assert self.history is not None
        self.history.push(eps2 if self.inverse is None else eps2[self.order])

    def state(self) -> dict:
        return super().state() | {"recent": self.recent.tolist()}

    def load_state(self, state: dict) -> None:
        self.history = None
        super().load_state(state)
        recent = np.asarray(state["recent"], dtype=np.float64)
        # a ledger without levels yet stores [] (no row to infer the width from)
        if recent.size:
            recent = recent.reshape(self.levels, -1)
            cols = min(recent.shape[1], self.recent.shape[1])
            self.recent[:, :cols] = recent[:, :cols]


class DistributionLedger(WindowHistoryLedger):
    """PBD (Algorithm 4) and BD: half the remaining window budget for each publication."""

    name = "distribution"

    def _plan(self) -> tuple[np.ndarray, np.ndarray]:
        remaining = np.maximum(self.half - self._spent_before(), 0.0)
        return remaining / 2.0, self.never

    def _commit(self, plan: RunsPlan, published: np.ndarray) -> None:
        self._push(np.where(published[:, None], plan.eps2, 0.0))


class UniformLedger(BudgetLedger):
    """Uniform: E/w at every slot, no dissimilarity test."""

    name = "uniform"
    adaptive = False

    def _plan(self) -> tuple[np.ndarray, np.ndarray]:
        return self.budgets / self.windows, self.never

    def _commit(self, plan: RunsPlan, published: np.ndarray) -> None:
        pass


class SampleLedger(BudgetLedger):
    """Sample: a level publishes with its whole E once at least w slots passed since it last did.

    A slot where no level is due is nullified. Levels not due at a publication are charged 0.
    """

    name = "sample"
    adaptive = False
    last_runs = np.zeros((0, 0), dtype=np.int64)

    def _grow(self) -> None:
        super()._grow()
        if self.last_runs.shape[0] != self.runs:
            self.last_runs = np.zeros((self.runs, 0), dtype=np.int64)
        self.last_runs = _padded(self.last_runs, self.levels)

    @property
    def last(self) -> np.ndarray:
        """The one run's last publishing slot per level (0: never)."""
        return self._one(self.last_runs)

    def _plan(self) -> tuple[np.ndarray, np.ndarray]:
        due = (self.last_runs == 0) | (self.slot - self.last_runs >= self.windows)
        return np.where(due, self.budgets, 0.0), ~(due & self.valid).any(axis=1)

    def _commit(self, plan: RunsPlan, published: np.ndarray) -> None:
        self.last_runs = np.where(published[:, None] & (plan.eps2 > 0), self.slot,
                                  self.last_runs)

    def state(self) -> dict:
        return super().state() | {"last": self.last.tolist()}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.last_runs = np.asarray(state["last"], dtype=np.int64).reshape(1, -1)


class AbsorptionLedger(WindowHistoryLedger):
    """PBA (Algorithm 5) and BA: absorb unused shares E/(2w), then nullify what was borrowed.

    A publication at slot t using k shares of a level nullifies the next k - 1 slots for that
    level (Definition 15); the slot is nullified when it lies within the largest such span over
    all levels. A level whose own span ended earlier absorbs the slots since then.

    The decisions need only each level's last publication; the history of each slot's
    publication charge is kept for what a level spent over its window (the job's budget
    gauges), which a restored state from before it was kept starts at zero.
    """

    name = "absorption"
    shares_runs = np.zeros((0, 0), dtype=np.int64)
    published_runs = np.zeros(0, dtype=np.int64)

    def _grow(self) -> None:
        super()._grow()
        if self.shares_runs.shape[0] != self.runs:
            self.shares_runs = np.zeros((self.runs, 0), dtype=np.int64)
            self.published_runs = np.zeros(self.runs, dtype=np.int64)
        self.shares_runs = _padded(self.shares_runs, self.levels)

    @property
    def shares(self) -> np.ndarray:
        """The one run's shares absorbed by each level's last publication."""
        return self._one(self.shares_runs)

    @property
    def last_published(self) -> int:
        """The one run's last publishing slot (0: never)."""
        return int(self._one(self.published_runs[:, None])[0])

    def _plan(self) -> tuple[np.ndarray, np.ndarray]:
        # t_{i,N}: the slots after the last publication that each level's publication borrowed
        spans = np.maximum(self.shares_runs - 1, 0)
        since = self.slot - self.published_runs
        bound = spans.max(axis=1, initial=0)
        nullified = (self.published_runs > 0) & (since <= bound)
        absorbed = np.maximum(since[:, None] - spans, 0)
        return self.eps1 * np.minimum(absorbed, self.windows), nullified

    def _commit(self, plan: RunsPlan, published: np.ndarray) -> None:
        self._push(np.where(published[:, None], plan.eps2, 0.0))
        if published.any():
            since = self.slot - self.published_runs
            absorbed = np.maximum(since[:, None] - np.maximum(self.shares_runs - 1, 0), 0)
            self.shares_runs = np.where(published[:, None],
                                        np.minimum(absorbed, self.windows), self.shares_runs)
            self.published_runs = np.where(published, self.slot, self.published_runs)

    def state(self) -> dict:
        return super().state() | {
            "shares": self.shares.tolist(),
            "last_published": self.last_published,
        }

    def load_state(self, state: dict) -> None:
        super().load_state({"recent": [], **state})  # no history before it was kept
        self.shares_runs = np.asarray(state["shares"], dtype=np.int64).reshape(1, -1)
        self.published_runs = np.array([int(state["last_published"])], dtype=np.int64)
