"""Per-slot step time of DPBD and DPBA against the bincount floor, with peak memory.

n users, d = 100 cells, 10 levels per requirement field (windows <= 200), 1% of the users
changing their requirement before each slot. Each configuration runs in a fresh process so
that the peak resident memory is its own. Usage: ``python benchmarks/bench_dynamic.py [n ...]``.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time

import numpy as np

D = 100
WARMUP, SLOTS = 20, 30
WINDOWS = np.arange(20, 201, 20)
BUDGETS = np.linspace(0.5, 5.0, 10)


def draw(rng: np.random.Generator, k: int) -> tuple[np.ndarray, ...]:
    """k random requirements (wB, EB, wF, EF) from 10 levels per field."""
    return (
        rng.choice(WINDOWS, k),
        rng.choice(BUDGETS, k),
        rng.choice(WINDOWS, k),
        rng.choice(BUDGETS, k),
    )


def run(name: str, n: int) -> dict:
    """Measure one configuration in this process."""
    from mechanisms.dynamic import DynamicMechanism, DynamicRequirements

    rng = np.random.default_rng(0)
    wB, EB, wF, EF = draw(rng, n)
    req = DynamicRequirements(
        np.ones(n, dtype=np.int64), tuple(f"u{i}" for i in range(n)), wB, EB, wF, EF
    )
    mech = DynamicMechanism(name, req, D, rng=np.random.default_rng(1), max_window=200)
    step_ns, floor_ns, published = [], [], 0
    for t in range(1, WARMUP + SLOTS + 1):
        cells = (np.minimum(rng.geometric(0.05, n), D - 1) + 3 * t) % D
        start = time.perf_counter_ns()
        if t > 1:
            changed = rng.choice(n, n // 100, replace=False)
            mech.declare_indices(changed, *draw(rng, changed.size))
        rel = mech.step(cells)
        mid = time.perf_counter_ns()
        np.bincount(cells, minlength=D)
        end = time.perf_counter_ns()
        if t > WARMUP:
            step_ns.append(mid - start)
            floor_ns.append(end - mid)
            published += rel.published
    step, floor = float(np.median(step_ns)), float(np.median(floor_ns))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {
        "mechanism": name,
        "n": n,
        "ns_per_user_slot": step / n,
        "floor_ns_per_user": floor / n,
        "ratio": step / floor,
        "peak_gib": peak / 2**30,
        "published": published,
        "pool_runs": len(mech.ledger.pool),
        "groups": mech.ledger.groups,
    }


def main(sizes: list[int]) -> None:
    print(
        "| mechanism | n | ns/user/slot | floor ns/user | ratio | peak GiB | published | groups |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n in sizes:
        for name in ("dpbd", "dpba"):
            out = subprocess.run(
                [sys.executable, __file__, "--one", name, str(n)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            r = json.loads(out.strip().splitlines()[-1])
            print(
                f"| {r['mechanism']} | {r['n']:,} | {r['ns_per_user_slot']:.1f} | "
                f"{r['floor_ns_per_user']:.2f} | {r['ratio']:.1f} | {r['peak_gib']:.2f} | "
                f"{r['published']}/{SLOTS} | {r['groups']:,} |",
                flush=True,
            )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        print(json.dumps(run(sys.argv[2], int(sys.argv[3]))))
    else:
        main([int(a) for a in sys.argv[1:]] or [10**5, 10**6])
