"""The work of ``pwevent evaluate``: its (E, w, ratio) settings and its (dataset, repeats)
tasks, each run in a process of its own (:func:`run_task`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from queue import Queue

import numpy as np

Setting = tuple[float, int, float | None]  # E, w, share of the ratio experiment
#: The post-processings scored besides the raw release (``amre_<method>`` columns; a
#: mechanism whose releases report no noise scale gets no ``kalman`` nor ``kalman_bank`` score).
POSTPROCESSED = ("round", "kalman", "kalman_bank")


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


def run_task(dataset: str, repeats: list[int], args: dict,
             progress: Queue | None = None) -> list[dict]:
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
        users = [reqs.n for _, (_, _, reqs), _, _, _ in specs]
        results = run_batch(mechs, [s[2] for s in specs], [s[3] for s in specs],
                            postprocess=POSTPROCESSED, users=users)
        for (repeat, ((E, w, ratio), _, _), _, true, _), res in zip(specs, results, strict=True):
            rows.append({"dataset": dataset, "mechanism": name, "E": E, "w": w,
                         "repeat": repeat, "amre": res.amre, "ajsd": res.ajsd, "mae": res.mae,
                         "fresh": res.fresh, "slots": true.shape[0],
                         "seconds": round(res.seconds, 3),
                         "ratio": "" if ratio is None else ratio,
                         **{f"amre_{m}": res.post[m][0] if m in res.post else ""
                            for m in POSTPROCESSED},
                         "coverage": "" if np.isnan(res.coverage) else res.coverage,
                         "bars": "" if np.isnan(res.bars) else res.bars})
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
