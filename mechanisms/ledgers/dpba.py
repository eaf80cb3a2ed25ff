"""The budget ledger of DPBA (Algorithm 7, papers/000 section 5): absorb unused forward shares,
nullify what was borrowed.

DPBA plans a group's publication budget as the largest absorption -V_tau over the live slots
tau of its forward runs (:mod:`mechanisms.ledgers.dynamic` holds the state it shares with
DPBD), with ``V_tau = sum(eps2[tau..t-1]) - (t - tau + 1) * share``, and nullifies slot t when
some run's border t_FN,tau reaches t. Per run it tracks the slots tau maximising and minimising
V_tau: all live V_tau move by the same amount from one slot to the next, so only a new slot or
the expiry of the tracked one needs work. The smallest V serves only slots that are not
nullified: when its slot expires the run is marked stale and searched again when needed (in
closed form when nothing was charged in its window).

Budgets are integer units rounded down, which may leave the nullification border R_FN a few
units below a slot t it equals in exact arithmetic: such a tie nullifies t as Algorithm 7 says
(t <= R_FN), within a slack of ``TIE_UNITS_PER_SLOT * max_window + TIE_UNITS_BASE`` units
(:meth:`DPBALedger.borders` reports the border as rounded).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mechanisms.ledgers.columns import Runs
from mechanisms.ledgers.dynamic import DynamicLedger
from mechanisms.ledgers.groups import RUN_FIELDS

# DPBA nullifies a slot whose border falls short of it by at most this many units (per slot of
# the ledger's longest window, plus a base): what rounding every share and charge down can lose
TIE_UNITS_PER_SLOT = 4
TIE_UNITS_BASE = 16
_SCAN_CELLS = 1 << 21  # entries of one (window, runs) matrix in a rescan
_INT_MAX = np.iinfo(np.int64).max
_INT_MIN = np.iinfo(np.int64).min


class DPBALedger(DynamicLedger):
    """DPBA (Algorithm 7): absorb unused forward shares, nullify what was borrowed."""

    name = "dpba"
    run_state = RUN_FIELDS[1:]  # the tracked slots of largest and smallest V too

    def __init__(
        self, max_window: int, grid_bits: int | None = None, merge_every: int | None = None
    ) -> None:
        super().__init__(max_window, grid_bits, merge_every)
        # the tie slack: units a border may lose to rounding (see :meth:`_reaches_border`)
        self.tie_units = TIE_UNITS_PER_SLOT * self.max_window + TIE_UNITS_BASE
        self.run_tie_units: np.ndarray | None = None  # per run, in a ledger of several runs

    def hold_runs(self, ledgers: Sequence[DynamicLedger]) -> None:
        """As :meth:`DynamicLedger.hold_runs`, each run keeping its own tie slack."""
        super().hold_runs(ledgers)
        self.run_tie_units = np.array([ledger.tie_units for ledger in ledgers])

    def _wanted(self, cur: Runs, remain: np.ndarray) -> tuple[bool, np.ndarray]:
        """Nullified where a border reaches the slot; else each column's absorption, within
        its remaining forward budget."""
        nullified, absorb = self._absorption(cur)
        return nullified, np.minimum(np.maximum(absorb, 0), remain)

    def _wanted_runs(self, cur: Runs, remain: np.ndarray) -> np.ndarray:
        return np.minimum(np.maximum(self._absorption_runs(cur), 0), remain)

    def _close_runs(self, closed: Runs, t: int) -> None:
        # the slot t was a candidate of the open run but is no run slot any more
        stale = (closed.m_hi >= t) | (closed.m_lo >= t)
        if stale.any():
            self._rescan(closed, np.flatnonzero(stale), t)

    def _track(self, runs: Runs, eps2: np.ndarray | None, t: int, opened: bool,
               leaving: np.ndarray) -> None:
        """Move the tracked slots of largest and smallest V from slot t to t + 1."""
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

    def _absorption_runs(self, cur: Runs) -> np.ndarray:
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

    def _absorption(self, cur: Runs) -> tuple[bool, np.ndarray]:
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

    def _reaches_border(self, runs: Runs, t: int) -> np.ndarray:
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
        """Find the smallest V of every run marked stale, so that equal states look equal."""
        for runs in (self._current(), self.pool):
            stale = np.flatnonzero(runs.stale)
            if stale.size:
                self._rescan(runs, stale, self.slot)

    def _absorb(self, runs: Runs, t: int) -> np.ndarray:
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

    def _rescan(self, runs: Runs, idx: np.ndarray, nxt: int) -> None:
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

    def _scan(self, runs: Runs, idx: np.ndarray, nxt: int) -> None:
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
