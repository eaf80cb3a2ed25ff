"""Time of the exact discrete Laplace sampler against one PBD slot step.

For each eps, ``exact_discrete_laplace(eps, d, SecureBits)`` (the noise of one released slot of
d cells) is timed in alternation with one PBD slot step at n users (``benchmarks/bench_step.py``'s
set-up, with the same d), the reference it must stay small against, so that both see the same
load; the ratio of their medians (and of their minima) is printed, next to the old inexact numpy
sampler (a difference of two ``rng.geometric``). The target is a sampler/step ratio below 10%.
The random words used per sample are counted on a separate call.

Run: ``.venv/bin/python benchmarks/bench_noise.py [--d 10000] [--users 1000000] [--rounds 40]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_step import requirements  # noqa: E402

from mechanisms.build import build  # noqa: E402
from mechanisms.noise.bits import SecureBits  # noqa: E402
from mechanisms.noise.discrete_laplace import exact_discrete_laplace  # noqa: E402


class CountingBits:
    """Counts the words drawn from another source."""

    def __init__(self, bits: SecureBits) -> None:
        self.bits, self.count = bits, 0

    def words(self, n: int) -> np.ndarray:
        self.count += n
        return self.bits.words(n)


def median_time(fn, repeat: int) -> float:
    """Median seconds of ``fn()`` over ``repeat`` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def old_geometric(eps: float, d: int, rng: np.random.Generator) -> np.ndarray:
    """The inexact sampler this replaces: difference of two numpy geometrics."""
    p = -np.expm1(-eps)
    return rng.geometric(p, d).astype(np.int64) - rng.geometric(p, d).astype(np.int64)


def pbd_step(n: int, d: int, slots: int, seed: int):
    """One PBD slot step at n users and d cells, cycling over ``slots`` slots of data."""
    rng = np.random.default_rng(seed)
    reqs = requirements(n, rng)
    data = [rng.integers(0, d, n) for _ in range(slots)]
    mech = build("pbd", reqs, d, np.random.default_rng(seed))
    mech.step(data[0])  # warm-up
    turn = iter(range(10**12))
    return lambda: mech.step(data[next(turn) % slots])


def interleaved(step, sample, rounds: int, calls: int) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of ``step()`` and of ``sample()``, taken in alternation (one step, then
    ``calls`` samples, ``rounds`` times), so that both see the same load."""
    steps, samples = [], []
    sample()
    for _ in range(rounds):
        t0 = time.perf_counter()
        step()
        steps.append(time.perf_counter() - t0)
        for _ in range(calls):
            t0 = time.perf_counter()
            sample()
            samples.append(time.perf_counter() - t0)
    return np.array(steps), np.array(samples)


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=10_000, help="cells (noise draws per slot)")
    parser.add_argument("--users", type=int, default=1_000_000, help="users in the PBD step")
    parser.add_argument("--step-d", type=int, help="cells in the PBD step (default: --d)")
    parser.add_argument("--eps", type=float, nargs="+",
                        default=[0.0025, 0.01, 0.1, 0.5, 1.0, 3.7, 10.0])
    parser.add_argument("--rounds", type=int, default=40, help="steps timed per eps")
    parser.add_argument("--calls", type=int, default=5, help="sampler calls per step timed")
    parser.add_argument("--slots", type=int, default=10, help="slots of data the step cycles")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    step_d = args.step_d or args.d
    step = pbd_step(args.users, step_d, args.slots, args.seed)
    rng = np.random.default_rng(args.seed)
    bits = SecureBits(args.seed.to_bytes(32, "big"))
    print(f"PBD step at {args.users:,} users, d = {step_d:,}, timed in alternation with the "
          f"exact sampler's noise for d = {args.d:,} cells ({args.rounds} steps and "
          f"{args.rounds * args.calls} sampler calls per eps)\n")
    print("| eps | exact (SecureBits) us | words/sample | old numpy geometric us | step ms "
          "| exact/step (medians) | exact/step (minima) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for eps in args.eps:
        steps, exact = interleaved(
            step, lambda e=eps: exact_discrete_laplace(e, args.d, bits), args.rounds, args.calls)
        old = median_time(lambda e=eps: old_geometric(e, args.d, rng), args.rounds)
        counter = CountingBits(bits)
        exact_discrete_laplace(eps, args.d, counter)
        med, low = np.median(exact) / np.median(steps), exact.min() / steps.min()
        print(f"| {eps:g} | {np.median(exact) * 1e6:.0f} | {counter.count / args.d:.2f} "
              f"| {old * 1e6:.0f} | {np.median(steps) * 1e3:.2f} | {med:.1%} | {low:.1%} |")


if __name__ == "__main__":
    main()
