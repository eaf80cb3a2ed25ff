"""Runs of one mechanism under fixed requirements stepped together, with one call per slot.

:class:`BatchedFixed` steps many runs of one :class:`~mechanisms.run.fixed.FixedMechanism`
(repeats, and settings of E, w and seed) through the same ledger and rule with a leading run
axis.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mechanisms.requirements import class_levels
from mechanisms.run.fixed import FixedMechanism
from mechanisms.run.mechanism import BatchRelease, Mechanism, first_run


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

    >>> from mechanisms.requirements import FixedRequirements
    >>> req = [FixedRequirements(("a", "b"), np.array([4, 2]), np.array([E, 1.0])) for E in (1, 2)]
    >>> alone = [FixedMechanism("pba", r, 2, np.random.default_rng(7)) for r in req]
    >>> batch = BatchedFixed([FixedMechanism("pba", r, 2, np.random.default_rng(7)) for r in req])
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
