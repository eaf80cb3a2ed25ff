"""Budget-free multi-task streaming queries over released trees (papers/002 2.5, MTSP-LDP M4).

Every function reads released trees only, so it costs no privacy budget (post-processing).
``trees`` is a (T, 2D - 1) array, one released tree per slot in heap order (see
:mod:`mechanisms.baselines.private_tree`) holding counts of users, oldest first; the last row is the
current slot t. :attr:`mechanisms.baselines.mtsp_ldp.MtspRelease.tree_counts` gives one row.

The excerpt of papers/002 lost the formulas of event monitoring; from its prose, alpha is the
count of a value (or range) over a monitoring period of Delta slots and beta flags a
significant increase between two consecutive periods. The test used here, parameterised by
``ratio`` and ``margin``, is this module's own: beta_t = 1 iff
alpha_t > ratio * max(alpha_{t - Delta}, 0) + margin.
"""

from __future__ import annotations

import numpy as np

from mechanisms.baselines.private_tree import minimum_cover


def _trees(trees: np.ndarray) -> tuple[np.ndarray, int]:
    """``trees`` as float64 (T, 2D - 1) and h."""
    trees = np.asarray(trees, dtype=np.float64)
    if trees.ndim != 2 or trees.shape[0] == 0:
        raise ValueError(f"need a (T, nodes) array of at least one tree, got {trees.shape}")
    h = (trees.shape[1] + 1).bit_length() - 2
    if h < 1 or trees.shape[1] != 2 ** (h + 1) - 1:
        raise ValueError(f"{trees.shape[1]} nodes is not a perfect binary tree of height >= 1")
    return trees, h


def _delta(delta: int, T: int) -> int:
    if not 1 <= int(delta) <= T:
        raise ValueError(f"need 1 <= delta <= {T} released trees, got delta={delta}")
    return int(delta)


def range_series(trees: np.ndarray, a: int, b: int) -> np.ndarray:
    """Per slot, the count of values in [a, b], summed over its minimum node cover."""
    trees, h = _trees(trees)
    return trees[:, minimum_cover(a, b, h)].sum(axis=1)


def range_query(trees: np.ndarray, a: int, b: int, delta: int = 1) -> float:
    """Q^r_t([a, b], Delta): the count of values in [a, b] over the last ``delta`` slots."""
    trees, _ = _trees(trees)
    return float(range_series(trees[-_delta(delta, trees.shape[0]) :], a, b).sum())


def counting_query(trees: np.ndarray, v: int, delta: int = 1) -> float:
    """Q^c_t(v, Delta): the count of value ``v`` over the last ``delta`` slots."""
    return range_query(trees, v, v, delta)


def period_counts(trees: np.ndarray, a: int, b: int, delta: int) -> np.ndarray:
    """alpha at every slot: the count of [a, b] over the ``delta`` slots ending there (NaN for
    the first delta - 1 slots)."""
    series = range_series(trees, a, b)
    delta = _delta(delta, series.size)
    csum = np.concatenate(([0.0], np.cumsum(series)))
    out = np.full(series.size, np.nan)
    out[delta - 1 :] = csum[delta:] - csum[:-delta]
    return out


def event_monitor(
    trees: np.ndarray,
    a: int,
    b: int,
    delta: int,
    ratio: float = 1.5,
    margin: float = 0.0,
) -> np.ndarray:
    """beta at every slot: 1 iff alpha of the period ending there exceeds ratio times the
    previous period's (negative counts taken as 0) plus ``margin``; 0 for the first
    2 delta - 1 slots, which lack a previous period. For one value v, a = b = v."""
    if not np.isfinite(ratio) or ratio < 0 or not np.isfinite(margin):
        raise ValueError(f"need a finite ratio >= 0 and a finite margin, got {ratio}, {margin}")
    alpha = period_counts(trees, a, b, delta)
    beta = np.zeros(alpha.size, dtype=np.int64)
    now, before = alpha[delta:], alpha[:-delta]
    known = ~np.isnan(before)
    beta[delta:][known] = now[known] > ratio * np.maximum(before[known], 0.0) + margin
    return beta
