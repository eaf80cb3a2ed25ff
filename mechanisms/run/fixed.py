"""Mechanisms under fixed requirements: users registered with (w, E), grouped into levels.

:class:`FixedMechanism` maps each registered user to the level of its requirement, counts a
slot's cells per (level, cell) and releases through the one :class:`mechanisms.mechanism.Mechanism`
(the level ledger of the mechanism's kind plus the release rule). :class:`BatchedFixed` steps
many runs of one such mechanism (repeats, and settings of E, w and seed) with one call per
slot, through the same ledger and rule with a leading run axis.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mechanisms.ledgers.adaptive import AdaptiveLedger
from mechanisms.ledgers.fixed import (
    AbsorptionLedger,
    BudgetLedger,
    DistributionLedger,
    SampleLedger,
    UniformLedger,
)
from mechanisms.mechanism import BatchRelease, HoldsMechanism, Mechanism, Release, first_run
from mechanisms.registry import names, specs
from mechanisms.release import ReleaseRule
from mechanisms.requirements import (
    FixedRequirements,
    class_levels,
    validate_budgets,
    validate_windows,
)

FIXED_MECHANISMS = names(family="central")
#: The budget ledger of each ledger kind of :mod:`mechanisms.registry`.
LEDGER_CLASSES: dict[str, type[BudgetLedger]] = {
    "distribution": DistributionLedger,
    "absorption": AbsorptionLedger,
    "uniform": UniformLedger,
    "sample": SampleLedger,
    "adaptive": AdaptiveLedger,
}
_LEDGERS: dict[str, type[BudgetLedger]] = {
    s.name: LEDGER_CLASSES[s.ledger] for s in specs(family="central") if s.ledger}
HOMOGENEOUS = frozenset(names(family="central", homogeneous=True))
#: the mechanisms releasing the unbiased (inverse-probability weighted) histogram
IPW = frozenset(n for n in FIXED_MECHANISMS if n.endswith("_ipw"))


class FixedMechanism(HoldsMechanism):
    """A fixed-requirement mechanism over registered users and a domain of ``d`` cells.

    ``step(cells)`` takes one cell index per registered user (-1: no report) and returns the
    slot's :class:`Release`. Randomness comes from ``rng`` (inject a seeded generator in tests,
    a per-slot counter-based one in the job via :meth:`step_counts`).
    """

    def __init__(self, name: str, requirements: FixedRequirements, d: int,
                 rng: np.random.Generator | None = None, noise: str = "laplace") -> None:
        if name not in _LEDGERS:
            raise ValueError(f"unknown mechanism {name!r}; choose from {FIXED_MECHANISMS}")
        self.name = name
        self.d = int(d)
        self.rng = rng if rng is not None else np.random.default_rng()
        rule = ReleaseRule(d, noise, "scale" if name in ("bd", "ba") else "obs",
                           estimator="ipw" if name in IPW else "paper")
        self.users: list[str] = []
        self._index: dict[str, int] = {}
        self._level_of: dict[tuple[int, float], int] = {}
        self.level_of_user = np.zeros(0, dtype=np.int64)
        self.ledger = _LEDGERS[name](np.zeros(0, dtype=np.int64), np.zeros(0))
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


def create_mechanism(name: str, requirements: FixedRequirements, d: int,
                     rng: np.random.Generator | None = None,
                     noise: str = "laplace") -> FixedMechanism:
    """Build one of ``FIXED_MECHANISMS`` over the given users.

    Three users with windows 4, 2 and 3 and a budget of 1 each; a slot takes one cell per user
    (-1: no report). PBA's first slot spends each user's dissimilarity budget E/(2w):

    >>> import numpy as np
    >>> req = FixedRequirements(("a", "b", "c"), np.array([4, 2, 3]), np.array([1.0, 1.0, 1.0]))
    >>> mech = create_mechanism("pba", req, d=2, rng=np.random.default_rng(0), noise="discrete")
    >>> release = mech.step(np.array([0, 1, -1]))
    >>> release.slot, release.eps1.round(4).tolist()
    (1, [0.125, 0.25, 0.1667])
    >>> release.histogram.dtype.kind  # integer noise: counts carry no floating-point bits
    'i'
    """
    return FixedMechanism(name.lower(), requirements, d, rng, noise)


def ledger_for(name: str, requirements: FixedRequirements) -> tuple[BudgetLedger, np.ndarray]:
    """A mechanism's ledger over the requirements' levels, and each user's level."""
    mech = FixedMechanism(name, requirements, 1)
    return mech.ledger, mech.level_of_user


class BatchedFixed:
    """Runs of one central mechanism (:class:`FixedMechanism`) stepped together: their ledgers
    stacked into one ledger of many runs, the shared release rule, each run its requirements,
    its generator and its last publication. Each run releases exactly what it releases alone.

    Built from fresh mechanisms (made as for a run alone, so their generators are where a run
    alone has them); the mechanisms themselves are not stepped. It takes per-(level, cell)
    counts directly (:meth:`step_counts`), which is how the evaluation feeds it: each realised
    stream is counted once per user *class* (users whose requirements agree in every setting)
    and :meth:`class_matrix` maps class counts to each run's level counts.

    Two runs of PBA at different budgets stepped together release what each releases alone:

    >>> req = [FixedRequirements(("a", "b"), np.array([4, 2]), np.array([E, 1.0])) for E in (1, 2)]
    >>> alone = [create_mechanism("pba", r, 2, np.random.default_rng(7)) for r in req]
    >>> batch = BatchedFixed([create_mechanism("pba", r, 2, np.random.default_rng(7)) for r in req])
    >>> cells = np.array([[0, 1], [1, 1], [0, -1]])
    >>> for slot in cells:
    ...     together = batch.step(np.stack([slot, slot]))
    ...     one = [m.step(slot) for m in alone]
    ...     assert [r.published for r in one] == together.published.tolist()
    ...     assert np.array_equal(np.stack([r.histogram for r in one]), together.histogram)
    >>> batch.slot
    4
    """

    def __init__(self, mechanisms: Sequence[FixedMechanism]) -> None:
        first = first_run(mechanisms, lambda m: (m.name, m.d, m.rule.noise, m.rule.test,
                                                  m.rule.sensitivity, m.rule.estimator),
                          "mechanism, domain and noise")
        self.name, self.d = first.name, first.d
        self.rngs = [m.rng for m in mechanisms]
        ledger = type(first.ledger).stack([m.ledger for m in mechanisms])
        self.mechanism = Mechanism(ledger, first.rule, runs=len(mechanisms))
        self.runs, self.levels = ledger.runs, ledger.levels
        self.sizes = np.zeros((self.runs, self.levels), dtype=np.int64)
        for b, m in enumerate(mechanisms):
            self.sizes[b, : m.ledger.levels] = m.level_sizes()
        self.level_of_user = [m.level_of_user for m in mechanisms]
        # the dissimilarity budgets are fixed per run: so are their OBS and sampling
        rule = self.mechanism.rule
        self._first = rule.sampling(rule.scaled(ledger.eps1), self.sizes)

    @property
    def slot(self) -> int:
        """The next slot to be released (from 1)."""
        return self.mechanism.ledger.slot

    @property
    def last(self) -> np.ndarray:
        """Each run's last published histogram, (runs, d)."""
        return self.mechanism.lasts

    def class_matrix(self, classes: Sequence[np.ndarray]) -> np.ndarray:
        """(runs, levels, classes) 0/1: which class's reports each run's level counts.

        ``classes[b]`` labels run b's users (0..C-1); every user of a class must be in one level
        of the run (``ValueError`` otherwise), so counting a stream's reports per class once
        gives every run's level counts exactly.
        """
        C = 1 + max(int(c.max(initial=-1)) for c in classes)
        out = np.zeros((self.runs, self.levels, C), dtype=np.int64)
        for b, (cls, lvl) in enumerate(zip(classes, self.level_of_user, strict=True)):
            if cls.shape != lvl.shape:
                raise ValueError(f"run {b}: one class per user expected")
            level_of_class = np.full(C, -1, dtype=np.int64)
            found = class_levels(cls, lvl)
            level_of_class[: found.size] = found
            seen = level_of_class >= 0
            out[b, level_of_class[seen], np.flatnonzero(seen)] = 1
        return out

    def level_counts(self, cells: np.ndarray) -> np.ndarray:
        """(runs, levels, d) reports per level and cell from (runs, users) cells (-1: none)."""
        width = self.d + 1
        out = np.zeros((self.runs, self.levels, self.d), dtype=np.int64)
        for b, lvl in enumerate(self.level_of_user):
            cb = np.asarray(cells[b])
            if cb.shape != lvl.shape or cb.dtype.kind not in "iu":
                raise ValueError(f"run {b}: expected {lvl.shape[0]} integer cells")
            if cb.size and (cb.min() < -1 or cb.max() >= self.d):
                raise ValueError(f"run {b}: cells must lie in [0, {self.d}) or be -1")
            flat = np.bincount(lvl * width + 1 + cb, minlength=self.levels * width)
            out[b] = flat.reshape(self.levels, width)[:, 1:]
        return out

    def step(self, cells: np.ndarray) -> BatchRelease:
        """Release the next slot of every run from (runs, users) cells (-1: no report)."""
        return self.step_counts(self.level_counts(cells))

    def step_counts(self, counts: np.ndarray) -> BatchRelease:
        """Release the next slot of every run from its reports per (level, cell): a
        (runs, levels, d) integer array (a padded level counts 0)."""
        return self.mechanism.release_runs(counts, self.sizes, self.rngs, self._first)
