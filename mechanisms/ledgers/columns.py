"""Column storage of the dynamic ledgers (:mod:`mechanisms.ledgers.dynamic`).

Budgets as integer units of 2**-40, the quasi-geometric grid charges are rounded onto, the ring
buffers of the last ``max_window`` charges per column, the forward *runs* (consecutive slots
sharing one forward declaration) with the pool of closed runs, and :class:`GroupColumns`: the
state of every group of users in one column of these arrays, with the allocation, copying and
freeing of columns that keeps group, size, rings, runs and pool in agreement.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mechanisms.ledgers.groups import COL_FIELDS, RUN_FIELDS

UNIT = 2.0**-40
MAX_BUDGET = 4096.0


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
    raw = units.astype(np.float64).view(np.int64)
    raw >>= 52 - bits
    raw -= (1023 << bits) - 1
    # amounts <= 0 (sign bit set, or a zero exponent) give raw <= 0: code 0
    np.maximum(raw, 0, out=raw)
    return raw.astype(np.uint16)


class Ring:
    """Charges of the last ``width`` slots, row ``slot % width``, one column per group."""

    def __init__(self, width: int, table: np.ndarray | None) -> None:
        self.width = width
        self.table = table
        self.dtype = np.int64 if table is None else np.uint16
        self.data = np.zeros((width, 0), dtype=self.dtype)
        # rows that may hold a nonzero charge (columns at or above ``k`` are never written,
        # and reused columns are overwritten, so an all-zero row written stays all-zero)
        self.nonzero = np.zeros(width, dtype=bool)
        self._cycle_key: tuple[int, int] | None = None
        self._cycle = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))

    def resize(self, cap: int) -> None:
        """Hold ``cap`` columns; new columns hold zeros."""
        old = self.data.shape[1]
        if cap > old:
            new = np.zeros((self.width, cap), dtype=self.dtype)
            new[:, :old] = self.data
            self.data = new

    def load(self, data: np.ndarray, nonzero: np.ndarray) -> None:
        """Take saved charges of the first ``data.shape[1]`` columns (capacity already held)."""
        self.data[:, : data.shape[1]] = data
        self.nonzero[:] = nonzero
        self._cycle_key = None

    def write(self, slot: int, stored: np.ndarray) -> None:
        """Record one slot's stored values (units, or grid codes) for columns ``0..k-1``."""
        self.data[slot % self.width, : stored.shape[0]] = stored
        self.nonzero[slot % self.width] = bool(stored.any())

    def copy_columns(self, src: np.ndarray, dst: np.ndarray) -> None:
        """Give columns ``dst`` the charges of ``src`` (``dst`` below ``k``: all-zero rows are
        zero there already)."""
        rows = np.flatnonzero(self.nonzero)
        if rows.size == self.width:
            self.data[:, dst] = self.data[:, src]
        elif rows.size:
            self.data[rows[:, None], dst[None, :]] = self.data[rows[:, None], src[None, :]]

    def clear_columns(self, cols: np.ndarray) -> None:
        """Zero the charges of ``cols``."""
        rows = np.flatnonzero(self.nonzero)
        if rows.size == self.width:
            self.data[:, cols] = 0
        elif rows.size:
            self.data[rows[:, None], cols[None, :]] = 0

    def decode(self, stored: np.ndarray) -> np.ndarray:
        """Stored values to units."""
        return stored if self.table is None else np.take(self.table, stored)

    def _index(self, now: int, slots: np.ndarray) -> np.ndarray:
        """Positions of ``slots`` in the window ``now - width + 1 .. now`` (slots outside it are
        clipped there: padding that callers mask out)."""
        lo = now - self.width + 1
        if self._cycle_key != (lo, self.data.shape[1]):
            rows = np.arange(lo, lo + self.width) % self.width
            self._cycle = (rows * self.data.shape[1], rows)
            self._cycle_key = (lo, self.data.shape[1])
        return slots - lo

    def _rows(self, now: int, slots: np.ndarray) -> np.ndarray:
        """Flat offsets of the rows of ``slots`` (see :meth:`_index`)."""
        index = self._index(now, slots)  # before reading the table it may refresh
        return np.take(self._cycle[0], index, mode="clip")

    def at(self, cols: np.ndarray, now: int, slots: np.ndarray) -> np.ndarray:
        """Units charged to ``cols[k]`` at ``slots[k]`` (within the last ``width`` up to now)."""
        out = self.at_nonzero(cols, now, slots)
        return np.zeros(np.shape(slots), dtype=np.int64) if out is None else out

    def at_nonzero(self, cols: np.ndarray, now: int, slots: np.ndarray) -> np.ndarray | None:
        """As :meth:`at`, or ``None`` when the rows of all ``slots`` hold only zeros."""
        index = self._index(now, slots)
        if not self.nonzero.all():
            live = np.take(self.nonzero, self._cycle[1])
            if not np.take(live, index, mode="clip").any():
                return None
        flat = np.take(self._cycle[0], index, mode="clip")
        flat += cols
        return self.decode(np.take(self.data.ravel(), flat, mode="clip"))

    def at_age(self, cols: np.ndarray, now: int, ages: np.ndarray) -> np.ndarray:
        """Units charged at slot ``now - ages[k]``."""
        return self.at(cols, now, now - ages)

    def recent(self, cols: np.ndarray, now: int, length: int) -> np.ndarray:
        """A (length, k) matrix: row j holds the units charged at slot ``now - j``."""
        return self.ages(cols, now, np.arange(length)[:, None])

    def ages(self, cols: np.ndarray, now: int, ages: np.ndarray) -> np.ndarray:
        """Units charged to ``cols`` at slots ``now - ages`` (``ages`` broadcast over cols)."""
        return self.gather(self.flat(cols, now, ages))

    def sum_range(
        self, cols: np.ndarray, now: int, first: np.ndarray, count: np.ndarray
    ) -> np.ndarray | None:
        """Per column, the units charged at ages ``first .. first + count - 1`` before ``now``
        (ages below ``width``); ``None`` when the ring holds only zeros. When fewer rows may
        hold a nonzero charge than the longest range, only those rows are read."""
        rows = np.flatnonzero(self.nonzero)
        length = int(count.max(initial=0))
        if rows.size == 0 or length == 0:
            return None
        if rows.size >= length:
            j = np.arange(length)[:, None]
            ages = first[None, :] + j
            return np.where(j < count, self.gather(self.flat(cols, now, ages)), 0).sum(axis=0)
        row_age = ((now - rows) % self.width)[:, None]
        inside = (row_age >= first[None, :]) & (row_age < (first + count)[None, :])
        flat = rows[:, None] * self.data.shape[1] + cols[None, :]
        return np.where(inside, self.gather(flat), 0).sum(axis=0)

    def flat(self, cols: np.ndarray, now: int, ages: np.ndarray) -> np.ndarray:
        """Flat positions of ``cols`` at slots ``now - ages`` (``ages`` broadcast over cols)."""
        return self._rows(now, now - ages) + cols[None, :]

    def gather(self, flat: np.ndarray) -> np.ndarray:
        """Units at flat positions from :meth:`flat`."""
        return self.decode(np.take(self.data.ravel(), flat, mode="clip"))


@dataclass
class Runs:
    """Forward runs (struct of arrays): slots a..b share one forward declaration (wF, EF).

    ``col`` is the group's column. ``spent`` is eps2 charged from the run's earliest live slot
    lo = max(a, t - wF + 1) to t - 1. ``m_hi``/``s_hi`` and ``m_lo``/``s_lo`` are the live slots
    of largest and smallest V_tau with eps2 charged from there to t - 1 (DPBA only).
    ``stale`` (0 or 1) marks runs whose ``m_lo``/``s_lo`` left the window: the smallest V is
    needed only for a slot that is not nullified, so it is looked for then.
    """

    col: np.ndarray
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
    stale: np.ndarray

    @classmethod
    def empty(cls, size: int = 0) -> Runs:
        return cls(*(np.zeros(size, dtype=np.int64) for _ in range(len(RUN_FIELDS))))

    def __len__(self) -> int:
        return int(self.col.shape[0])

    def take(self, index: np.ndarray | slice) -> Runs:
        return Runs(*(getattr(self, f)[index] for f in RUN_FIELDS))

    def put(self, index: np.ndarray, other: Runs) -> None:
        for f in RUN_FIELDS:
            getattr(self, f)[index] = getattr(other, f)

    def extend(self, other: Runs) -> None:
        for f in RUN_FIELDS:
            setattr(self, f, np.concatenate([getattr(self, f), getattr(other, f)]))

    def keep(self, mask: np.ndarray) -> None:
        for f in RUN_FIELDS:
            setattr(self, f, getattr(self, f)[mask])


class RunPool(Runs):
    """Runs in one (fields, capacity) buffer: the fields are views of its first ``len`` columns,
    so that appending is proportional to the appended runs."""

    def __init__(self) -> None:
        self._buf = np.zeros((len(RUN_FIELDS), 0), dtype=np.int64)
        self._len = 0
        self._point()

    @classmethod
    def of(cls, rows: np.ndarray) -> RunPool:
        """A pool holding the runs of a (fields, runs) int64 matrix."""
        pool = cls()
        pool._buf = np.array(rows, dtype=np.int64, order="C")
        pool._len = int(rows.shape[1])
        pool._point()
        return pool

    def _point(self) -> None:
        for i, f in enumerate(RUN_FIELDS):
            setattr(self, f, self._buf[i, : self._len])

    def extend(self, other: Runs) -> None:
        size = self._len + len(other)
        if size > self._buf.shape[1]:
            buf = np.zeros((len(RUN_FIELDS), max(size + size // 4, 16)), dtype=np.int64)
            buf[:, : self._len] = self._buf[:, : self._len]
            self._buf = buf
        for i, f in enumerate(RUN_FIELDS):
            self._buf[i, self._len : size] = getattr(other, f)
        self._len = size
        self._point()

    def keep(self, mask: np.ndarray) -> None:
        # the order of runs carries no meaning: the kept runs beyond the new length fill the
        # places of the dropped ones before it, so the work is proportional to the dropped runs
        size = int(np.count_nonzero(mask))
        holes = np.flatnonzero(~mask[:size])
        if holes.size:
            movers = size + np.flatnonzero(mask[size:])
            self._buf[:, holes] = self._buf[:, movers]
        self._len = size
        self._point()


_OPEN = np.int64(1) << 62  # b of a run that is still the group's current declaration
NO_CLOSED_RUNS = np.int64(1) << 62  # the pool minima of a column without closed runs


def new_runs(cols: np.ndarray, slot: int, wF: np.ndarray, EF_units: np.ndarray) -> Runs:
    k = cols.shape[0]
    zero = np.zeros(k, dtype=np.int64)
    start = np.full(k, slot, dtype=np.int64)
    share = EF_units // (2 * wF)
    return Runs(
        col=cols.astype(np.int64),
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
        stale=zero.copy(),
    )


class GroupColumns:
    """The state of a dynamic ledger's groups, one column each, and the bookkeeping of columns.

    Per column (group of users with the same history): the backward window ``wB``, budget
    ``EB`` and sums ``sum1``/``sum2`` of what the previous ``wB - 1`` slots charged, the forward
    declaration ``wF``/``EF`` with its current run, ``size`` users (0: a free column), the
    ``npool`` closed runs it has in :attr:`pool` and their smallest share and remaining budget;
    the charges of the last ``max_window`` slots in :attr:`ring1` (eps1) and :attr:`ring2`
    (eps2). ``group[i]`` is user i's column; ``k`` columns are in use (live and free ones);
    ``version`` changes whenever ``group`` does. ``table`` decodes stored grid codes (None:
    charges are stored as units).
    """

    def __init__(self, max_window: int, table: np.ndarray | None) -> None:
        self.slot = 1
        self.n = 0
        self.k = 0  # columns in use: live and free ones below k
        self.group = np.zeros(0, dtype=np.int64)
        self.version = 0  # changes whenever ``group`` does
        self.free = np.zeros(0, dtype=np.int64)
        self.ring1 = Ring(max_window, table)
        self.ring2 = Ring(max_window, table)
        z = np.zeros(0, dtype=np.int64)
        self.wB, self.EB, self.sum1, self.sum2 = z.copy(), z.copy(), z.copy(), z.copy()
        self.wF, self.size, self.npool = z.copy(), z.copy(), z.copy()
        # per column, the smallest share and remaining forward budget over its closed runs,
        # kept up to date except for the columns marked dirty
        self.pool_share, self.pool_remain = z.copy(), z.copy()
        self.pool_dirty = np.zeros(0, dtype=bool)
        self.EF = np.zeros(0)
        self.current = Runs.empty()
        self.pool: Runs = RunPool()
        self._view: Runs | None = None

    @property
    def groups(self) -> int:
        """Number of live groups (columns with users)."""
        return int(np.count_nonzero(self.size[: self.k]))

    def _current(self) -> Runs:
        """The current runs of columns ``0..k-1`` (views)."""
        view = self._view
        if view is None or len(view) != self.k or view.col.base is not self.current.col:
            view = self._view = self.current.take(slice(0, self.k))
        return view

    def _cap(self) -> int:
        return int(self.size.shape[0])

    def reserve(self, k: int) -> None:
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
        self.pool_share = np.concatenate([self.pool_share, z + NO_CLOSED_RUNS])
        self.pool_remain = np.concatenate([self.pool_remain, z + NO_CLOSED_RUNS])
        self.pool_dirty = np.concatenate([self.pool_dirty, np.zeros(pad, dtype=bool)])
        self.current.extend(new_runs(np.arange(cap, new), self.slot, z + 1, z))
        self.ring1.resize(new)
        self.ring2.resize(new)

    def _allocate(self, count: int) -> np.ndarray:
        """``count`` free columns: reused ones first, then fresh ones above ``k``."""
        reuse, self.free = self.free[:count], self.free[count:]
        more = count - reuse.size
        fresh = np.arange(self.k, self.k + more, dtype=np.int64)
        self.reserve(self.k + more)
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
        self.pool_share[dst] = NO_CLOSED_RUNS
        self.pool_remain[dst] = NO_CLOSED_RUNS
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
        self.current.put(cols, new_runs(cols, self.slot, z + 1, z))
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
        self.pool_share[cols] = NO_CLOSED_RUNS
        self.pool_remain[cols] = NO_CLOSED_RUNS
        self.pool_dirty[cols] = False

    def _pool_minima(self) -> tuple[np.ndarray, np.ndarray]:
        """Per column, the smallest share and remaining budget (half - spent) over its closed
        runs (``NO_CLOSED_RUNS`` without any): the dirty columns are recomputed from their runs."""
        k = self.k
        dirty = np.flatnonzero(self.pool_dirty[:k])
        if dirty.size:
            self.pool_share[dirty] = NO_CLOSED_RUNS
            self.pool_remain[dirty] = NO_CLOSED_RUNS
            pool = self.pool
            if len(pool):
                sel = np.flatnonzero(np.take(self.pool_dirty, pool.col))
                cols = pool.col[sel]
                np.minimum.at(self.pool_share, cols, pool.share[sel])
                np.minimum.at(self.pool_remain, cols, pool.half[sel] - pool.spent[sel])
            self.pool_dirty[dirty] = False
        return self.pool_share[:k], self.pool_remain[:k]
