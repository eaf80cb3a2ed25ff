"""Snapshots of the dynamic ledgers (DPBD, DPBA): their whole state as one compressed numpy
archive, and a ledger restored from it that goes on exactly as the one that wrote it.

>>> from mechanisms.ledgers.kinds import DYNAMIC_LEDGERS
>>> ledger = DYNAMIC_LEDGERS["dpba"](4)
>>> type(from_bytes(to_bytes(ledger))).__name__
'DPBALedger'
"""

from __future__ import annotations

import io
import zipfile
import zlib

import numpy as np

from mechanisms.ledgers.columns import RunPool
from mechanisms.ledgers.dynamic import DynamicLedger
from mechanisms.ledgers.groups import RUN_FIELDS
from mechanisms.ledgers.kinds import DYNAMIC_LEDGERS

# a snapshot (:func:`to_bytes`) holds the scalars in "meta", in this order, and the
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


def to_bytes(ledger: DynamicLedger) -> bytes:
    """The whole state of ``ledger``, compressed; :func:`from_bytes` takes it back.

    Only the ``k`` columns in use are saved (the rest is capacity); plan caches are not.
    """
    if _ledger_classes().get(ledger.name) is not type(ledger):
        raise TypeError(f"{type(ledger).__name__} is not a registered dynamic ledger")
    k, cur, pool = ledger.k, ledger.current, ledger.pool
    bits = -1 if ledger.grid_bits is None else int(ledger.grid_bits)
    meta = (_SNAPSHOT_FORMAT, ledger.max_window, bits, ledger.merge_every, ledger.slot, ledger.n, k)
    buffer = io.BytesIO()
    np.savez_compressed(
        buffer,
        meta=np.array([*meta, ledger.version], dtype=np.int64),
        name=np.array(ledger.name),
        columns=_matrix(ledger, _SAVED_COLUMNS, k),
        EF=ledger.EF[:k],
        current=_matrix(cur, RUN_FIELDS, k),
        pool=_matrix(pool, RUN_FIELDS, len(pool)),
        group=ledger.group,
        free=ledger.free,
        rings=np.stack([ledger.ring1.data[:, :k], ledger.ring2.data[:, :k]]),
        nonzero=np.stack([ledger.ring1.nonzero, ledger.ring2.nonzero]),
    )
    return buffer.getvalue()


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
    ledger.reserve(k)
    ledger.k = k
    for f, row in zip(_SAVED_COLUMNS, saved["columns"], strict=True):
        getattr(ledger, f)[:k] = row
    ledger.EF[:k] = saved["EF"]
    for f, row in zip(RUN_FIELDS, saved["current"], strict=True):
        getattr(ledger.current, f)[:k] = row
    ledger.pool = RunPool.of(saved["pool"])
    ledger.group = np.array(saved["group"], dtype=np.int64)
    ledger.free = np.array(saved["free"], dtype=np.int64)
    for ring, charges, nonzero in zip(
        (ledger.ring1, ledger.ring2), saved["rings"], saved["nonzero"], strict=True
    ):
        ring.load(charges, nonzero)
    return ledger


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
