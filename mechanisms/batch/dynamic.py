"""Runs of a mechanism under dynamic requirements (DPBD, DPBA) stepped together: one Python call
per slot.

The runs' per-user ledgers are one :class:`~mechanisms.ledgers.dynamic.DynamicLedger` whose
columns each belong to one run, their levels are grouped over the batch, and the one
:class:`~mechanisms.run.mechanism.Mechanism` releases every run's slot with the release rule's
batch axis. Each run releases exactly what it releases alone (tests/mechanisms/test_batch.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mechanisms.ledgers.columns import UNIT
from mechanisms.ledgers.plan import RunsPlan
from mechanisms.requirements import class_levels, validate_declarations
from mechanisms.run.dynamic import DynamicMechanism, UserDirectory
from mechanisms.run.mechanism import BatchRelease, Mechanism


class BatchedDynamic:
    """Runs of DPBD or DPBA (:class:`~mechanisms.run.dynamic.DynamicMechanism`) stepped together.

    The runs' per-user ledgers are held as one :class:`~mechanisms.ledgers.dynamic.
    DynamicLedger` whose columns each belong to one run (a run's users declare apart, so no
    column is shared, and groups are never merged across runs): it plans and commits the whole
    batch with one call per slot, each run nullified and published on its own. The runs' levels
    (distinct budget pairs of a run's columns) and the release rule are computed over the batch.

    Built from fresh mechanisms (their requirements, domain, noise and generators); the
    mechanisms themselves are not stepped. The batch is the ledger of its levels
    (:meth:`plan_runs`, :meth:`commit_runs`) for the one
    :class:`~mechanisms.run.mechanism.Mechanism` that releases every run's slot.
    """

    def __init__(self, mechanisms: Sequence[DynamicMechanism]) -> None:
        if not mechanisms:
            raise ValueError("a batch needs at least one run")
        first = mechanisms[0]
        for m in mechanisms:
            if m.slot != 1 or m.n or m._extra:
                raise ValueError("a batch starts from fresh mechanisms (slot 1)")
            if (type(m.ledger), m.ledger.grid_bits, m.d, m.rule.noise, m.rule.test,
                m.rule.sensitivity) != (type(first.ledger), first.ledger.grid_bits, first.d,
                                        first.rule.noise, first.rule.test,
                                        first.rule.sensitivity):
                raise ValueError("a batch holds runs of one mechanism, domain and noise")
        self.requirements = [m.requirements for m in mechanisms]
        self.runs, self.d = len(mechanisms), first.d
        widths = np.array([m.ledger.max_window for m in mechanisms], dtype=np.int64)
        ledger = type(first.ledger)(int(widths.max()), first.ledger.grid_bits, 1 << 62)
        ledger.hold_runs([m.ledger for m in mechanisms])
        self.ledger = ledger
        self.rngs = [m.rng for m in mechanisms]
        self.mechanism = Mechanism(self, first.rule, runs=self.runs)
        self._plan: RunsPlan | None = None
        self.directories = [UserDirectory() for _ in mechanisms]
        self.users = [np.zeros(0, dtype=np.int64) for _ in mechanisms]  # ledger index of each
        self._declared = [set(np.unique(r.slot).tolist()) for r in self.requirements]
        self._any_declared = set().union(*self._declared)
        self._class_cache: tuple | None = None  # the classes' columns, and their key

    @property
    def slot(self) -> int:
        """The next slot to be released (from 1)."""
        return self.ledger.slot

    def _apply(self) -> None:
        """This slot's declarations, run by run (each its own declare: no shared column)."""
        ledger, t = self.ledger, self.ledger.slot
        if t not in self._any_declared:
            return
        for b, req in enumerate(self.requirements):
            if t not in self._declared[b]:
                continue
            users, wB, EB, wF, EF = req.at(t)
            if not users:
                continue
            wB, EB, wF, EF = validate_declarations(users, wB, EB, wF, EF)
            directory = self.directories[b]
            local = directory.indices(users)
            fresh = local >= len(directory.users)
            index = np.empty(local.size, dtype=np.int64)
            index[~fresh] = self.users[b][local[~fresh]]
            order = np.argsort(local[fresh], kind="stable")
            added = ledger.n + np.arange(int(fresh.sum()), dtype=np.int64)
            index[np.flatnonzero(fresh)[order]] = added
            ledger.declare(index, wB, EB, wF, EF)
            directory.add(users, local)
            self.users[b] = np.concatenate([self.users[b], added])
            owner = np.zeros(ledger.size.shape[0], dtype=np.int64)
            owner[: ledger.owner.size] = ledger.owner[: owner.size]
            owner[ledger.group[self.users[b]]] = b
            ledger.owner = owner

    def step(self, cells: Sequence[np.ndarray]) -> BatchRelease:
        """Release the next slot of every run from its cells (-1: no report)."""
        self._apply()
        counts = []
        for b, c in enumerate(cells):
            c = np.asarray(c)
            n = self.users[b].size
            if c.shape != (n,) or c.dtype.kind not in "iu":
                raise ValueError(f"run {b}: expected {n} integer cells")
            if n and (c.min() < -1 or c.max() >= self.d):
                raise ValueError(f"run {b}: cells must lie in [0, {self.d}) or be -1")
            keep = c >= 0
            counts.append((self.users[b][keep], c[keep]))
        return self._release(counts, by_user=True)

    def step_classes(self, class_counts: Sequence[np.ndarray],
                     classes: Sequence[np.ndarray]) -> BatchRelease:
        """Release the next slot of every run from its reports per (class, cell), all users of
        a class being in one ledger column of the run."""
        self._apply()
        return self._release(list(zip(classes, class_counts, strict=True)), by_user=False)

    def _release(self, reports: list, by_user: bool) -> BatchRelease:
        ledger, d, B = self.ledger, self.d, self.runs
        slot = ledger.slot
        plan = ledger.plan_columns()
        k = ledger.k
        owner, size = ledger.owner[:k], ledger.size[:k]
        code1, code2 = plan.stored1.astype(np.int64), plan.stored2.astype(np.int64)
        width2 = int(code2.max(initial=0)) + 1
        pair = code1 * width2 + code2
        span = int(pair.max(initial=0)) + 1
        key = owner * span + pair
        live = size > 0
        keys = np.unique(key[live])  # sorted by run, then by (eps1, eps2) code: as alone
        level_of_col = np.searchsorted(keys, key)
        run_of_level = keys // span
        start = np.searchsorted(run_of_level, np.arange(B))
        rank = np.arange(keys.size) - start[run_of_level]  # a level's index within its run
        P = max(1, int(np.bincount(run_of_level, minlength=B).max(initial=0)))
        table = ledger.table
        eps1 = np.zeros((B, P))
        eps2 = np.zeros((B, P))
        eps1[run_of_level, rank] = table[(keys % span) // width2] * UNIT
        eps2[run_of_level, rank] = table[(keys % span) % width2] * UNIT
        sizes = np.zeros((B, P), dtype=np.int64)
        np.add.at(sizes, (owner[live], rank[level_of_col[live]]), size[live])
        counts = np.zeros((B, P, d), dtype=np.int64)
        if by_user:
            for b, (who, what) in enumerate(reports):
                levels = rank[level_of_col[ledger.group[who]]]
                np.add.at(counts[b], (levels, what), 1)
        else:  # every run's classes at once: sums of integers, exact in any order
            run_of, columns = self._class_columns([who for who, _ in reports])
            what = np.concatenate([np.asarray(w, dtype=np.int64) for _, w in reports])
            used = columns >= 0
            rows = run_of[used] * P + rank[level_of_col[columns[used]]]
            np.add.at(counts.reshape(B * P, d), rows, what[used])
        self._plan = RunsPlan(slot, eps1, eps2, ledger.nullified_runs.copy())
        rule = self.mechanism.rule
        first = rule.sampling(rule.scaled(eps1), sizes)
        return self.mechanism.release_runs(counts, sizes, self.rngs, first)

    def plan_runs(self) -> RunsPlan:
        """The levels' plan of the slot being released (the batch is its mechanism's ledger)."""
        if self._plan is None or self._plan.slot != self.slot:
            raise ValueError("the levels are planned when a slot is released")
        return self._plan

    def commit_runs(self, published: np.ndarray) -> np.ndarray:
        """Commit every run's decision to the runs' ledger; returns which runs published."""
        return self.ledger.commit_runs(published)

    def _class_columns(self, classes: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """For every run's classes, run after run: the run and the ledger column of each class
        (cached while the classes and the columns hold)."""
        key = (tuple(map(id, classes)), self.ledger.version)
        cached = self._class_cache
        if cached is None or cached[0] != key:
            runs, columns = [], []
            for b, cls in enumerate(classes):
                if cls.shape != self.users[b].shape:
                    raise ValueError(f"run {b}: one class per declared user expected")
                cols = class_levels(cls, self.ledger.group[self.users[b]])
                runs.append(np.full(cols.size, b, dtype=np.int64))
                columns.append(cols)
            cached = self._class_cache = (key, list(classes), np.concatenate(runs),
                                            np.concatenate(columns))
        return cached[2], cached[3]
