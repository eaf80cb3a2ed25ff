"""Replaying a stream through a mechanism and measuring its error (no I/O).

Every mechanism is driven the same way: one cell per user per slot (-1: no value), one released
histogram per slot. The metrics compare released and true histograms over the whole run.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from mechanisms.build import build
from mechanisms.dynamic import DynamicRequirements
from mechanisms.evaluation.experiments import dynamic_rows
from mechanisms.evaluation.metrics import ajsd, amre, mae
from mechanisms.mechanism import Stepper
from mechanisms.registry import REGISTRY, spec
from mechanisms.requirements import FixedRequirements

EVALUATED = ("bd", "ba", "spas", "plbu", "pbd", "pba", "dpbd", "dpba")
KNOWN = tuple(REGISTRY)


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


def synthetic_cells(
    probabilities: np.ndarray, n: int, rng: np.random.Generator
) -> np.ndarray:
    """(T, n) int8 states: user i is in state 1 at slot t with probability p_t."""
    T = probabilities.shape[0]
    out = np.empty((T, n), dtype=np.int8)
    for t in range(T):  # one vectorised draw per slot keeps memory at T x n bytes
        out[t] = rng.random(n) < probabilities[t]
    return out


def true_histograms(cells: np.ndarray, d: int) -> np.ndarray:
    """(T, d) counts of users per cell, ignoring -1."""
    T = cells.shape[0]
    c = cells.astype(np.int64)
    offsets = c + d * np.arange(T, dtype=np.int64)[:, None]
    return np.bincount(offsets[c >= 0], minlength=T * d).reshape(T, d)
