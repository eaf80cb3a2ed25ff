"""Replaying a stream through a mechanism and measuring its error (no I/O).

Every mechanism is driven the same way: one cell per user per slot (-1: no value), one released
histogram per slot. The metrics compare released and true histograms over the whole run.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from mechanisms import postprocess as pp
from mechanisms.batch.fixed import BatchedFixed
from mechanisms.build import batch, build
from mechanisms.defaults import DEFAULT
from mechanisms.evaluation.experiments import dynamic_rows
from mechanisms.evaluation.metrics import ajsd, amre, coverage, mae
from mechanisms.registry import REGISTRY, spec
from mechanisms.requirements import DynamicRequirements, FixedRequirements
from mechanisms.run.mechanism import RuleRelease, Stepper

EVALUATED = ("bd", "ba", "spas", "plbu", "pbd", "pba", "dpbd", "dpba")
#: Every mechanism ``pwevent evaluate`` runs: the registry's and the default configuration.
KNOWN = (*REGISTRY, DEFAULT)


def make_step(
    name: str,
    requirements: FixedRequirements,
    d: int,
    rng: np.random.Generator,
    noise: str = "laplace",
) -> Stepper:
    """The mechanism ``name`` as evaluated: a dynamic one gets requirements that change over
    the run, drawn from ``requirements`` with ``rng``
    (:func:`mechanisms.evaluation.experiments.dynamic_rows`).
    """
    if spec(name).family == "dynamic":
        rows = dynamic_rows(requirements, rng)
        return build(name, DynamicRequirements.from_rows(rows), d, rng, noise)
    return build(name, requirements, d, rng, noise)


@dataclass(frozen=True)
class RunResult:
    """Errors of one run."""

    amre: float
    ajsd: float
    mae: float
    fresh: int
    seconds: float
    #: per post-processing method, its (AMRE, MAE, AJSD) (:func:`run_batch`)
    post: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    #: share of the cells with error bars whose 95% bar holds the true count (nan: no bars)
    coverage: float = float("nan")
    #: share of the published slots given error bars (not thinned; nan: none published)
    bars: float = float("nan")


def run_stream(mech: Stepper, cells: np.ndarray, true: np.ndarray) -> RunResult:
    """Replay ``cells`` (T, n) through ``mech`` and score against ``true`` (T, d)."""
    T = cells.shape[0]
    released = np.zeros(true.shape, dtype=np.float64)
    fresh = 0
    start = time.perf_counter()
    for t in range(T):
        release = mech.step(cells[t].astype(np.int64, copy=False))
        released[t] = release.histogram
        fresh += bool(release.published)
    seconds = time.perf_counter() - start
    return RunResult(amre(released, true), ajsd(released, true), mae(released, true), fresh,
                     seconds)


@dataclass(frozen=True)
class ClassCounts:
    """A realised stream counted once per class of users: ``counts`` (T, classes, d) reports,
    ``classes`` each user's class (:func:`mechanisms.requirements.user_classes`)."""

    counts: np.ndarray
    classes: np.ndarray


def class_counts(cells: np.ndarray, classes: np.ndarray, d: int, chunk: int = 16) -> ClassCounts:
    """Count a (T, n) stream's reports per (slot, class, cell), ``chunk`` slots at a time."""
    T, n = cells.shape
    classes = np.asarray(classes, dtype=np.int64)
    C = int(classes.max(initial=-1)) + 1
    width = d + 1
    out = np.empty((T, C, d), dtype=np.int64)
    keys = classes * width + 1
    for start in range(0, T, chunk):
        part = cells[start : start + chunk].astype(np.int64)
        rows = part.shape[0]
        flat = part + keys[None, :]
        flat += (np.arange(rows, dtype=np.int64) * (C * width))[:, None]
        table = np.bincount(flat.ravel(), minlength=rows * C * width)
        out[start : start + rows] = table.reshape(rows, C, width)[:, :, 1:]
    return ClassCounts(out, classes)


@dataclass(frozen=True)
class Replayed:
    """A batch's releases: ``released`` (runs, T, d), ``published`` (runs, T), ``std`` (runs,
    T) the per-cell noise standard deviation of each publication (None where the mechanism does
    not report one), and the batch's seconds per run."""

    released: np.ndarray
    published: np.ndarray
    std: np.ndarray | None
    seconds: float
    thinned: np.ndarray | None = None


def replay_batch(
    mechs: Sequence[Stepper],
    streams: Sequence[np.ndarray | ClassCounts],
    chunk: int = 256,
    d: int | None = None,
    T: int | None = None,
) -> Replayed:
    """Replay each run's stream through its mechanism, all runs stepped together
    (:func:`mechanisms.build.batch`); each run releases what it would alone.

    ``thinned`` (runs, T) marks the publications that sampled users away (no error bars).
    A stream is (T, n) cells or its :class:`ClassCounts`; counts feed the central mechanisms
    their level counts and the others their ``step_classes``, without a pass over the users.
    """
    runs = batch(mechs)
    B = len(mechs)
    released = np.zeros((B, T, d), dtype=np.float64)
    published = np.zeros((B, T), dtype=bool)
    std = np.full((B, T), np.nan)
    thin = np.zeros((B, T), dtype=bool)
    has_std = True
    counted = all(isinstance(s, ClassCounts) for s in streams)

    def keep(t: int, release) -> None:
        nonlocal has_std
        released[:, t] = release.histogram
        published[:, t] = release.published
        if isinstance(release, RuleRelease):
            std[:, t] = release.std
            if release.thinned is not None:
                thin[:, t] = release.thinned
        else:
            has_std = False

    start = time.perf_counter()
    if counted and isinstance(runs, BatchedFixed):
        matrix = runs.class_matrix([s.classes for s in streams])  # (B, L, C)
        C = matrix.shape[2]
        for lo in range(0, T, chunk):
            hi = min(lo + chunk, T)
            cc = np.zeros((B, hi - lo, C, d), dtype=np.int64)
            for b, s in enumerate(streams):
                cc[b, :, : s.counts.shape[1]] = s.counts[lo:hi]
            level = np.matmul(matrix[:, None], cc)  # (B, slots, L, d)
            for i in range(hi - lo):
                keep(lo + i, runs.step_counts(level[:, i]))
    elif counted:
        classes = [s.classes for s in streams]
        for t in range(T):
            keep(t, runs.step_classes([s.counts[t] for s in streams], classes))
    else:
        for t in range(T):
            keep(t, runs.step([np.asarray(s[t], dtype=np.int64) for s in streams]))
    seconds = (time.perf_counter() - start) / B
    return Replayed(released, published, std if has_std else None, seconds, thin)


def run_batch(
    mechs: Sequence[Stepper],
    streams: Sequence[np.ndarray | ClassCounts],
    trues: Sequence[np.ndarray],
    chunk: int = 256,
    postprocess: Sequence[str] = (),
    users: Sequence[int] = (),
) -> list[RunResult]:
    """Replay each run's stream through its mechanism, all runs stepped together
    (:func:`replay_batch`); each run's result is what :func:`run_stream` gives it alone
    (``seconds`` is the batch's time divided among its runs).

    Each method of ``postprocess`` (:data:`mechanisms.postprocess.METHODS`) is applied to the
    releases (with ``users[b]`` registered users in run b) and scored in the result's ``post``;
    a mechanism whose releases carry no noise scale gets no score from a filter
    (:data:`mechanisms.postprocess.FILTERING`) and no ``coverage`` (of the raw release's error
    bars, the only bars the job emits, on the published slots that did not thin a level: the
    others get none).
    """
    T, d = trues[0].shape
    rep = replay_batch(mechs, streams, chunk, d, T)
    released = rep.released
    fresh = rep.published.sum(axis=1)
    post: list[dict[str, tuple[float, float, float]]] = [{} for _ in mechs]
    for method in postprocess:
        if method in pp.FILTERING and rep.std is None:
            continue
        estimates = pp.postprocess(method, released, rep.published, rep.std,
                                   np.asarray(users, dtype=np.float64), d)
        for b in range(len(mechs)):
            post[b][method] = (amre(estimates[b], trues[b]), mae(estimates[b], trues[b]),
                               ajsd(estimates[b], trues[b]))
    barred = rep.published & ~rep.thinned
    covered = [float("nan") if rep.std is None else
               coverage(released[b], trues[b], barred[b], rep.std[b])
               for b in range(len(mechs))]
    bars = [float("nan") if rep.std is None or not fresh[b] else
            float(barred[b].sum() / fresh[b]) for b in range(len(mechs))]
    return [RunResult(amre(released[b], trues[b]), ajsd(released[b], trues[b]),
                      mae(released[b], trues[b]), int(fresh[b]), rep.seconds, post[b],
                      covered[b], bars[b])
            for b in range(len(mechs))]


def synthetic_cells(
    probabilities: np.ndarray, n: int, rng: np.random.Generator
) -> np.ndarray:
    """(T, n) int8 states: user i is in state 1 at slot t with probability p_t."""
    T = probabilities.shape[0]
    out = np.empty((T, n), dtype=np.int8)
    for t in range(T):  # one vectorised draw per slot keeps memory at T x n bytes
        out[t] = rng.random(n) < probabilities[t]
    return out


def true_histograms(cells: np.ndarray, d: int, chunk: int = 64) -> np.ndarray:
    """(T, d) counts of users per cell, ignoring -1 (``chunk`` slots at a time, so that the
    int64 copies stay small)."""
    T = cells.shape[0]
    out = np.empty((T, d), dtype=np.int64)
    for start in range(0, T, chunk):
        c = cells[start : start + chunk].astype(np.int64)
        rows = c.shape[0]
        offsets = c + d * np.arange(rows, dtype=np.int64)[:, None]
        out[start : start + rows] = np.bincount(offsets[c >= 0], minlength=rows * d).reshape(
            rows, d)
    return out
