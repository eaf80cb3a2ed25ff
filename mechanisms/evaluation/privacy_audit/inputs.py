"""The audited population and its neighbouring pairs of inputs."""


from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mechanisms.evaluation.audit_names import MODES, NEIGHBOURING, PAIRS
from mechanisms.requirements import FixedRequirements


@dataclass(frozen=True)
class Population:
    """A public population over ``d`` cells and T slots: each user's requirement (w, E) and its
    base stream ``cells`` (T, n) (-1: no report; a device's first event is its first report);
    ``target`` is the user whose reports the neighbouring inputs change."""

    users: tuple[str, ...]
    w: np.ndarray
    E: np.ndarray
    cells: np.ndarray
    d: int
    target: int

    @property
    def T(self) -> int:  # noqa: N802 - the papers' name
        """Number of slots."""
        return int(self.cells.shape[0])

    def requirements(self) -> FixedRequirements:
        """The users' fixed requirements."""
        return FixedRequirements.from_arrays(self.users, self.w, self.E)


def default_population(mode: str = "declared") -> Population:
    """The audit's population: three levels over d = 2 cells and 3 slots.

    Level A (w = 2, E = 1) holds the target u0 and u1, level B (w = 1, E = 8) six users and
    level C (w = 1, E = 10) one: OBS takes B's budget as threshold, so A is sampled and C kept
    whole. The target reports cell 0 at every slot; four of B move between cells at slot 2, so
    the dissimilarity test has something to see. Under ``defaults``, two devices of B have
    their first event at slot 2 (latent before it).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    users = tuple(f"u{i}" for i in range(9))
    w = np.array([2, 2, 1, 1, 1, 1, 1, 1, 1])
    E = np.array([1.0, 1.0, 8.0, 8.0, 8.0, 8.0, 8.0, 8.0, 10.0])
    base = np.array([0, 1, 0, 0, 1, 1, 1, 1, 1])
    moved = np.array([0, 1, 0, 0, 0, 0, 1, 1, 1])
    cells = np.stack([base, moved, base]).astype(np.int64)
    if mode == "defaults":
        cells[0, [6, 7]] = -1
    return Population(users, w, E, cells, 2, 0)


@dataclass(frozen=True)
class NeighbourPair:
    """Two neighbouring inputs: the streams ``cells0`` and ``cells1`` (T, n), which differ only
    in the target's reports, at ``slots`` (1-based); ``E`` and ``w`` are the target's
    requirement, against which the bound is compared."""

    name: str
    cells0: np.ndarray
    cells1: np.ndarray
    slots: tuple[int, ...]
    E: float
    w: int
    target: str
    index: int
    text: str


def neighbour_pair(population: Population, pair: str,
                   neighbouring: str = "add-remove") -> NeighbourPair:
    """The neighbouring inputs ``pair`` of :data:`PAIRS` over ``population`` (module doc):
    ``slot`` at the slot after the target's first report, ``window`` over the w_u slots from
    its first report, ``first_event`` from its first report's slot to the next one."""
    if pair not in PAIRS:
        raise ValueError(f"pair must be one of {PAIRS}, got {pair!r}")
    if neighbouring not in NEIGHBOURING:
        raise ValueError(f"neighbouring must be one of {NEIGHBOURING}, got {neighbouring!r}")
    u, T, d = population.target, population.T, population.d
    w_u, E_u = int(population.w[u]), float(population.E[u])
    cells0 = population.cells.copy()
    reports = np.flatnonzero(cells0[:, u] >= 0)
    if reports.size == 0:
        raise ValueError("the target has no report in the population's stream")
    first = int(reports[0])
    cells1 = cells0.copy()
    if pair == "slot":
        t = min(first + 1, T - 1)
        if cells0[t, u] < 0:
            raise ValueError(f"the target has no report at slot {t + 1} to change")
        if neighbouring == "replace":
            cells1[t, u] = (cells0[t, u] + 1) % d
            text = f"{population.users[u]}'s report at slot {t + 1} moved to another cell"
        else:
            cells1[t, u] = -1
            text = f"{population.users[u]}'s report at slot {t + 1} removed"
    elif pair == "window":
        span = slice(first, min(first + w_u, T))
        cells1[span, u] = -1
        text = (f"{population.users[u]}'s reports removed over slots {first + 1}.."
                f"{min(first + w_u, T)} (w = {w_u})")
    else:
        if w_u < 2 or first + 1 >= T:
            raise ValueError("first_event needs a target window of at least 2 slots and a "
                             "slot after its first report")
        cells1[first, u] = -1
        if cells1[first + 1, u] < 0:
            cells1[first + 1, u] = cells0[first, u]
        text = (f"{population.users[u]}'s first event moved from slot {first + 1} to slot "
                f"{first + 2}")
    slots = tuple(int(t) + 1 for t in np.flatnonzero((cells0 != cells1).any(axis=1)))
    return NeighbourPair(pair, cells0, cells1, slots, E_u, w_u, population.users[u], u,
                         text)
