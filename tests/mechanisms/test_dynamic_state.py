"""Snapshots of the dynamic ledgers: a restored ledger goes on exactly as the one that wrote it."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mechanisms.ledgers import dynamic_snapshot
from mechanisms.ledgers.columns import MAX_BUDGET
from mechanisms.ledgers.dpba import DPBALedger
from mechanisms.ledgers.dynamic import DynamicLedger
from mechanisms.ledgers.kinds import DYNAMIC_LEDGERS
from mechanisms.requirements import DynamicRequirements

MERGE_EVERY = 4
NULL = (1, MAX_BUDGET, 1, 0.0)  # what ``DynamicLedger.suspend`` declares

# one slot's declarations: (users, wB, EB, wF, EF)
Declaration = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


@st.composite
def histories(draw):
    """A few users declaring from a few requirements within ``max_window`` (so that groups split
    and, once their differences have left every window, merge) or suspended, publish bits, and
    where to snapshot: after ``cut`` committed slots, before the next slot's declarations,
    after them, or after planning it."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    n, T = int(rng.integers(1, 6)), int(rng.integers(1, 41))
    max_window = draw(st.sampled_from([3, 6, 12]))
    options = [
        (
            int(rng.integers(1, max_window + 1)),
            float(rng.choice([0.3, 1.0, 2.5])),
            int(rng.integers(1, max_window + 1)),
            float(rng.choice([0.4, 1.2, 3.0])),
        )
        for _ in range(int(rng.integers(1, 4)))
    ]
    first = np.sort(rng.integers(1, T + 1, n))  # users join in index order
    first[0] = 1
    decls: list[Declaration] = []
    for t in range(1, T + 1):
        users = [i for i in range(n) if first[i] == t or (first[i] < t and rng.random() < 0.2)]
        # a registered user is sometimes suspended: it then holds the null requirement
        reqs = [NULL if first[i] < t and rng.random() < 0.15
                else options[int(rng.integers(len(options)))] for i in users]
        cols = list(zip(*reqs, strict=True)) if reqs else [(), (), (), ()]
        decls.append(
            (
                np.array(users, dtype=np.int64),
                np.array(cols[0], dtype=np.int64),
                np.array(cols[1], dtype=np.float64),
                np.array(cols[2], dtype=np.int64),
                np.array(cols[3], dtype=np.float64),
            )
        )
    bits = (rng.random(T) < rng.uniform(0.2, 1.0)).tolist()
    cut = int(rng.integers(0, T + 1))
    phase = draw(st.sampled_from(["before", "declared", "planned"]))
    return max_window, decls, bits, cut, phase


def snapshot_arrays(ledger: DynamicLedger) -> dict[str, np.ndarray]:
    """The arrays of a ledger's snapshot."""
    with np.load(io.BytesIO(dynamic_snapshot.to_bytes(ledger)), allow_pickle=False) as archive:
        return {key: archive[key] for key in archive.files}


def assert_same_ledger(a: DynamicLedger, b: DynamicLedger) -> None:
    assert type(b) is type(a)
    for attr in ("max_window", "grid_bits", "merge_every", "slot", "n", "k", "version"):
        assert getattr(b, attr) == getattr(a, attr), attr
    assert b.groups == a.groups
    np.testing.assert_array_equal(b.group, a.group)


def assert_same_step(a: DynamicLedger, b: DynamicLedger, bit: bool) -> None:
    """Plan and commit one slot on both ledgers, asserting equal plans, charges and groups."""
    t = a.slot
    pa, pb = a.plan(), b.plan()
    assert (pb.slot, pb.nullified, pb.projected) == (pa.slot, pa.nullified, pa.projected), t
    for field in ("eps1", "eps2", "backward_budget", "projected_users"):
        np.testing.assert_array_equal(getattr(pb, field), getattr(pa, field), f"{field} {t}")
    assert b.projected_count() == a.projected_count()
    if isinstance(a, DPBALedger):
        np.testing.assert_array_equal(b.borders(), a.borders(), f"borders slot {t}")
    ca, cb = a.commit(bit), b.commit(bit)
    assert (cb.slot, cb.published, cb.nullified) == (ca.slot, ca.published, ca.nullified), t
    assert cb.extra == ca.extra
    np.testing.assert_array_equal(cb.eps1, ca.eps1, f"charged eps1 slot {t}")
    np.testing.assert_array_equal(cb.eps2, ca.eps2, f"charged eps2 slot {t}")
    assert_same_ledger(a, b)


@pytest.mark.parametrize("name", ["dpbd", "dpba"])
@pytest.mark.parametrize("grid_bits", [None, 3])
@given(case=histories())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_restored_ledger_goes_on_identically(name, grid_bits, case) -> None:
    max_window, decls, bits, cut, phase = case
    a = DYNAMIC_LEDGERS[name](max_window, grid_bits, MERGE_EVERY)
    for t in range(1, cut + 1):
        a.declare(*decls[t - 1])
        a.commit(bits[t - 1])
    declared = cut < len(bits) and phase != "before"
    if declared:
        a.declare(*decls[cut])
        if phase == "planned":
            a.plan()
    b = dynamic_snapshot.from_bytes(dynamic_snapshot.to_bytes(a))
    assert_same_ledger(a, b)
    for t in range(cut + 1, len(bits) + 1):
        if not (declared and t == cut + 1):
            a.declare(*decls[t - 1])
            b.declare(*decls[t - 1])
        assert_same_step(a, b, bits[t - 1])
    # and the whole state agrees at the end
    sa, sb = snapshot_arrays(a), snapshot_arrays(b)
    assert sa.keys() == sb.keys()
    for key in sa:
        np.testing.assert_array_equal(sb[key], sa[key], key)


@pytest.mark.parametrize("name", ["dpbd", "dpba"])
@pytest.mark.parametrize("cut", range(1, 17))
def test_restore_amid_a_detour_merges_back(name, cut) -> None:
    # 40 users in 4 declarations; u0..u9 leave at slot 3 and return at slot 6, and their groups
    # merge back once the detour has left every window (closed runs sit in the pool at slots
    # 3, 4 and 6; merged columns are free from slot 12 or 15): snapshot after declaring at cut
    rows = [(1, f"u{i}", 1, 10.0, 3, 1.0 + (i % 4)) for i in range(40)]
    rows += [(3, f"u{i}", 3, 2.0, 2, 0.5) for i in range(10)]
    rows += [(6, f"u{i}", 1, 10.0, 3, 1.0 + (i % 4)) for i in range(10)]
    req = DynamicRequirements.from_rows(rows)
    a = DYNAMIC_LEDGERS[name](4, 3, merge_every=1)
    b = None
    for t in range(1, 30):
        users, wB, EB, wF, EF = req.at(t)
        idx = np.array([int(u[1:]) for u in users], dtype=np.int64)
        a.declare(idx, wB, EB, wF, EF)
        if b is not None:
            b.declare(idx, wB, EB, wF, EF)
        elif t == cut:
            b = dynamic_snapshot.from_bytes(dynamic_snapshot.to_bytes(a))
            assert_same_ledger(a, b)
            assert len(b.pool) == len(a.pool) and b.free.tolist() == a.free.tolist()
        if b is None:
            a.commit(t % 3 != 0)
        else:
            assert_same_step(a, b, t % 3 != 0)
    assert b is not None and b.groups == a.groups == 4


@pytest.mark.parametrize("name", ["dpbd", "dpba"])
@pytest.mark.parametrize("grid_bits", [None, 3])
def test_empty_ledger_round_trip(name, grid_bits) -> None:
    a = DYNAMIC_LEDGERS[name](6, grid_bits, merge_every=2)
    data = dynamic_snapshot.to_bytes(a)
    b = dynamic_snapshot.from_bytes(data)
    assert_same_ledger(a, b)
    assert b.k == 0 and b.n == 0 and b.slot == 1 and len(b.pool) == 0
    assert len(data) < 4096
    # a slot without users, then users arriving
    assert_same_step(a, b, True)
    for ledger in (a, b):
        ledger.declare(np.arange(3), [2, 6, 1], [1.0, 2.0, 0.5], [3, 6, 2], [1.5, 0.8, 2.0])
    for t in range(2, 12):
        assert_same_step(a, b, t % 4 != 0)


@pytest.mark.parametrize("name", ["dpbd", "dpba"])
def test_round_trip_before_the_first_commit(name) -> None:
    a = DYNAMIC_LEDGERS[name](6, None, merge_every=3)
    a.declare(np.arange(4), [2, 6, 1, 2], [1.0, 2.0, 0.5, 1.0], [3, 6, 2, 3], [1.5, 0.8, 2.0, 1.5])
    b = dynamic_snapshot.from_bytes(dynamic_snapshot.to_bytes(a))
    assert_same_ledger(a, b)
    assert b.n == 4 and b.k == 3 and b.groups == 3 and b.slot == 1
    for t in range(1, 15):
        if t == 5:
            for ledger in (a, b):
                ledger.declare(np.array([1, 4]), [3, 1], [1.0, 1.0], [2, 4], [0.6, 1.0])
        assert_same_step(a, b, t % 3 != 1)


def test_snapshot_holds_only_the_columns_in_use() -> None:
    a = DYNAMIC_LEDGERS["dpba"](30, 3)
    reqs = ([5, 30, 2, 9], [1.0, 2.0, 3.0, 4.0], [30, 4, 7, 1], [2.0, 1.0, 0.5, 3.0])
    a.declare(np.arange(2000), *(np.repeat(x, 500) for x in reqs))
    for t in range(1, 50):
        a.commit(t % 2 == 0)
    saved = snapshot_arrays(a)
    assert a.k == 4 and a.size.shape[0] > a.k  # capacity beyond the columns in use
    assert saved["rings"].shape == (2, 30, 4) and saved["columns"].shape[1] == 4
    assert len(dynamic_snapshot.to_bytes(a)) < 8192


def _tampered(**changes: np.ndarray) -> bytes:
    """A valid snapshot with some arrays replaced."""
    a = DYNAMIC_LEDGERS["dpbd"](4)
    a.declare(np.arange(2), [1, 2], [1.0, 1.0], [2, 2], [1.0, 2.0])
    a.commit(True)
    saved = snapshot_arrays(a) | changes
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **saved)
    return buffer.getvalue()


def _npz(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    return buffer.getvalue()


def _npy() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.arange(5))
    return buffer.getvalue()


GARBAGE = {
    "empty": b"",
    "text": b"not a ledger at all",
    "random": np.random.default_rng(0).bytes(300),
    "zip magic": b"PK\x03\x04" + bytes(100),
    "npy": _npy(),
    "other npz": _npz(x=np.arange(3)),
    "pickled": _tampered(meta=np.array([object()], dtype=object)),
    "truncated": dynamic_snapshot.to_bytes(DYNAMIC_LEDGERS["dpba"](5))[:-40],
    "unknown ledger": _tampered(name=np.array("nope")),
    "future format": _tampered(meta=np.array([99, 4, -1, 16, 2, 2, 2, 1])),
    "short group": _tampered(group=np.zeros(1, dtype=np.int64)),
    "group out of range": _tampered(group=np.array([0, 7])),
    "float columns": _tampered(columns=np.zeros((10, 2))),
    "bad grid": _tampered(meta=np.array([1, 4, 77, 16, 2, 2, 2, 1])),
}


@pytest.mark.parametrize("data", GARBAGE.values(), ids=GARBAGE.keys())
def test_from_bytes_rejects_garbage(data) -> None:
    with pytest.raises(ValueError, match="^not a dynamic ledger snapshot: "):
        dynamic_snapshot.from_bytes(data)
