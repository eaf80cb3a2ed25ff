"""What every ledger returns: a slot's plan (each level's budgets) and what the slot charged."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class SlotPlan:
    """What a ledger allows at one slot, per level.

    ``eps2`` is what a publication would charge; an approximated or nullified slot charges 0.
    ``adaptive`` says whether the release rule runs the dissimilarity test; a non-adaptive
    mechanism publishes at every slot that is not nullified.
    """

    slot: int
    eps1: np.ndarray
    eps2: np.ndarray
    nullified: bool
    adaptive: bool = True
    projected: int = 0

    def take(self, rows: np.ndarray) -> SlotPlan:
        """The plan of the levels ``rows`` only (the levels a slot's counts cover)."""
        return SlotPlan(self.slot, self.eps1[rows], self.eps2[rows], self.nullified,
                        self.adaptive, self.projected)


@dataclass
class Charge:
    """What one committed slot actually charged, per level."""

    slot: int
    eps1: np.ndarray
    eps2: np.ndarray
    published: bool
    nullified: bool
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RunsPlan:
    """A slot's plan for each run of a batch: budgets are (runs, levels), ``nullified`` (runs,)."""

    slot: int
    eps1: np.ndarray
    eps2: np.ndarray
    nullified: np.ndarray
    adaptive: bool = True

    def run(self, b: int) -> SlotPlan:
        """Run ``b``'s plan."""
        return SlotPlan(self.slot, self.eps1[b], self.eps2[b], bool(self.nullified[b]),
                        self.adaptive)
