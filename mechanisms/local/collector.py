"""The collector's estimate of one slot from its accepted local reports (docs/ldp-reports.md),
pure and vectorised over the reports.

Every report is read with the probabilities its words realise, not the nominal ones. Over ``n``
reporters of one budget, let ``p`` be the probability that a user's own cell is reported (OUE:
its bit is 1; GRR: the cell is kept) and ``q`` that another given cell is. With ``f_j`` the
true frequency of cell j among the reporters, the observed count ``o_j`` (OUE: the reports whose
bit j is 1; GRR: the reports of cell j) is a sum of independent Bernoulli draws::

    E[o_j]   = n (f_j p + (1 - f_j) q)
    Var[o_j] = n (f_j p (1 - p) + (1 - f_j) q (1 - q))

so the debiased frequency ``F_j = (o_j/n - q)/(p - q)`` is unbiased, with variance::

    V_j = (q (1 - q) + f_j (p - q)(1 - p - q)) / (n (p - q)^2)

- OUE: ``p = 1/2`` (threshold 2^31), ``q = T/2^32`` with ``T = oue_threshold(eps)``, so
  ``V_j = q (1 - q)/(n (1/2 - q)^2) + f_j/n``. The first term at the nominal
  ``q = 1/(e^eps + 1)`` is the evaluation's ``4 e^eps/(n (e^eps - 1)^2)``.
- GRR: ``p = T/2^32`` with ``T = grr_keep_threshold(eps, d)``, ``q = (1 - p)/(d - 1)`` (the
  other cell is drawn exactly uniformly), so ``V_j = q (1 - q)/(n (p - q)^2) +
  f_j (1 - p - q)/(n (p - q))``; the first term at the nominal probabilities is the
  evaluation's ``(e^eps + d - 2)/(n (e^eps - 1)^2)``. Over one cell every report is kept
  (``p = 1``, ``q = 0``): ``F = 1`` exactly, ``V = 0``.

The error bars plug ``F_j`` clipped to [0, 1] in for ``f_j``. A budget so small that both
thresholds round to the same word (``p <= q``) carries no information: its estimate is 0 with
infinite variance.

Budget groups (PLBU) are combined as :meth:`mechanisms.baselines.ldp.BatchedPlbu.estimate`
combines them: weights ``1/N_g`` with ``N_g = q_g (1 - q_g)/(n_g (p_g - q_g)^2)`` (the variance
without its ``f`` term, as the evaluation weighs), ``F = sum_g F_g/N_g / sum_g 1/N_g``; the
groups hold different users, so ``Var F = sum_g V_g/N_g^2 / (sum_g 1/N_g)^2``. Exact groups
(``N_g = 0``) are combined alone, weighted by their reporters. The combination estimates
``sum_g f_g/N_g / sum_g 1/N_g``, the frequency over all reporters when the groups share one
distribution (the evaluation's premise). Counts are the frequency times the slot's reporters.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from mechanisms.local.oracles import HALF_WORD, WORD, grr_keep_threshold, oue_threshold


def oue_probabilities(eps: float) -> tuple[float, float]:
    """OUE's effective (p, q) at budget ``eps``: (2^31/2^32, oue_threshold(eps)/2^32)."""
    return HALF_WORD / WORD, oue_threshold(eps) / WORD


def grr_probabilities(eps: float, d: int) -> tuple[float, float]:
    """GRR's effective (p, q) at budget ``eps`` over ``d`` cells: p = grr_keep_threshold/2^32,
    q = (1 - p)/(d - 1); (1, 0) over one cell, where nothing is drawn."""
    if d == 1:
        return 1.0, 0.0
    p = grr_keep_threshold(eps, d) / WORD
    return p, (1.0 - p) / (d - 1)


def debias(observed: np.ndarray, n: int, p: float, q: float, oracle: str) -> np.ndarray:
    """The unbiased frequencies ``(o/n - q)/(p - q)`` from the observed counts of ``n`` reports
    (written as the evaluation writes each oracle's); zeros when n = 0 or p <= q."""
    o = np.asarray(observed, dtype=np.float64)
    if n <= 0 or not p > q:
        return np.zeros(o.shape)
    if oracle == "oue":
        return (o - n * q) / (n * (p - q))
    return (o / n - q) / (p - q)


def noise_variance(n: int, p: float, q: float) -> float:
    """The variance of a frequency whose true value is 0: q (1 - q)/(n (p - q)^2) (inf when n = 0
    or p <= q). The groups' weights are its inverse."""
    if n <= 0 or not p > q:
        return float("inf")
    return q * (1.0 - q) / (n * (p - q) ** 2)


def frequency_variance(frequency: np.ndarray, n: int, p: float, q: float) -> np.ndarray:
    """Per cell, the variance of the debiased frequency, f plugged in as ``frequency`` clipped to
    [0, 1]: (q (1 - q) + f (p - q)(1 - p - q))/(n (p - q)^2) (inf when n = 0 or p <= q)."""
    f = np.clip(np.asarray(frequency, dtype=np.float64), 0.0, 1.0)
    if n <= 0 or not p > q:
        return np.full(f.shape, np.inf)
    return (q * (1.0 - q) + f * ((p - q) * (1.0 - p - q))) / (n * (p - q) ** 2)


@dataclass(frozen=True)
class GroupEstimate:
    """One budget group's estimate: its oracle, budget, reporters, effective probabilities,
    frequencies, their per-cell variance and the variance without the ``f`` term (``noise``)."""

    oracle: str
    eps: float
    reporters: int
    p: float
    q: float
    frequency: np.ndarray
    variance: np.ndarray
    noise: float


def estimate_group(observed: np.ndarray, n: int, p: float, q: float, *, oracle: str,
                   eps: float) -> GroupEstimate:
    """A group's estimate from its observed counts per cell, ``n`` reports and (p, q)."""
    frequency = debias(observed, n, p, q, oracle)
    return GroupEstimate(oracle, float(eps), int(n), p, q, frequency,
                         frequency_variance(frequency, n, p, q), noise_variance(n, p, q))


@dataclass(frozen=True)
class SlotEstimate:
    """One slot's estimate: reporters, frequency and its variance per cell, the groups."""

    reporters: int
    frequency: np.ndarray
    variance: np.ndarray
    groups: tuple[GroupEstimate, ...]

    @property
    def counts(self) -> np.ndarray:
        """The estimated counts: frequency times reporters."""
        return self.frequency * self.reporters

    @property
    def count_std(self) -> np.ndarray:
        """The counts' standard deviation per cell: reporters times sqrt(variance) (inf without
        reporters)."""
        if self.reporters == 0:
            return np.full(self.variance.shape, np.inf)
        return self.reporters * np.sqrt(self.variance)


def combine_groups(groups: tuple[GroupEstimate, ...], d: int) -> SlotEstimate:
    """The groups' estimates combined with inverse-variance weights (the module's docstring);
    one group is taken as it is; no reports estimate zeros with infinite variance."""
    reporters = sum(g.reporters for g in groups)
    live = tuple(g for g in groups if g.reporters > 0)
    if len(live) == 1:
        g = live[0]
        return SlotEstimate(reporters, g.frequency, g.variance, groups)
    noise = np.array([g.noise for g in live])
    exact = noise == 0
    if exact.any():
        weights = np.where(exact, [g.reporters for g in live], 0.0).astype(np.float64)
    else:
        weights = 1.0 / noise  # inf noise: weight 0
    total = float(weights.sum())
    if not live or total == 0:
        return SlotEstimate(reporters, np.zeros(d), np.full(d, np.inf), groups)
    freq = np.stack([g.frequency for g in live])
    var = np.stack([g.variance for g in live])
    used = weights > 0  # an uninformative group's inf variance has weight 0
    frequency = (weights @ freq) / total
    variance = (np.square(weights[used]) @ var[used]) / total**2
    return SlotEstimate(reporters, frequency, variance, groups)


def oue_estimate(bits: np.ndarray, eps: float) -> GroupEstimate:
    """One budget's OUE estimate from its reports' bits, an (n, d) bool array."""
    b = np.asarray(bits, dtype=bool)
    p, q = oue_probabilities(eps)
    return estimate_group(b.sum(axis=0), b.shape[0], p, q, oracle="oue", eps=eps)


def grr_estimate(cells: np.ndarray, eps: float, d: int) -> GroupEstimate:
    """One budget's GRR estimate from its reported cells, an (n,) int array in [0, d)."""
    c = np.asarray(cells, dtype=np.int64)
    p, q = grr_probabilities(eps, d)
    return estimate_group(np.bincount(c, minlength=d), c.size, p, q, oracle="grr", eps=eps)


#: One budget group's counts: its budget, its reports and the observed count per cell.
GroupCounts = tuple[float, int, np.ndarray]


def estimate_counts(d: int, *, oue: Iterable[GroupCounts] = (),
                    grr: Iterable[GroupCounts] = ()) -> SlotEstimate:
    """One slot's estimate from its reports counted per (oracle, budget) group: ``oue`` and
    ``grr`` hold (budget, reports, observed count per cell), each in increasing budget (OUE's
    observed count of cell j: the reports whose bit j is 1; GRR's: the reports of cell j). Each
    group is debiased with its effective probabilities, the groups combined
    (:func:`combine_groups`), OUE's first."""
    groups: list[GroupEstimate] = []
    for e, n, o in oue:
        p, q = oue_probabilities(e)
        groups.append(estimate_group(o, n, p, q, oracle="oue", eps=e))
    for e, n, o in grr:
        p, q = grr_probabilities(e, d)
        groups.append(estimate_group(o, n, p, q, oracle="grr", eps=e))
    return combine_groups(tuple(groups), d)


def estimate_slot(d: int, *, oue_eps: np.ndarray | None = None, oue_bits: np.ndarray | None = None,
                  grr_eps: np.ndarray | None = None,
                  grr_cells: np.ndarray | None = None) -> SlotEstimate:
    """One slot's estimate from its accepted reports: OUE ones as budgets (n1,) and bits
    (n1, d), GRR ones as budgets (n2,) and cells (n2,). Reports are grouped by (oracle, budget)
    and counted, then estimated by :func:`estimate_counts`."""
    oue: list[GroupCounts] = []
    grr: list[GroupCounts] = []
    if oue_eps is not None and np.size(oue_eps):
        bits = np.asarray(oue_bits, dtype=bool).reshape(-1, d)
        budgets, inverse = np.unique(np.asarray(oue_eps, dtype=np.float64), return_inverse=True)
        sizes = np.bincount(inverse, minlength=budgets.size)
        flat = (inverse.reshape(-1, 1) * d + np.arange(d))[bits]
        ones = np.bincount(flat, minlength=budgets.size * d).reshape(budgets.size, d)
        oue = list(zip(budgets.tolist(), sizes.tolist(), ones, strict=True))
    if grr_eps is not None and np.size(grr_eps):
        cells = np.asarray(grr_cells, dtype=np.int64).reshape(-1)
        budgets, inverse = np.unique(np.asarray(grr_eps, dtype=np.float64), return_inverse=True)
        sizes = np.bincount(inverse, minlength=budgets.size)
        counts = np.bincount(inverse.reshape(-1) * d + cells, minlength=budgets.size * d)
        grr = list(zip(budgets.tolist(), sizes.tolist(), counts.reshape(-1, d), strict=True))
    return estimate_counts(d, oue=oue, grr=grr)
