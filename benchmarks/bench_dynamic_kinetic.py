"""A lean DPBD slot that touches only the users whose plan changes (kinetic ledger).

``bench_dynamic_bound.py`` and ``bench_dynamic_compiled.py`` time a slot that does work for every
user. This benchmark asks whether a ledger that works only on the users whose plan *changes*
escapes that cost. Without publications a DPBD user's plan is eps1 = grid(min(share, EB/2 - S))
with S the user's eps1 over the previous wB - 1 slots: a recurrence over the user's own charges.
Given the charges inside the window, the slot at which the plan next changes can be computed in
advance: S moves by (charge leaving - charge entering) per slot, piecewise linearly between the
slots at which the user's charge changed ("jumps"). Each user keeps that slot; a slot's work is
then the users due (their plan changes, or they declared), each by walking its jumps in the
window, and the per-level counts over all users. Window sums are never moved: they come from
prefix sums stored at each jump.

This is the lean slot only: eps1's plan with a fixed eps2 level per declaration, no
publication, no forward runs, no DPBA (each would add due users and work). Two
implementations:

- ``numpy``: the jumps in one log (a linked list per user), the due users' walks vectorised
  hop by hop;
- ``compiled``: a loop over the due users compiled by numba, each user's state and its last
  ``BLOCK`` jumps in one record of its own. A user with more jumps than that inside its window
  cannot be served from the record; the benchmark counts such recomputations ("overflows")
  instead of handling them.

Before timing, both are checked against the recurrence computed directly from the full history
of charges, at ``--check-users`` users and 1% churn; the same history gives the share of users
whose window sum moves from one slot to the next (a ledger that moved only those sums would
still touch that share of the users at every slot).

    .venv/bin/python benchmarks/bench_dynamic_kinetic.py [--users 100000 1000000]

numba is optional (``.venv/bin/pip install numba``); without it only ``numpy`` runs. The ratio
is the median step over the median ``np.bincount`` of the same cells, interleaved in one run,
as in ``bench_step.py``.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from bench_step import draw_dynamic as draw

from mechanisms.dynamic_ledgers import grid_codes, grid_table, to_units

BITS = 3
TABLE = grid_table(BITS)
NCODE = TABLE.size
NEVER = np.iinfo(np.int32).max  # "no change ahead" (a slot number)
BIG = np.int64(1) << 61  # an unbounded side of the interval a plan stays in
BLOCK = 24  # jumps per user record (compiled)
FIELDS = 8  # scalars per user record: wB, EB/2, share, grid(share), code, eps2 code, jumps


class Kinetic:
    """Per-user requirements, plan codes, level keys and due slots; the jumps are the
    subclasses' business."""

    def __init__(self, n: int, d: int, req: tuple[np.ndarray, ...]) -> None:
        self.n, self.d, self.t = n, d, 1
        self.wB = np.zeros(n, np.int64)
        self.half, self.share = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.code, self.code2 = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.due = np.ones(n, np.int32)  # everybody is planned at slot 1
        self.level_of = np.full(NCODE * NCODE, -1, np.int64)
        self.levels = 0
        self.keys = np.zeros(n, np.int64)
        self.hops = 0
        self.overflows = 0
        self.clock: dict[str, float] = {}
        self._set(np.arange(n), *req)

    def _set(self, users: np.ndarray, wB, EB, wF, EF) -> None:
        self.wB[users] = wB
        self.half[users] = to_units(EB) >> 1
        self.share[users] = to_units(EF / (2 * wF))
        self.code2[users] = grid_codes(np.minimum(to_units(EF) >> 2, self.half[users]), BITS)

    def declare(self, users: np.ndarray, *req: np.ndarray) -> None:
        """New requirements from this slot on: the users are due now."""
        self._set(users, *req)
        self.due[users] = self.t

    def _keys(self, users: np.ndarray) -> None:
        """Level keys of ``users`` after their codes changed (levels numbered as first seen)."""
        pair = self.code[users] * NCODE + self.code2[users]
        fresh = np.unique(pair[self.level_of[pair] < 0])
        self.level_of[fresh] = np.arange(self.levels, self.levels + fresh.size)
        self.levels += fresh.size
        self.keys[users] = self.level_of[pair] * (self.d + 1) + 1

    def step(self, cells: np.ndarray) -> np.ndarray:
        """Plan slot t for the due users and count the reports per level."""
        t0 = time.perf_counter()
        due = np.flatnonzero(self.due == self.t)
        t1 = time.perf_counter()
        self.recompute(due)
        t2 = time.perf_counter()
        counts = np.bincount(self.keys + cells, minlength=self.levels * (self.d + 1))
        t3 = time.perf_counter()
        for key, dt in (("due", t1 - t0), ("recompute", t2 - t1), ("counts", t3 - t2)):
            self.clock[key] = self.clock.get(key, 0.0) + dt
        self.last_due = due.size
        self.t += 1
        return counts

    def recompute(self, users: np.ndarray) -> None:
        raise NotImplementedError


class VectorKinetic(Kinetic):
    """Jumps in one log, a linked list per user; walks vectorised over the due users."""

    def __init__(self, n: int, d: int, req: tuple[np.ndarray, ...]) -> None:
        super().__init__(n, d, req)
        self.head, self.first = np.full(n, -1, np.int64), np.full(n, -1, np.int64)
        self.size = 0
        self.log = np.zeros((5, 1 << 16), np.int64)  # slot, value, prefix before, prev, next

    def _append(self, users: np.ndarray, values: np.ndarray, prefix: np.ndarray) -> None:
        k, s = users.size, self.size
        if s + k > self.log.shape[1]:
            grown = np.zeros((5, 2 * (s + k)), np.int64)
            grown[:, :s] = self.log[:, :s]
            self.log = grown
        idx = np.arange(s, s + k)
        old = self.head[users]
        self.log[:, idx] = [np.full(k, self.t), values, prefix, old, np.full(k, -1)]
        self.log[4, old[old >= 0]] = idx[old >= 0]
        self.first[users[old < 0]] = idx[old < 0]
        self.head[users] = idx
        self.size += k

    def recompute(self, u: np.ndarray) -> None:
        t = self.t
        slot, value, before, prev, nxt = self.log
        head = self.head[u]
        had = head >= 0
        h = np.maximum(head, 0)
        p1 = np.where(had, before[h] + value[h] * (t - slot[h]), 0)  # eps1 over slots 1..t-1
        s0 = t - self.wB[u]
        cover = head.copy()  # the jump in force at s0 (-1: none yet)
        walk = np.flatnonzero(had & (slot[h] > s0))
        while walk.size:
            self.hops += walk.size
            cover[walk] = prev[cover[walk]]
            walk = walk[cover[walk] >= 0]
            walk = walk[slot[cover[walk]] > s0[walk]]
        known = cover >= 0
        c = np.maximum(cover, 0)
        p0 = np.where(known, before[c] + value[c] * (s0 - slot[c] + 1), 0)
        y = self.half[u] - (p1 - p0)  # EB/2 - S
        share = self.share[u]
        code = grid_codes(np.minimum(share, np.maximum(y, 0)), BITS).astype(np.int64)
        v = TABLE[code]
        jump = np.flatnonzero((code != self.code[u]) | ~had)
        if jump.size:
            self.code[u[jump]] = code[jump]
            self._append(u[jump], v[jump], p1[jump])
            self._keys(u[jump])
            slot, value, before, prev, nxt = self.log
        # the plan stays while y stays in [lo, hi); y moves by (leaving - v) per slot
        capped = code == grid_codes(share, BITS)
        hi = np.where(capped, BIG, TABLE[np.minimum(code + 1, NCODE - 1)])
        lo = np.where(code > 0, v, -BIG)
        due = np.full(u.size, NEVER, np.int64)
        seg_value = np.where(known, value[c], 0)
        following = np.where(known, nxt[c], self.first[u])
        seg_start, s1 = s0 + 1, s0 + 1
        walk = np.arange(u.size)
        while walk.size:
            self.hops += walk.size
            f = following[walk]
            end = np.minimum(np.where(f >= 0, slot[np.maximum(f, 0)] - 1, t - 1), t - 1)
            length = end - seg_start[walk] + 1
            delta = seg_value[walk] - v[walk]
            yy = y[walk]
            steps = np.full(walk.size, BIG)
            up = (delta > 0) & (hi[walk] < BIG)
            steps[up] = -((yy[up] - hi[walk][up]) // delta[up])  # first k: yy + k delta >= hi
            down = (delta < 0) & (lo[walk] > -BIG)
            steps[down] = (yy[down] - lo[walk][down]) // -delta[down] + 1
            hit = (length > 0) & (steps <= length)
            due[walk[hit]] = t + seg_start[walk][hit] - s1[walk][hit] + steps[hit]
            y[walk] = yy + np.maximum(length, 0) * delta
            on = ~hit & (end < t - 1) & (f >= 0)
            walk, f = walk[on], f[on]
            seg_value[walk] = value[f]
            seg_start[walk] = np.maximum(slot[f], seg_start[walk])
            following[walk] = nxt[f]
        self.due[u] = np.minimum(due, NEVER)


def _recompute_records(  # compiled by numba: one loop over the due users
    users, t, rec, due, keys, level_of, levels, table, d, block
):
    hops = overflows = 0
    for q in range(users.size):
        r = rec[users[q]]
        jumps = r[6]
        oldest, head = max(jumps - block, 0), jumps - 1
        p1 = 0
        if head >= 0:
            e = FIELDS + 3 * (head % block)
            p1 = r[e + 2] + r[e + 1] * (t - r[e])
        s0 = t - r[0]
        cover = head
        while cover >= oldest and cover >= 0 and r[FIELDS + 3 * (cover % block)] > s0:
            cover -= 1
            hops += 1
        if 0 <= cover < oldest:
            overflows += 1
            cover = oldest
        p0 = 0
        if cover >= 0:
            e = FIELDS + 3 * (cover % block)
            p0 = r[e + 2] + r[e + 1] * (s0 - r[e] + 1)
        y = r[1] - (p1 - p0)
        amount = min(r[2], max(y, 0))
        lo_i, hi_i = 0, table.size  # grid code: the largest table entry <= amount
        while hi_i - lo_i > 1:
            mid = (lo_i + hi_i) >> 1
            if table[mid] <= amount:
                lo_i = mid
            else:
                hi_i = mid
        code, v = lo_i, table[lo_i]
        if code != r[4] or head < 0:
            e = FIELDS + 3 * (jumps % block)
            r[e], r[e + 1], r[e + 2] = t, v, p1
            jumps += 1
            r[6], r[4] = jumps, code
            pair = code * table.size + r[5]
            if level_of[pair] < 0:
                level_of[pair] = levels
                levels += 1
            keys[users[q]] = level_of[pair] * (d + 1) + 1
        hi = BIG if code == r[3] else table[min(code + 1, table.size - 1)]
        lo = v if code > 0 else -BIG
        s1 = s0 + 1
        seg_value = r[FIELDS + 3 * (cover % block) + 1] if cover >= 0 else 0
        following, seg_start, when = cover + 1, s1, NEVER
        while True:
            hops += 1
            end = t - 1
            if following < jumps:
                end = min(r[FIELDS + 3 * (following % block)] - 1, t - 1)
            length, delta = end - seg_start + 1, seg_value - v
            if length > 0 and delta != 0:
                steps = BIG
                if delta > 0 and hi < BIG:
                    steps = (hi - y + delta - 1) // delta
                elif delta < 0 and lo > -BIG:
                    steps = (y - lo) // (-delta) + 1
                if steps <= length:
                    when = t + (seg_start - s1) + steps
                    break
                y += length * delta
            if end >= t - 1 or following >= jumps:
                break
            e = FIELDS + 3 * (following % block)
            seg_value, seg_start = r[e + 1], max(r[e], seg_start)
            following += 1
        due[users[q]] = min(when, NEVER)
    return levels, hops, overflows


class CompiledKinetic(Kinetic):
    """Each user's scalars and last ``BLOCK`` jumps in one record; a compiled loop per slot."""

    def __init__(self, n: int, d: int, req: tuple[np.ndarray, ...], loop, block: int) -> None:
        self.rec = np.zeros((n, FIELDS + 3 * block), np.int64)
        self.loop, self.block = loop, block
        super().__init__(n, d, req)

    def _set(self, users: np.ndarray, *req: np.ndarray) -> None:
        super()._set(users, *req)
        r = self.rec
        r[users, 0], r[users, 1], r[users, 2] = self.wB[users], self.half[users], self.share[users]
        r[users, 3] = grid_codes(self.share[users], BITS)
        r[users, 5] = self.code2[users]

    def recompute(self, users: np.ndarray) -> None:
        self.levels, hops, overflows = self.loop(
            users, self.t, self.rec, self.due, self.keys, self.level_of, self.levels, TABLE,
            self.d, self.block,
        )
        self.hops += hops
        self.overflows += overflows
        self.code = self.rec[:, 4]


def check(make, n: int, slots: int, seed: int) -> float:
    """Compare a ledger's plans with the recurrence over the full history; returns the mean
    share of users whose window sum moved per slot over the last 100 slots."""
    rng = np.random.default_rng(seed)
    ledger = make(n, 4, draw(rng, n))
    history = np.zeros((slots + 1, n), np.int64)  # eps1 units, row t = slot t
    prefix = np.zeros((slots + 1, n), np.int64)  # prefix[s] = eps1 over slots 1..s
    moved = []
    for t in range(1, slots + 1):
        if t > 1:
            users = rng.choice(n, n // 100, replace=False)
            ledger.declare(users, *draw(rng, users.size))
        window = prefix[t - 1] - prefix[np.maximum(t - ledger.wB, 0), np.arange(n)]
        amount = np.minimum(ledger.share, np.maximum(ledger.half - window, 0))
        want = grid_codes(amount, BITS)
        ledger.step(np.zeros(n, np.int64))
        if not np.array_equal(want, ledger.code):
            sys.exit(f"{type(ledger).__name__}: plans differ from the recurrence at slot {t}")
        history[t] = TABLE[want]
        prefix[t] = prefix[t - 1] + history[t]
        leaving = history[np.maximum(t - ledger.wB + 1, 0), np.arange(n)]
        if t > slots - 100:
            moved.append(np.mean(history[t] != leaving))
    return float(np.mean(moved))


def measure(make, n: int, d: int, warmup: int, slots: int, seed: int) -> dict:
    """Step and floor per slot at 1% churn, after ``warmup`` slots."""
    rng = np.random.default_rng(seed)
    ledger = make(n, d, draw(rng, n))
    steps, floors, due = [], [], []
    for t in range(1, warmup + slots + 1):
        cells = (np.minimum(rng.geometric(0.05, n), d - 1) + 3 * t) % d
        users = rng.choice(n, n // 100, replace=False)
        req = draw(rng, users.size)
        if t == warmup + 1:
            ledger.clock, ledger.hops = {}, 0
        t0 = time.perf_counter()
        if t > 1:
            ledger.declare(users, *req)
        t1 = time.perf_counter()
        ledger.step(cells)
        t2 = time.perf_counter()
        np.bincount(cells, minlength=d)
        t3 = time.perf_counter()
        if t > warmup:
            ledger.clock["declare"] = ledger.clock.get("declare", 0.0) + t1 - t0
            steps.append(t2 - t0)
            floors.append(t3 - t2)
            due.append(ledger.last_due)
    floor = float(np.median(floors))
    return {
        "floor_ms": floor * 1e3,
        "ratio": float(np.median(steps)) / floor,
        "parts": {k: v / slots / floor for k, v in ledger.clock.items()},
        "due": float(np.mean(due)),
        "hops": ledger.hops / slots,
        "overflows": ledger.overflows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=250)
    parser.add_argument("--slots", type=int, default=40)
    parser.add_argument("--check-users", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    variants = {"numpy": VectorKinetic}
    checked = dict(variants)  # the check needs every jump of a window in the record
    try:
        import numba
    except ImportError:
        print("numba is not installed: only the numpy variant runs "
              "(.venv/bin/pip install numba)", file=sys.stderr)
    else:
        loop = numba.njit(cache=True)(_recompute_records)
        variants["compiled"] = lambda n, d, req: CompiledKinetic(n, d, req, loop, BLOCK)
        checked["compiled"] = lambda n, d, req: CompiledKinetic(n, d, req, loop, 256)
    for name, make in checked.items():
        moved = check(make, args.check_users, 400, args.seed)
        print(f"{name}: plans equal the recurrence over 400 slots at {args.check_users:,} users; "
              f"window sums moving per slot: {moved:.1%} of the users", file=sys.stderr)
    print("| users | variant | due users per slot | jumps walked per slot | floor ms | due | "
          "recompute | counts | declare | step (median) | overflows |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.users:
        for name, make in variants.items():
            r = measure(make, n, args.d, args.warmup, args.slots, args.seed)
            p = r["parts"]
            print(f"| {n:,} | {name} | {r['due']:,.0f} | {r['hops']:,.0f} | {r['floor_ms']:.3f} | "
                  + " | ".join(f"{p[k]:.1f}" for k in ("due", "recompute", "counts", "declare"))
                  + f" | {r['ratio']:.1f} | {r['overflows']:,} |", flush=True)


if __name__ == "__main__":
    main()
