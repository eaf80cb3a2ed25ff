"""Replaying a stream through mechanisms in one process, without Kafka."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from mechanisms.datasets import log_probabilities, sin_probabilities, tlns_probabilities
from mechanisms.evaluation import make_step, true_histograms
from mechanisms.experiments import paper_requirements
from mechanisms.metrics import ajsd, amre, mae
from streams.progress import Progress

SYNTHETIC = {"sin": sin_probabilities, "log": log_probabilities, "tlns": tlns_probabilities}


@dataclass(frozen=True)
class ReplaySummary:
    """Errors of one mechanism over one replay."""

    mechanism: str
    slots: int
    fresh: int
    amre: float
    ajsd: float
    mae: float
    seconds: float


def synthetic_slots(dataset: str, users: int, slots: int, seed: int) -> Iterator[np.ndarray]:
    """Per slot, each user's state (0/1) in a synthetic stream of papers/000 section 6.1."""
    probs = SYNTHETIC[dataset](slots)
    rng = np.random.default_rng([seed, 0])
    for p in probs:
        yield (rng.random(users) < p).astype(np.int64)


def replay(
    mechanisms: list[str],
    dataset: str = "sin",
    users: int = 2000,
    slots: int = 200,
    epsilon: float = 0.6,
    window: int = 120,
    seed: int = 1,
    show_progress: bool = True,
) -> list[ReplaySummary]:
    """Run every mechanism over the same synthetic stream; returns their errors."""
    cells = np.array(list(synthetic_slots(dataset, users, slots, seed)))
    true = true_histograms(cells, 2)
    reqs = paper_requirements(users, epsilon, window, np.random.default_rng([seed, 1]))
    bar = Progress(len(mechanisms) * slots, "replay") if show_progress else None
    out = []
    for k, name in enumerate(mechanisms):
        step = make_step(name, reqs, 2, np.random.default_rng([seed, 2, k]))
        released = np.zeros(true.shape)
        fresh = 0
        start = time.perf_counter()
        for t in range(slots):
            released[t], published = step(cells[t])
            fresh += bool(published)
            if bar:
                bar.advance(note=name)
        out.append(ReplaySummary(name, slots, fresh, amre(released, true), ajsd(released, true),
                                 mae(released, true), time.perf_counter() - start))
    if bar:
        bar.close()
    return out


def print_table(rows: list[ReplaySummary], stream=None) -> None:
    """A readable table of replay errors."""
    stream = stream or sys.stdout
    stream.write(f"{'mechanism':<10} {'slots':>6} {'fresh':>6} {'AMRE':>14} {'AJSD':>9} "
                 f"{'MAE':>10} {'seconds':>8}\n")
    for r in rows:
        stream.write(f"{r.mechanism:<10} {r.slots:>6} {r.fresh:>6} {r.amre:>14,.2f} "
                     f"{r.ajsd:>9.5f} {r.mae:>10.2f} {r.seconds:>8.2f}\n")
