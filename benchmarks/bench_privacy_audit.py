"""The empirical privacy audit in full: every mechanism of the job (and the job's default
setting) in both population modes on the three neighbouring pairs, 1e5 trials per input, and,
with ``--plants``, each planted defect on the configuration that shows it.

Prints one table row per (mechanism, mode, pair): the 95% lower bound eps_lb of the privacy
loss, the target's E it is compared with (its window w), pass or FAIL, and the event that gave
the bound; then the wall time of the whole audit (generators, runs and tests).

Run: ``.venv/bin/python benchmarks/bench_privacy_audit.py [--trials 100000] [--no-plants]``.
"""

from __future__ import annotations

import argparse
import time

from mechanisms.evaluation.privacy_audit import (
    AUDITED,
    MODES,
    PAIRS,
    PairResult,
    Setting,
    TrialStreams,
    audit,
    audit_pair,
    format_table,
    settings_for,
)
from streams.job.config import JobConfig

#: each planted defect on a configuration where it overspends the target's budget
PLANTED = (
    ("noise_halved", "uniform", "declared", "window"),
    ("charge_dropped", "sample", "declared", "window"),
    ("threshold_off_by_one", "pbd", "declared", "slot"),
    ("realised_users", "pbd", "defaults", "first_event"),
)


def main() -> None:
    """Print the tables and the wall time."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000, help="runs of each input")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--mechanisms", nargs="+", default=[*AUDITED, "default"])
    parser.add_argument("--noise", choices=("laplace", "discrete"), default="laplace")
    parser.add_argument("--no-plants", action="store_true", help="skip the planted defects")
    args = parser.parse_args()

    config = JobConfig()
    settings = settings_for(args.mechanisms, config.mechanism, config.postprocess)
    print(f"{len(settings)} settings x {len(MODES)} modes x {len(PAIRS)} pairs, "
          f"{args.trials:,} trials per input, {args.noise} noise, seed {args.seed}\n")
    start = time.perf_counter()
    honest = audit(settings, trials=args.trials, seed=args.seed, noise=args.noise)
    honest_s = time.perf_counter() - start
    print(format_table(honest))
    failed = sum(not r.passed for r in honest)
    print(f"\n{len(honest)} pairs, {failed} with eps_lb > E; {honest_s:.1f} s "
          f"({honest_s / len(honest):.2f} s per pair)\n")

    planted: list[PairResult] = []
    if not args.no_plants:
        streams = TrialStreams(args.trials)
        t0 = time.perf_counter()
        for plant, mechanism, mode, pair in PLANTED:
            planted.append(audit_pair(Setting(mechanism, mechanism), mode, pair,
                                      trials=args.trials, seed=args.seed, plant=plant,
                                      noise=args.noise, streams=streams))
        print("Planted defects (each must be found: eps_lb > E)\n")
        print(format_table(planted))
        found = sum(not r.passed for r in planted)
        print(f"\n{found} of {len(planted)} planted defects found; "
              f"{time.perf_counter() - t0:.1f} s\n")
    print(f"wall time: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
