"""One run of a mechanism under fixed requirements: users registered with (w, E), grouped into
levels.

:class:`FixedMechanism` maps each registered user to the level of its requirement, counts a
slot's cells per (level, cell) and releases through the one
:class:`mechanisms.run.mechanism.Mechanism` (the level ledger of the mechanism's kind plus the
release rule). Many runs of one such mechanism step together as
:class:`mechanisms.batch.fixed.BatchedFixed`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mechanisms.ledgers.fixed import BudgetLedger
from mechanisms.ledgers.kinds import LEDGER_CLASSES
from mechanisms.registry import names, specs
from mechanisms.release.rule import release_rule
from mechanisms.requirements import FixedRequirements, validate_budgets, validate_windows
from mechanisms.run.mechanism import HoldsMechanism, Mechanism, Release

FIXED_MECHANISMS = names(family="central")
#: The budget ledger class of each mechanism of fixed requirements.
FIXED_LEDGERS: dict[str, type[BudgetLedger]] = {
    s.name: LEDGER_CLASSES[s.ledger] for s in specs(family="central") if s.ledger}
HOMOGENEOUS = frozenset(names(family="central", homogeneous=True))


class FixedMechanism(HoldsMechanism):
    """A fixed-requirement mechanism over registered users and a domain of ``d`` cells.

    ``step(cells)`` takes one cell index per registered user (-1: no report) and returns the
    slot's :class:`Release`. Randomness comes from ``rng`` (inject a seeded generator in tests,
    a per-slot counter-based one in the job via :meth:`step_counts`).
    """

    def __init__(self, name: str, requirements: FixedRequirements, d: int,
                 rng: np.random.Generator | None = None, noise: str = "laplace") -> None:
        if name not in FIXED_LEDGERS:
            raise ValueError(f"unknown mechanism {name!r}; choose from {FIXED_MECHANISMS}")
        self.name = name
        self.d = int(d)
        self.rng = rng if rng is not None else np.random.default_rng()
        rule = release_rule(name, d, noise)
        self.users: list[str] = []
        self._index: dict[str, int] = {}
        self._level_of: dict[tuple[int, float], int] = {}
        self.level_of_user = np.zeros(0, dtype=np.int64)
        self.ledger = FIXED_LEDGERS[name](np.zeros(0, dtype=np.int64), np.zeros(0))
        self.mechanism = Mechanism(self.ledger, rule)
        self._keys = np.zeros(0, dtype=np.int64)
        self._sizes = np.zeros(0, dtype=np.int64)
        self.register(requirements.users, requirements.w, requirements.E)

    @property
    def n(self) -> int:
        """Number of registered users."""
        return len(self.users)

    @property
    def slot(self) -> int:
        """The next slot to be released (from 1)."""
        return self.ledger.slot

    def level_sizes(self) -> np.ndarray:
        """Registered users per level."""
        return self._sizes

    def register(
        self, users: Sequence[str], w: Sequence[int] | np.ndarray, E: Sequence[float] | np.ndarray
    ) -> None:
        """Register new users with their requirements; all are checked before any is added.

        A user joining later joins the level of its requirement: it has spent nothing, so what
        the level's ledger allows is within its own window budget too. Homogeneous baselines
        tighten their single level to the strictest requirement seen.
        """
        users_t = [str(u) for u in users]
        w64 = validate_windows(users_t, np.asarray(w))
        E64 = validate_budgets(users_t, np.asarray(E))
        if w64.shape != (len(users_t),) or E64.shape != (len(users_t),):
            raise ValueError("users, w and E must have one entry per user")
        seen = set(self._index)
        for u in users_t:
            if u in seen:
                raise ValueError(f"user {u!r}: already registered")
            seen.add(u)
        if not users_t:
            return
        if self.name in HOMOGENEOUS:
            levels = self._tighten(int(w64.max()), float(E64.min()), len(users_t))
        else:
            levels = np.empty(len(users_t), dtype=np.int64)
            for key in set(zip(w64.tolist(), E64.tolist(), strict=True)):
                if key not in self._level_of:
                    self._level_of[key] = self.ledger.add_level(*key)
            lookup = self._level_of
            levels[:] = [lookup[k] for k in zip(w64.tolist(), E64.tolist(), strict=True)]
        for u in users_t:
            self._index[u] = len(self.users)
            self.users.append(u)
        self.level_of_user = np.concatenate([self.level_of_user, levels])
        self._keys = self.level_of_user * (self.d + 1) + 1
        self._sizes = np.bincount(self.level_of_user, minlength=self.ledger.levels)

    def _tighten(self, w: int, E: float, count: int) -> np.ndarray:
        return np.full(count, self.ledger.strictest_level(w, E), dtype=np.int64)

    def validate_cells(self, cells: np.ndarray) -> np.ndarray:
        """Check one integer cell per user in [-1, d); raises ``ValueError`` naming the user."""
        cells = np.asarray(cells)
        if cells.shape != (self.n,):
            raise ValueError(f"expected one cell per registered user ({self.n}), got {cells.shape}")
        if cells.dtype.kind not in "iu":
            raise ValueError(f"cells must be integers, got dtype {cells.dtype}")
        if self.n and (cells.min() < -1 or cells.max() >= self.d):
            i = int(np.flatnonzero((cells < -1) | (cells >= self.d))[0])
            raise ValueError(
                f"user {self.users[i]!r}: field cell={int(cells[i])} outside [0, {self.d}) "
                "(-1 means no report)"
            )
        return cells

    def level_counts(self, cells: np.ndarray) -> np.ndarray:
        """Reports per (level, cell): a (levels, d) int64 matrix."""
        cells = self.validate_cells(cells)
        width = self.d + 1
        flat = np.bincount(self._keys + cells, minlength=self.ledger.levels * width)
        return flat.reshape(self.ledger.levels, width)[:, 1:]

    def step(self, cells: np.ndarray) -> Release:
        """Release the next slot from one cell index per registered user (-1: no report)."""
        return self.step_counts(self.level_counts(cells))

    def step_counts(
        self, counts: np.ndarray, rng: np.random.Generator | None = None
    ) -> Release:
        """Release the next slot from per-(level, cell) counts, then commit the ledger."""
        counts = np.asarray(counts)
        if counts.shape != (self.ledger.levels, self.d) or counts.dtype.kind not in "iu":
            raise ValueError(
                f"counts must be an integer ({self.ledger.levels}, {self.d}) matrix, "
                f"got {counts.dtype} {counts.shape}"
            )
        if (counts < 0).any():
            raise ValueError("counts must be >= 0")
        decision, charge = self.mechanism.release(counts, self.level_sizes(), rng or self.rng)
        return Release.of(decision, charge, self.level_of_user, int(counts.sum()))


def ledger_for(name: str, requirements: FixedRequirements) -> tuple[BudgetLedger, np.ndarray]:
    """A mechanism's ledger over the requirements' levels, and each user's level."""
    mech = FixedMechanism(name, requirements, 1)
    return mech.ledger, mech.level_of_user
