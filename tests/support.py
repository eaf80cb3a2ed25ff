"""Helpers shared by the tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from mechanisms.requirements import FixedRequirements


def window_sums(charges: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Largest sum over any w_i consecutive slots, per user; ``charges`` is (T, n)."""
    T, n = charges.shape
    csum = np.vstack([np.zeros((1, n)), np.cumsum(charges, axis=0)])
    worst = np.zeros(n)
    for i in range(n):
        k = min(int(w[i]), T)
        worst[i] = (csum[k:, i] - csum[:-k, i]).max() if T else 0.0
        worst[i] = max(worst[i], csum[k, i])
    return worst


@st.composite
def fixed_schedules(draw, max_users: int, max_window: int, max_slots: int):
    """Random fixed requirements (users u0, u1, ...) and a publish/approximate schedule."""
    n = draw(st.integers(1, max_users))
    w = draw(st.lists(st.integers(1, max_window), min_size=n, max_size=n))
    E = draw(st.lists(st.floats(0.001, 5.0), min_size=n, max_size=n))
    T = draw(st.integers(1, max_slots))
    bits = draw(st.lists(st.booleans(), min_size=T, max_size=T))
    return FixedRequirements.from_arrays([f"u{i}" for i in range(n)], w, E), bits


def local_stream(
    rng: np.random.Generator, n: int, d: int, T: int, jumpy: bool, every: int = 3
) -> list[np.ndarray]:
    """T slots of n cells for the local-DP tests: a stable distribution, or one whose mode moves
    every ``every`` slots; about 10% of the users hold no value (-1) at each slot."""
    out = []
    for t in range(T):
        p = np.ones(d)
        p[(t // every) % d if jumpy else 0] += 4 * d
        cells = rng.choice(d, n, p=p / p.sum())
        cells[rng.random(n) < 0.1] = -1
        out.append(cells)
    return out
