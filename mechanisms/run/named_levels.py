"""One run of a mechanism under fixed requirements over levels named by canonical keys
(``w:E``), for the job's coordinator.

The job's coordinator never sees users, only per-level counts and user numbers sent by the
partitions. :class:`LevelEngine` orders levels by their key, so the release for a slot depends
only on the counts, the level sizes, the ledger state and the slot's generator, not on the order
in which levels were first seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mechanisms.release.rule import release_rule
from mechanisms.run.fixed import FIXED_LEDGERS, HOMOGENEOUS
from mechanisms.run.mechanism import HoldsMechanism, Mechanism


def level_key(w: int, E: float) -> str:
    """The canonical name of the requirement (w, E)."""
    return f"{int(w)}:{float(E)!r}"


def parse_level_key(key: str) -> tuple[int, float]:
    """Inverse of :func:`level_key`."""
    w, _, E = key.partition(":")
    return int(w), float(E)


def _order(key: str) -> tuple[int, float]:
    return parse_level_key(key)


@dataclass(frozen=True)
class LevelRelease:
    """One slot's release with each level's charge."""

    slot: int
    histogram: np.ndarray
    published: bool
    nullified: bool
    threshold: float
    eps1: dict[str, float]
    eps2: dict[str, float]
    #: per cell, the standard deviation of the noise added (published slots only)
    noise_std: np.ndarray | None = None


class LevelEngine(HoldsMechanism):
    """The fixed-requirement :class:`~mechanisms.run.mechanism.Mechanism` over named levels;
    ``step`` releases the next slot."""

    def __init__(self, name: str, d: int, noise: str = "discrete", sensitivity: int = 1) -> None:
        if name not in FIXED_LEDGERS:
            raise ValueError(f"unknown mechanism {name!r}; choose from {sorted(FIXED_LEDGERS)}")
        self.name, self.d, self.noise = name, int(d), noise
        self.homogeneous = name in HOMOGENEOUS
        rule = release_rule(name, d, noise, sensitivity)
        self.ledger = FIXED_LEDGERS[name](np.zeros(0, dtype=np.int64), np.zeros(0))
        self.mechanism = Mechanism(self.ledger, rule)
        self.row_of: dict[str, int] = {}

    @property
    def released(self) -> int:
        """Slots released so far."""
        return self.ledger.slot - 1

    def ensure_level(self, key: str) -> None:
        """Make the level known (a baseline tightens its single level to it)."""
        if key in self.row_of:
            return
        w, E = parse_level_key(key)
        if self.homogeneous:
            self.row_of[key] = self.ledger.strictest_level(w, E)
        else:
            self.row_of[key] = self.ledger.add_level(w, E)

    def step(
        self, sizes: dict[str, int], counts: dict[str, np.ndarray], rng: np.random.Generator
    ) -> LevelRelease:
        """Release the next slot from registered users and report counts per level."""
        for key in sizes:
            self.ensure_level(key)
        keys = sorted((k for k, n in sizes.items() if n > 0), key=_order)
        zero = np.zeros(self.d, dtype=np.int64)
        if self.homogeneous and keys:
            total = sum((np.asarray(counts.get(k, zero), dtype=np.int64) for k in keys), zero)
            rows = np.array([0])
            matrix = total[None, :]
            size_vec = np.array([sum(sizes[k] for k in keys)])
        else:
            rows = np.array([self.row_of[k] for k in keys], dtype=np.int64)
            matrix = np.array([np.asarray(counts.get(k, zero), dtype=np.int64) for k in keys],
                              dtype=np.int64).reshape(len(keys), self.d)
            size_vec = np.array([sizes[k] for k in keys], dtype=np.int64)
        plan = self.ledger.plan().take(rows)
        decision, charge = self.mechanism.release(matrix, size_vec, rng, plan)
        std = None
        if charge.published:
            std = (self.mechanism.rule.noise_std(decision.threshold) if decision.std is None
                   else np.full(self.d, decision.std))
        return LevelRelease(
            slot=charge.slot,
            histogram=decision.histogram,
            published=charge.published,
            nullified=charge.nullified,
            threshold=decision.threshold,
            eps1={k: float(charge.eps1[self.row_of[k]]) for k in keys},
            eps2={k: float(charge.eps2[self.row_of[k]]) for k in keys},
            noise_std=std,
        )

    def replay(self, sizes: dict[str, int], published: bool, histogram: np.ndarray) -> None:
        """Advance the ledger through a slot already released elsewhere: its levels, its
        publish decision and, when published, its histogram (a coordinator rebuilding its
        state from the decisions and releases topics)."""
        for key in sizes:
            self.ensure_level(key)
        self.mechanism.adopt(published, histogram)

    def state(self) -> dict:
        """A JSON-able snapshot."""
        return {"name": self.name, "ledger": self.ledger.state(), "rows": self.row_of,
                "last": self.last.tolist()}

    def load_state(self, state: dict) -> None:
        """Restore from :meth:`state`."""
        if state["name"] != self.name:
            raise ValueError(f"state of {state['name']!r} given to engine {self.name!r}")
        self.ledger.load_state(state["ledger"])
        self.row_of = dict(state["rows"])
        self.mechanism.load_last(state["last"])
