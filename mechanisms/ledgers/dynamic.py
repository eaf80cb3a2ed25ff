"""Budget ledgers of DPBD (Algorithm 6) and DPBA (Algorithm 7), papers/000 section 5.

Every user may declare at any slot a backward requirement (wB, EB) on the window ending at that
slot and a forward requirement (wF, EF) on the window starting there; a declaration holds until
the user's next one. A user's budgets depend only on public inputs: the declarations the user
made and the past publish/approximate decisions (docs/design.md, privacy decision 2). Users who
declared the same requirements at the same slots therefore have the same ledger, and the ledger
keeps its state once per such *group*, in one column of numpy arrays:

- the charges of the last ``max_window`` slots in two ring buffers (eps1, eps2), one row per slot;
- the backward sums of eps1 and eps2 over the previous ``wB - 1`` slots, updated in O(1);
- the forward set T_B,i,t as *runs*: consecutive slots that share one forward declaration. The
  run of the current declaration is held per group; closed runs whose windows still cover the
  present sit in a pool until they expire. Per run the ledger keeps the sum of eps2 since its
  earliest live slot (the minimum over tau of the remaining forward budget is reached there),
  and, for DPBA, the slots tau maximising and minimising
  ``V_tau = sum(eps2[tau..t-1]) - (t - tau + 1) * share``: all live V_tau move by the same amount
  from one slot to the next, so only a new slot or the expiry of the tracked one needs work. The
  smallest V serves only slots that are not nullified: when its slot expires the run is marked
  stale and searched again when needed (in closed form when nothing was charged in its window).
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
Rounding down may leave DPBA's nullification border R_FN a few units below a slot t it equals in
exact arithmetic: such a tie nullifies t as Algorithm 7 says (t <= R_FN), within a slack of
``TIE_UNITS_PER_SLOT * max_window + TIE_UNITS_BASE`` units (:meth:`DynamicLedger.borders`
reports the border as rounded).
With ``grid_bits`` set, every charge is also rounded down to a fixed quasi-geometric grid (the
top ``grid_bits + 1`` significant bits kept) and stored as a 16-bit code: spending less than
allowed is always safe, and users then fall into few budget levels.

Slots are numbered from 1.

This file is long because it holds one class: every method of :class:`DynamicLedger` keeps the
same column layout invariant (group, size, rings, runs and pool agree), and splitting the class
would spread that invariant over modules. Its storage lives in :mod:`mechanisms.ledgers.columns`
and its group merging in :mod:`mechanisms.ledgers.groups`.
"""

from __future__ import annotations

import io
import zipfile
import zlib
from dataclasses import dataclass

import numpy as np

from mechanisms.ledgers.columns import (
    _INT_MAX,
    _INT_MIN,
    _NONE,
    _SCAN_CELLS,
    MAX_BUDGET,
    UNIT,
    _new_runs,
    _Pool,
    _Ring,
    _Runs,
    grid_codes,
    grid_table,
    to_units,
)
from mechanisms.ledgers.groups import COL_FIELDS, RUN_FIELDS, merge_groups
from mechanisms.ledgers.plan import Charge, SlotPlan

# DPBA nullifies a slot whose border falls short of it by at most this many units (per slot of
# the ledger's longest window, plus a base): what rounding every share and charge down can lose
TIE_UNITS_PER_SLOT = 4
TIE_UNITS_BASE = 16


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


# per-column scalar state, in the order the merge step compares it

# snapshots (:meth:`DynamicLedger.to_bytes`): the scalars in "meta", in this order, and the
# per-column integer state in "columns", one row per field (``pool_dirty`` as 0/1)
_SNAPSHOT_FORMAT = 1
_META = ("format", "max_window", "grid_bits", "merge_every", "slot", "n", "k", "version")
_SAVED_COLUMNS = (
    "wB",
    "EB",
    "sum1",
    "sum2",
    "wF",
    "size",
    "npool",
    "pool_share",
    "pool_remain",
    "pool_dirty",
)
_SNAPSHOT_KEYS = frozenset(
    {"meta", "name", "columns", "EF", "current", "pool", "group", "free", "rings", "nonzero"}
)


class DynamicLedger:
    """Common state of DPBD and DPBA over users ``0..n-1``; see the module docstring.

    ``declare`` sets requirements effective from the next planned slot (registering new users,
    whose indices must continue ``0..n-1``); ``plan`` and ``commit`` work as in
    :class:`mechanisms.ledgers.fixed.BudgetLedger`, one entry per user. ``group[i]`` is user i's
    column; ``size`` counts each column's users (0: a free column); ``version`` changes whenever
    ``group`` does.
    """

    name = ""
    absorbs = False

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
        # DPBA's tie slack: units a border may lose to rounding (see :meth:`_reaches_border`)
        self.tie_units = TIE_UNITS_PER_SLOT * self.max_window + TIE_UNITS_BASE
        self.table = None if grid_bits is None else grid_table(grid_bits)
        self.slot = 1
        self.n = 0
        self.k = 0  # columns in use: live and free ones below k
        self.group = np.zeros(0, dtype=np.int64)
        self.version = 0  # changes whenever ``group`` does
        self.free = np.zeros(0, dtype=np.int64)
        self.ring1 = _Ring(self.max_window, self.table)
        self.ring2 = _Ring(self.max_window, self.table)
        z = np.zeros(0, dtype=np.int64)
        self.wB, self.EB, self.sum1, self.sum2 = z.copy(), z.copy(), z.copy(), z.copy()
        self.wF, self.size, self.npool = z.copy(), z.copy(), z.copy()
        # per column, the smallest share and remaining forward budget over its closed runs,
        # kept up to date except for the columns marked dirty
        self.pool_share, self.pool_remain = z.copy(), z.copy()
        self.pool_dirty = np.zeros(0, dtype=bool)
        self.EF = np.zeros(0)
        self.current = _Runs.empty()
        self.pool: _Runs = _Pool()
        self._pending: DynamicSlotPlan | None = None
        self._units: ColumnPlan | None = None
        self._view: _Runs | None = None
        # several independent runs in one ledger (mechanisms.dynamic_batch.BatchedDynamic): each
        # column's run and tie slack, and each run's nullification of the planned slot
        self.owner: np.ndarray | None = None
        self.runs = 1
        self.run_tie_units: np.ndarray | None = None
        self.nullified_runs = np.zeros(1, dtype=bool)

    # ----------------------------------------------------------------- columns
    @property
    def groups(self) -> int:
        """Number of live groups (columns with users)."""
        return int(np.count_nonzero(self.size[: self.k]))

    def _current(self) -> _Runs:
        """The current runs of columns ``0..k-1`` (views)."""
        view = self._view
        if view is None or len(view) != self.k or view.col.base is not self.current.col:
            view = self._view = self.current.take(slice(0, self.k))
        return view

    def _cap(self) -> int:
        return int(self.size.shape[0])

    def _reserve(self, k: int) -> None:
        """Make room for ``k`` columns; unused columns hold an empty, inert state."""
        cap = self._cap()
        if k <= cap:
            return
        # live columns never outnumber users: growth stops at n (k above n only if it must)
        new = max(k, min(cap + cap // 2, self.n), 16)
        pad = new - cap
        z = np.zeros(pad, dtype=np.int64)
        for f in ("wB", "EB", "sum1", "sum2", "wF", "size", "npool"):
            setattr(self, f, np.concatenate([getattr(self, f), z]))
        self.EF = np.concatenate([self.EF, np.zeros(pad)])
        self.pool_share = np.concatenate([self.pool_share, z + _NONE])
        self.pool_remain = np.concatenate([self.pool_remain, z + _NONE])
        self.pool_dirty = np.concatenate([self.pool_dirty, np.zeros(pad, dtype=bool)])
        self.current.extend(_new_runs(np.arange(cap, new), self.slot, z + 1, z))
        self.ring1.resize(new)
        self.ring2.resize(new)

    def _allocate(self, count: int) -> np.ndarray:
        """``count`` free columns: reused ones first, then fresh ones above ``k``."""
        reuse, self.free = self.free[:count], self.free[count:]
        more = count - reuse.size
        fresh = np.arange(self.k, self.k + more, dtype=np.int64)
        self._reserve(self.k + more)
        self.k += more
        return np.concatenate([reuse, fresh])

    def _copy_columns(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Give columns ``dst`` the whole state of ``src`` (pairwise), pool runs included."""
        for f in (*COL_FIELDS, "npool"):
            arr = getattr(self, f)
            arr[dst] = arr[src]
        self.current.put(dst, self.current.take(src))
        self.current.col[dst] = dst
        for ring in (self.ring1, self.ring2):
            ring.copy_columns(src, dst)
        having = self.npool[src] > 0
        self.pool_dirty[dst] = having
        self.pool_share[dst] = _NONE
        self.pool_remain[dst] = _NONE
        if having.any() and len(self.pool):
            s, d = src[having], dst[having]
            order = np.argsort(s, kind="stable")
            s, d = s[order], d[order]
            # the pool runs of the source columns (a mask over columns: one pass over the pool)
            mark = np.zeros(self.k, dtype=bool)
            mark[s] = True
            mine = np.flatnonzero(np.take(mark, self.pool.col))
            cols = self.pool.col[mine]
            left = np.searchsorted(s, cols, "left")
            reps = np.searchsorted(s, cols, "right") - left
            keep = reps > 0
            runs, left, counts = mine[keep], left[keep], reps[keep]
            idx = np.repeat(runs, counts)
            rank = np.arange(idx.size) - np.repeat(np.cumsum(counts) - counts, counts)
            copies = self.pool.take(idx)
            copies.col = d[np.repeat(left, counts) + rank]
            self.pool.extend(copies)

    def _clear_columns(self, cols: np.ndarray) -> None:
        """Reset ``cols`` to the empty state of a user that never declared."""
        for f in ("wB", "EB", "sum1", "sum2", "wF", "npool"):
            getattr(self, f)[cols] = 0
        self._no_pool(cols)
        self.EF[cols] = 0.0
        z = np.zeros(cols.size, dtype=np.int64)
        self.current.put(cols, _new_runs(cols, self.slot, z + 1, z))
        for ring in (self.ring1, self.ring2):
            ring.clear_columns(cols)

    def release_columns(self, cols: np.ndarray) -> None:
        """Free columns left without users: drop their pool runs, keep them for reuse."""
        if cols.size == 0:
            return
        if self.npool[cols].any():
            dead = np.zeros(self.k, dtype=bool)
            dead[cols] = True
            self.pool.keep(~dead[self.pool.col])
        self.npool[cols] = 0
        self._no_pool(cols)
        self.free = np.concatenate([self.free, cols])

    def _no_pool(self, cols: np.ndarray) -> None:
        """Mark ``cols`` as having no closed runs."""
        self.pool_share[cols] = _NONE
        self.pool_remain[cols] = _NONE
        self.pool_dirty[cols] = False

    def _pool_minima(self) -> tuple[np.ndarray, np.ndarray]:
        """Per column, the smallest share and remaining budget (half - spent) over its closed
        runs (``_NONE`` without any): the dirty columns are recomputed from their runs."""
        k = self.k
        dirty = np.flatnonzero(self.pool_dirty[:k])
        if dirty.size:
            self.pool_share[dirty] = _NONE
            self.pool_remain[dirty] = _NONE
            pool = self.pool
            if len(pool):
                sel = np.flatnonzero(np.take(self.pool_dirty, pool.col))
                cols = pool.col[sel]
                np.minimum.at(self.pool_share, cols, pool.share[sel])
                np.minimum.at(self.pool_remain, cols, pool.half[sel] - pool.spent[sel])
            self.pool_dirty[dirty] = False
        return self.pool_share[:k], self.pool_remain[:k]

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
                # the slot t was a candidate of the open run but is no run slot any more
                stale = (closed.m_hi >= t) | (closed.m_lo >= t)
                if self.absorbs and stale.any():
                    self._rescan(closed, np.flatnonzero(stale), t)
                self.pool.extend(closed)
                np.add.at(self.npool, closed.col, 1)
                np.minimum.at(self.pool_share, closed.col, closed.share)
                np.minimum.at(self.pool_remain, closed.col, closed.half - closed.spent)
            self.current.put(idx, _new_runs(idx, t, wF[changed_f], EF_units[changed_f]))

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

    def _forward(self, cur: _Runs) -> tuple[np.ndarray, np.ndarray]:
        """Per column: the smallest live share and the smallest remaining forward eps2 budget."""
        pool_share, pool_remain = self._pool_minima()
        share = np.minimum(cur.share, pool_share)
        remain = np.subtract(cur.half, cur.spent)
        np.minimum(remain, pool_remain, out=remain)
        return share, np.maximum(remain, 0, out=remain)

    def _absorption_runs(self, cur: _Runs) -> np.ndarray:
        """:meth:`_absorption` for a ledger of several runs: sets :attr:`nullified_runs` and
        returns eps_AF, computed (as for one run) only for the runs not nullified."""
        t, k = self.slot, self.k
        owner = self.owner[:k]
        null = np.zeros(self.runs, dtype=bool)
        null[owner[self._reaches_border(cur, t) & (self.size[:k] > 0)]] = True
        pool = self.pool
        if len(pool):
            hit = self._reaches_border(pool, t) & ~self._suspended(pool.col)
            null[owner[pool.col[hit]]] = True
        self.nullified_runs = null
        absorb = np.zeros(k, dtype=np.int64)
        live = np.flatnonzero(~null[owner])
        if live.size:
            sub = cur.take(live)
            absorb[live] = self._absorb(sub, t)
            cur.put(live, sub)
            if len(pool):
                sel = np.flatnonzero(~null[owner[pool.col]])
                if sel.size:
                    psub = pool.take(sel)
                    values = self._absorb(psub, t)
                    pool.put(sel, psub)
                    np.maximum.at(absorb, psub.col, values)
        return absorb

    def _absorption(self, cur: _Runs) -> tuple[bool, np.ndarray]:
        """DPBA: whether the slot is nullified, and each column's absorption budget eps_AF."""
        t = self.slot
        hit = self._reaches_border(cur, t) & (self.size[: self.k] > 0)
        nullified = bool(hit.any())
        pool = self.pool
        if not nullified and len(pool):
            hit = np.flatnonzero(self._reaches_border(pool, t))
            # a suspended column is charged nothing: publishing cannot overspend its windows
            nullified = not self._suspended(pool.col[hit]).all()
        if nullified:  # no publication budget is spent: eps_AF is not needed
            return True, np.zeros(self.k, dtype=np.int64)
        absorb = self._absorb(cur, t)
        if len(pool):
            np.maximum.at(absorb, pool.col, self._absorb(pool, t))
        return False, absorb

    def _reaches_border(self, runs: _Runs, t: int) -> np.ndarray:
        """Per run, whether slot ``t`` is at or before its border: t <= t_FN,tau for the slot
        tau of largest V, i.e. V_tau = spent - (t - tau + 1) * share >= 0, ties included.

        A V short of 0 by at most ``tie_units`` counts as 0: the shares and charges it sums are
        rounded down, so a border that is exactly t in exact arithmetic may come out a few units
        below t (nullifying spends nothing, so erring this way is safe). The slack stays below
        half a share, so a slot with nothing spent since never nullifies; with a zero share
        (EF below one unit per slot) any charge nullifies.
        """
        v_hi = np.subtract(t + 1, runs.m_hi)
        v_hi *= runs.share
        np.subtract(runs.s_hi, v_hi, out=v_hi)
        slack = np.subtract(runs.share, 1)
        slack >>= 1
        tie = self.tie_units if self.owner is None else self.run_tie_units[self.owner[runs.col]]
        np.minimum(slack, tie, out=slack)
        return v_hi >= -slack

    def refresh_stale(self) -> None:
        """Find the smallest V of every run marked stale (DPBA), so that equal states look
        equal."""
        if self.absorbs:
            for runs in (self._current(), self.pool):
                stale = np.flatnonzero(runs.stale)
                if stale.size:
                    self._rescan(runs, stale, self.slot)

    def _absorb(self, runs: _Runs, t: int) -> np.ndarray:
        """Per run, the largest absorption -V_tau over its live slots for slot ``t``."""
        stale = runs.stale != 0
        charged = np.flatnonzero(stale & (runs.spent != 0))
        if charged.size:
            self._rescan(runs, charged, t)
            stale[charged] = False
        out = np.subtract(t + 1, runs.m_lo)
        out *= runs.share
        out -= runs.s_lo
        if stale.any():
            # nothing charged in the window: -V_tau is largest at the oldest live slot
            quiet = np.subtract(t + 1, runs.a)
            np.minimum(quiet, runs.w, out=quiet)
            quiet *= runs.share
            np.copyto(out, quiet, where=stale)
        return out

    def borders(self) -> np.ndarray:
        """DPBA's R_FN,i for the next slot: the largest t_FN,i,tau over each user's T_B,i,t.

        From the rounded units: a slot a few units beyond a border is a tie and is nullified
        too (:meth:`_reaches_border`).
        """
        t = self.slot
        out = np.full(self.k, -np.inf)
        for runs in (self._current(), self.pool):
            if not len(runs):
                continue
            live = runs.share > 0
            with np.errstate(divide="ignore", invalid="ignore"):
                border = np.where(
                    live, runs.s_hi / np.where(live, runs.share, 1) + runs.m_hi - 1, np.inf
                )
            border = np.where(~live & (runs.s_hi == 0), t - 1, border)
            np.maximum.at(out, runs.col, border)
        out[self._suspended(slice(0, self.k))] = -np.inf  # suspended users nullify nothing
        return out[self.group]

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
            if self.absorbs:
                want = np.minimum(np.maximum(self._absorption_runs(cur), 0), remain)
            else:
                want = remain >> 1
            eps2, stored2 = self._round(np.minimum(want, bound2, out=bound2))
            dead = self.nullified_runs[self.owner[:k]]
            if dead.any():
                eps2, stored2 = np.where(dead, 0, eps2), np.where(dead, 0, stored2)
            nullified = bool(self.nullified_runs.all())
        else:
            if self.absorbs:
                nullified, absorb = self._absorption(cur)
                want = np.minimum(np.maximum(absorb, 0), remain)
            else:
                want = remain >> 1  # remain >= 0
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

    def _advance(self, runs: _Runs, eps2: np.ndarray | None, t: int, opened: bool) -> None:
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
        if not self.absorbs:
            return
        if eps2 is not None:
            runs.s_hi += eps2
            runs.s_lo += eps2
        nxt = t + 1
        if opened:
            # slot t + 1 joins with V = -share; ties go to the newer slot (it expires later):
            # -share >= V_m = s - (nxt - m + 1) * share  iff  (nxt - m) * share >= s
            for m, s, take_new in (
                (runs.m_hi, runs.s_hi, np.greater_equal),
                (runs.m_lo, runs.s_lo, np.less_equal),
            ):
                gap = np.subtract(nxt, m)
                gap *= runs.share
                take = take_new(gap, s)
                np.copyto(m, nxt, where=take)
                np.copyto(s, 0, where=take)
        lo = np.maximum(runs.a, leaving + 1)
        expired = runs.m_hi < lo
        lost = runs.m_lo < lo
        if not opened:
            live = lo <= runs.b
            expired &= live
            lost &= live
        runs.stale |= lost
        if expired.any():
            self._rescan(runs, np.flatnonzero(expired), nxt)

    def _rescan(self, runs: _Runs, idx: np.ndarray, nxt: int) -> None:
        """Find the live slots of largest and smallest V for ``runs[idx]`` as of slot ``nxt``."""
        # nothing charged since the earliest live slot: V_tau = -(nxt - tau + 1) * share, whose
        # largest value is at the newest live slot and smallest at the oldest (newest on ties)
        quiet = runs.spent[idx] == 0
        if quiet.any():
            q = idx[quiet]
            a, w, b, share = runs.a[q], runs.w[q], runs.b[q], runs.share[q]
            lo = np.maximum(a, nxt - w + 1)
            hi = np.minimum(b, nxt)
            empty = hi < lo  # no live slot: as the scan below
            runs.m_hi[q] = np.where(empty, nxt, hi)
            runs.m_lo[q] = np.where(empty, nxt, np.where(share > 0, lo, hi))
            runs.s_hi[q] = 0
            runs.s_lo[q] = 0
            runs.stale[q] = 0
            idx = idx[~quiet]
            if idx.size == 0:
                return
        # the scan holds (window, runs) matrices: runs in chunks bound its memory
        step = max(_SCAN_CELLS // self.max_window, 1)
        for start in range(0, idx.size, step):
            self._scan(runs, idx[start : start + step], nxt)

    def _scan(self, runs: _Runs, idx: np.ndarray, nxt: int) -> None:
        """The scan of :meth:`_rescan` over the live slots of ``runs[idx]``."""
        sub = runs.take(idx)
        lo = np.maximum(sub.a, nxt - sub.w + 1)
        hi = np.minimum(sub.b, nxt)
        length = int((nxt - lo).max()) + 1  # j = nxt - tau runs over 0 .. nxt - lo
        charged = self.ring2.recent(sub.col, nxt - 1, max(length - 1, 1))[: length - 1]
        spent = np.zeros((length, idx.shape[0]), dtype=np.int64)
        np.cumsum(charged, axis=0, out=spent[1:])
        j = np.arange(length)[:, None]
        v = spent - (j + 1) * sub.share[None, :]
        valid = (j >= (nxt - hi)[None, :]) & (j <= (nxt - lo)[None, :])
        j_hi = np.argmax(np.where(valid, v, _INT_MIN), axis=0)
        j_lo = np.argmin(np.where(valid, v, _INT_MAX), axis=0)
        cols = np.arange(idx.shape[0])
        sub.m_hi, sub.s_hi = nxt - j_hi, spent[j_hi, cols]
        sub.m_lo, sub.s_lo = nxt - j_lo, spent[j_lo, cols]
        sub.stale = np.zeros(idx.shape[0], dtype=np.int64)
        runs.put(idx, sub)

    # ----------------------------------------------------------------- snapshots
    def to_bytes(self) -> bytes:
        """The whole ledger state, compressed; :meth:`from_bytes` takes it back.

        Only the ``k`` columns in use are saved (the rest is capacity); plan caches are not.
        """
        if _ledger_classes().get(self.name) is not type(self):
            raise TypeError(f"{type(self).__name__} is not a registered dynamic ledger")
        k, cur, pool = self.k, self.current, self.pool
        bits = -1 if self.grid_bits is None else int(self.grid_bits)
        meta = (_SNAPSHOT_FORMAT, self.max_window, bits, self.merge_every, self.slot, self.n, k)
        buffer = io.BytesIO()
        np.savez_compressed(
            buffer,
            meta=np.array([*meta, self.version], dtype=np.int64),
            name=np.array(self.name),
            columns=_matrix(self, _SAVED_COLUMNS, k),
            EF=self.EF[:k],
            current=_matrix(cur, RUN_FIELDS, k),
            pool=_matrix(pool, RUN_FIELDS, len(pool)),
            group=self.group,
            free=self.free,
            rings=np.stack([self.ring1.data[:, :k], self.ring2.data[:, :k]]),
            nonzero=np.stack([self.ring1.nonzero, self.ring2.nonzero]),
        )
        return buffer.getvalue()

    @staticmethod
    def from_bytes(data: bytes) -> DynamicLedger:
        """A ledger equal to the one that wrote ``data`` (DPBD or DPBA, as saved).

        Raises ``ValueError`` when ``data`` is not a snapshot of this format.
        """
        saved = _read_snapshot(data)
        meta = dict(zip(_META, saved["meta"].tolist(), strict=True))
        k, n, width = meta["k"], meta["n"], meta["max_window"]
        bits = None if meta["grid_bits"] == -1 else meta["grid_bits"]
        if meta["merge_every"] < 1 or meta["slot"] < 1:
            raise ValueError("not a dynamic ledger snapshot: bad merge_every or slot")
        cls = _ledger_classes().get(str(saved["name"]))
        if cls is None:
            raise ValueError(f"not a dynamic ledger snapshot: unknown ledger {saved['name']}")
        _check_snapshot(saved, k, n, width, np.int64 if bits is None else np.uint16)
        try:
            ledger = cls(width, bits, meta["merge_every"])
        except ValueError as err:  # max_window or grid_bits out of range
            raise ValueError(f"not a dynamic ledger snapshot: {err}") from err
        ledger.slot, ledger.n, ledger.version = meta["slot"], n, meta["version"]
        ledger._reserve(k)
        ledger.k = k
        for f, row in zip(_SAVED_COLUMNS, saved["columns"], strict=True):
            getattr(ledger, f)[:k] = row
        ledger.EF[:k] = saved["EF"]
        for f, row in zip(RUN_FIELDS, saved["current"], strict=True):
            getattr(ledger.current, f)[:k] = row
        ledger.pool = _Pool.of(saved["pool"])
        ledger.group = np.array(saved["group"], dtype=np.int64)
        ledger.free = np.array(saved["free"], dtype=np.int64)
        for ring, charges, nonzero in zip(
            (ledger.ring1, ledger.ring2), saved["rings"], saved["nonzero"], strict=True
        ):
            ring.load(charges, nonzero)
        return ledger


class DPBDLedger(DynamicLedger):
    """DPBD (Algorithm 6): half the smallest remaining forward budget, within the backward one."""

    name = "dpbd"


class DPBALedger(DynamicLedger):
    """DPBA (Algorithm 7): absorb unused forward shares, nullify what was borrowed."""

    name = "dpba"
    absorbs = True


DYNAMIC_LEDGERS: dict[str, type[DynamicLedger]] = {"dpbd": DPBDLedger, "dpba": DPBALedger}


def _matrix(owner: object, fields: tuple[str, ...], size: int) -> np.ndarray:
    """The first ``size`` entries of ``owner``'s array attributes ``fields``, as int64 rows."""
    out = np.empty((len(fields), size), dtype=np.int64)
    for i, f in enumerate(fields):
        out[i] = getattr(owner, f)[:size]
    return out


def _ledger_classes() -> dict[str, type[DynamicLedger]]:
    """The ledger classes a snapshot may name, by their ``name``."""
    return {DynamicLedger.name: DynamicLedger, **DYNAMIC_LEDGERS}


def _read_snapshot(data: bytes) -> dict[str, np.ndarray]:
    """The arrays of a snapshot, with its keys and scalars checked."""
    if bytes(data[:4]) != b"PK\x03\x04":
        raise ValueError("not a dynamic ledger snapshot: not a compressed numpy archive")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            if set(archive.files) != _SNAPSHOT_KEYS:
                raise ValueError(f"unexpected arrays {sorted(archive.files)}")
            saved = {key: archive[key] for key in archive.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zlib.error) as err:
        raise ValueError(f"not a dynamic ledger snapshot: {err}") from err
    meta, name = saved["meta"], saved["name"]
    if meta.dtype != np.int64 or meta.shape != (len(_META),) or meta[0] != _SNAPSHOT_FORMAT:
        raise ValueError("not a dynamic ledger snapshot: bad header or format version")
    if name.dtype.kind != "U" or name.shape != ():
        raise ValueError("not a dynamic ledger snapshot: bad ledger name")
    return saved


def _check_snapshot(
    saved: dict[str, np.ndarray], k: int, n: int, width: int, ring_dtype: type
) -> None:
    """Raise ``ValueError`` unless the arrays fit ``k`` columns, ``n`` users and the rings."""
    pool = saved["pool"]
    expected = {
        "columns": ((len(_SAVED_COLUMNS), k), np.int64),
        "EF": ((k,), np.float64),
        "current": ((len(RUN_FIELDS), k), np.int64),
        "pool": ((len(RUN_FIELDS), pool.shape[-1] if pool.ndim == 2 else -1), np.int64),
        "group": ((n,), np.int64),
        "free": ((saved["free"].size,), np.int64),
        "rings": ((2, width, k), ring_dtype),
        "nonzero": ((2, width), np.bool_),
    }
    for key, (shape, dtype) in expected.items():
        if saved[key].shape != shape or saved[key].dtype != dtype:
            raise ValueError(
                f"not a dynamic ledger snapshot: {key} has shape {saved[key].shape} and dtype "
                f"{saved[key].dtype}, expected {shape} and {np.dtype(dtype)}"
            )
    for key, cols in (("group", saved["group"]), ("free", saved["free"]), ("pool", pool[0])):
        if cols.size and not (cols.min() >= 0 and cols.max() < k):
            raise ValueError(f"not a dynamic ledger snapshot: {key} names a column beyond {k}")
