"""Budget ledgers of dynamic requirements, papers/000 section 5: the state DPBD (Algorithm 6) and
DPBA (Algorithm 7) share, and DPBD's rule.

Every user may declare at any slot a backward requirement (wB, EB) on the window ending at that
slot and a forward requirement (wF, EF) on the window starting there; a declaration holds until
the user's next one. A user's budgets depend only on public inputs: the declarations the user
made and the past publish/approximate decisions (docs/design.md, privacy decision 2). Users who
declared the same requirements at the same slots therefore have the same ledger, and the ledger
keeps its state once per such *group*, in one column of numpy arrays
(:class:`mechanisms.ledgers.columns.GroupColumns`):

- the charges of the last ``max_window`` slots in two ring buffers (eps1, eps2), one row per slot;
- the backward sums of eps1 and eps2 over the previous ``wB - 1`` slots, updated in O(1);
- the forward set T_B,i,t as *runs*: consecutive slots that share one forward declaration. The
  run of the current declaration is held per group; closed runs whose windows still cover the
  present sit in a pool until they expire. Per run the ledger keeps the sum of eps2 since its
  earliest live slot (the minimum over tau of the remaining forward budget is reached there);
  DPBA tracks more per run (:mod:`mechanisms.ledgers.dpba`).
- per group, the smallest share and remaining forward budget over its closed runs, recomputed
  only for the groups whose closed runs changed.

A declaration moves its users from their group to the group (old group, declaration, slot); the
old column is reused when all of its users move alike. Every ``merge_every`` slots, groups whose
whole state has become identical (their differing history has left every window) are merged
(:mod:`mechanisms.ledgers.groups`). A slot's work is thus proportional to the number of groups,
and only mapping groups to users is per user.

A removed user is *suspended* (:meth:`DynamicLedger.suspend`): it holds a null requirement that
charges nothing and nullifies nothing, until its next declaration resumes it.

Budgets are kept in integer units of 2**-40 (charges are rounded down to a unit), so window sums
are exact integers and never drift; budgets above ``MAX_BUDGET`` are treated as ``MAX_BUDGET``.
With ``grid_bits`` set, every charge is also rounded down to a fixed quasi-geometric grid (the
top ``grid_bits + 1`` significant bits kept) and stored as a 16-bit code: spending less than
allowed is always safe, and users then fall into few budget levels.

Slots are numbered from 1. :class:`DynamicLedger` plans DPBD's publication budget;
:class:`mechanisms.ledgers.dpba.DPBALedger` replaces that rule with DPBA's absorption and
nullification. Snapshots of either are written and read by
:mod:`mechanisms.ledgers.dynamic_snapshot`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mechanisms.ledgers.columns import (
    MAX_BUDGET,
    UNIT,
    GroupColumns,
    Runs,
    grid_codes,
    grid_table,
    new_runs,
    to_units,
)
from mechanisms.ledgers.groups import RUN_FIELDS, merge_groups
from mechanisms.ledgers.plan import Charge, SlotPlan


@dataclass(frozen=True)
class DynamicSlotPlan(SlotPlan):
    """A :class:`SlotPlan` per user, with what the dynamic ledgers also know.

    ``backward_budget`` is each user's EB after projection: the declared EB, or what the user
    already spent in the window when that is more. ``projected_users`` marks those users.
    """

    backward_budget: np.ndarray | None = None
    projected_users: np.ndarray | None = None


@dataclass(frozen=True)
class ColumnPlan:
    """One planned slot per group column (``k`` columns, dead ones included).

    Units and stored values (grid codes with a grid) of eps1 and eps2, the backward budget after
    projection, which columns were projected, and whether the slot is nullified.
    """

    eps1: np.ndarray
    stored1: np.ndarray
    eps2: np.ndarray
    stored2: np.ndarray
    budget: np.ndarray
    projected: np.ndarray
    nullified: bool


class DynamicLedger(GroupColumns):
    """The ledger of DPBD over users ``0..n-1`` (module doc), and the state DPBA shares.

    ``declare`` sets requirements effective from the next planned slot (registering new users,
    whose indices must continue ``0..n-1``); ``plan`` and ``commit`` work as in
    :class:`mechanisms.ledgers.fixed.BudgetLedger`, one entry per user. ``group[i]`` is user i's
    column; ``size`` counts each column's users (0: a free column); ``version`` changes whenever
    ``group`` does. A mechanism's own rule overrides :meth:`_wanted` (and :meth:`_wanted_runs`),
    and what it tracks per run :meth:`_close_runs`, :meth:`_track` and :meth:`refresh_stale`.
    """

    name = ""
    #: the run fields that are part of a group's state (compared when groups merge)
    run_state: tuple[str, ...] = RUN_FIELDS[1:7]

    def __init__(
        self, max_window: int, grid_bits: int | None = None, merge_every: int | None = None
    ) -> None:
        if max_window < 1:
            raise ValueError(f"max_window must be >= 1, got {max_window}")
        if grid_bits is not None and not 0 <= grid_bits <= 10:
            raise ValueError(f"grid_bits must be in 0..10, got {grid_bits}")
        self.max_window = int(max_window)
        self.grid_bits = grid_bits
        self.merge_every = int(merge_every or max(self.max_window, 16))
        self.table = None if grid_bits is None else grid_table(grid_bits)
        super().__init__(self.max_window, self.table)
        self._pending: DynamicSlotPlan | None = None
        self._units: ColumnPlan | None = None
        # several independent runs in one ledger (:meth:`hold_runs`): each column's run, and
        # each run's nullification of the planned slot
        self.owner: np.ndarray | None = None
        self.runs = 1
        self.nullified_runs = np.zeros(1, dtype=bool)

    # ----------------------------------------------------------------- requirements
    def declare(
        self,
        users: np.ndarray,
        wB: np.ndarray,
        EB: np.ndarray,
        wF: np.ndarray,
        EF: np.ndarray,
    ) -> None:
        """Apply validated declarations (one per distinct user) from slot ``self.slot`` on."""
        users = np.asarray(users, dtype=np.int64)
        wB, wF = np.asarray(wB, dtype=np.int64), np.asarray(wF, dtype=np.int64)
        EB, EF = np.asarray(EB, dtype=np.float64), np.asarray(EF, dtype=np.float64)
        if users.size == 0:
            return
        ordered = np.sort(users)
        if (ordered[1:] == ordered[:-1]).any():
            raise ValueError("at most one declaration per user and slot")
        wide = np.maximum(wB, wF) > self.max_window
        if wide.any():
            i = int(np.flatnonzero(wide)[0])
            field = "wB" if wB[i] > self.max_window else "wF"
            raise ValueError(
                f"user index {int(users[i])}: field {field}={max(wB[i], wF[i])} exceeds "
                f"the ledger's max_window={self.max_window}"
            )
        new = users >= self.n
        count = int(new.sum())
        if count and not np.array_equal(np.sort(users[new]), np.arange(self.n, self.n + count)):
            raise ValueError("new users must take the next free indices")
        if count:
            self.group = np.concatenate([self.group, np.full(count, -1, dtype=np.int64)])
            self.n += count
        self._pending = None
        self._units = None
        # one target column per (old column, declaration)
        src = self.group[users]
        order = np.lexsort((EF, wF, EB, wB, src))
        keys = [x[order] for x in (src, wB, EB, wF, EF)]
        first = np.ones(users.size, dtype=bool)
        for x in keys:
            first[1:] &= x[1:] == x[:-1]
        first = ~first
        first[0] = True
        starts = np.flatnonzero(first)
        counts = np.diff(np.append(starts, users.size))
        key_of = np.empty(users.size, dtype=np.int64)
        key_of[order] = np.cumsum(first) - 1
        src_k, wB_k, EB_k, wF_k, EF_k = (x[starts] for x in keys)
        # a column all of whose users move takes its first declaration in place
        old = src_k >= 0
        moved = np.bincount(src_k[old], counts[old], minlength=self.k + 1).astype(np.int64)
        at = np.maximum(src_k, 0)
        in_place = old & (moved[at] == np.append(self.size[: self.k], 0)[at])
        in_place &= np.concatenate(([True], src_k[1:] != src_k[:-1]))
        target = src_k.copy()
        fresh = ~in_place
        target[fresh] = self._allocate(int(fresh.sum()))
        copied = fresh & old
        if copied.any():
            self._copy_columns(src_k[copied], target[copied])
            np.subtract.at(self.size, src_k[copied], counts[copied])
        pristine = ~old
        if pristine.any():
            self._clear_columns(target[pristine])
        self.size[target[fresh]] = counts[fresh]
        self.group[users] = target[key_of]
        self.version += 1
        self._declare_columns(target, pristine, wB_k, EB_k, wF_k, EF_k)

    def suspend(self, users: np.ndarray) -> None:
        """Stop charging registered ``users`` from slot ``self.slot`` on (they were removed).

        A suspended user holds the null requirement (wB = wF = 1, EB = ``MAX_BUDGET``, EF = 0):
        it is charged nothing and nullifies no slot. The charges it already made stay in its
        windows and the forward windows it opened before keep binding, so a later declaration,
        which resumes it, still cannot overspend them. Once all of those have passed, suspended
        users' states are equal and the periodic merge gives them one column.
        """
        users = np.asarray(users, dtype=np.int64)
        if users.size and (users.min() < 0 or users.max() >= self.n):
            raise ValueError(f"only registered users (indices 0..{self.n - 1}) can be suspended")
        one = np.ones(users.size, dtype=np.int64)
        self.declare(users, one, np.full(users.size, MAX_BUDGET), one, np.zeros(users.size))

    def _declare_columns(
        self,
        cols: np.ndarray,
        new: np.ndarray,
        wB: np.ndarray,
        EB: np.ndarray,
        wF: np.ndarray,
        EF: np.ndarray,
    ) -> None:
        """Apply one declaration per column (``new``: columns of users without a history)."""
        t = self.slot
        EB_units, EF_units = to_units(EB), to_units(EF)
        # backward: a new window needs its sums over the previous wB - 1 slots afresh
        changed_b = ~new & (wB != self.wB[cols])
        if changed_b.any():
            idx = cols[changed_b]
            self._move_windows(idx, self.wB[idx], wB[changed_b])
        self.wB[cols], self.EB[cols] = wB, EB_units
        # forward: a new declaration closes the current run and opens one
        changed_f = new | (wF != self.wF[cols]) | (self.EF[cols] != EF)
        idx = cols[changed_f]
        self.wF[idx], self.EF[idx] = wF[changed_f], EF[changed_f]
        if idx.size:
            old = self.current.take(idx)
            live = (old.a <= t - 1) & (t <= t - 1 + old.w - 1) & ~new[changed_f]
            if live.any():
                closed = old.take(live)
                closed.b[:] = t - 1
                self._close_runs(closed, t)
                self.pool.extend(closed)
                np.add.at(self.npool, closed.col, 1)
                np.minimum.at(self.pool_share, closed.col, closed.share)
                np.minimum.at(self.pool_remain, closed.col, closed.half - closed.spent)
            self.current.put(idx, new_runs(idx, t, wF[changed_f], EF_units[changed_f]))

    def _move_windows(self, cols: np.ndarray, old: np.ndarray, new: np.ndarray) -> None:
        """Move backward sums from windows of ``old`` to ``new`` slots: add or drop the slots
        between them (ages min(old, new) - 1 .. max(old, new) - 2 before the next slot)."""
        first = np.minimum(old, new) - 1
        count = np.abs(new - old)
        sign = np.where(new > old, 1, -1)
        order = np.argsort(count)
        cols, first, count, sign = cols[order], first[order], count[order], sign[order]
        # blocks of similar length keep the padded matrices small
        edges = np.searchsorted(count, [1, 8, 32, 96, self.max_window + 1])
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            if lo == hi:
                continue
            part = slice(int(lo), int(hi))
            last = self.slot - 1
            for ring, sums in ((self.ring1, self.sum1), (self.ring2, self.sum2)):
                moved = ring.sum_range(cols[part], last, first[part], count[part])
                if moved is not None:
                    sums[cols[part]] += sign[part] * moved

    # ----------------------------------------------------------------- planning
    def _round(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Charges as (units, stored): rounded down to the grid when there is one."""
        if self.table is None:
            return units, units
        codes = grid_codes(units, self.grid_bits or 0)
        return np.take(self.table, codes), codes

    def _forward(self, cur: Runs) -> tuple[np.ndarray, np.ndarray]:
        """Per column: the smallest live share and the smallest remaining forward eps2 budget."""
        pool_share, pool_remain = self._pool_minima()
        share = np.minimum(cur.share, pool_share)
        remain = np.subtract(cur.half, cur.spent)
        np.minimum(remain, pool_remain, out=remain)
        return share, np.maximum(remain, 0, out=remain)

    def _suspended(self, cols: np.ndarray | slice) -> np.ndarray:
        """Whether each of ``cols`` is suspended (its declaration is the null one, EF = 0)."""
        return self.EF[cols] == 0.0

    def plan_columns(self) -> ColumnPlan:
        """Plan the next slot per column, without changing the ledger; repeated calls agree."""
        if self._units is not None:
            return self._units
        k = self.k
        sum1, sum2, EB = self.sum1[:k], self.sum2[:k], self.EB[:k]
        cur = self._current()
        spent = sum1 + sum2
        budget = np.maximum(EB, spent)
        projected = spent > EB
        left = budget - spent
        share, remain = self._forward(cur)
        half_budget = budget >> 1  # budgets are >= 0
        bound1 = half_budget - sum1
        np.minimum(bound1, left, out=bound1)
        np.maximum(bound1, 0, out=bound1)
        eps1, stored1 = self._round(np.minimum(share, bound1, out=bound1))
        bound2 = half_budget - sum2
        left -= eps1
        np.minimum(bound2, left, out=bound2)
        np.maximum(bound2, 0, out=bound2)
        nullified = False
        if self.owner is not None:  # several runs: each run nullified or not
            self.nullified_runs = np.zeros(self.runs, dtype=bool)
            want = self._wanted_runs(cur, remain)
            eps2, stored2 = self._round(np.minimum(want, bound2, out=bound2))
            dead = self.nullified_runs[self.owner[:k]]
            if dead.any():
                eps2, stored2 = np.where(dead, 0, eps2), np.where(dead, 0, stored2)
            nullified = bool(self.nullified_runs.all())
        else:
            nullified, want = self._wanted(cur, remain)
            if nullified:
                eps2 = np.zeros(k, dtype=np.int64)
                stored2 = eps2 if self.table is None else np.zeros(k, dtype=np.uint16)
            else:
                eps2, stored2 = self._round(np.minimum(want, bound2, out=bound2))
        self._units = ColumnPlan(eps1, stored1, eps2, stored2, budget, projected, nullified)
        return self._units

    def plan(self) -> DynamicSlotPlan:
        """Plan the next slot without changing the ledger; repeated calls agree."""
        if self._pending is None:
            p = self.plan_columns()
            g = self.group
            self._pending = DynamicSlotPlan(
                self.slot,
                p.eps1[g] * UNIT,
                p.eps2[g] * UNIT,
                nullified=p.nullified,
                projected=self.projected_count(),
                backward_budget=p.budget[g] * UNIT,
                projected_users=p.projected[g],
            )
        return self._pending

    def projected_count(self) -> int:
        """Users whose backward budget is projected at the planned slot."""
        p = self.plan_columns()
        return int(self.size[: self.k][p.projected].sum())

    # ----------------------------------------------------------------- committing
    def commit(self, published: bool) -> Charge:
        """Record the planned slot's decision and advance; eps2 is charged only if published."""
        p = self.plan_columns()
        projected = self.projected_count()
        t = self.slot
        published = self.commit_columns(published)
        g = self.group
        eps2 = p.eps2[g] * UNIT if published else np.zeros(self.n)
        extra = {"projected": projected}
        return Charge(t, p.eps1[g] * UNIT, eps2, published, p.nullified, extra)

    def commit_columns(self, published: bool) -> bool:
        """Record the planned slot's decision and advance; returns whether it was published."""
        p = self.plan_columns()
        published = bool(published) and not p.nullified
        eps1, stored1, eps2, stored2 = p.eps1, p.stored1, p.eps2, p.stored2
        if not published:
            eps2, stored2 = np.zeros_like(eps2), np.zeros_like(stored2)
        t, k = self.slot, self.k
        cols = np.arange(k)
        self.ring1.write(t, stored1)
        self.ring2.write(t, stored2)
        # backward sums move to the window before t + 1: add slot t, drop slot t - wB + 1
        ages = self.wB[:k] - 1
        self.sum1[:k] += eps1 - self.ring1.at_age(cols, t, ages)
        if published:
            self.sum2[:k] += eps2
        gone = self.ring2.at_nonzero(cols, t, t - ages)
        if gone is not None:
            self.sum2[:k] -= gone
        charged = published and bool(stored2.any())
        self._advance(self._current(), eps2 if charged else None, t, opened=True)
        if len(self.pool):
            if charged:
                # every closed run of a column was charged alike
                np.subtract(
                    self.pool_remain[:k], eps2, out=self.pool_remain[:k], where=self.npool[:k] > 0
                )
            self._advance(self.pool, eps2[self.pool.col] if charged else None, t, opened=False)
            self._expire_pool(t)
        self._next_slot()
        if self.slot % self.merge_every == 0:
            merge_groups(self)
        return published

    def commit_runs(self, published: np.ndarray) -> np.ndarray:
        """:meth:`commit_columns` for a ledger of several runs: ``published`` per run; returns
        which runs published (not nullified). A run's columns move exactly as in a ledger of
        its own; groups are never merged (a merge could join columns of different runs)."""
        p = self.plan_columns()
        t, k = self.slot, self.k
        done = np.asarray(published, dtype=bool) & ~self.nullified_runs
        charged = done[self.owner[:k]]
        eps1, stored1 = p.eps1, p.stored1
        eps2, stored2 = np.where(charged, p.eps2, 0), np.where(charged, p.stored2, 0)
        cols = np.arange(k)
        self.ring1.write(t, stored1)
        self.ring2.write(t, stored2)
        # as commit_columns, with zero charges for the runs that did not publish (adding zero
        # units is what skipping does)
        ages = self.wB[:k] - 1
        self.sum1[:k] += eps1 - self.ring1.at_age(cols, t, ages)
        self.sum2[:k] += eps2
        gone = self.ring2.at_nonzero(cols, t, t - ages)
        if gone is not None:
            self.sum2[:k] -= gone
        self._advance(self._current(), eps2, t, opened=True)
        if len(self.pool):
            np.subtract(
                self.pool_remain[:k], eps2, out=self.pool_remain[:k], where=self.npool[:k] > 0
            )
            self._advance(self.pool, eps2[self.pool.col], t, opened=False)
            self._expire_pool(t)
        self._next_slot()
        return done

    def _expire_pool(self, t: int) -> None:
        """Drop the closed runs whose windows end at ``t``."""
        expired = t + 1 > self.pool.b + self.pool.w - 1
        if expired.any():
            cols = self.pool.col[expired]
            np.subtract.at(self.npool, cols, 1)
            self.pool_dirty[cols] = True
            self.pool.keep(~expired)

    def _next_slot(self) -> None:
        self.slot += 1
        self._pending = None
        self._units = None

    def _advance(self, runs: Runs, eps2: np.ndarray | None, t: int, opened: bool) -> None:
        """Move the runs' sums from slot t to t + 1 after eps2 was charged at t (None: zero)."""
        if eps2 is not None:
            runs.spent += eps2
        leaving = t - runs.w + 1  # lo moves past this slot
        idx = np.flatnonzero(leaving >= runs.a)
        if idx.size and self.ring2.nonzero.any():
            gone = self.ring2.at_nonzero(runs.col[idx], t, leaving[idx])
            if gone is not None:
                runs.spent[idx] -= gone
                if not opened:
                    self.pool_dirty[runs.col[idx[gone != 0]]] = True
        self._track(runs, eps2, t, opened, leaving)

    def _wanted(self, cur: Runs, remain: np.ndarray) -> tuple[bool, np.ndarray]:
        """Whether the planned slot is nullified, and per column the eps2 units the mechanism
        asks for before the backward bound, from its smallest remaining forward budget
        ``remain`` (>= 0). DPBD (Algorithm 6): half of it, never nullified."""
        return False, remain >> 1

    def _wanted_runs(self, cur: Runs, remain: np.ndarray) -> np.ndarray:
        """:meth:`_wanted` for a ledger of several runs, which marks the runs it nullifies in
        :attr:`nullified_runs`."""
        return remain >> 1

    def _close_runs(self, closed: Runs, t: int) -> None:
        """Runs closed at slot ``t`` (their last slot is t - 1), about to join the pool."""

    def _track(self, runs: Runs, eps2: np.ndarray | None, t: int, opened: bool,
               leaving: np.ndarray) -> None:
        """What the mechanism tracks per run besides its sums, moved from slot t to t + 1
        (:meth:`_advance`; ``leaving`` is each run's slot leaving its window)."""

    def refresh_stale(self) -> None:
        """Bring what the mechanism tracks per run up to date, so that equal states look equal
        (before groups are merged)."""

    def hold_runs(self, ledgers: Sequence[DynamicLedger]) -> None:
        """Make this fresh ledger hold several independent runs, one per ledger of ``ledgers``
        (fresh ledgers of the runs alone): each column then belongs to one run
        (:attr:`owner`), and each run is nullified on its own (:attr:`nullified_runs`)."""
        self.owner = np.zeros(0, dtype=np.int64)
        self.runs = len(ledgers)
        self.nullified_runs = np.zeros(self.runs, dtype=bool)


class DPBDLedger(DynamicLedger):
    """DPBD (Algorithm 6): half the smallest remaining forward budget, within the backward one."""

    name = "dpbd"
