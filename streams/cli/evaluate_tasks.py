"""The work of ``pwevent evaluate``: its (E, w, ratio) settings and its tasks, run in processes
of their own and handed out by :func:`evaluate_all`.

Two kinds of task: :func:`prepare` makes repeats of a dataset (each one's stream counted per
class of users), and :func:`run_counted` steps one mechanism over every prepared repeat of a
dataset, all its runs as one batch.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mechanisms.evaluation.runs import ClassCounts, RunResult

Setting = tuple[float, int, float | None]  # E, w, share of the ratio experiment
#: The post-processings scored besides the raw release (``amre_<method>`` columns; a
#: mechanism whose releases report no noise scale gets no score from a filter).
POSTPROCESSED = ("round", "kalman", "kalman_bank", "kalman_split")
#: A run of a dynamic mechanism costs about twice a fixed one per slot (docs/performance.md):
#: the weight :func:`evaluate_all` gives its tasks when it orders them.
DYNAMIC_COST = 2.0

#: The datasets read from files (the others are drawn).
REAL = ("taxi", "foursquare")
#: This process's last real dataset read (key, cells, d): its repeats share the data.
_LOADED: list = []
#: This process's requirements of recent repeats: every mechanism's task asks for them.
_REQUIREMENTS: dict[tuple, list] = {}


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
    """A (T, n) cell matrix and the domain size for one repeat (real data is read once per
    process and shared by its repeats, read-only)."""
    from mechanisms.evaluation import datasets

    if dataset not in REAL:
        from mechanisms.evaluation.runs import synthetic_cells

        T = args["slots"] or 10_000
        probs = getattr(datasets, f"{dataset}_probabilities")(T)
        rng = np.random.default_rng([args["seed"], repeat, 0])
        return synthetic_cells(probs, args["users"], rng), 2
    from streams.data.loaders import load_foursquare, load_taxi

    path = Path(args["paths"][dataset])
    start, end = args["start"].get(dataset), args["end"].get(dataset)
    key = (dataset, str(path), start, end, args["slots"])
    if _LOADED and _LOADED[0] == key:
        return _LOADED[1], _LOADED[2]
    _LOADED.clear()  # one dataset at a time: its cells can take hundreds of MB
    if dataset == "taxi":
        data = load_taxi(path, start=start, end=end)
    else:
        folder = path if path.is_dir() else path.parent
        data = load_foursquare(folder / "checkins.tsv.gz", folder / "pois.tsv.gz",
                               start=start, end=end)
    cells = data.cells if args["slots"] is None else data.cells[: args["slots"]]
    cells.flags.writeable = False  # shared by the repeats
    _LOADED[:] = [key, cells, data.d]
    return cells, data.d


def _requirements(args: dict, n: int, repeat: int) -> list[tuple[Setting, list, object]]:
    """Each setting of a repeat with its rng tag and the users' requirements (kept for the
    process's next tasks, which ask for the same)."""
    from mechanisms.evaluation.experiments import paper_requirements, ratio_requirements

    key = (args["seed"], n, repeat, tuple(args["settings"]), args["ratio_experiment"])
    hit = _REQUIREMENTS.get(key)
    if hit is not None:
        return hit
    out = []
    for E, w, ratio in args["settings"]:
        tag = [int(E * 1000), w] + ([] if ratio is None else [int(ratio * 1000)])
        if ratio is None:
            reqs = paper_requirements(n, E, w,
                                      np.random.default_rng([args["seed"], repeat, 1, *tag]))
        else:
            reqs = ratio_requirements(n, ratio, args["ratio_experiment"])
        out.append(((E, w, ratio), tag, reqs))
    if len(_REQUIREMENTS) >= 64:
        _REQUIREMENTS.clear()
    _REQUIREMENTS[key] = out
    return out


def counted(name: str) -> bool:
    """Whether mechanism ``name`` runs on a stream's per-class counts (no pass over users)."""
    from mechanisms.defaults import DEFAULT
    from mechanisms.registry import spec

    if name == DEFAULT:  # pbu or pbad
        return True
    s = spec(name)
    return s.family in ("central", "dynamic") or s.name in ("spas", "plbu")


@dataclass(frozen=True)
class Stream:
    """One repeat of a dataset as the counted mechanisms take it: its reports per (slot,
    class of users, cell), each slot's true histogram (T, d) and the domain size."""

    repeat: int
    counts: ClassCounts
    true: np.ndarray
    d: int


def _run(dataset: str, name: str, k: int, args: dict,
         specs: list[tuple[int, tuple, np.ndarray | ClassCounts, np.ndarray, int]]) -> list[dict]:
    """Mechanism ``name`` (``k``-th of ``--mechanisms``) on every (repeat, setting, stream,
    true histograms, d) of ``specs``, as one batch; one row per run."""
    from mechanisms.defaults import DEFAULT

    if name == DEFAULT:
        return _run_default(dataset, k, args, specs)
    from mechanisms.evaluation.runs import make_step, run_batch

    mechs = []
    for repeat, (_, tag, reqs), _, _, d in specs:
        rng = np.random.default_rng([args["seed"], repeat, 2, *tag, k])
        mechs.append(make_step(name, reqs, d, rng, args["noise"]))
    users = [reqs.n for _, (_, _, reqs), _, _, _ in specs]
    results = run_batch(mechs, [s[2] for s in specs], [s[3] for s in specs],
                        postprocess=POSTPROCESSED, users=users)
    return [_row(dataset, name, spec_, res) for spec_, res in zip(specs, results, strict=True)]


def _row(dataset: str, name: str, spec_: tuple, res: RunResult) -> dict:
    """One run's row of results.csv."""
    repeat, ((E, w, ratio), _, _), _, true, _ = spec_
    return {"dataset": dataset, "mechanism": name, "E": E, "w": w,
            "repeat": repeat, "amre": res.amre, "ajsd": res.ajsd, "mae": res.mae,
            "fresh": res.fresh, "slots": true.shape[0],
            "seconds": round(res.seconds, 3),
            "ratio": "" if ratio is None else ratio,
            **{f"amre_{m}": res.post[m][0] if m in res.post else ""
               for m in POSTPROCESSED},
            "coverage": "" if np.isnan(res.coverage) else res.coverage,
            "bars": "" if np.isnan(res.bars) else res.bars}


def _run_default(dataset: str, k: int, args: dict, specs: list[tuple]) -> list[dict]:
    """The default configuration (:mod:`mechanisms.defaults`) on every spec of :func:`_run`:
    each run's mechanism and post-processing chosen from its requirements and d, the runs of
    one choice as one batch. A row's ``amre``, ``ajsd`` and ``mae`` score the post-processed
    release, what the default publishes; it has no error bars (``coverage`` and ``bars``
    empty) and no ``amre_<method>`` columns."""
    from mechanisms.defaults import DEFAULT, choose
    from mechanisms.evaluation.runs import make_step, run_batch

    choices = [(c.mechanism, c.postprocess)
               for c in (choose(reqs, d) for _, (_, _, reqs), _, _, d in specs)]
    rows: list[dict | None] = [None] * len(specs)
    for mechanism, postprocess in sorted(set(choices)):  # the runs of one branch: one batch
        at = [i for i, c in enumerate(choices) if c == (mechanism, postprocess)]
        mechs = []
        for i in at:
            repeat, (_, tag, reqs), _, _, d = specs[i]
            rng = np.random.default_rng([args["seed"], repeat, 2, *tag, k])
            mechs.append(make_step(mechanism, reqs, d, rng, args["noise"]))
        results = run_batch(mechs, [specs[i][2] for i in at], [specs[i][3] for i in at],
                            postprocess=(postprocess,), users=[specs[i][1][2].n for i in at])
        for i, res in zip(at, results, strict=True):
            score, error, divergence = res.post[postprocess]
            row = _row(dataset, DEFAULT, specs[i], res)
            row.update({"amre": score, "ajsd": divergence, "mae": error, "coverage": "",
                        "bars": "", **{f"amre_{m}": "" for m in POSTPROCESSED}})
            rows[i] = row
    return [r for r in rows if r is not None]


def prepare(dataset: str, repeats: list[int], args: dict) -> tuple[list[Stream], list[dict]]:
    """Some repeats of ``dataset``: each one's stream counted once per class of users (users
    whose requirements agree in every setting), and the rows of the mechanisms that need each
    user's cell, run here while the cells are at hand (each as one batch of the settings)."""
    from mechanisms.evaluation.runs import class_counts
    from mechanisms.requirements import user_classes

    streams: list[Stream] = []
    rows: list[dict] = []
    for repeat in repeats:
        cells, d = load_cells(dataset, args, repeat)
        settings_ = _requirements(args, cells.shape[1], repeat)
        classes = user_classes(*(reqs for _, _, reqs in settings_))
        counts = class_counts(cells, classes, d)
        true = counts.counts.sum(axis=1)  # what true_histograms(cells, d) counts
        for k, name in enumerate(args["mechanisms"]):
            if not counted(name):
                rows += _run(dataset, name, k, args,
                             [(repeat, st, cells, true, d) for st in settings_])
        streams.append(Stream(repeat, counts, true, d))
    return streams, rows


def run_counted(dataset: str, k: int, streams: list[Stream], args: dict) -> list[dict]:
    """The ``k``-th mechanism of ``--mechanisms`` on every setting of every repeat in
    ``streams``, all as one batch (:func:`mechanisms.evaluation.runs.run_batch`), each run with
    the generator it has alone, so each gives what it gives alone."""
    specs = [(s.repeat, st, s.counts, s.true, s.d) for s in streams
             for st in _requirements(args, s.counts.classes.size, s.repeat)]
    return _run(dataset, args["mechanisms"][k], k, args, specs)


def task_cost(name: str, runs: int, slots: int) -> float:
    """A counted task's expected cost, to order the tasks: runs x slots, weighted by
    :data:`DYNAMIC_COST` for a dynamic mechanism."""
    from mechanisms.defaults import DEFAULT
    from mechanisms.registry import spec

    if name == DEFAULT:
        return float(runs * slots)
    return runs * slots * (DYNAMIC_COST if spec(name).family == "dynamic" else 1.0)


def evaluate_all(pool: Executor, jobs: int, datasets: list[str], repeats: int, args: dict,
                 report: Callable[[int, str], None] | None = None) -> list[dict]:
    """Every run of the evaluation, on ``pool``'s processes; returns the rows.

    First every (dataset, repeat) is prepared (:func:`prepare`; a real dataset's repeats in one
    task, which reads the data once); once a dataset's repeats are all prepared, each counted
    mechanism runs on all of them as one task
    (:func:`run_counted`: the larger a batch, the less a run's slot costs). At most ``jobs``
    tasks are handed out at a time, so the next one is chosen when a process is free:
    preparations first, then the most expensive task left (:func:`task_cost`), which leaves
    the shortest tasks for the end and keeps every process busy to it. ``report(runs, what)``
    is told of each finished task.
    """
    order = itertools.count()
    waiting: list[tuple[tuple, tuple]] = []
    # a real dataset is read once, in one task for all its repeats (the first tasks handed
    # out: the longest preparations), unless some mechanism needs each repeat's cells
    together = all(counted(name) for name in args["mechanisms"])
    for ds in sorted(datasets, key=lambda ds: ds not in REAL):
        parts = [list(range(repeats))] if ds in REAL and together else [
            [r] for r in range(repeats)]
        for part in parts:
            heapq.heappush(waiting, ((0, next(order)), ("prepare", ds, part)))
    prepared: dict[str, list[Stream]] = {ds: [] for ds in datasets}
    running: dict[Future, tuple] = {}
    rows: list[dict] = []
    while waiting or running:
        while waiting and len(running) < max(1, jobs):
            _, task = heapq.heappop(waiting)
            if task[0] == "prepare":
                running[pool.submit(prepare, task[1], task[2], args)] = task
            else:
                ds, k = task[1], task[2]
                running[pool.submit(run_counted, ds, k, prepared[ds], args)] = task
        finished, _ = wait(running, return_when=FIRST_COMPLETED)
        for fut in finished:
            task = running.pop(fut)
            ds = task[1]
            if task[0] == "prepare":
                streams, got = fut.result()
                prepared[ds].extend(streams)
                if len(prepared[ds]) == repeats:
                    prepared[ds].sort(key=lambda s: s.repeat)
                    runs = repeats * len(args["settings"])
                    slots = streams[0].true.shape[0]
                    for k, name in enumerate(args["mechanisms"]):
                        if counted(name):
                            cost = task_cost(name, runs, slots)
                            heapq.heappush(waiting, ((1, -cost, next(order)), ("run", ds, k)))
                span = task[2][0] if len(task[2]) == 1 else f"{task[2][0]}-{task[2][-1]}"
                what = f"{ds} repeats {span} prepared"
            else:
                got = fut.result()
                what = f"{ds} {args['mechanisms'][task[2]]} done"
            rows.extend(got)
            if report is not None:
                report(len(got), what)
    return rows
