"""One run of a mechanism under dynamic requirements: DPBD and DPBA (papers/000 section 5).

A user's declaration (wB, EB, wF, EF, :class:`~mechanisms.requirements.DynamicRequirements`)
holds from its slot until the user's next declaration. :class:`DynamicMechanism` steps one slot
at a time like :class:`mechanisms.run.fixed.FixedMechanism`: the per-user ledger
(:mod:`mechanisms.ledgers.dynamic`) plans each user's eps1 and eps2, rounded down onto a fixed
grid, and the release rule runs on a (levels, d) count matrix where a level is one distinct
(eps1, eps2) pair of grid values. :func:`plan_dynamic` is a ledger's dry run under a forced
schedule (``pwevent plan``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from mechanisms.ledgers.dynamic import DynamicLedger, DynamicSlotPlan
from mechanisms.ledgers.grid_levels import GridLevels
from mechanisms.ledgers.kinds import DYNAMIC_LEDGERS
from mechanisms.registry import names
from mechanisms.release.rule import release_rule
from mechanisms.requirements import DynamicRequirements, validate_declarations
from mechanisms.run.mechanism import HoldsMechanism, Mechanism, Release, SlotRelease

DYNAMIC_MECHANISMS = names(family="dynamic")


class UserDirectory:
    """User names to ledger indices, in order of first declaration."""

    def __init__(self) -> None:
        self.users: list[str] = []
        self.index: dict[str, int] = {}

    def indices(self, users: Sequence[str]) -> np.ndarray:
        """Indices of ``users``, giving new users the next free ones (not yet recorded)."""
        get = self.index.get
        found = [get(u) for u in users]
        missing = found.count(None)
        if missing:
            first = len(self.users)
            new = dict.fromkeys(u for u, i in zip(users, found, strict=True) if i is None)
            if missing == len(found) == len(new):  # all new and distinct: the next indices
                return np.arange(first, first + missing, dtype=np.int64)
            fresh = dict(zip(new, range(first, first + len(new)), strict=True))
            found = [fresh[u] if i is None else i for u, i in zip(users, found, strict=True)]
        return np.array(found, dtype=np.int64).reshape(len(users))

    def add(self, users: Sequence[str], indices: np.ndarray) -> None:
        """Record the new users among ``users`` (their :meth:`indices`)."""
        first = len(self.users)
        new = dict(pair for pair in zip(users, indices.tolist(), strict=True)
                   if pair[1] >= first)
        self.index.update(new)
        self.users.extend(new)  # in the order of their indices: that of first appearance


def _declare(
    ledger: DynamicLedger, directory: UserDirectory, decl: tuple[list[str], np.ndarray, ...]
) -> None:
    users, wB, EB, wF, EF = decl
    if not users:
        return
    wB, EB, wF, EF = validate_declarations(users, wB, EB, wF, EF)
    if len(set(users)) != len(users):
        raise ValueError("at most one declaration per user and slot")
    idx = directory.indices(users)
    ledger.declare(idx, wB, EB, wF, EF)
    directory.add(users, idx)


def _ledger(name: str, max_window: int, grid_bits: int | None) -> DynamicLedger:
    key = name.lower()
    if key not in DYNAMIC_LEDGERS:
        raise ValueError(f"unknown mechanism {name!r}; choose from {DYNAMIC_MECHANISMS}")
    return DYNAMIC_LEDGERS[key](max_window, grid_bits)


class DynamicMechanism(HoldsMechanism):
    """DPBD or DPBA over a domain of ``d`` cells, stepping one slot at a time.

    Declarations from ``requirements`` take effect at their slots; :meth:`declare` adds more for
    the next slot (they win over ``requirements`` for the same user and slot). ``step(cells)``
    takes one cell per user declared so far (-1: no report). ``max_window`` bounds every window
    (default: the largest in ``requirements``); ``grid_bits`` sets the budget grid.
    """

    def __init__(self, name: str, requirements: DynamicRequirements, d: int,
                 rng: np.random.Generator | None = None, noise: str = "laplace",
                 grid_bits: int = 3, max_window: int | None = None) -> None:
        self.name = name.lower()
        self.d = int(d)
        self.requirements = requirements
        self.ledger = _ledger(self.name, max_window or requirements.max_window, grid_bits)
        self.levels = GridLevels(self.ledger)
        self.mechanism = Mechanism(self.levels, release_rule(self.name, self.d, noise))
        self.rng = rng if rng is not None else np.random.default_rng()
        self.directory = UserDirectory()
        self._extra: dict[str, tuple] = {}
        self._applied = 0
        self._declared_at = set(np.unique(requirements.slot).tolist())

    @property
    def slot(self) -> int:
        """The next slot to be released (from 1)."""
        return self.ledger.slot

    @property
    def users(self) -> list[str]:
        """Users declared so far, in ledger order."""
        return self.directory.users

    @property
    def n(self) -> int:
        """Number of users declared so far."""
        return len(self.directory.users)

    def declare(
        self,
        users: Sequence[str],
        wB: Sequence[int] | np.ndarray,
        EB: Sequence[float] | np.ndarray,
        wF: Sequence[int] | np.ndarray,
        EF: Sequence[float] | np.ndarray,
    ) -> None:
        """Declare requirements effective from the next slot; all are checked first."""
        users = [str(u) for u in users]
        validate_declarations(users, wB, EB, wF, EF)
        if len(set(users)) != len(users):
            raise ValueError("at most one declaration per user and slot")
        for k, u in enumerate(users):
            self._extra[u] = (wB[k], EB[k], wF[k], EF[k])

    def declare_indices(
        self,
        index: np.ndarray,
        wB: np.ndarray,
        EB: np.ndarray,
        wF: np.ndarray,
        EF: np.ndarray,
    ) -> None:
        """Change declared users' requirements, by ledger index, from the next slot on.

        The vectorised path for many changes at once; new users go through :meth:`declare`.
        """
        self._apply()
        index = np.asarray(index, dtype=np.int64)
        if index.size and (index.min() < 0 or index.max() >= self.n):
            raise ValueError("declare_indices takes indices of users already declared")
        try:
            checked = validate_declarations(["?"] * index.size, wB, EB, wF, EF)
        except ValueError:
            validate_declarations([self.users[i] for i in index.tolist()], wB, EB, wF, EF)
            raise
        self.ledger.declare(index, *checked)

    def _apply(self) -> None:
        """Apply this slot's declarations (from ``requirements`` and :meth:`declare`)."""
        if self._applied == self.slot:
            return
        if not self._extra and self.slot not in self._declared_at:
            self._applied = self.slot
            return
        users, wB, EB, wF, EF = self.requirements.at(self.slot)
        rows = {u: (wB[k], EB[k], wF[k], EF[k]) for k, u in enumerate(users)}
        rows.update(self._extra)
        if rows:
            names = list(rows)
            cols = list(zip(*rows.values(), strict=True))
            _declare(self.ledger, self.directory, (names, *map(np.asarray, cols)))
        self._extra = {}
        self._applied = self.slot

    def level_counts(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Plan the slot and count reports per level: (counts, level_codes, level_of_user)."""
        counts, _, level_of_user = self._group(cells)
        return counts, self.levels.codes, level_of_user

    def _group(self, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self._apply()
        cells = np.asarray(cells)
        n = self.n
        if cells.shape != (n,):
            raise ValueError(f"expected one cell per declared user ({n}), got {cells.shape}")
        if cells.dtype.kind not in "iu":
            raise ValueError(f"cells must be integers, got dtype {cells.dtype}")
        if n and (cells.min() < -1 or cells.max() >= self.d):
            i = int(np.flatnonzero((cells < -1) | (cells >= self.d))[0])
            raise ValueError(
                f"user {self.users[i]!r}: field cell={int(cells[i])} outside [0, {self.d}) "
                "(-1 means no report)"
            )
        return self.levels.group(cells, self.d)

    def step_classes(self, class_counts: np.ndarray, classes: np.ndarray) -> SlotRelease:
        """Release the next slot from reports per (class of users, cell): ``classes`` labels
        every declared user, and all users of a class must share one ledger group (as users
        declaring alike do); ``ValueError`` otherwise. What :meth:`step` releases on cells with
        those counts (the batched evaluation's count path)."""
        self._apply()
        classes = np.asarray(classes)
        if classes.shape != (self.n,):
            raise ValueError(f"expected one class per declared user ({self.n}), got "
                             f"{classes.shape}")
        counts, sizes = self.levels.group_classes(np.asarray(class_counts), classes)
        plan = self.levels.plan()
        decision, charge = self.mechanism.release(counts, sizes, self.rng, plan)
        return SlotRelease(charge.slot, decision.histogram, charge.published, decision.threshold)

    def step(self, cells: np.ndarray) -> Release:
        """Release the next slot from one cell per declared user (-1: no report)."""
        counts, sizes, level_of_user = self._group(cells)
        plan = self.levels.plan()
        decision, charge = self.mechanism.release(counts, sizes, self.rng, plan)
        return Release.of(decision, charge, level_of_user, int(counts.sum()), plan.projected)


def dynamic_ledger(name: str, max_window: int, grid_bits: int | None = None) -> DynamicLedger:
    """A DPBD or DPBA ledger (exact charges unless ``grid_bits`` is given)."""
    return _ledger(name, max_window, grid_bits)


def plan_dynamic(
    name: str, requirements: DynamicRequirements, schedule: str
) -> Iterator[dict]:
    """Dry run of a dynamic ledger: one dict per slot of ``schedule`` ('1' publish, '0' not).

    eps2 is what the slot charged (0 when approximated or nullified); every user declared so
    far is listed; ``projected`` counts users whose backward budget was projected.

    A user lowers its backward budget at slot 3 below what its window already spent: the
    budget is projected and nothing more is charged while the window holds the old charges.

    >>> rows = [(1, "a", 3, 4.0, 1, 4.0), (3, "a", 3, 0.5, 1, 4.0)]
    >>> slots = list(plan_dynamic("dpbd", DynamicRequirements.from_rows(rows), "1111"))
    >>> [(s["slot"], s["eps1"]["a"] + s["eps2"]["a"], s["projected"]) for s in slots]
    [(1, 3.0, 0), (2, 1.0, 0), (3, 0.0, 1), (4, 0.0, 1)]
    """
    bad = set(schedule) - {"0", "1"}
    if bad:
        raise ValueError(f"schedule must contain only 0 and 1, got {sorted(bad)!r}")
    ledger = _ledger(name, requirements.max_window, None)
    directory = UserDirectory()
    for t, bit in enumerate(schedule, start=1):
        _declare(ledger, directory, requirements.at(t))
        plan: DynamicSlotPlan = ledger.plan()
        charge = ledger.commit(bit == "1")
        users = directory.users
        yield {
            "slot": t,
            "nullified": charge.nullified,
            "published": charge.published,
            "eps1": dict(zip(users, charge.eps1.tolist(), strict=True)),
            "eps2": dict(zip(users, charge.eps2.tolist(), strict=True)),
            "projected": plan.projected,
        }
