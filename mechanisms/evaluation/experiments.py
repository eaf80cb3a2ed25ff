"""Privacy requirements as in the paper's experiments (papers/000 section 6.2, Table 4).

Ten user types split the users evenly. Each type's E is drawn from the E grid values >= the
target E and its w from the w grid values <= the target w; type 0 takes exactly the target, so
the strictest requirement, which the homogeneous baselines use, equals the target (E, w).
Dynamic requirements keep the backward requirement inactive (EB = 10, wB = 1) and give each
type a forward requirement with E_F >= E_i and w_F <= w_i, declared at slot 1.
"""

from __future__ import annotations

import numpy as np

from mechanisms.requirements import FixedRequirements

E_GRID = (0.2, 0.4, 0.6, 0.8, 1.0)
W_GRID = (40, 80, 120, 160, 200)
TYPES = 10
INACTIVE_BACKWARD = (1, 10.0)


def user_names(n: int) -> list[str]:
    """Names of n synthetic users."""
    return [f"u{i}" for i in range(n)]


def _types(n: int) -> np.ndarray:
    return np.arange(n) % TYPES


def paper_requirements(
    n: int, E: float, w: int, rng: np.random.Generator
) -> FixedRequirements:
    """Table 4's personalised requirements for target budget ``E`` and window ``w``."""
    e_choices = [e for e in E_GRID if e >= E - 1e-12] or [E]
    w_choices = [x for x in W_GRID if x <= w] or [w]
    type_E = rng.choice(e_choices, TYPES)
    type_w = rng.choice(w_choices, TYPES)
    type_E[0], type_w[0] = E, w
    kind = _types(n)
    return FixedRequirements.from_arrays(user_names(n), type_w[kind], type_E[kind])


def dynamic_rows(
    fixed: FixedRequirements, rng: np.random.Generator
) -> list[tuple[int, str, int, float, int, float]]:
    """Declarations (slot, user, wB, EB, wF, EF) at slot 1 for every user of ``fixed``.

    Users of one fixed type share one forward requirement drawn with E_F >= E_i, w_F <= w_i.
    """
    rows = []
    cache: dict[tuple[int, float], tuple[int, float]] = {}
    wB, EB = INACTIVE_BACKWARD
    for user, w, E in zip(fixed.users, fixed.w.tolist(), fixed.E.tolist(), strict=True):
        key = (w, E)
        if key not in cache:
            e_choices = [e for e in E_GRID if e >= E - 1e-12] or [E]
            w_choices = [x for x in W_GRID if x <= w] or [w]
            cache[key] = (int(rng.choice(w_choices)), float(rng.choice(e_choices)))
        wF, EF = cache[key]
        rows.append((1, user, wB, EB, wF, EF))
    return rows


def ratio_requirements(
    n: int, ratio: float, vary: str = "E"
) -> FixedRequirements:
    """Figures 11 and 12: a share ``ratio`` of users gets E = 1.0 (w = 120) when ``vary="E"``,
    or w = 40 (E = 0.6) when ``vary="w"``; the others keep (0.6, 120)."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"ratio must be in [0, 1], got {ratio}")
    chosen = np.arange(n) < int(round(ratio * n))
    E = np.full(n, 0.6)
    w = np.full(n, 120)
    if vary == "E":
        E[chosen] = 1.0
    elif vary == "w":
        w[chosen] = 40
    else:
        raise ValueError(f"vary must be 'E' or 'w', got {vary!r}")
    return FixedRequirements.from_arrays(user_names(n), w, E)
