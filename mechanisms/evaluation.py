"""Replaying a stream through a mechanism and measuring its error (no I/O).

Every mechanism is driven the same way: one cell per user per slot (-1: no value), one released
histogram per slot. The metrics compare released and true histograms over the whole run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from mechanisms.experiments import dynamic_rows
from mechanisms.ldp import Plbu
from mechanisms.ldp_ids import LDP_IDS, LdpIds
from mechanisms.mechanism import FIXED_MECHANISMS, create_mechanism
from mechanisms.metrics import ajsd, amre, mae
from mechanisms.mtsp_ldp import MtspLdp
from mechanisms.registry import REGISTRY
from mechanisms.requirements import FixedRequirements
from mechanisms.spas import Spas

EVALUATED = ("bd", "ba", "spas", "plbu", "pbd", "pba", "dpbd", "dpba")
KNOWN = tuple(REGISTRY)

Step = Callable[[np.ndarray], tuple[np.ndarray, bool]]


def _releases(mech: Any) -> Step:
    """The :data:`Step` of a mechanism whose ``step(cells)`` returns a release with
    ``histogram`` and ``published``."""

    def step(cells: np.ndarray) -> tuple[np.ndarray, bool]:
        rel = mech.step(cells)
        return rel.histogram, rel.published

    return step


def make_step(
    name: str,
    requirements: FixedRequirements,
    d: int,
    rng: np.random.Generator,
    noise: str = "laplace",
) -> Step:
    """A function from one slot's cells to (released histogram, fresh?) for ``name``."""
    if name in FIXED_MECHANISMS:
        return _releases(create_mechanism(name, requirements, d, rng, noise))
    if name == "spas":
        w, E = requirements.strictest()
        spas = Spas(w, E, d, rng, noise)

        def homogeneous(cells: np.ndarray) -> tuple[np.ndarray, bool]:
            rel = spas.step(np.bincount(cells[cells >= 0], minlength=d))
            return rel.histogram, rel.published

        return homogeneous
    if name == "plbu":
        plbu = Plbu(requirements, d, rng)

        def local(cells: np.ndarray) -> tuple[np.ndarray, bool]:
            rel = plbu.step(cells)
            return rel.histogram, True

        return local
    if name in LDP_IDS:
        w, E = requirements.strictest()
        return _releases(LdpIds(name, w, E, requirements.n, d, rng))
    if name == "mtsp":
        w, E = requirements.strictest()
        return _releases(MtspLdp(w, E, requirements.n, d, rng))
    if name in ("dpbd", "dpba"):
        from mechanisms.dynamic import DynamicMechanism, DynamicRequirements

        reqs = DynamicRequirements.from_rows(dynamic_rows(requirements, rng))
        return _releases(DynamicMechanism(name, reqs, d, rng, noise))
    raise ValueError(f"unknown mechanism {name!r}; choose from {KNOWN}")


@dataclass(frozen=True)
class RunResult:
    """Errors of one run."""

    amre: float
    ajsd: float
    mae: float
    fresh: int
    seconds: float


def run_stream(step: Step, cells: np.ndarray, true: np.ndarray) -> RunResult:
    """Replay ``cells`` (T, n) through ``step`` and score against ``true`` (T, d)."""
    T = cells.shape[0]
    released = np.zeros(true.shape, dtype=np.float64)
    fresh = 0
    start = time.perf_counter()
    for t in range(T):
        hist, published = step(cells[t].astype(np.int64, copy=False))
        released[t] = hist
        fresh += bool(published)
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
