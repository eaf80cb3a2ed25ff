"""``pwevent evaluate``: replay datasets through mechanisms and report AMRE, AJSD and MAE.

Runs its tasks in parallel processes (:func:`streams.cli.evaluate_tasks.evaluate_all`): each
repeat's stream is built and counted once, then each mechanism runs every (E, w) setting of
every repeat of a dataset as one batch (:func:`mechanisms.evaluation.runs.run_batch`). Writes
``results.csv``, ``summary.md`` (means over repeats laid out like Tables 5 and 6 of papers/000)
and PNG plots of AMRE.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from importlib.util import find_spec
from pathlib import Path

import numpy as np

from streams.cli.evaluate_report import EVAL_EXTRA, SUMMARY_FILE, write_plots, write_summary
from streams.cli.evaluate_tasks import evaluate_all, settings
from streams.cli.options import USERS, add_options, option

DATASETS = ("tlns", "sin", "log", "taxi", "foursquare")
FIELDS = ("dataset", "mechanism", "E", "w", "repeat", "amre", "ajsd", "mae", "fresh", "slots",
          "seconds", "ratio", "amre_round", "amre_kalman", "coverage",
          "bars", "amre_kalman_bank", "amre_kalman_split")


def _list(kind: type, text: str) -> list:
    try:
        values = [kind(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of {kind.__name__}: {text!r}"
        ) from None
    if not values:
        raise argparse.ArgumentTypeError("empty list")
    return values


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``evaluate`` sub-command."""
    from mechanisms.evaluation.runs import EVALUATED, KNOWN

    p = sub.add_parser("evaluate", help="replay datasets through mechanisms and measure error",
                       description="Replay datasets through mechanisms and report AMRE, AJSD "
                                   f"and MAE: writes results.csv, {SUMMARY_FILE} (means over "
                                   "repeats) and PNG plots of AMRE into --out.")
    add_options(p, (
        option("--dataset", f"comma-separated, of {','.join(DATASETS)}", required=True,
               type=lambda s: _list(str, s)),
        option("--data", "input for taxi (a points file or a folder of per-taxi files) or "
               "foursquare (a folder with checkins.tsv.gz and pois.tsv.gz); taxi=PATH or "
               "foursquare=PATH when both are evaluated", action="append", default=[],
               metavar="[NAME=]PATH"),
        option("--mechanisms", f"comma-separated, of {','.join(KNOWN)} (default: %(default)s)",
               default=",".join(EVALUATED), type=lambda s: _list(str, s)),
        option("--epsilon", "comma-separated values of E, each run with w = --base-window "
               "(default: %(default)s)", default="0.2,0.4,0.6,0.8,1.0",
               type=lambda s: _list(float, s)),
        option("--window", "comma-separated values of w, each run with E = --base-epsilon "
               "(default: %(default)s)", default="40,80,120,160,200",
               type=lambda s: _list(int, s)),
        option("--base-epsilon", "E used while w varies (default: %(default)s)", type=float,
               default=0.6),
        option("--base-window", "w used while E varies (default: %(default)s)", type=int,
               default=120),
        option("--cross", "run every (E, w) pair instead of the two one-at-a-time sweeps",
               action="store_true"),
        option("--ratio-experiment", "Figures 11/12 instead of Tables 5/6: a share (--ratios) of "
               "users gets E = 1.0 (E) or w = 40 (w), the others (0.6, 120) (default: off)",
               choices=("E", "w"), default=None),
        option("--ratios", "comma-separated shares of users for --ratio-experiment "
               "(default: %(default)s)", default="0.1,0.3,0.5,0.7,0.9",
               type=lambda s: _list(float, s)),
        USERS.but(default=10_000),
        option("--slots", "evaluate the first SLOTS slots (default: 10000 synthetic slots, all "
               "of the real data)", type=int, default=None),
        option("--start", "real data: first slot's time (taxi=TIME or foursquare=TIME when "
               "both are evaluated; default: the data's first report)", action="append",
               default=[], metavar="[NAME=]TIME"),
        option("--end", "real data: last time included (default: the data's last report)",
               action="append", default=[], metavar="[NAME=]TIME"),
        option("--repeat", "repeats of every dataset and setting (default: %(default)s)",
               type=int, default=10),
        option("--seed", "seed of the streams, requirements and noise (default: %(default)s)",
               type=int, default=1),
        option("--noise", "continuous Laplace or discrete Laplace (two-sided geometric) noise "
               "(default: %(default)s)", choices=("laplace", "discrete"), default="laplace"),
        option("--jobs", "parallel processes (default: %(default)s, the number of CPUs)",
               type=int, default=os.cpu_count() or 1),
        option("--out", f"directory for results.csv, {SUMMARY_FILE} and the plots", required=True,
               type=Path, metavar="DIR"),
    ))
    p.set_defaults(func=run)


def _per_dataset(values: list[str], real: list[str], flag: str) -> dict[str, str]:
    """``[NAME=]VALUE`` options: a bare value applies to the one real dataset, or to all."""
    out: dict[str, str] = {}
    for item in values:
        name, sep, value = item.partition("=")
        if sep and name in ("taxi", "foursquare"):
            out[name] = value
        elif flag != "--data" or len(real) == 1:
            for r in real:
                out[r] = item
        else:
            raise ValueError(f"{flag} {item!r}: say taxi=VALUE or foursquare=VALUE")
    return out


def _data_paths(args: argparse.Namespace) -> dict[str, str]:
    real = [d for d in args.dataset if d in ("taxi", "foursquare")]
    paths = _per_dataset(args.data, real, "--data")
    for name in real:
        if name not in paths:
            raise ValueError(f"dataset {name} needs --data PATH")
    return paths


def missing_extra(datasets: list[str]) -> str | None:
    """Why the run cannot finish without the eval extra, or ``None`` when it can."""
    if find_spec("matplotlib") is None:
        return f"plots need {EVAL_EXTRA}"
    if "foursquare" in datasets and find_spec("reverse_geocode") is None:
        return f"the foursquare dataset needs {EVAL_EXTRA}"
    return None


def run(args: argparse.Namespace) -> int:
    """Execute ``pwevent evaluate``; returns the exit status."""
    from tqdm import tqdm

    from mechanisms.evaluation.runs import KNOWN

    try:
        bad = [d for d in args.dataset if d not in DATASETS]
        if bad:
            raise ValueError(f"unknown dataset {bad[0]!r}; choose from {', '.join(DATASETS)}")
        bad = [m for m in args.mechanisms if m not in KNOWN]
        if bad:
            raise ValueError(f"unknown mechanism {bad[0]!r}; choose from {', '.join(KNOWN)}")
        if args.repeat < 1 or args.users < 1 or (args.slots is not None and args.slots < 1):
            raise ValueError("--repeat, --users and --slots must be >= 1")
        if any(not (e > 0 and np.isfinite(e)) for e in args.epsilon) or min(args.window) < 1:
            raise ValueError("--epsilon values must be > 0 and --window values >= 1")
        if args.ratio_experiment and any(not 0.0 <= r <= 1.0 for r in args.ratios):
            raise ValueError("--ratios must lie in [0, 1]")
        missing = missing_extra(args.dataset)
        if missing:
            raise ValueError(missing)
        paths = _data_paths(args)
        real = [d for d in args.dataset if d in ("taxi", "foursquare")]
        starts = _per_dataset(args.start, real, "--start")
        ends = _per_dataset(args.end, real, "--end")
        for name, path in paths.items():
            if not Path(path).exists():
                raise ValueError(f"--data for {name}: {path} does not exist")
    except ValueError as exc:
        print(f"pwevent evaluate: error: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    shared = {"seed": args.seed, "users": args.users, "slots": args.slots, "paths": paths,
              "start": starts, "end": ends,
              "settings": settings(args),
              "mechanisms": args.mechanisms, "noise": args.noise,
              "ratio_experiment": args.ratio_experiment}
    started = time.monotonic()
    runs = len(args.dataset) * args.repeat * len(shared["settings"]) * len(args.mechanisms)
    # one bar over the runs; disable=None: drawn on a terminal only, silent in CI logs
    bar = tqdm(total=runs, desc="evaluate", unit="run", disable=None)

    def report(done: int, what: str) -> None:
        bar.set_postfix_str(what, refresh=False)
        bar.update(done)

    try:
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            rows = evaluate_all(pool, args.jobs, args.dataset, args.repeat, shared, report)
    except (ValueError, OSError, ImportError) as exc:
        bar.close()
        print(f"pwevent evaluate: error: {exc}", file=sys.stderr)
        return 2
    bar.close()
    rows.sort(key=lambda r: (DATASETS.index(r["dataset"]), r["mechanism"], r["E"], r["w"],
                             r["repeat"]))
    with (args.out / "results.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        writer.writerows(rows)
    write_summary(rows, args, args.out)
    plots = write_plots(rows, args, args.out)
    print(f"{len(rows)} runs in {time.monotonic() - started:.1f}s; wrote {args.out}/results.csv, "
          f"{SUMMARY_FILE} and {len(plots)} plots")
    return 0
