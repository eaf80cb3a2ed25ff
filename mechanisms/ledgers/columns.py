"""Column storage of the dynamic ledgers (:mod:`mechanisms.ledgers.dynamic`).

Budgets as integer units of 2**-40, the quasi-geometric grid charges are rounded onto, the ring
buffers of the last ``max_window`` charges per column, and the forward *runs* (consecutive slots
sharing one forward declaration) with the pool of closed runs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mechanisms.ledgers.groups import RUN_FIELDS

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
    raw = units.astype(np.float64).view(np.int64)
    raw >>= 52 - bits
    raw -= (1023 << bits) - 1
    # amounts <= 0 (sign bit set, or a zero exponent) give raw <= 0: code 0
    np.maximum(raw, 0, out=raw)
    return raw.astype(np.uint16)


class _Ring:
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
class _Runs:
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
    def empty(cls, size: int = 0) -> _Runs:
        return cls(*(np.zeros(size, dtype=np.int64) for _ in range(len(RUN_FIELDS))))

    def __len__(self) -> int:
        return int(self.col.shape[0])

    def take(self, index: np.ndarray | slice) -> _Runs:
        return _Runs(*(getattr(self, f)[index] for f in RUN_FIELDS))

    def put(self, index: np.ndarray, other: _Runs) -> None:
        for f in RUN_FIELDS:
            getattr(self, f)[index] = getattr(other, f)

    def extend(self, other: _Runs) -> None:
        for f in RUN_FIELDS:
            setattr(self, f, np.concatenate([getattr(self, f), getattr(other, f)]))

    def keep(self, mask: np.ndarray) -> None:
        for f in RUN_FIELDS:
            setattr(self, f, getattr(self, f)[mask])




class _Pool(_Runs):
    """Runs in one (fields, capacity) buffer: the fields are views of its first ``len`` columns,
    so that appending is proportional to the appended runs."""

    def __init__(self) -> None:
        self._buf = np.zeros((len(RUN_FIELDS), 0), dtype=np.int64)
        self._len = 0
        self._point()

    @classmethod
    def of(cls, rows: np.ndarray) -> _Pool:
        """A pool holding the runs of a (fields, runs) int64 matrix."""
        pool = cls()
        pool._buf = np.array(rows, dtype=np.int64, order="C")
        pool._len = int(rows.shape[1])
        pool._point()
        return pool

    def _point(self) -> None:
        for i, f in enumerate(RUN_FIELDS):
            setattr(self, f, self._buf[i, : self._len])

    def extend(self, other: _Runs) -> None:
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
_NONE = np.int64(1) << 62  # the pool minima of a column without closed runs
_SCAN_CELLS = 1 << 21  # entries of one (window, runs) matrix in a rescan


def _new_runs(cols: np.ndarray, slot: int, wF: np.ndarray, EF_units: np.ndarray) -> _Runs:
    k = cols.shape[0]
    zero = np.zeros(k, dtype=np.int64)
    start = np.full(k, slot, dtype=np.int64)
    share = EF_units // (2 * wF)
    return _Runs(
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
