"""Per-slot time per run of the evaluation: one run at a time (the old path) against batches.

The paper's set-up: the Sin stream of N = 10,000 users over d = 2 cells, ten user types
(Table 4's requirements, :func:`mechanisms.evaluation.experiments.paper_requirements`). A batch
of B runs cycles through the nine (E, w) settings of docs/results.md with a seed per run, all
on one realised stream, as ``pwevent evaluate`` batches a repeat's settings.

- old: ``run_stream(make_step(...), cells, true)``, one run after the other, on the cells (the
  old path's cost per run does not depend on B: it is measured on ``--old-runs`` runs);
- new: ``run_batch`` of the B runs on the stream's counts per class of users (the stream is
  counted once, before the clock starts; that count is shown apart, per slot).

Every run's results are checked to be identical on both paths. Reported: microseconds per run
and slot, and old / new. A batch of more than one run takes the compiled loops where numba is
installed (mechanisms/kernels/compiled.py): their one-time cost in a process (loading numba, the
compiled kernels from their disk cache, the generators' typed list) is measured apart, on a
batch of two runs over a few slots before the clock starts, and printed.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/bench_eval.py [--slots 1000] [--batches 1 10 90]``
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from mechanisms.evaluation.datasets import sin_probabilities
from mechanisms.evaluation.experiments import paper_requirements
from mechanisms.evaluation.runs import (
    ClassCounts,
    class_counts,
    make_step,
    run_batch,
    run_stream,
    synthetic_cells,
    true_histograms,
)
from mechanisms.kernels import compiled
from mechanisms.requirements import user_classes

SETTINGS = [(e, 120) for e in (0.2, 0.4, 0.6, 0.8, 1.0)] + [(0.6, w) for w in (40, 80, 160, 200)]
MECHANISMS = ("pbd", "pba", "bd", "ba", "dpbd", "dpba")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--slots", type=int, default=1000)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 10, 90])
    parser.add_argument("--old-runs", type=int, default=4)
    parser.add_argument("--mechanisms", nargs="+", default=list(MECHANISMS))
    args = parser.parse_args()
    n, T, d = args.users, args.slots, 2
    cells = synthetic_cells(sin_probabilities(T), n, np.random.default_rng([1, 0, 0]))
    true = true_histograms(cells, d)
    most = max(max(args.batches), args.old_runs)
    runs = []  # (requirements, seed) of each run
    for k in range(most):
        E, w = SETTINGS[k % len(SETTINGS)]
        reqs = paper_requirements(n, E, w, np.random.default_rng([1, k, 1]))
        runs.append((reqs, k))
    classes = user_classes(*(r for r, _ in runs))
    t0 = time.perf_counter()
    counts = class_counts(cells, classes, d)
    count_us = (time.perf_counter() - t0) / T * 1e6

    def fresh(name: str, k: int):
        reqs, seed = runs[k]
        return make_step(name, reqs, d, np.random.default_rng([1, seed, 2]))

    print(f"Sin, N = {n:,}, d = {d}, {T} slots; counting the stream per class: "
          f"{count_us:.1f} us per slot (once per stream, shared by every run)")
    t0 = time.perf_counter()
    for name in args.mechanisms:  # the compiled loops' one-time cost, before any clock
        head = ClassCounts(counts.counts[:5], counts.classes)
        run_batch([fresh(name, k) for k in range(2)], [head] * 2, [true[:5]] * 2)
    print(f"compiled loops: {'numba' if compiled.available(2) else 'none (numba missing)'}, "
          f"one-time cost in this process {time.perf_counter() - t0:.2f} s")
    print()
    head = "| mechanism | old us/run-slot |" + "".join(
        f" B={b} us/run-slot | old/new B={b} |" for b in args.batches)
    print(head)
    print("|---|---:|" + "---:|---:|" * len(args.batches))
    for name in args.mechanisms:
        old, results = [], {}
        for k in range(args.old_runs):
            mech = fresh(name, k)
            t0 = time.perf_counter()
            res = run_stream(mech, cells, true)
            old.append(time.perf_counter() - t0)
            results[k] = res
        old_us = float(np.mean(old)) / T * 1e6
        line = f"| {name} | {old_us:.1f} |"
        for b in args.batches:
            mechs = [fresh(name, k) for k in range(b)]
            t0 = time.perf_counter()
            got = run_batch(mechs, [counts] * b, [true] * b)
            new_us = (time.perf_counter() - t0) / (b * T) * 1e6
            for k, res in enumerate(got):
                want = results.get(k)
                if want is not None and (res.amre, res.fresh) != (want.amre, want.fresh):
                    raise SystemExit(f"{name} run {k}: batch differs from the run alone")
            line += f" {new_us:.2f} | {old_us / new_us:.1f} |"
        print(line, flush=True)


if __name__ == "__main__":
    main()
