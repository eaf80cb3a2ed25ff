"""Time of the exact discrete Laplace sampler against one PBD slot step.

For each eps, the median time of ``exact_discrete_laplace(eps, d, SecureBits)`` (the noise of one
released slot of d cells) is printed next to the old inexact numpy sampler (a difference of two
``rng.geometric``) and, as the reference it must stay small against, the time of one PBD slot
step at n users (``benchmarks/bench_step.py``'s set-up and timing, with the same d), measured
before and after the samplers; the smaller is used, so the ratio errs high. The target is a
sampler/step ratio below 10%. The random words used per sample are counted on a separate call.

Run: ``.venv/bin/python benchmarks/bench_noise.py [--d 10000] [--users 1000000] [--repeat 200]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_step import best_of, requirements  # noqa: E402

from mechanisms import create_mechanism  # noqa: E402
from mechanisms.exact_noise import SecureBits, exact_discrete_laplace  # noqa: E402


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


def step_time(n: int, d: int, slots: int, seed: int) -> float:
    """Median seconds of one PBD slot step at n users and d cells (best of 2 passes)."""
    rng = np.random.default_rng(seed)
    reqs = requirements(n, rng)
    data = [rng.integers(0, d, n) for _ in range(slots)]
    mech = create_mechanism("pbd", reqs, d, np.random.default_rng(seed))
    mech.step(data[0])  # warm-up
    return best_of(mech.step, data, 2)


def main() -> None:
    """Print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d", type=int, default=10_000, help="cells (noise draws per slot)")
    parser.add_argument("--users", type=int, default=1_000_000, help="users in the PBD step")
    parser.add_argument("--step-d", type=int, help="cells in the PBD step (default: --d)")
    parser.add_argument("--eps", type=float, nargs="+", default=[0.01, 0.1, 1.0, 10.0])
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--slots", type=int, default=10, help="slots timed in the PBD step")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    step_d = args.step_d or args.d
    before = step_time(args.users, step_d, args.slots, args.seed)
    rng = np.random.default_rng(args.seed)
    bits = SecureBits(args.seed.to_bytes(32, "big"))
    rows = []
    for eps in args.eps:
        exact = median_time(lambda e=eps: exact_discrete_laplace(e, args.d, bits), args.repeat)
        old = median_time(lambda e=eps: old_geometric(e, args.d, rng), args.repeat)
        counter = CountingBits(bits)
        exact_discrete_laplace(eps, args.d, counter)
        rows.append((eps, exact, counter.count / args.d, old))
    after = step_time(args.users, step_d, args.slots, args.seed)
    step = min(before, after)
    print(
        f"PBD step, {args.users:,} users, d = {step_d:,}: {before * 1e3:.2f} ms before, "
        f"{after * 1e3:.2f} ms after the samplers; noise for d = {args.d:,} cells\n"
    )
    print("| eps | exact (SecureBits) us | words/sample | old numpy geometric us | exact/step |")
    print("|---:|---:|---:|---:|---:|")
    for eps, exact, words, old in rows:
        print(
            f"| {eps:g} | {exact * 1e6:.0f} | {words:.2f} | {old * 1e6:.0f} | {exact / step:.1%} |"
        )


if __name__ == "__main__":
    main()
