"""Reference oracle: the per-user DPBD and DPBA ledgers, one column per user.

A frozen copy of the per-user implementation that :mod:`mechanisms.ledgers.dynamic` replaced with
state per requirement history; the tests check that both charge and decide identically.

Every user may declare at any slot a backward requirement (wB, EB) on the window ending at that
slot and a forward requirement (wF, EF) on the window starting there; a declaration holds until
the user's next one. The ledger keeps, per user, numpy arrays only:

- the charges of the last ``max_window`` slots in two ring buffers (eps1, eps2), one row per slot;
- the backward sums of eps1 and eps2 over the previous ``wB - 1`` slots, updated in O(1);
- the forward set T_B,i,t as *runs*: consecutive slots that share one forward declaration. The
  run of the current declaration is held per user; closed runs whose windows still cover the
  present sit in a pool until they expire. Per run the ledger keeps the sum of eps2 since its
  earliest live slot (the minimum over tau of the remaining forward budget is reached there),
  and, for DPBA, the slots tau maximising and minimising
  ``V_tau = sum(eps2[tau..t-1]) - (t - tau + 1) * share``: all live V_tau move by the same amount
  from one slot to the next, so only a new slot or the expiry of the tracked one needs work.

Budgets are kept in integer units of 2**-40 (charges are rounded down to a unit), so window sums
are exact integers and never drift; budgets above ``MAX_BUDGET`` are treated as ``MAX_BUDGET``.
With ``grid_bits`` set, every charge is also rounded down to a fixed quasi-geometric grid (the
top ``grid_bits + 1`` significant bits kept) and stored as a 16-bit code: spending less than
allowed is always safe, and users then fall into few budget levels.

Slots are numbered from 1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mechanisms.ledgers.plan import Charge, SlotPlan

UNIT = 2.0**-40
MAX_BUDGET = 4096.0
_INT_MAX = np.iinfo(np.int64).max
_INT_MIN = np.iinfo(np.int64).min


def to_units(values: np.ndarray) -> np.ndarray:
    """Budgets as int64 units, rounded down; values above ``MAX_BUDGET`` are capped."""
    v = np.minimum(np.asarray(values, dtype=np.float64), MAX_BUDGET)
    return np.floor(v / UNIT).astype(np.int64)


def grid_table(bits: int) -> np.ndarray:
    """Unit value of every grid code: 0 is zero, code c >= 1 keeps ``bits`` mantissa bits."""
    codes = np.arange(1, (53 << bits) + 1, dtype=np.int64)
    exponent, mantissa = (codes - 1) >> bits, (codes - 1) & ((1 << bits) - 1)
    values = ((mantissa + (1 << bits)) << exponent) >> bits
    return np.concatenate(([0], values)).astype(np.int64)


def grid_codes(units: np.ndarray, bits: int) -> np.ndarray:
    """Code of the largest grid value <= each unit amount (amounts below 2**53)."""
    raw = units.astype(np.float64).view(np.int64) >> (52 - bits)
    return np.where(units > 0, raw - (1023 << bits) + 1, 0).astype(np.uint16)


class _Ring:
    """Charges of the last ``width`` slots, row ``slot % width``, one column per user."""

    def __init__(self, width: int, table: np.ndarray | None) -> None:
        self.width = width
        self.table = table
        self.dtype = np.int64 if table is None else np.uint16
        self.data = np.zeros((width, 0), dtype=self.dtype)

    def grow(self, n: int) -> None:
        """Make room for ``n`` users; new columns hold zeros."""
        cap = self.data.shape[1]
        if n > cap:
            new = np.zeros((self.width, max(n, 2 * cap, 16)), dtype=self.dtype)
            new[:, :cap] = self.data
            self.data = new

    def write(self, slot: int, stored: np.ndarray) -> None:
        """Record one slot's stored values (units, or grid codes) for users ``0..n-1``."""
        self.data[slot % self.width, : stored.shape[0]] = stored

    def decode(self, stored: np.ndarray) -> np.ndarray:
        """Stored values to units."""
        return stored if self.table is None else np.take(self.table, stored)

    def at(self, users: np.ndarray, slots: np.ndarray) -> np.ndarray:
        """Units charged to ``users[k]`` at ``slots[k]`` (slots within the last ``width``)."""
        flat = (slots % self.width) * self.data.shape[1] + users
        return self.decode(np.take(self.data.ravel(), flat, mode="wrap"))

    def at_age(self, users: np.ndarray, now: int, ages: np.ndarray) -> np.ndarray:
        """Units charged at slot ``now - ages[k]``: one gather with wrap-around."""
        cap = self.data.shape[1]
        flat = users - ages * cap + (now % self.width) * cap
        return self.decode(np.take(self.data.ravel(), flat, mode="wrap"))

    def recent(self, users: np.ndarray, now: int, length: int) -> np.ndarray:
        """A (length, k) matrix: row j holds the units charged at slot ``now - j``."""
        return self.ages(users, now, np.arange(length)[:, None])

    def ages(self, users: np.ndarray, now: int, ages: np.ndarray) -> np.ndarray:
        """Units charged to ``users`` at slots ``now - ages`` (``ages`` broadcast over users)."""
        cap = self.data.shape[1]
        flat = users[None, :] - ages * cap + (now % self.width) * cap
        return self.decode(np.take(self.data.ravel(), flat, mode="wrap"))


@dataclass
class _Runs:
    """Forward runs (struct of arrays): slots a..b share one forward declaration (wF, EF).

    ``spent`` is eps2 charged from the run's earliest live slot lo = max(a, t - wF + 1) to t - 1.
    ``m_hi``/``s_hi`` and ``m_lo``/``s_lo`` are the live slots of largest and smallest V_tau
    with eps2 charged from there to t - 1 (DPBA only).
    """

    user: np.ndarray
    a: np.ndarray
    b: np.ndarray
    w: np.ndarray
    half: np.ndarray
    share: np.ndarray
    spent: np.ndarray
    m_hi: np.ndarray
    s_hi: np.ndarray
    m_lo: np.ndarray
    s_lo: np.ndarray

    @classmethod
    def empty(cls) -> _Runs:
        z = np.zeros(0, dtype=np.int64)
        return cls(*(z.copy() for _ in range(11)))

    def __len__(self) -> int:
        return int(self.user.shape[0])

    def take(self, index: np.ndarray) -> _Runs:
        return _Runs(*(getattr(self, f)[index] for f in _RUN_FIELDS))

    def put(self, index: np.ndarray, other: _Runs) -> None:
        for f in _RUN_FIELDS:
            getattr(self, f)[index] = getattr(other, f)

    def extend(self, other: _Runs) -> None:
        for f in _RUN_FIELDS:
            setattr(self, f, np.concatenate([getattr(self, f), getattr(other, f)]))

    def keep(self, mask: np.ndarray) -> None:
        for f in _RUN_FIELDS:
            setattr(self, f, getattr(self, f)[mask])


_RUN_FIELDS = ("user", "a", "b", "w", "half", "share", "spent", "m_hi", "s_hi", "m_lo", "s_lo")
_OPEN = np.int64(1) << 62  # b of a run that is still the user's current declaration


def _new_runs(users: np.ndarray, slot: int, wF: np.ndarray, EF_units: np.ndarray) -> _Runs:
    k = users.shape[0]
    zero = np.zeros(k, dtype=np.int64)
    start = np.full(k, slot, dtype=np.int64)
    share = EF_units // (2 * wF)
    return _Runs(
        user=users.astype(np.int64),
        a=start.copy(),
        b=np.full(k, _OPEN, dtype=np.int64),
        w=wF.astype(np.int64),
        half=share * wF,  # EF/2 in whole shares, so that ties between shares stay exact
        share=share,
        spent=zero.copy(),
        m_hi=start.copy(),
        s_hi=zero.copy(),
        m_lo=start,
        s_lo=zero,
    )


@dataclass(frozen=True)
class DynamicSlotPlan(SlotPlan):
    """A :class:`SlotPlan` per user, with what the dynamic ledgers also know.

    ``backward_budget`` is each user's EB after projection: the declared EB, or what the user
    already spent in the window when that is more. ``projected_users`` marks those users.
    """

    backward_budget: np.ndarray | None = None
    projected_users: np.ndarray | None = None


class DynamicLedger:
    """Common state of DPBD and DPBA over users ``0..n-1``; see the module docstring.

    ``declare`` sets requirements effective from the next planned slot (registering new users,
    whose indices must continue ``0..n-1``); ``plan`` and ``commit`` work as in
    :class:`mechanisms.ledgers.fixed.BudgetLedger`, one entry per user.
    """

    name = ""
    absorbs = False

    def __init__(self, max_window: int, grid_bits: int | None = None) -> None:
        if max_window < 1:
            raise ValueError(f"max_window must be >= 1, got {max_window}")
        if grid_bits is not None and not 0 <= grid_bits <= 10:
            raise ValueError(f"grid_bits must be in 0..10, got {grid_bits}")
        self.max_window = int(max_window)
        self.grid_bits = grid_bits
        self.table = None if grid_bits is None else grid_table(grid_bits)
        self.slot = 1
        self.n = 0
        self.ring1 = _Ring(self.max_window, self.table)
        self.ring2 = _Ring(self.max_window, self.table)
        z = np.zeros(0, dtype=np.int64)
        self.wB, self.EB, self.sum1, self.sum2 = z.copy(), z.copy(), z.copy(), z.copy()
        self.wF = z.copy()
        self.EF = np.zeros(0)
        self.current = _Runs.empty()
        self.pool = _Runs.empty()
        self._pending: DynamicSlotPlan | None = None
        self._units: tuple[np.ndarray, ...] | None = None

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
        if np.unique(users).size != users.size:
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
        if new.any() and not np.array_equal(
            np.sort(users[new]), np.arange(self.n, self.n + int(new.sum()))
        ):
            raise ValueError("new users must take the next free indices")
        self._register(int(new.sum()))
        t = self.slot
        EB_units, EF_units = to_units(EB), to_units(EF)
        # backward: a new window needs its sums over the previous wB - 1 slots afresh
        changed_b = ~new & (wB != self.wB[users])
        if changed_b.any():
            idx = users[changed_b]
            self._move_windows(idx, self.wB[idx], wB[changed_b])
        self.wB[users], self.EB[users] = wB, EB_units
        # forward: a new declaration closes the current run and opens one
        changed_f = new | (wF != self.wF[users]) | (self.EF[users] != EF)
        idx = users[changed_f]
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
            self.current.put(idx, _new_runs(idx, t, wF[changed_f], EF_units[changed_f]))
        self._pending = None
        self._units = None

    def _register(self, count: int) -> None:
        if count == 0:
            return
        n = self.n + count
        self.ring1.grow(n)
        self.ring2.grow(n)
        pad = np.zeros(count, dtype=np.int64)
        self.wB, self.EB = np.concatenate([self.wB, pad]), np.concatenate([self.EB, pad])
        self.sum1, self.sum2 = np.concatenate([self.sum1, pad]), np.concatenate([self.sum2, pad])
        self.wF = np.concatenate([self.wF, pad])
        self.EF = np.concatenate([self.EF, np.zeros(count)])
        self.current.extend(_new_runs(np.arange(self.n, n), self.slot, pad + 1, pad))
        self.n = n

    def _move_windows(self, users: np.ndarray, old: np.ndarray, new: np.ndarray) -> None:
        """Move backward sums from windows of ``old`` to ``new`` slots: add or drop the slots
        between them (ages min(old, new) - 1 .. max(old, new) - 2 before the next slot)."""
        first = np.minimum(old, new) - 1
        count = np.abs(new - old)
        sign = np.where(new > old, 1, -1)
        order = np.argsort(count)
        users, first, count, sign = users[order], first[order], count[order], sign[order]
        # blocks of similar length keep the padded matrices small
        edges = np.searchsorted(count, [1, 8, 32, 96, self.max_window + 1])
        for lo, hi in zip(edges[:-1], edges[1:], strict=True):
            if lo == hi:
                continue
            part = slice(int(lo), int(hi))
            j = np.arange(int(count[hi - 1]))[:, None]
            ages = first[None, part] + j
            keep = j < count[None, part]
            last = self.slot - 1
            s1 = np.where(keep, self.ring1.ages(users[part], last, ages), 0).sum(axis=0)
            s2 = np.where(keep, self.ring2.ages(users[part], last, ages), 0).sum(axis=0)
            self.sum1[users[part]] += sign[part] * s1
            self.sum2[users[part]] += sign[part] * s2

    # ----------------------------------------------------------------- planning
    def _round(self, units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Charges as (units, stored): rounded down to the grid when there is one."""
        if self.table is None:
            return units, units
        codes = grid_codes(units, self.grid_bits or 0)
        return np.take(self.table, codes), codes

    def _forward(self) -> tuple[np.ndarray, np.ndarray]:
        """Per user: the smallest live share and the smallest remaining forward eps2 budget."""
        cur, pool = self.current, self.pool
        share = cur.share.copy()
        remain = cur.half - cur.spent
        if len(pool):
            np.minimum.at(share, pool.user, pool.share)
            np.minimum.at(remain, pool.user, pool.half - pool.spent)
        return share, np.maximum(remain, 0)

    def _absorption(self) -> tuple[bool, np.ndarray]:
        """DPBA: whether the slot is nullified, and each user's absorption budget eps_AF."""
        t = self.slot
        nullified = False
        absorb = np.zeros(self.n, dtype=np.int64)
        for runs, own in ((self.current, True), (self.pool, False)):
            if not len(runs):
                continue
            v_hi = runs.s_hi - (t - runs.m_hi + 1) * runs.share
            active = self.EF[runs.user] != 0.0  # a suspended user nullifies nothing
            # a border a few units short of t (rounding) is a tie: nullified, as in the ledger
            slack = np.minimum(4 * self.max_window + 16, (runs.share - 1) >> 1)
            nullified = nullified or bool(((v_hi >= -slack) & active).any())
            af = (t - runs.m_lo + 1) * runs.share - runs.s_lo
            if own:
                absorb = af
            else:
                np.maximum.at(absorb, runs.user, af)
        return nullified, absorb

    def borders(self) -> np.ndarray:
        """DPBA's R_FN,i for the next slot: the largest t_FN,i,tau over each user's T_B,i,t."""
        t = self.slot
        out = np.full(self.n, -np.inf)
        for runs in (self.current, self.pool):
            if not len(runs):
                continue
            live = runs.share > 0
            with np.errstate(divide="ignore", invalid="ignore"):
                border = np.where(
                    live, runs.s_hi / np.where(live, runs.share, 1) + runs.m_hi - 1, np.inf
                )
            border = np.where(~live & (runs.s_hi == 0), t - 1, border)
            np.maximum.at(out, runs.user, border)
        out[self.EF == 0.0] = -np.inf
        return out

    def suspend(self, users: np.ndarray) -> None:
        """From slot ``self.slot`` on, ``users`` hold the null requirement: charged nothing,
        nullifying nothing, until their next declaration."""
        one = np.ones(len(users), dtype=np.int64)
        self.declare(users, one, np.full(len(users), MAX_BUDGET), one, np.zeros(len(users)))

    def _plan_units(self) -> tuple[np.ndarray, ...]:
        """(eps1, stored1, eps2, stored2, EB after projection, projected, nullified)."""
        if self._units is not None:
            return self._units
        spent = self.sum1 + self.sum2
        budget = np.maximum(self.EB, spent)
        projected = spent > self.EB
        left = budget - spent
        share, remain = self._forward()
        bound1 = np.maximum(np.minimum(budget // 2 - self.sum1, left), 0)
        eps1, stored1 = self._round(np.minimum(share, bound1))
        bound2 = np.maximum(np.minimum(budget // 2 - self.sum2, left - eps1), 0)
        nullified = False
        if self.absorbs:
            nullified, absorb = self._absorption()
            want = np.minimum(np.maximum(absorb, 0), remain)
        else:
            want = remain // 2
        eps2, stored2 = self._round(np.minimum(want, bound2))
        if nullified:
            eps2, stored2 = np.zeros_like(eps2), np.zeros_like(stored2)
        self._units = (eps1, stored1, eps2, stored2, budget, projected, np.bool_(nullified))
        return self._units

    def plan(self) -> DynamicSlotPlan:
        """Plan the next slot without changing the ledger; repeated calls agree."""
        if self._pending is None:
            eps1, _, eps2, _, budget, projected, nullified = self._plan_units()
            self._pending = DynamicSlotPlan(
                self.slot,
                eps1 * UNIT,
                eps2 * UNIT,
                nullified=bool(nullified),
                projected=int(projected.sum()),
                backward_budget=budget * UNIT,
                projected_users=projected,
            )
        return self._pending

    # ----------------------------------------------------------------- committing
    def commit(self, published: bool) -> Charge:
        """Record the planned slot's decision and advance; eps2 is charged only if published."""
        eps1, stored1, eps2, stored2, _, projected, nullified = self._plan_units()
        published = bool(published) and not bool(nullified)
        if not published:
            eps2, stored2 = np.zeros_like(eps2), np.zeros_like(stored2)
        t, users = self.slot, np.arange(self.n)
        self.ring1.write(t, stored1)
        self.ring2.write(t, stored2)
        # backward sums move to the window before t + 1: add slot t, drop slot t - wB + 1
        ages = self.wB - 1
        self.sum1 += eps1 - self.ring1.at_age(users, t, ages)
        self.sum2 += eps2 - self.ring2.at_age(users, t, ages)
        self._advance(self.current, eps2, t, opened=True)
        if len(self.pool):
            self._advance(self.pool, eps2[self.pool.user], t, opened=False)
            self.pool.keep(t + 1 <= self.pool.b + self.pool.w - 1)
        extra = {"projected": int(projected.sum())}
        self.slot += 1
        self._pending = None
        self._units = None
        return Charge(t, eps1 * UNIT, eps2 * UNIT, published, bool(nullified), extra)

    def _advance(self, runs: _Runs, eps2: np.ndarray, t: int, opened: bool) -> None:
        """Move the runs' sums from slot t to t + 1 after eps2 was charged at t."""
        runs.spent += eps2
        leaving = t - runs.w + 1  # lo moves past this slot
        drop = leaving >= runs.a
        if opened:
            gone = self.ring2.at_age(runs.user, t, runs.w - 1)
            runs.spent -= np.where(drop, gone, 0)
        elif drop.any():
            idx = np.flatnonzero(drop)
            runs.spent[idx] -= self.ring2.at(runs.user[idx], leaving[idx])
        if not self.absorbs:
            return
        runs.s_hi += eps2
        runs.s_lo += eps2
        nxt = t + 1
        if opened:
            # slot t + 1 joins with V = -share; ties go to the newer slot (it expires later)
            v_hi = runs.s_hi - (nxt - runs.m_hi + 1) * runs.share
            v_lo = runs.s_lo - (nxt - runs.m_lo + 1) * runs.share
            take_hi = -runs.share >= v_hi
            take_lo = -runs.share <= v_lo
            runs.m_hi[take_hi], runs.s_hi[take_hi] = nxt, 0
            runs.m_lo[take_lo], runs.s_lo[take_lo] = nxt, 0
        lo = np.maximum(runs.a, nxt - runs.w + 1)
        expired = (runs.m_hi < lo) | (runs.m_lo < lo)
        if not opened:
            expired &= lo <= runs.b
        if expired.any():
            self._rescan(runs, np.flatnonzero(expired), nxt)

    def _rescan(self, runs: _Runs, idx: np.ndarray, nxt: int) -> None:
        """Find the live slots of largest and smallest V for ``runs[idx]`` as of slot ``nxt``."""
        sub = runs.take(idx)
        lo = np.maximum(sub.a, nxt - sub.w + 1)
        hi = np.minimum(sub.b, nxt)
        length = int((nxt - lo).max()) + 1  # j = nxt - tau runs over 0 .. nxt - lo
        charged = self.ring2.recent(sub.user, nxt - 1, max(length - 1, 1))[: length - 1]
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
        runs.put(idx, sub)


class DPBDLedger(DynamicLedger):
    """DPBD (Algorithm 6): half the smallest remaining forward budget, within the backward one."""

    name = "dpbd"


class DPBALedger(DynamicLedger):
    """DPBA (Algorithm 7): absorb unused forward shares, nullify what was borrowed."""

    name = "dpba"
    absorbs = True


DYNAMIC_LEDGERS: dict[str, type[DynamicLedger]] = {"dpbd": DPBDLedger, "dpba": DPBALedger}
