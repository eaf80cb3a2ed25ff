"""Per-slot step time of the fixed mechanisms against the np.bincount floor.

For n registered users, d cells and 10 requirement levels (w <= 200), each slot's step is timed
next to ``np.bincount(values, minlength=d)`` over the same values in the same run, and the ratio
is reported. Run: ``.venv/bin/python benchmarks/bench_step.py [--users 10000 100000 1000000]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mechanisms import FixedRequirements, create_mechanism

W_GRID = np.array([20, 40, 60, 80, 100, 120, 140, 160, 180, 200])
E_GRID = np.array([0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0])


def requirements(n: int, rng: np.random.Generator) -> FixedRequirements:
    """n users over 10 requirement levels."""
    kind = rng.integers(0, 10, n)
    return FixedRequirements.from_arrays([f"u{i}" for i in range(n)], W_GRID[kind], E_GRID[kind])


def best_of(fn, slots: list[np.ndarray], repeat: int) -> float:
    """Median seconds per call of ``fn`` over the slots, best of ``repeat`` passes."""
    best = float("inf")
    for _ in range(repeat):
        times = []
        for cells in slots:
            t0 = time.perf_counter()
            fn(cells)
            times.append(time.perf_counter() - t0)
        best = min(best, float(np.median(times)))
    return best


def measure(name: str, n: int, d: int, slots: int, repeat: int, seed: int) -> tuple[float, float]:
    """(step seconds, floor seconds) per slot, measured interleaved in one run."""
    rng = np.random.default_rng(seed)
    reqs = requirements(n, rng)
    data = [rng.integers(0, d, n) for _ in range(slots)]  # every user reports
    mech = create_mechanism(name, reqs, d, np.random.default_rng(seed))
    mech.step(data[0])  # warm-up
    floor = best_of(lambda v: np.bincount(v, minlength=d), data, repeat)
    step = best_of(mech.step, data, repeat)
    floor = min(floor, best_of(lambda v: np.bincount(v, minlength=d), data, repeat))
    return step, floor


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--mechanisms", nargs="+", default=["pbd", "pba"])
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--slots", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print("| mechanism | users | step ns/user/slot | floor ns/user/slot | ratio |")
    print("|---|---:|---:|---:|---:|")
    for n in args.users:
        for name in args.mechanisms:
            step, floor = measure(name, n, args.d, args.slots, args.repeat, args.seed)
            print(
                f"| {name} | {n:,} | {step / n * 1e9:.2f} | {floor / n * 1e9:.2f} "
                f"| {step / floor:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
