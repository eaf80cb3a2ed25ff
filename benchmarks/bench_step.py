"""Per-slot step time of the mechanisms against the np.bincount floor.

Fixed mechanisms (pbd, pba): n registered users, d cells, 10 requirement levels (w <= 200); each
slot's step is timed next to ``np.bincount(values, minlength=d)`` over the same values in the
same run, and the ratio of the medians is reported.

Dynamic mechanisms (dpbd, dpba): n users with (wB, EB, wF, EF) drawn from 10 levels per field
(windows <= 200), a share ``--churn`` of the users (default 1%) changing their requirement before
each slot (the change is timed with the step). A ledger's state depends on each user's history
of declarations, so the first ``--warmup`` slots (default 250, more than the longest window)
bring it to its steady state before ``--slots`` slots are measured; ``--warmup 20`` shows the
cold start. Each dynamic run is a fresh process, so that its peak resident memory is its own.

Run: ``.venv/bin/python benchmarks/bench_step.py [--users 100000 1000000] [--mechanisms ...]``.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

import numpy as np

from mechanisms import FixedRequirements
from mechanisms.build import build

W_GRID = np.array([20, 40, 60, 80, 100, 120, 140, 160, 180, 200])
E_GRID = np.array([0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0])
EB_GRID = np.linspace(0.5, 5.0, 10)
DYNAMIC = ("dpbd", "dpba")


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
    mech = build(name, reqs, d, np.random.default_rng(seed))
    mech.step(data[0])  # warm-up
    floor = best_of(lambda v: np.bincount(v, minlength=d), data, repeat)
    step = best_of(mech.step, data, repeat)
    floor = min(floor, best_of(lambda v: np.bincount(v, minlength=d), data, repeat))
    return step, floor


def peak_resident() -> int:
    """This process's peak resident memory in bytes (VmHWM: unlike ru_maxrss, it does not
    carry the parent's peak over a fork and exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def draw_dynamic(rng: np.random.Generator, k: int) -> tuple[np.ndarray, ...]:
    """k random requirements (wB, EB, wF, EF) from 10 levels per field."""
    return (
        rng.choice(W_GRID, k),
        rng.choice(EB_GRID, k),
        rng.choice(W_GRID, k),
        rng.choice(EB_GRID, k),
    )


def measure_dynamic(
    name: str, n: int, d: int, warmup: int, slots: int, seed: int, forced: bool,
    churn: float = 0.01,
) -> dict:
    """One dynamic configuration in this process: step and floor per slot, peak memory.

    ``forced``: instead of the release rule deciding, every other slot is published (the
    ledger's most expensive regime: charged slots keep every window sum moving); the slot's
    work is then the level counts and the ledger's commit, without the rule's O(levels x d).
    """
    from mechanisms.requirements import DynamicRequirements
    from mechanisms.run.dynamic import DynamicMechanism

    rng = np.random.default_rng(seed)
    req = DynamicRequirements(
        np.ones(n, dtype=np.int64), tuple(f"u{i}" for i in range(n)), *draw_dynamic(rng, n)
    )
    mech = DynamicMechanism(name, req, d, rng=np.random.default_rng(seed + 1), max_window=200)
    step_s, floor_s, published = [], [], 0
    for t in range(1, warmup + slots + 1):
        cells = (np.minimum(rng.geometric(0.05, n), d - 1) + 3 * t) % d
        changed = rng.choice(n, int(round(n * churn)), replace=False)
        change = draw_dynamic(rng, changed.size)
        t0 = time.perf_counter()
        if t > 1:
            mech.declare_indices(changed, *change)
        if forced:
            mech.level_counts(cells)
            published_now = mech.ledger.commit_columns(t % 2 == 1)
        else:
            published_now = mech.step(cells).published
        t1 = time.perf_counter()
        np.bincount(cells, minlength=d)
        t2 = time.perf_counter()
        if t > warmup:
            step_s.append(t1 - t0)
            floor_s.append(t2 - t1)
            published += published_now
        elif t % 50 == 0:
            print(f"{name} n={n:,}: warm-up slot {t}/{warmup}", file=sys.stderr, flush=True)
    step, floor = float(np.median(step_s)), float(np.median(floor_s))
    return {
        "mechanism": name,
        "n": n,
        "step_ns": step / n * 1e9,
        "mean_step_ns": float(np.mean(step_s)) / n * 1e9,
        "floor_ns": floor / n * 1e9,
        "ratio": step / floor,
        "peak_gib": peak_resident() / 2**30,
        "published": published,
        "slots": slots,
        "groups": mech.ledger.groups,
        "schedule": "every other slot" if forced else "release rule",
    }


def run_one(name: str, n: int, schedule: str, args: argparse.Namespace) -> dict:
    """One dynamic configuration in a fresh process (its own peak memory)."""
    cmd = [
        sys.executable,
        __file__,
        "--one",
        "--mechanisms",
        name,
        "--users",
        str(n),
        "--d",
        str(args.d),
        "--slots",
        str(args.slots),
        "--warmup",
        str(args.warmup),
        "--churn",
        str(args.churn),
        "--seed",
        str(args.seed),
        "--schedules",
        schedule,
    ]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    """Print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--mechanisms", nargs="+", default=["pbd", "pba", "dpbd", "dpba"])
    parser.add_argument("--d", type=int, default=100)
    parser.add_argument("--slots", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=250, help="dynamic: slots before measuring")
    parser.add_argument(
        "--churn", type=float, default=0.01, help="dynamic: share of users changing per slot"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--schedules",
        nargs="+",
        default=["rule", "forced"],
        choices=["rule", "forced"],
        help="dynamic: who decides publication (the release rule, or every other slot)",
    )
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        name, n = args.mechanisms[0], args.users[0]
        forced = args.schedules == ["forced"]
        r = measure_dynamic(
            name, n, args.d, args.warmup, args.slots, args.seed, forced, args.churn
        )
        print(json.dumps(r))
        return
    fixed = [m for m in args.mechanisms if m not in DYNAMIC]
    dynamic = [m for m in args.mechanisms if m in DYNAMIC]
    if fixed:
        print("| mechanism | users | step ns/user/slot | floor ns/user/slot | ratio |")
        print("|---|---:|---:|---:|---:|")
        for n in args.users:
            for name in fixed:
                step, floor = measure(name, n, args.d, args.slots, args.repeat, args.seed)
                print(
                    f"| {name} | {n:,} | {step / n * 1e9:.2f} | {floor / n * 1e9:.2f} "
                    f"| {step / floor:.2f} |",
                    flush=True,
                )
    if dynamic:
        print(
            f"\nDynamic, {args.churn:.2%} of users changing per slot, measured after "
            f"{args.warmup} slots:\n"
        )
        print(
            "| mechanism | users | publication | step ns/user/slot (median) | mean "
            "| floor ns/user/slot | ratio | peak GiB | published | groups |"
        )
        print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
        for n in args.users:
            for name in dynamic:
                for schedule in args.schedules:
                    r = run_one(name, n, schedule, args)
                    print(
                        f"| {name} | {n:,} | {r['schedule']} | {r['step_ns']:.1f} "
                        f"| {r['mean_step_ns']:.1f} "
                        f"| {r['floor_ns']:.2f} | {r['ratio']:.1f} | {r['peak_gib']:.2f} "
                        f"| {r['published']}/{r['slots']} | {r['groups']:,} |",
                        flush=True,
                    )


if __name__ == "__main__":
    main()
