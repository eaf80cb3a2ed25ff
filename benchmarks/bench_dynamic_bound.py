"""How fast could a per-user dynamic ledger be in numpy? A lower bound for DPBD's slot.

At 1% requirement changes per slot the groups of ``mechanisms.dynamic_ledgers`` are the users
(``docs/performance.md``), so a slot's work is per-user array work. This benchmark times the
leanest per-user DPBD slot: the plan's budget bounds (backward sums and one forward share and
remaining budget per user), rounding to the grid, the per-level counts, and the commit of an
unpublished slot (ring write and the backward window's move). It leaves out everything the real
ledger must also do: forward runs of earlier declarations, declarations and their window moves,
DPBA's absorption, snapshots. Every operation writes into preallocated arrays, and ring rows
come from a comparison instead of ``%``. The ratio is the median slot over the median
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


class LeanLedger:
    """Per-user state of the bound: sums, budgets, two rings of grid codes (slot-major)."""

    def __init__(self, n: int, width: int, bits: int, rng: np.random.Generator) -> None:
        self.n, self.width, self.bits = n, width, bits
        self.table = grid_table(bits)
        self.age = rng.choice(W_GRID, n).astype(np.int64) - 1  # wB - 1
        self.EB = to_units(rng.choice(E_GRID, n))
        wF, EF = rng.choice(W_GRID, n), rng.choice(E_GRID, n)
        self.share = to_units(EF / (2 * wF))
        self.remain = to_units(EF / 2)
        self.sum1 = np.zeros(n, dtype=np.int64)
        self.sum2 = np.zeros(n, dtype=np.int64)
        self.ring1 = np.zeros((width, n), dtype=np.uint16)
        self.ring2 = np.zeros((width, n), dtype=np.uint16)
        self.col = np.arange(n, dtype=np.int64)
        self.buf = [np.empty(n, dtype=np.int64) for _ in range(6)]

    def slot(self, t: int, cells: np.ndarray, d: int, clock: dict[str, float]) -> np.ndarray:
        """Plan, count and commit (unpublished) slot ``t``; returns the (levels, d) counts."""
        spent, budget, half, b1, b2, scratch = self.buf
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
        pair = np.multiply(code1, (53 << self.bits) + 1, out=scratch, dtype=np.int64)
        np.add(pair, code2, out=pair)
        present = np.bincount(pair) > 0
        level = np.take(np.cumsum(present) - 1, pair, mode="clip", out=spent)
        np.multiply(level, d, out=level)
        np.add(level, cells, out=level)
        counts = np.bincount(level, minlength=int(present.sum()) * d)
        t3 = time.perf_counter()
        row = t % self.width
        self.ring1[row] = code1
        self.ring2[row] = 0
        t4 = time.perf_counter()
        # the row of slot t - wB + 1: row - age, wrapped without a division
        flat = np.subtract(row, self.age, out=scratch)
        np.add(flat, self.width, out=flat, where=flat < 0)
        np.multiply(flat, self.n, out=flat)
        np.add(flat, self.col, out=flat)
        gone = np.take(self.table, self.ring1.ravel().take(flat, mode="clip"), mode="clip",
                       out=half)
        t5 = time.perf_counter()
        np.add(self.sum1, eps1, out=self.sum1)
        np.subtract(self.sum1, gone, out=self.sum1)
        t6 = time.perf_counter()
        for name, a, b in zip(PARTS, (t0, t1, t2, t3, t4, t5), (t1, t2, t3, t4, t5, t6),
                              strict=True):
            clock[name] = clock.get(name, 0.0) + b - a
        return counts.reshape(-1, d)


def measure(n: int, d: int, warmup: int, slots: int, seed: int) -> dict:
    """Median slot and floor seconds after ``warmup`` slots, and the share of each part."""
    rng = np.random.default_rng(seed)
    ledger = LeanLedger(n, 200, 3, rng)
    step, floor, clock = [], [], {}
    for t in range(1, warmup + slots + 1):
        cells = (np.minimum(rng.geometric(0.05, n), d - 1) + 3 * t) % d
        if t == warmup + 1:
            clock.clear()
        t0 = time.perf_counter()
        ledger.slot(t, cells, d, clock)
        t1 = time.perf_counter()
        np.bincount(cells, minlength=d)
        t2 = time.perf_counter()
        if t > warmup:
            step.append(t1 - t0)
            floor.append(t2 - t1)
    s, f = float(np.median(step)), float(np.median(floor))
    total = sum(clock.values())
    return {"n": n, "step_ms": s * 1e3, "floor_ms": f * 1e3, "ratio": s / f,
            "parts": {k: v / total for k, v in clock.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=220)
    parser.add_argument("--slots", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print("| users | slot ms (median) | floor ms | ratio | " + " | ".join(PARTS) + " |")
    print("|---:|---:|---:|---:|" + "---:|" * len(PARTS))
    for n in args.users:
        r = measure(n, args.d, args.warmup, args.slots, args.seed)
        shares = " | ".join(f"{r['parts'][p]:.0%}" for p in PARTS)
        print(f"| {n:,} | {r['step_ms']:.2f} | {r['floor_ms']:.3f} | {r['ratio']:.1f} | "
              f"{shares} |", flush=True)


if __name__ == "__main__":
    main()
