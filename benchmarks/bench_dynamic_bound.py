"""How fast could a per-user dynamic ledger be in numpy? A lower bound for DPBD's slot.

At 1% requirement changes per slot the groups of ``mechanisms.dynamic_ledgers`` are the users
(``docs/performance.md``), so a slot's work is per-user array work. This benchmark times the
leanest per-user DPBD slot: the plan's budget bounds (backward sums and one forward share and
remaining budget per user), rounding to the grid, the per-level counts, and the commit of an
unpublished slot (ring write and the backward window's move). It leaves out what the real
ledger must also do: forward runs, DPBA's absorption, snapshots. Every operation writes into
preallocated arrays, and ring rows come from a comparison instead of ``%``.

Budgets are integers of 64 bits (units of 2**-40, as in the ledger) or of 32 bits (units of
2**-17: half the memory traffic per pass, at the price of coarser charges and a far smaller
range than the ledger accepts). Apart from the slot, the benchmark times the declarations'
*window moves* at 1% churn on their own: a user whose wB changes needs the charges of both rings
between its old and its new window, one read of a separate cache line each, in whatever
language the ledger is written; and, for comparison, one slot's write and read in a
user-major ring (each user's slots side by side). The ratio is the median over the median
``np.bincount`` of the same cells, measured interleaved in one run, as in ``bench_step.py``.

Run: ``.venv/bin/python benchmarks/bench_dynamic_bound.py [--users 100000 1000000]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mechanisms.dynamic_ledgers import grid_codes, grid_table, to_units

W_GRID = np.arange(20, 201, 20)
E_GRID = np.linspace(0.5, 5.0, 10)
PARTS = ("plan", "round", "counts", "ring write", "ring read", "sums")
SHIFT32 = 23  # 2**-40 units to 2**-17 units


class LeanLedger:
    """Per-user state of the bound: sums, budgets, two rings of grid codes (slot-major)."""

    def __init__(
        self, n: int, width: int, bits: int, rng: np.random.Generator, dtype: type = np.int64
    ) -> None:
        self.n, self.width, self.bits, self.dtype = n, width, bits, dtype
        wide = dtype == np.int64
        table = grid_table(bits)
        self.table = (table if wide else np.minimum(table, np.iinfo(dtype).max)).astype(dtype)
        self.age = rng.choice(W_GRID, n).astype(np.int64) - 1  # wB - 1
        wF, EF = rng.choice(W_GRID, n), rng.choice(E_GRID, n)
        self.EB = self._units(rng.choice(E_GRID, n))
        self.share = self._units(EF / (2 * wF))
        self.remain = self._units(EF / 2)
        self.sum1 = np.zeros(n, dtype=dtype)
        self.sum2 = np.zeros(n, dtype=dtype)
        self.rings = (np.zeros((width, n), dtype=np.uint16), np.zeros((width, n), dtype=np.uint16))
        self.col = np.arange(n, dtype=np.int64)
        self.buf = [np.empty(n, dtype=dtype) for _ in range(6)]
        self.index = [np.empty(n, dtype=np.int64) for _ in range(2)]

    def _units(self, budgets: np.ndarray) -> np.ndarray:
        units = to_units(budgets)
        return units if self.dtype == np.int64 else (units >> SHIFT32).astype(self.dtype)

    def slot(self, t: int, cells: np.ndarray, d: int, clock: dict[str, float]) -> np.ndarray:
        """Plan, count and commit (unpublished) slot ``t``; returns the (levels, d) counts."""
        spent, budget, half, b1, b2, scratch = self.buf
        pair, flat = self.index
        ring1, ring2 = self.rings
        t0 = time.perf_counter()
        np.add(self.sum1, self.sum2, out=spent)
        np.maximum(self.EB, spent, out=budget)
        np.right_shift(budget, 1, out=half)
        np.subtract(budget, spent, out=budget)  # budget left in the backward window
        np.subtract(half, self.sum1, out=b1)
        np.minimum(b1, budget, out=b1)
        np.maximum(b1, 0, out=b1)
        np.minimum(b1, self.share, out=b1)
        t1 = time.perf_counter()
        code1 = grid_codes(b1, self.bits)
        eps1 = np.take(self.table, code1, mode="clip", out=b1)
        np.subtract(budget, eps1, out=budget)
        np.subtract(half, self.sum2, out=b2)
        np.minimum(b2, budget, out=b2)
        np.maximum(b2, 0, out=b2)
        np.right_shift(self.remain, 1, out=scratch)
        np.minimum(b2, scratch, out=b2)
        code2 = grid_codes(b2, self.bits)
        t2 = time.perf_counter()
        np.multiply(code1, (53 << self.bits) + 1, out=pair, dtype=np.int64)
        np.add(pair, code2, out=pair)
        present = np.bincount(pair) > 0
        level = np.take(np.cumsum(present) - 1, pair, mode="clip", out=pair)
        np.multiply(level, d, out=level)
        np.add(level, cells, out=level)
        counts = np.bincount(level, minlength=int(present.sum()) * d)
        t3 = time.perf_counter()
        row = t % self.width
        ring1[row] = code1
        ring2[row] = 0
        t4 = time.perf_counter()
        # the row of slot t - wB + 1: row - age, wrapped without a division
        np.subtract(row, self.age, out=flat)
        np.add(flat, self.width, out=flat, where=flat < 0)
        np.multiply(flat, self.n, out=flat)
        np.add(flat, self.col, out=flat)
        gone = np.take(self.table, ring1.ravel().take(flat, mode="clip"), mode="clip", out=half)
        t5 = time.perf_counter()
        np.add(self.sum1, eps1, out=self.sum1)
        np.subtract(self.sum1, gone, out=self.sum1)
        t6 = time.perf_counter()
        for name, a, b in zip(PARTS, (t0, t1, t2, t3, t4, t5), (t1, t2, t3, t4, t5, t6),
                              strict=True):
            clock[name] = clock.get(name, 0.0) + b - a
        return counts.reshape(-1, d)

    def move_windows(self, t: int, users: np.ndarray, new_age: np.ndarray) -> float:
        """Give ``users`` the backward windows of ``new_age + 1`` slots before slot ``t``: add or
        drop, in both rings, the charges between their old and their new window. Returns the
        seconds spent reading the rings (the gathers alone)."""
        old_age = self.age[users]
        first, count = np.minimum(old_age, new_age) + 1, np.abs(new_age - old_age)
        moved = count > 0
        users, first, count = users[moved], first[moved], count[moved]
        if users.size == 0:
            return 0.0
        sign = np.where(new_age[moved] > old_age[moved], 1, -1).astype(self.dtype)
        # ages first .. first + count - 1 before slot t (the window holds ages 1 .. age)
        starts = np.cumsum(count) - count
        ages = np.repeat(first - starts, count) + np.arange(int(count.sum()))
        rows = (t - ages) % self.width
        flat = rows * self.n + np.repeat(users, count)
        reading = 0.0
        for ring, sums in zip(self.rings, (self.sum1, self.sum2), strict=True):
            t0 = time.perf_counter()
            stored = ring.ravel().take(flat)
            reading += time.perf_counter() - t0
            charged = np.take(self.table, stored, mode="clip")
            sums[users] += sign * np.add.reduceat(charged, starts)
        self.age[users] = new_age[moved]
        return reading


def measure(n: int, d: int, warmup: int, slots: int, seed: int, dtype: type) -> dict:
    """Medians of the slot, the window moves, their reads and the floor after ``warmup`` slots,
    over ``slots`` slots, and each part's share of the slot."""
    rng = np.random.default_rng(seed)
    ledger = LeanLedger(n, 200, 3, rng, dtype)
    step, moves, reads, floor, clock = [], [], [], [], {}
    churn = max(n // 100, 1)
    for t in range(1, warmup + slots + 1):
        cells = (np.minimum(rng.geometric(0.05, n), d - 1) + 3 * t) % d
        changed = np.unique(rng.integers(0, n, churn))
        new_age = rng.choice(W_GRID, changed.size).astype(np.int64) - 1
        if t == warmup + 1:
            clock.clear()
        t0 = time.perf_counter()
        read = ledger.move_windows(t, changed, new_age)
        t1 = time.perf_counter()
        ledger.slot(t, cells, d, clock)
        t2 = time.perf_counter()
        np.bincount(cells, minlength=d)
        t3 = time.perf_counter()
        if t > warmup:
            moves.append(t1 - t0)
            reads.append(read)
            step.append(t2 - t1)
            floor.append(t3 - t2)
    s, m, r, f = (float(np.median(x)) for x in (step, moves, reads, floor))
    total = sum(clock.values())
    return {"n": n, "dtype": np.dtype(dtype).name, "step_ms": s * 1e3, "floor_ms": f * 1e3,
            "ratio": s / f, "moves_ms": m * 1e3, "moves_ratio": m / f,
            "reads_ratio": r / f,
            "parts": {k: v / total for k, v in clock.items()}}


def user_major(n: int, width: int, d: int, repeat: int = 10) -> tuple[float, float]:
    """Ratios to the floor of writing and of reading one slot's column of a user-major ring
    (``n`` rows of ``width`` 16-bit codes), best of ``repeat``."""
    ring = np.ones((n, width), dtype=np.uint16)
    codes = np.ones(n, dtype=np.uint16)
    cells = np.random.default_rng(0).integers(0, d, n)
    best = {"floor": np.inf, "write": np.inf, "read": np.inf}
    for k in range(repeat):
        t0 = time.perf_counter()
        np.bincount(cells, minlength=d)
        t1 = time.perf_counter()
        ring[:, k % width] = codes
        t2 = time.perf_counter()
        ring[:, (k + 7) % width].copy()
        t3 = time.perf_counter()
        for key, dt in (("floor", t1 - t0), ("write", t2 - t1), ("read", t3 - t2)):
            best[key] = min(best[key], dt)
    return best["write"] / best["floor"], best["read"] / best["floor"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--dtypes", nargs="+", choices=("int64", "int32"),
                        default=["int64", "int32"])
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=220)
    parser.add_argument("--slots", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print("| users | budgets | slot ms (median) | floor ms | ratio | window moves ms | ratio "
          "| their reads' ratio | " + " | ".join(PARTS) + " |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(PARTS))
    for n in args.users:
        for dtype in args.dtypes:
            r = measure(n, args.d, args.warmup, args.slots, args.seed, np.dtype(dtype).type)
            shares = " | ".join(f"{r['parts'][p]:.0%}" for p in PARTS)
            print(f"| {n:,} | {r['dtype']} | {r['step_ms']:.2f} | {r['floor_ms']:.3f} | "
                  f"{r['ratio']:.1f} | {r['moves_ms']:.2f} | {r['moves_ratio']:.1f} | "
                  f"{r['reads_ratio']:.1f} | {shares} |",
                  flush=True)
    for n in args.users:
        write, read = user_major(n, 200, args.d)
        print(f"user-major ring, {n:,} users: one column written {write:.1f}x, "
              f"read {read:.1f}x the floor")


if __name__ == "__main__":
    main()
