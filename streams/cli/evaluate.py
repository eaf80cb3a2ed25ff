"""``pwevent evaluate``: replay datasets through mechanisms and report AMRE, AJSD and MAE.

Runs (dataset, repeats) tasks in parallel processes; each task builds each repeat's stream once
and runs every mechanism and every (E, w) setting on it, the runs of one mechanism stepped
together as one batch (:func:`mechanisms.evaluation.runs.run_batch`). Writes ``results.csv``,
``summary.md`` (means over repeats laid out like Tables 5 and 6 of papers/000) and PNG plots of
AMRE.
"""

from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from collections import defaultdict
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from importlib.util import find_spec
from multiprocessing import Manager
from pathlib import Path

import numpy as np

DATASETS = ("tlns", "sin", "log", "taxi", "foursquare")
EVAL_EXTRA = "the eval extra: pip install 'pwevent[eval]'"
FIELDS = ("dataset", "mechanism", "E", "w", "repeat", "amre", "ajsd", "mae", "fresh", "slots",
          "seconds", "ratio")


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
                                   "and MAE: writes results.csv, summary.md (means over "
                                   "repeats) and PNG plots of AMRE into --out.")
    p.add_argument("--dataset", required=True, type=lambda s: _list(str, s),
                   help=f"comma-separated, of {','.join(DATASETS)}")
    p.add_argument("--data", action="append", default=[], metavar="[NAME=]PATH",
                   help="input for taxi (a points file or a folder of per-taxi files) or "
                        "foursquare (a folder with checkins.tsv.gz and pois.tsv.gz); "
                        "taxi=PATH or foursquare=PATH when both are evaluated")
    p.add_argument("--mechanisms", default=",".join(EVALUATED), type=lambda s: _list(str, s),
                   help=f"comma-separated, of {','.join(KNOWN)} (default: %(default)s)")
    p.add_argument("--epsilon", default="0.2,0.4,0.6,0.8,1.0", type=lambda s: _list(float, s),
                   help="comma-separated values of E, each run with w = --base-window "
                        "(default: %(default)s)")
    p.add_argument("--window", default="40,80,120,160,200", type=lambda s: _list(int, s),
                   help="comma-separated values of w, each run with E = --base-epsilon "
                        "(default: %(default)s)")
    p.add_argument("--base-epsilon", type=float, default=0.6,
                   help="E used while w varies (default: %(default)s)")
    p.add_argument("--base-window", type=int, default=120,
                   help="w used while E varies (default: %(default)s)")
    p.add_argument("--cross", action="store_true",
                   help="run every (E, w) pair instead of the two one-at-a-time sweeps")
    p.add_argument("--ratio-experiment", choices=("E", "w"), default=None,
                   help="Figures 11/12 instead of Tables 5/6: a share (--ratios) of users gets "
                        "E = 1.0 (E) or w = 40 (w), the others (0.6, 120) (default: off)")
    p.add_argument("--ratios", default="0.1,0.3,0.5,0.7,0.9", type=lambda s: _list(float, s),
                   help="comma-separated shares of users for --ratio-experiment "
                        "(default: %(default)s)")
    p.add_argument("--users", type=int, default=10_000,
                   help="synthetic users (default: %(default)s)")
    p.add_argument("--slots", type=int, default=None,
                   help="evaluate the first SLOTS slots (default: 10000 synthetic slots, all "
                        "of the real data)")
    p.add_argument("--start", action="append", default=[], metavar="[NAME=]TIME",
                   help="real data: first slot's time (taxi=TIME or foursquare=TIME when both "
                        "are evaluated; default: the data's first report)")
    p.add_argument("--end", action="append", default=[], metavar="[NAME=]TIME",
                   help="real data: last time included (default: the data's last report)")
    p.add_argument("--repeat", type=int, default=10,
                   help="repeats of every dataset and setting (default: %(default)s)")
    p.add_argument("--seed", type=int, default=1,
                   help="seed of the streams, requirements and noise (default: %(default)s)")
    p.add_argument("--noise", choices=("laplace", "discrete"), default="laplace",
                   help="continuous Laplace or discrete Laplace (two-sided geometric) noise "
                        "(default: %(default)s)")
    p.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                   help="parallel processes (default: %(default)s, the number of CPUs)")
    p.add_argument("--out", required=True, type=Path, metavar="DIR",
                   help="directory for results.csv, summary.md and the plots")
    p.set_defaults(func=run)


Setting = tuple[float, int, float | None]  # E, w, share of the ratio experiment


def settings(args: argparse.Namespace) -> list[Setting]:
    """The (E, w, ratio) settings to run."""
    if args.ratio_experiment:
        return [(0.6, 120, r) for r in args.ratios]
    if args.cross:
        return [(e, w, None) for e in args.epsilon for w in args.window]
    pairs = [(e, args.base_window, None) for e in args.epsilon]
    pairs += [(args.base_epsilon, w, None) for w in args.window
              if (args.base_epsilon, w, None) not in pairs]
    return pairs


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


def load_cells(dataset: str, args: dict, repeat: int) -> tuple[np.ndarray, int]:
    """A (T, n) cell matrix and the domain size for one task."""
    from mechanisms.evaluation import datasets

    if dataset in ("tlns", "sin", "log"):
        from mechanisms.evaluation.runs import synthetic_cells

        T = args["slots"] or 10_000
        probs = getattr(datasets, f"{dataset}_probabilities")(T)
        rng = np.random.default_rng([args["seed"], repeat, 0])
        return synthetic_cells(probs, args["users"], rng), 2
    from streams.data.loaders import load_foursquare, load_taxi

    path = Path(args["paths"][dataset])
    start, end = args["start"].get(dataset), args["end"].get(dataset)
    if dataset == "taxi":
        data = load_taxi(path, start=start, end=end)
    else:
        folder = path if path.is_dir() else path.parent
        data = load_foursquare(folder / "checkins.tsv.gz", folder / "pois.tsv.gz",
                               start=start, end=end)
    cells = data.cells if args["slots"] is None else data.cells[: args["slots"]]
    return cells, data.d


def _requirements(args: dict, n: int, repeat: int) -> list[tuple[Setting, list, object]]:
    """Each setting of a repeat with its rng tag and the users' requirements."""
    from mechanisms.evaluation.experiments import paper_requirements, ratio_requirements

    out = []
    for E, w, ratio in args["settings"]:
        tag = [int(E * 1000), w] + ([] if ratio is None else [int(ratio * 1000)])
        if ratio is None:
            reqs = paper_requirements(n, E, w,
                                      np.random.default_rng([args["seed"], repeat, 1, *tag]))
        else:
            reqs = ratio_requirements(n, ratio, args["ratio_experiment"])
        out.append(((E, w, ratio), tag, reqs))
    return out


def counted(name: str) -> bool:
    """Whether mechanism ``name`` runs on a stream's per-class counts (no pass over users)."""
    from mechanisms.registry import spec

    s = spec(name)
    return s.family in ("central", "dynamic") or s.name in ("spas", "plbu")


def run_task(dataset: str, repeats: list[int], args: dict, progress=None) -> list[dict]:
    """Every mechanism and setting on one dataset and some of its repeats.

    The runs of one mechanism are stepped together (:func:`mechanisms.evaluation.runs.
    run_batch`), each with the generator it has alone, so each gives what it gives alone. Each
    repeat's stream is counted once per class of users (users whose requirements agree in every
    setting) and those counts feed every mechanism that needs only counts. ``progress`` (a
    queue) is told how many runs each finished batch held.
    """
    from mechanisms.evaluation.runs import class_counts, make_step, run_batch
    from mechanisms.requirements import user_classes

    rows: list[dict] = []
    streams: dict[int, tuple] = {}

    def run(name: str, k: int, specs: list[tuple[int, tuple, np.ndarray, np.ndarray, int]]):
        mechs = []
        for repeat, (_, tag, reqs), _, _, d in specs:
            rng = np.random.default_rng([args["seed"], repeat, 2, *tag, k])
            mechs.append(make_step(name, reqs, d, rng, args["noise"]))
        results = run_batch(mechs, [s[2] for s in specs], [s[3] for s in specs])
        for (repeat, ((E, w, ratio), _, _), _, true, _), res in zip(specs, results, strict=True):
            rows.append({"dataset": dataset, "mechanism": name, "E": E, "w": w,
                         "repeat": repeat, "amre": res.amre, "ajsd": res.ajsd, "mae": res.mae,
                         "fresh": res.fresh, "slots": true.shape[0],
                         "seconds": round(res.seconds, 3),
                         "ratio": "" if ratio is None else ratio})
        if progress is not None:
            progress.put(len(specs))

    for repeat in repeats:
        cells, d = load_cells(dataset, args, repeat)
        settings_ = _requirements(args, cells.shape[1], repeat)
        classes = user_classes(*(reqs for _, _, reqs in settings_))
        counts = class_counts(cells, classes, d)
        true = counts.counts.sum(axis=1)  # what true_histograms(cells, d) counts
        streams[repeat] = (settings_, counts, true, d)
        for k, name in enumerate(args["mechanisms"]):
            if not counted(name):  # needs each user's cell: run now, while the cells are here
                run(name, k, [(repeat, st, cells, true, d) for st in settings_])
        del cells
    for k, name in enumerate(args["mechanisms"]):
        if counted(name):
            run(name, k, [(repeat, st, counts, true, d)
                          for repeat, (settings_, counts, true, d) in streams.items()
                          for st in settings_])
    return rows


def split_repeats(datasets: list[str], repeats: int, jobs: int) -> list[tuple[str, list[int]]]:
    """(dataset, repeats) tasks: each dataset's repeats in the fewest parts that give every
    process the same number of tasks (the more repeats a task holds, the larger its batches:
    a task's runs of one mechanism are one batch)."""
    jobs = max(1, jobs)
    parts = -(-jobs // len(datasets))
    while (len(datasets) * parts) % jobs:
        parts += 1
    parts = min(repeats, parts)
    return [(ds, part.tolist()) for ds in datasets
            for part in np.array_split(np.arange(repeats), parts)]


def write_summary(rows: list[dict], args: argparse.Namespace, out: Path) -> None:
    """Means over repeats, one table with E varied and one with w varied, per metric."""
    mean: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        ratio = None if r["ratio"] == "" else r["ratio"]
        for metric in ("amre", "ajsd"):
            mean[(r["dataset"], r["mechanism"], r["E"], r["w"], ratio, metric)].append(r[metric])
    datasets = [d for d in args.dataset if any(r["dataset"] == d for r in rows)]
    mechs = args.mechanisms
    lines = ["# Evaluation summary", "",
             f"Means over {args.repeat} repeats (seed {args.seed}, noise {args.noise}).", ""]

    def table(title: str, keys: list[Setting], label) -> None:
        for metric in ("amre", "ajsd"):
            lines.extend([f"## {metric.upper()} with {title}", ""])
            head = "| dataset | setting | " + " | ".join(m.upper() for m in mechs) + " |"
            lines.extend([head, "|---|---|" + "---:|" * len(mechs)])
            for ds in datasets:
                for E, w, ratio in keys:
                    cells = []
                    for m in mechs:
                        vals = mean.get((ds, m, E, w, ratio, metric))
                        cells.append(f"{np.mean(vals):,.2f}" if metric == "amre" and vals
                                     else f"{np.mean(vals):.5f}" if vals else "")
                    lines.append(f"| {ds} | {label(E, w, ratio)} | " + " | ".join(cells) + " |")
            lines.append("")

    if args.ratio_experiment:
        which = "E_k = 1.0" if args.ratio_experiment == "E" else "w_k = 40"
        table(f"the share of users with {which} varied", settings(args),
              lambda E, w, r: f"ratio={r:g}")
    elif args.cross:
        table("every (E, w)", settings(args), lambda E, w, r: f"E={E:g}, w={w}")
    else:
        table(f"E varied (w = {args.base_window})",
              [(e, args.base_window, None) for e in args.epsilon], lambda E, w, r: f"E={E:g}")
        table(f"w varied (E = {args.base_epsilon:g})",
              [(args.base_epsilon, w, None) for w in args.window], lambda E, w, r: f"w={w}")
    (out / "summary.md").write_text("\n".join(lines))


def missing_extra(datasets: list[str]) -> str | None:
    """Why the run cannot finish without the eval extra, or ``None`` when it can."""
    if find_spec("matplotlib") is None:
        return f"plots need {EVAL_EXTRA}"
    if "foursquare" in datasets and find_spec("reverse_geocode") is None:
        return f"the foursquare dataset needs {EVAL_EXTRA}"
    return None


def write_plots(rows: list[dict], args: argparse.Namespace, out: Path) -> list[Path]:
    """AMRE against E and against w, one line per mechanism, log scale."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ImportError(f"plots need {EVAL_EXTRA}") from exc

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    if args.ratio_experiment:
        sweeps = [("ratio", "E", 0.6, args.ratios)]
    else:
        sweeps = [("E", "w", args.base_window, args.epsilon),
                  ("w", "E", args.base_epsilon, args.window)]
    for ds in args.dataset:
        for axis, fixed_key, fixed, values in sweeps:
            fig, ax = plt.subplots(figsize=(5, 3.6))
            drawn = False
            for m in args.mechanisms:
                ys = []
                for v in values:
                    vals = [r["amre"] for r in rows if r["dataset"] == ds and r["mechanism"] == m
                            and r[axis] == v and r[fixed_key] == fixed]
                    ys.append(np.mean(vals) if vals else np.nan)
                if not np.all(np.isnan(ys)):
                    ax.plot(values, ys, marker="o", label=m.upper())
                    drawn = True
            if not drawn:
                plt.close(fig)
                continue
            ax.set_yscale("log")
            ax.set_xlabel(axis)
            ax.set_ylabel("AMRE")
            ax.set_title(f"{ds}: AMRE against {axis} ({fixed_key} = {fixed:g})")
            ax.legend(fontsize=7, ncol=2)
            fig.tight_layout()
            path = out / f"amre_{ds}_{axis}.png"
            fig.savefig(path, dpi=110)
            plt.close(fig)
            written.append(path)
    return written


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
    tasks = split_repeats(args.dataset, args.repeat, args.jobs)
    rows: list[dict] = []
    started = time.monotonic()
    runs = len(args.dataset) * args.repeat * len(shared["settings"]) * len(args.mechanisms)
    # one bar over the runs; disable=None: drawn on a terminal only, silent in CI logs
    bar = tqdm(total=runs, desc="evaluate", unit="run", disable=None)
    try:
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool, Manager() as manager:
            # the tasks report each batch of runs they finish, so the bar moves per batch
            progress = manager.Queue()
            futures = {pool.submit(run_task, ds, rs, shared, progress): (ds, rs)
                       for ds, rs in tasks}
            pending = set(futures)
            while pending:
                finished, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for fut in finished:
                    ds, rs = futures[fut]
                    rows.extend(fut.result())
                    span = f"{rs[0]}" if len(rs) == 1 else f"{rs[0]}-{rs[-1]}"
                    bar.set_postfix_str(f"{ds} repeats {span} done", refresh=False)
                while not progress.empty():
                    bar.update(progress.get())
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
          f"summary.md and {len(plots)} plots")
    return 0
