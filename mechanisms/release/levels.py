"""The release rule's estimator ``"levels"``: every budget group's own noisy histogram, combined
by weights that minimise the expected squared error (docs/design.md, "The level-combining
estimator").

Levels with the same publication budget form a group; group g's users are counted together and
get one noise draw per cell at the group's budget eps_g (variance s_g^2). A user is in one group,
so the groups' noisy histograms together are eps_g-DP for group g's users (parallel
composition), and everything below is post-processing of them with public inputs: the groups'
budgets and registered users, and the last release.

The release is r = sum_g a_g (C_g + N_g). Modelling each user's report as a draw from the
population's cell frequencies (variance v per cell), a group's count is C_g = n_g mu + delta_g
with Var[delta_g] = n_g v, and the weights minimising the mean squared error of r against the
true count subject to sum_g a_g n_g = N (no bias when the groups report alike) are

    a_g = u n_g / (s_g^2 + v n_g),    u = N / sum_g n_g^2 / (s_g^2 + v n_g).

v -> infinity gives the plain sum (a_g = 1); v = 0 the inverse-variance weighting of the
groups' frequency estimates. v is the mean over cells of p(1 - p), p the last release's share of
each cell (1/d before any publication): a function of a past release, public. A single group
gets a_g = 1: its release is the exact count plus one noise draw, and its bars hold.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from mechanisms.noise.calibrated import draw_noise, noise_stds


def group_levels(eps: np.ndarray, sizes: np.ndarray, usable: np.ndarray
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Levels grouped by equal budget, per run: ``eps``, ``sizes`` and ``usable`` are
    (runs, levels). Returns each level's group (runs, levels; -1 for a level without users or
    usable budget), each group's budget and each group's users (runs, groups), groups in
    decreasing budget (a padded group has budget 0 and no users)."""
    runs, levels = eps.shape
    live = usable & (sizes > 0)
    key = np.where(live, eps, -np.inf)
    order = np.argsort(-key, axis=1, kind="stable")
    ordered = np.take_along_axis(key, order, axis=1)
    fresh = np.ones((runs, levels), dtype=bool)
    fresh[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    sorted_group = np.cumsum(fresh, axis=1) - 1
    sorted_group[~np.isfinite(ordered)] = -1
    group = np.empty_like(sorted_group)
    np.put_along_axis(group, order, sorted_group, axis=1)
    width = max(int(group.max(initial=-1)) + 1, 1)
    budgets = np.zeros((runs, width))
    users = np.zeros((runs, width), dtype=np.int64)
    rows, cols = np.nonzero(group >= 0)
    budgets[rows, group[rows, cols]] = eps[rows, cols]
    np.add.at(users, (rows, group[rows, cols]), sizes[rows, cols])
    return group, budgets, users


def combining_weights(variances: np.ndarray, users: np.ndarray, v: np.ndarray
                      ) -> tuple[np.ndarray, np.ndarray]:
    """The weights a_g of the module doc and the model's mean squared error per cell, per run:
    ``variances`` and ``users`` are (runs, groups) (a padded group: no users, infinite
    variance), ``v`` (runs,). A run with one group gets weight 1 and error s^2."""
    n = users.astype(np.float64)
    total = n.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(n > 0, n / (variances + v[:, None] * n), 0.0)
        u = total / (n * share).sum(axis=1)
        a = np.where(n > 0, u[:, None] * share, 0.0)
    single = (n > 0).sum(axis=1) == 1
    a[single] = (n[single] > 0).astype(np.float64)
    noise = np.where(n > 0, a * a * np.where(n > 0, variances, 0.0), 0.0).sum(axis=1)
    error = noise + v * (np.where(n > 0, (a - 1.0) ** 2 * n, 0.0)).sum(axis=1)
    return a, error


def cell_variance(last: np.ndarray, users: np.ndarray) -> np.ndarray:
    """Per run, the mean over cells of p (1 - p), p each cell's share of the registered users
    in the last release ``last`` (runs, d), clipped to [0, 1]; (1/d)(1 - 1/d) before a
    release with a positive total."""
    d = last.shape[1]
    n = np.maximum(users.astype(np.float64), 1.0)[:, None]
    p = np.clip(np.asarray(last, dtype=np.float64) / n, 0.0, 1.0)
    v = (p * (1.0 - p)).mean(axis=1)
    fresh = np.asarray(last, dtype=np.float64).sum(axis=1) <= 0
    return np.where(fresh, (1.0 / d) * (1.0 - 1.0 / d), v)


def levels_runs(rngs: Sequence[np.random.Generator], who: np.ndarray, counts: np.ndarray,
                eps: np.ndarray, sizes: np.ndarray, usable: np.ndarray, last: np.ndarray,
                noise: str = "laplace") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Release item i with run ``who[i]``'s generator: ``counts[i]`` (levels, d), the levels'
    budgets ``eps[i]`` (already scaled) and users ``sizes[i]``, which budgets the noise serves
    (``usable[i]``) and the run's last release ``last[i]`` (d,). Each run draws, groups in
    decreasing budget, one noise value per (group, cell). Returns the estimates (items, d), the
    model's per-cell standard deviation (items,) and each item's largest group budget."""
    group, budgets, users = group_levels(eps, sizes, usable)
    items, groups = budgets.shape
    d = counts.shape[-1]
    grouped = np.zeros((items, groups, d), dtype=np.int64)
    rows, cols = np.nonzero(group >= 0)
    np.add.at(grouped, (rows, group[rows, cols]), counts[rows, cols])
    live = users > 0
    variances = np.full((items, groups), np.inf)
    variances[live] = noise_stds(budgets[live], noise) ** 2
    v = cell_variance(last, users.sum(axis=1))
    a, error = combining_weights(variances, users, v)
    # the live groups lead each item's row (decreasing budget); item i uses the first k[i]
    k = live.sum(axis=1)
    lead = np.arange(groups)[None, :] < k[:, None]
    # each item draws from its run's generator, group by group, in item order
    live_items = [(b, i, n) for i, (b, n) in enumerate(zip(who.tolist(), k.tolist(), strict=True))
                  if n]
    if noise == "laplace":
        parts = [rngs[b].laplace(0.0, 1.0, (n, d)) for b, _i, n in live_items]
    else:
        parts = [np.stack([draw_noise(float(e), d, rngs[b], noise)
                           for e in budgets[i, :n].tolist()]) for b, i, n in live_items]
    drawn = np.zeros((items, groups, d))
    if parts:
        drawn[lead] = np.concatenate(parts)
    if noise == "laplace":
        drawn[lead] /= budgets[lead][:, None]
    estimates = np.zeros((items, d))
    for size in np.unique(k[k > 0]).tolist():
        # items of one count of live groups: each its own (1, size) @ (size, d) product
        sel = np.flatnonzero(k == size)
        weights = np.ascontiguousarray(a[sel, None, :size])
        values = np.ascontiguousarray(grouped[sel, :size] + drawn[sel, :size])
        estimates[sel] = np.matmul(weights, values)[:, 0]
    return estimates, np.sqrt(error), budgets[:, 0]


def level_weights(eps: np.ndarray, sizes: np.ndarray, last: np.ndarray,
                  noise: str = "laplace") -> tuple[np.ndarray, float]:
    """One run's weight per level (levels,) and the model's per-cell standard deviation, as
    :func:`levels_runs` releases them (for ``pwevent plan`` and the tests)."""
    e = np.asarray(eps, dtype=np.float64)[None]
    n = np.asarray(sizes, dtype=np.int64)[None]
    group, budgets, users = group_levels(e, n, e > 0)
    variances = np.full(budgets.shape, np.inf)
    variances[users > 0] = noise_stds(budgets[users > 0], noise) ** 2
    a, error = combining_weights(variances, users,
                                 cell_variance(np.asarray(last, dtype=np.float64)[None],
                                               users.sum(axis=1)))
    out = np.where(group[0] >= 0, a[0, np.maximum(group[0], 0)], 0.0)
    return out, math.sqrt(float(error[0]))
