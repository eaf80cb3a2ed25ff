"""The lean DPBD slot of ``bench_dynamic_bound.py`` as compiled per-user loops (numba).

``bench_dynamic_bound.py`` bounds what a per-user ledger costs in numpy. This benchmark asks the
same of machine code: the same slot (budget bounds from the backward sums, one forward share and
remaining budget per user, both charges rounded down to the grid, per-level counts, the commit
of an unpublished slot with the backward window's move) and the same window moves at 1% churn,
each as a loop over users compiled by numba. The window moves are timed twice: reading every
charge between the old and the new window from the slot-major ring, and reading whole blocks of
``BLOCK`` slots from per-user block sums instead (the ring storage the performance notes name as
the way to cheaper moves); both must give the same sums, which the benchmark checks.

numba is not a dependency of the project; install it into the environment to run this:

    .venv/bin/pip install numba
    .venv/bin/python benchmarks/bench_dynamic_compiled.py [--users 100000 1000000]

The ratio is the median over the median ``np.bincount`` of the same cells, interleaved in one
run, as in ``bench_step.py``.
"""

from __future__ import annotations

import argparse
import sys
import time
from itertools import pairwise

import numpy as np
from bench_dynamic_bound import E_GRID, W_GRID

from mechanisms.dynamic_ledgers import grid_table, to_units

try:
    import numba
except ImportError:  # pragma: no cover - depends on the environment
    sys.exit("this benchmark needs numba: .venv/bin/pip install numba")

BITS = 3
LEVELS = (53 << BITS) + 1  # grid codes 0 .. 53 << BITS
BLOCK, BLOCKS = 16, 13
WIDTH = BLOCK * BLOCKS  # ring rows: at least the largest window, a whole number of blocks
PARTS = ("plan", "counts", "commit")

njit = numba.njit(cache=True, nogil=True)


@njit
def _value(code: int) -> int:
    """Unit value of a grid code (as ``grid_table``), by integer arithmetic."""
    if code == 0:
        return 0
    exponent, mantissa = (code - 1) >> BITS, (code - 1) & ((1 << BITS) - 1)
    return ((mantissa + (1 << BITS)) << exponent) >> BITS


@njit
def _codes(units: np.ndarray, out: np.ndarray) -> None:
    """Grid code of each amount (as ``grid_codes``): the float's exponent and top bits."""
    scratch = np.empty(1, np.float64)
    bits = scratch.view(np.int64)
    for i in range(units.shape[0]):
        scratch[0] = np.float64(units[i])
        out[i] = max((bits[0] >> (52 - BITS)) - ((1023 << BITS) - 1), 0)


@njit
def _bound1(EB, share, sum1, sum2, out) -> None:  # noqa: N803
    """eps1's bound: half the backward budget less eps1's window sum, the budget left, the share."""
    for i in range(EB.shape[0]):
        spent = sum1[i] + sum2[i]
        budget = max(EB[i], spent)
        out[i] = min(max(min((budget >> 1) - sum1[i], budget - spent), 0), share[i])


@njit
def _bound2(EB, remain, sum1, sum2, code1, out) -> None:  # noqa: N803
    """eps2's bound: as eps1's after eps1's charge, and half the forward budget remaining."""
    for i in range(EB.shape[0]):
        spent = sum1[i] + sum2[i]
        budget = max(EB[i], spent)
        left = budget - spent - _value(code1[i])
        out[i] = min(max(min((budget >> 1) - sum2[i], left), 0), remain[i] >> 1)


@njit
def _count(code1, code2, cells, d, level_of, pairs, counts) -> int:
    """Counts per (level, cell) into ``counts``, levels numbered as first seen; returns levels."""
    levels = 0
    for i in range(cells.shape[0]):
        pair = np.int64(code1[i]) * LEVELS + code2[i]
        level = level_of[pair]
        if level < 0:
            level = levels
            level_of[pair] = level
            pairs[level] = pair
            levels += 1
        counts[level * d + cells[i]] += 1
    for k in range(levels):
        level_of[pairs[k]] = -1
    return levels


@njit
def _commit(t, code1, age, ring1, ring2, sum1, blocks1, blocks2, table) -> None:
    """Write slot t (eps2 = 0) and move eps1's backward window past it."""
    row, block = t % WIDTH, (t // BLOCK) % BLOCKS
    if t % BLOCK == 0:
        blocks1[block, :] = 0
        blocks2[block, :] = 0
    for i in range(code1.shape[0]):
        ring1[row, i] = code1[i]
        ring2[row, i] = 0
        blocks1[block, i] += table[code1[i]]
    for i in range(code1.shape[0]):
        gone = row - age[i]
        if gone < 0:
            gone += WIDTH
        sum1[i] += table[code1[i]] - table[ring1[gone, i]]


@njit
def _sum_plain(ring, i, first, last) -> tuple[int, int]:
    """User i's charges of slots first..last, and how many entries that read."""
    total = 0
    for s in range(first, last + 1):
        total += _value(ring[s % WIDTH, i])
    return total, last - first + 1


@njit
def _sum_blocks(ring, blocks, i, first, last) -> tuple[int, int]:
    """As :func:`_sum_plain`, whole blocks read from the block sums."""
    total, reads, s = 0, 0, first
    while s <= last and s % BLOCK:
        total += _value(ring[s % WIDTH, i])
        s, reads = s + 1, reads + 1
    while s + BLOCK - 1 <= last:
        total += blocks[(s // BLOCK) % BLOCKS, i]
        s, reads = s + BLOCK, reads + 1
    while s <= last:
        total += _value(ring[s % WIDTH, i])
        s, reads = s + 1, reads + 1
    return total, reads


@njit
def _move(t, users, new_age, age, ring1, ring2, sum1, sum2, blocks1, blocks2, by_block) -> int:
    """Give ``users`` backward windows of ``new_age + 1`` slots: add or drop the charges between
    the old and the new window in both rings. Returns the entries read."""
    reads = 0
    for k in range(users.shape[0]):
        i, old, new = users[k], age[users[k]], new_age[k]
        if old == new:
            continue
        first, last = t - max(old, new), t - min(old, new) - 1
        if by_block:
            moved1, reads1 = _sum_blocks(ring1, blocks1, i, first, last)
            moved2, reads2 = _sum_blocks(ring2, blocks2, i, first, last)
        else:
            moved1, reads1 = _sum_plain(ring1, i, first, last)
            moved2, reads2 = _sum_plain(ring2, i, first, last)
        sign = 1 if new > old else -1
        sum1[i] += sign * moved1
        sum2[i] += sign * moved2
        age[i] = new
        reads += reads1 + reads2
    return reads


def measure(n: int, d: int, warmup: int, slots: int, seed: int, by_block: bool) -> dict:
    """Medians of each part, the moves and the floor over ``slots`` slots after ``warmup``."""
    rng = np.random.default_rng(seed)
    age = rng.choice(W_GRID, n).astype(np.int64) - 1  # wB - 1
    wF, EF = rng.choice(W_GRID, n), rng.choice(E_GRID, n)
    EB, share, remain = to_units(rng.choice(E_GRID, n)), to_units(EF / (2 * wF)), to_units(EF / 2)
    sum1, sum2 = np.zeros(n, np.int64), np.zeros(n, np.int64)
    table = grid_table(BITS)
    ring1, ring2 = np.zeros((WIDTH, n), np.uint16), np.zeros((WIDTH, n), np.uint16)
    blocks1, blocks2 = np.zeros((BLOCKS, n), np.int64), np.zeros((BLOCKS, n), np.int64)
    level_of, pairs = np.full(LEVELS * LEVELS, -1, np.int64), np.empty(LEVELS * LEVELS, np.int64)
    code1, code2, units = np.empty(n, np.uint16), np.empty(n, np.uint16), np.empty(n, np.int64)
    counts = np.zeros(min(LEVELS * LEVELS, n) * d, np.int64)  # levels <= pairs, <= users
    times: dict[str, list[float]] = {k: [] for k in (*PARTS, "moves", "floor")}
    reads = []
    for t in range(1, warmup + slots + 1):
        cells = (np.minimum(rng.geometric(0.05, n), d - 1) + 3 * t) % d
        changed = np.unique(rng.integers(0, n, max(n // 100, 1)))
        new_age = rng.choice(W_GRID, changed.size).astype(np.int64) - 1
        marks = [time.perf_counter()]
        read = _move(t, changed, new_age, age, ring1, ring2, sum1, sum2, blocks1, blocks2,
                     by_block)
        marks.append(time.perf_counter())
        _bound1(EB, share, sum1, sum2, units)
        _codes(units, code1)
        _bound2(EB, remain, sum1, sum2, code1, units)
        _codes(units, code2)
        marks.append(time.perf_counter())
        levels = _count(code1, code2, cells, d, level_of, pairs, counts)
        counts[: levels * d].reshape(levels, d).copy()  # the slot's (levels, d) counts
        counts[: levels * d] = 0
        marks.append(time.perf_counter())
        _commit(t, code1, age, ring1, ring2, sum1, blocks1, blocks2, table)
        marks.append(time.perf_counter())
        np.bincount(cells, minlength=d)
        marks.append(time.perf_counter())
        if t > warmup:
            reads.append(read)
            for key, (a, b) in zip(("moves", *PARTS, "floor"), pairwise(marks), strict=True):
                times[key].append(b - a)
    med = {k: float(np.median(v)) for k, v in times.items()}
    floor = med.pop("floor")
    return {"ratios": {k: v / floor for k, v in med.items()}, "floor_ms": floor * 1e3,
            "reads": float(np.mean(reads)), "sums": (sum1, sum2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=230)
    parser.add_argument("--slots", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print("| users | window moves read | entries read per slot | floor ms | plan | counts | "
          "commit | slot | moves | slot and moves |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.users:
        sums = []
        for by_block in (False, True):
            r = measure(n, args.d, args.warmup, args.slots, args.seed, by_block)
            ratio = r["ratios"]
            slot = sum(ratio[p] for p in PARTS)
            how = f"block sums of {BLOCK}" if by_block else "every charge"
            print(f"| {n:,} | {how} | {r['reads']:,.0f} | {r['floor_ms']:.3f} | "
                  + " | ".join(f"{ratio[p]:.1f}" for p in PARTS)
                  + f" | {slot:.1f} | {ratio['moves']:.1f} | {slot + ratio['moves']:.1f} |",
                  flush=True)
            sums.append(r["sums"])
        if not all(np.array_equal(a, b) for a, b in zip(*sums, strict=True)):
            sys.exit("the two ways of moving windows gave different sums")


if __name__ == "__main__":
    main()
