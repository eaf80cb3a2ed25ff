"""A dynamic ledger seen as levels, so that the one release rule runs on it.

Under dynamic requirements every user has a ledger of its own (:mod:`mechanisms.ledgers.
dynamic`); each slot, :class:`GridLevels` groups the users by the grid codes of their planned
(eps1, eps2), and those groups are the levels of a (levels, d) count matrix, as under fixed
requirements.
"""

from __future__ import annotations

import numpy as np

from mechanisms.ledgers.columns import UNIT
from mechanisms.ledgers.dynamic import DynamicLedger
from mechanisms.ledgers.plan import Charge, SlotPlan
from mechanisms.requirements import class_levels


class GridLevels:
    """A dynamic ledger seen as levels: the users grouped by the grid codes of their planned
    (eps1, eps2), so the release rule runs on a (levels, d) matrix as under fixed requirements.

    :meth:`group` plans the slot and counts a slot's cells per level; :meth:`plan` and
    :meth:`commit` are then the :class:`~mechanisms.run.mechanism.Ledger` of those levels.
    """

    def __init__(self, ledger: DynamicLedger) -> None:
        self.ledger = ledger
        self.codes = np.zeros((2, 0), dtype=np.int64)
        # (ledger version, level of each column, level of each user, bincount keys)
        self._cache: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None
        # (codes, column plan, slot plan) of the last plan
        self._plan_cache: tuple[np.ndarray, object, SlotPlan] | None = None
        # (classes, ledger version, column of each class, users per class)
        self._class_cache: tuple[np.ndarray, int, np.ndarray, np.ndarray] | None = None

    @property
    def slot(self) -> int:
        """The next slot (from 1)."""
        return self.ledger.slot

    def group(self, cells: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(reports per (level, cell), users per level, level of each user) of the planned slot;
        ``cells`` are checked already."""
        ledger = self.ledger
        pairs, level_of_col = self._levels()
        width = d + 1
        cached = self._cache
        if (
            cached is not None
            and cached[0] == ledger.version
            and np.array_equal(cached[1], level_of_col)
        ):
            level_of_user, keys = cached[2], cached[3]
        else:
            # a narrow table stays in the cache: the gather by each user's column is 3-4x faster
            narrow = np.uint16 if pairs.size <= np.iinfo(np.uint16).max else np.int32
            level_of_user = np.take(level_of_col.astype(narrow), ledger.group)
            keys = np.multiply(level_of_user, width, dtype=np.int64)
            keys += 1
            self._cache = (ledger.version, level_of_col, level_of_user, keys)
        # one entry per user (column 0: no report), so a level's row sums to its users
        table = np.bincount(keys + cells, minlength=pairs.size * width).reshape(-1, width)
        return table[:, 1:], table.sum(axis=1), level_of_user

    def _levels(self) -> tuple[np.ndarray, np.ndarray]:
        """Plan the slot: the distinct (eps1, eps2) code pairs of the columns with users, and
        each column's level; sets :attr:`codes`."""
        ledger = self.ledger
        plan = ledger.plan_columns()
        code1, code2 = plan.stored1, plan.stored2
        width2 = int(code2.max(initial=0)) + 1
        pair = code1.astype(np.int64) * width2 + code2
        size = ledger.size[: ledger.k]
        if ledger.k <= 4096:
            pairs = np.unique(pair[size > 0])
            level_of_col = np.searchsorted(pairs, pair)
        else:
            present = np.bincount(pair, weights=size, minlength=1) > 0
            pairs = np.flatnonzero(present)
            level_of_col = np.take(np.cumsum(present) - 1, pair)
        self.codes = np.stack([pairs // width2, pairs % width2])
        return pairs, level_of_col

    def group_classes(
        self, class_counts: np.ndarray, classes: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """(reports per (level, cell), users per level) of the planned slot, from reports per
        (class, cell): what :meth:`group` counts, when every class lies in one ledger group."""
        ledger = self.ledger
        pairs, level_of_col = self._levels()
        cached = self._class_cache
        if cached is None or cached[0] is not classes or cached[1] != ledger.version:
            column_of_class = class_levels(classes, ledger.group)
            sizes = np.bincount(classes, minlength=column_of_class.size)
            self._class_cache = cached = (classes, ledger.version, column_of_class, sizes)
        column_of_class, class_sizes = cached[2], cached[3]
        used = column_of_class >= 0
        level_of_class = level_of_col[column_of_class[used]]
        counts = np.zeros((pairs.size, class_counts.shape[1]), dtype=np.int64)
        np.add.at(counts, level_of_class, class_counts[used])
        sizes = np.bincount(level_of_class, weights=class_sizes[used], minlength=pairs.size)
        return counts, sizes.astype(np.int64)

    def plan(self) -> SlotPlan:
        """The grouped levels' budgets, read from their grid codes."""
        table = self.ledger.table
        assert table is not None
        units = self.ledger.plan_columns()
        cached = self._plan_cache
        # the same codes and the same column plan (neither changed since): the same plan
        if cached is not None and cached[0] is self.codes and cached[1] is units:
            return cached[2]
        plan = SlotPlan(
            self.ledger.slot,
            table[self.codes[0]] * UNIT,
            table[self.codes[1]] * UNIT,
            nullified=units.nullified,
            projected=self.ledger.projected_count(),
        )
        self._plan_cache = (self.codes, units, plan)
        return plan

    def commit(self, published: bool) -> Charge:
        """Commit the users' ledger; the charge is per grouped level."""
        plan = self.plan()
        published = self.ledger.commit_columns(published)
        eps2 = plan.eps2 if published else np.zeros_like(plan.eps2)
        return Charge(plan.slot, plan.eps1, eps2, published, plan.nullified)
