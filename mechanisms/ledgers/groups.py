"""Merging the dynamic ledgers' groups whose state has become identical.

Two columns of a :class:`mechanisms.ledgers.dynamic.DynamicLedger` whose scalar state, ring
buffers and forward runs are equal behave identically from now on, whatever their users declare
next, so their users can share one column. A run's start ``a`` only matters while it is inside
the run's window, so it is compared as ``max(a, t - w + 1)``. Candidates are found by hashing and
then compared exactly: a hash collision never merges two different states.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# the ledger's per-run and per-column state, as compared here (and named by the ledger)
RUN_FIELDS = (
    "col",
    "a",
    "b",
    "w",
    "half",
    "share",
    "spent",
    "m_hi",
    "s_hi",
    "m_lo",
    "s_lo",
    "stale",
)
COL_FIELDS = ("wB", "EB", "sum1", "sum2", "wF", "EF")

DynamicLedger = _Ring = _Runs = Any  # the ledger's types, named without importing its module

_CHUNK = 16384
_KEYS = np.random.default_rng(0x5EED).integers(1, 2**63, size=4096, dtype=np.int64)
_KEYS = (_KEYS.astype(np.uint64) << np.uint64(1)) | np.uint64(1)


def _run_rows(runs: _Runs, slot: int, names: tuple[str, ...]) -> np.ndarray:
    """(runs, fields) int64: the run fields ``names`` (the ledger's ``run_state``, which leaves
    out what its rule never reads), with ``a`` (the first) made canonical."""
    fields = [getattr(runs, f) for f in names]
    fields[0] = np.maximum(runs.a, slot - runs.w + 1)
    return np.stack(fields, axis=1)


def _hash_rows(rows: np.ndarray, offset: int) -> np.ndarray:
    """A wrapping weighted sum of each row (rows as uint64)."""
    keys = _KEYS[offset : offset + rows.shape[1]]
    with np.errstate(over="ignore"):
        return (rows.view(np.uint64) * keys).sum(axis=1, dtype=np.uint64)


def _state_fields(ledger: DynamicLedger, cols: np.ndarray) -> list[np.ndarray]:
    """A column's scalar state and its current run, field by field (int64)."""
    fields = [getattr(ledger, f)[cols] for f in COL_FIELDS]
    fields[COL_FIELDS.index("EF")] = fields[COL_FIELDS.index("EF")].view(np.int64)
    fields.append(ledger.npool[cols])
    cur = ledger.current
    run = [getattr(cur, f)[cols] for f in ledger.run_state]
    run[0] = np.maximum(run[0], ledger.slot - cur.w[cols] + 1)
    return fields + run


def _hash_fields(fields: list[np.ndarray], offset: int) -> np.ndarray:
    """:func:`_hash_rows` of the rows the fields would stack into, without stacking them."""
    out = np.zeros(fields[0].shape[0], dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j, field in enumerate(fields):
            out += field.view(np.uint64) * _KEYS[offset + j]
    return out


def _rows_of(ring: _Ring, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """The (rows, cols) block of a ring buffer's charges."""
    if rows.size == ring.width:
        return ring.data[:, cols]
    return ring.data[rows[:, None], cols[None, :]]


def _ring_hash(ledger: DynamicLedger, cols: np.ndarray) -> np.ndarray:
    """Hash of both ring buffers' columns."""
    out = np.zeros(cols.size, dtype=np.uint64)
    width = ledger.max_window
    with np.errstate(over="ignore"):
        for r, ring in enumerate((ledger.ring1, ledger.ring2)):
            # rows holding only zeros add nothing to the hash: they are not read
            rows = np.flatnonzero(ring.nonzero)
            if rows.size == 0:
                continue
            keys = _KEYS[1024 + r * width + rows, None]
            for lo in range(0, cols.size, _CHUNK):
                block = _rows_of(ring, rows, cols[lo : lo + _CHUNK])
                block = block.astype(np.int64).view(np.uint64)
                out[lo : lo + _CHUNK] += (block * keys).sum(axis=0, dtype=np.uint64)
    return out


def _pool_mismatch(ledger: DynamicLedger, member: np.ndarray, rep: np.ndarray) -> np.ndarray:
    """For pairs of columns with equal run counts: whether their pools of runs differ."""
    pool = ledger.pool
    k = ledger.k
    partner = np.full(k, -1, dtype=np.int64)
    partner[member] = rep
    wanted = np.zeros(k, dtype=bool)
    wanted[member] = True
    wanted[rep] = True
    sel = np.flatnonzero(wanted[pool.col])
    bad = np.zeros(member.size, dtype=bool)
    if sel.size == 0:
        return bad
    rows = _run_rows(pool.take(sel), ledger.slot, ledger.run_state)
    col = pool.col[sel]
    order = np.lexsort((*rows.T[::-1], col))
    rows, col = rows[order], col[order]
    start = np.searchsorted(col, np.arange(k))
    mine = np.flatnonzero(partner[col] >= 0)
    other = start[partner[col[mine]]] + (mine - start[col[mine]])
    differs = (rows[mine] != rows[other]).any(axis=1)
    bad_cols = np.zeros(k, dtype=bool)
    bad_cols[col[mine][differs]] = True
    return bad_cols[member]


def merge_groups(ledger: DynamicLedger) -> int:
    """Merge columns with identical state into one; returns how many columns were freed."""
    k = ledger.k
    live = np.flatnonzero(ledger.size[:k] > 0)
    if live.size < 2:
        return 0
    ledger.refresh_stale()
    fields = _state_fields(ledger, live)
    h = _hash_fields(fields, 0)
    # only columns whose scalar state and current run are shared can merge: the ring buffers
    # (the costly part) are read for those alone
    _, first, counts = np.unique(h, return_inverse=True, return_counts=True)
    shared = np.flatnonzero(counts[first] > 1)
    if shared.size < 2:
        return 0
    live, h = live[shared], h[shared]
    state = np.stack([f[shared] for f in fields], axis=1)
    with np.errstate(over="ignore"):
        h += _ring_hash(ledger, live)
        if len(ledger.pool):
            at = np.full(k, -1, dtype=np.int64)
            at[live] = np.arange(live.size)
            mine = np.flatnonzero(at[ledger.pool.col] >= 0)
            runs = _run_rows(ledger.pool.take(mine), ledger.slot, ledger.run_state)
            pool_h = _hash_rows(runs, 512)
            np.add.at(h, at[ledger.pool.col[mine]], pool_h * _KEYS[600])
    order = np.argsort(h, kind="stable")
    hs = h[order]
    head = np.concatenate(([True], hs[1:] != hs[:-1]))
    if head.all():
        return 0
    rep_pos = order[np.maximum.accumulate(np.where(head, np.arange(order.size), 0))]
    member_pos = order[~head]
    rep_pos = rep_pos[~head]
    # exact comparison of every candidate with its representative
    same = (state[member_pos] == state[rep_pos]).all(axis=1)
    member, rep = live[member_pos], live[rep_pos]
    for ring in (ledger.ring1, ledger.ring2):
        rows = np.flatnonzero(ring.nonzero)  # the other rows are zero in every column
        if rows.size == 0:
            continue
        for lo in range(0, member.size, _CHUNK):
            part = slice(lo, lo + _CHUNK)
            eq = (_rows_of(ring, rows, member[part]) == _rows_of(ring, rows, rep[part])).all(0)
            same[part] &= eq
    with_pool = same & (ledger.npool[member] > 0)
    if with_pool.any():
        idx = np.flatnonzero(with_pool)
        same[idx] &= ~_pool_mismatch(ledger, member[idx], rep[idx])
    member, rep = member[same], rep[same]
    if member.size == 0:
        return 0
    np.add.at(ledger.size, rep, ledger.size[member])
    ledger.size[member] = 0
    remap = np.arange(k)
    remap[member] = rep
    ledger.group = remap[ledger.group]
    ledger.version += 1
    ledger.release_columns(member)
    ledger._pending = None
    ledger._units = None
    return int(member.size)
