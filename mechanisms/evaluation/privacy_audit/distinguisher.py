"""The distinguishing test: candidate events chosen on one half of the trials, their
probabilities bounded on the other (:func:`distinguish`)."""


from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from mechanisms.evaluation.privacy_audit.bounds import clopper_pearson, wilson_bounds


@dataclass(frozen=True)
class Event:
    """A set of outputs: ``statistic op threshold`` and/or ``discrete part == category``;
    ``numerator`` is the input (0 or 1) whose probability is on top of the ratio."""

    statistic: str | None
    above: bool
    threshold: float
    category: int | None
    numerator: int

    def mask(self, stats: Mapping[str, np.ndarray], category: np.ndarray) -> np.ndarray:
        """Which outputs lie in the event."""
        out = np.ones(category.shape, dtype=bool)
        if self.category is not None:
            out &= category == self.category
        if self.statistic is not None:
            s = stats[self.statistic]
            out &= (s > self.threshold) if self.above else (s <= self.threshold)
        return out

    def describe(self, labels: Sequence[str] = ()) -> str:
        """A short text of the event."""
        parts = []
        if self.statistic is not None:
            parts.append(f"{self.statistic} {'>' if self.above else '<='} {self.threshold:.4g}")
        if self.category is not None:
            label = labels[self.category] if self.category < len(labels) else f"#{self.category}"
            parts.append(f"[{label}]")
        ratio = "P0/P1" if self.numerator == 0 else "P1/P0"
        return f"{' & '.join(parts) or 'any output'} ({ratio})"


@dataclass(frozen=True)
class Distinguished:
    """The distinguisher's outcome: the lower bound, the event that gave it, the bounds of its
    numerator's and denominator's probability and their counts on the evaluation half."""

    epsilon_lb: float
    event: Event | None
    p_lower: float
    p_upper: float
    hits: tuple[int, int]
    halves: tuple[int, int]
    description: str = ""


#: quantiles of the pooled statistic tried as thresholds (fine in the tails, where the ratios
#: of a noisy count are largest)
_QUANTILES = np.unique(np.concatenate([
    [1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2],
    np.linspace(0.1, 0.9, 17),
    1.0 - np.array([1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2]),
]))


def _threshold_counts(values0: np.ndarray, values1: np.ndarray) -> tuple[np.ndarray, ...]:
    """Candidate thresholds of a statistic and, per threshold, how many values of each input
    lie above it."""
    pooled = np.concatenate([values0, values1])
    if pooled.size == 0:
        empty = np.zeros(0)
        return empty, empty, empty
    taus = np.unique(np.quantile(pooled, _QUANTILES, method="inverted_cdf"))
    s0, s1 = np.sort(values0), np.sort(values1)
    above0 = s0.size - np.searchsorted(s0, taus, side="right")
    above1 = s1.size - np.searchsorted(s1, taus, side="right")
    return taus, above0.astype(np.float64), above1.astype(np.float64)


def _candidates(stats0: Mapping[str, np.ndarray], cat0: np.ndarray,
                stats1: Mapping[str, np.ndarray], cat1: np.ndarray,
                combined: int) -> tuple[list[tuple], np.ndarray, np.ndarray]:
    """Every candidate event (statistic, above, threshold, category) with its counts in each
    input; ``combined`` most frequent categories are crossed with the statistics."""
    events: list[tuple] = []
    k0: list[np.ndarray] = []
    k1: list[np.ndarray] = []

    def add(name: str | None, category: int | None, sel0: np.ndarray | None,
            sel1: np.ndarray | None) -> None:
        v0 = stats0[name] if sel0 is None else stats0[name][sel0]
        v1 = stats1[name] if sel1 is None else stats1[name][sel1]
        taus, a0, a1 = _threshold_counts(v0, v1)
        for above, c0, c1 in ((True, a0, a1), (False, v0.size - a0, v1.size - a1)):
            events.extend((name, above, float(t), category) for t in taus.tolist())
            k0.append(c0)
            k1.append(c1)

    for name in stats0:
        add(name, None, None, None)
    cats, counts = np.unique(np.concatenate([cat0, cat1]), return_counts=True)
    for c in cats.tolist():
        events.append((None, True, 0.0, int(c)))
        k0.append(np.array([float((cat0 == c).sum())]))
        k1.append(np.array([float((cat1 == c).sum())]))
    if cats.size > 1:
        for c in cats[np.argsort(-counts, kind="stable")][:combined].tolist():
            sel0, sel1 = cat0 == c, cat1 == c
            for name in stats0:
                add(name, int(c), sel0, sel1)
    return events, np.concatenate(k0), np.concatenate(k1)


def distinguish(
    stats0: Mapping[str, np.ndarray],
    category0: np.ndarray,
    stats1: Mapping[str, np.ndarray],
    category1: np.ndarray,
    *,
    alpha: float = 0.05,
    events: int = 4,
    combined: int = 4,
    labels: Sequence[str] = (),
) -> Distinguished:
    """Lower-bound the privacy loss between two inputs from their trials' outputs (module doc).

    ``stats0[name]`` is a scalar statistic of each trial of input 0, ``category0`` the label of
    each trial's discrete part (shared labels across both inputs; all zeros when there is
    none). The first half of each input's trials selects ``events`` events, the second half
    bounds them; the result holds with probability at least ``1 - alpha``.
    """
    cat0, cat1 = np.asarray(category0), np.asarray(category1)
    n0, n1 = cat0.size, cat1.size
    if n0 < 4 or n1 < 4:
        raise ValueError("each input needs at least 4 trials")
    if set(stats0) != set(stats1):
        raise ValueError("both inputs need the same statistics")
    h0, h1 = n0 // 2, n1 // 2
    first0 = {k: np.asarray(v)[:h0] for k, v in stats0.items()}
    first1 = {k: np.asarray(v)[:h1] for k, v in stats1.items()}
    level = alpha / (2.0 * events)
    z = NormalDist().inv_cdf(1.0 - level)
    cands, k0, k1 = _candidates(first0, cat0[:h0], first1, cat1[:h1], combined)
    lo0, up0 = wilson_bounds(k0, h0, z)
    lo1, up1 = wilson_bounds(k1, h1, z)
    with np.errstate(divide="ignore"):
        score = np.concatenate([np.log(lo0) - np.log(up1), np.log(lo1) - np.log(up0)])
    order = np.argsort(-score, kind="stable")[:events]
    chosen = [Event(*cands[i % len(cands)], numerator=int(i >= len(cands)))
              for i in order.tolist() if np.isfinite(score[i])]
    second = ({k: np.asarray(v)[h0:] for k, v in stats0.items()}, cat0[h0:],
              {k: np.asarray(v)[h1:] for k, v in stats1.items()}, cat1[h1:])
    best = Distinguished(0.0, None, 0.0, 1.0, (0, 0), (n0 - h0, n1 - h1), "no event")
    for event in chosen:
        hit0 = int(event.mask(second[0], second[1]).sum())
        hit1 = int(event.mask(second[2], second[3]).sum())
        num, den = (hit0, n0 - h0), (hit1, n1 - h1)
        if event.numerator == 1:
            num, den = den, num
        (k_num, n_num), (k_den, n_den) = num, den
        lower = clopper_pearson(k_num, n_num, level)[0]
        upper = clopper_pearson(k_den, n_den, level)[1]
        eps = math.log(lower / upper) if lower > 0.0 else 0.0
        if eps > best.epsilon_lb or best.event is None:
            best = Distinguished(max(eps, 0.0), event, lower, upper, (k_num, k_den),
                                 (n_num, n_den), event.describe(labels))
    return best
