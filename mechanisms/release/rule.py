"""The global release rule: OBS, the Sampling Mechanism, the publish/approximate test, noise.

It works on aggregates only: a (levels, d) matrix of report counts and each level's budgets,
which is what the partitions of the job send (docs/design.md, ledger and release rule).
:func:`release_rule` builds the rule a mechanism of :mod:`mechanisms.registry` runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from mechanisms.kernels import compiled
from mechanisms.ledgers.plan import SlotPlan
from mechanisms.noise.calibrated import DISCRETE_MIN_EPS, draw_noise, noise_std, noise_stds
from mechanisms.registry import spec
from mechanisms.release.ipw import ipw_runs
from mechanisms.release.levels import levels_runs
from mechanisms.release.obs import batch_optimal_budget
from mechanisms.release.run_draws import draw_runs
from mechanisms.release.sampling import inclusion_probabilities

TESTS = ("obs", "scale")
ESTIMATORS = ("paper", "ipw", "levels")


@dataclass(frozen=True)
class Decision:
    """The rule's outcome for one slot."""

    published: bool
    histogram: np.ndarray
    threshold: float
    dissimilarity: float | None
    #: the per-cell noise standard deviation where the estimator sets it itself
    #: (``estimator="ipw"``); None: that of the threshold (:meth:`ReleaseRule.noise_std`)
    std: float | None = None


@dataclass(frozen=True)
class RunsDecision:
    """The rule's outcome for one slot of each run of a batch.

    ``histogram`` is (runs, d): a run that does not publish repeats its last publication.
    ``threshold`` is the publication threshold (0 for a nullified run), ``dissimilarity`` the
    noisy dissimilarity (nan where the run did not test it).
    """

    published: np.ndarray
    histogram: np.ndarray
    threshold: np.ndarray
    dissimilarity: np.ndarray
    #: per run, the per-cell noise standard deviation where the rule's estimator sets it
    #: itself (``estimator="ipw"``); None: that of the threshold (:meth:`ReleaseRule.noise_std`)
    std: np.ndarray | None = None

    def run(self, b: int) -> Decision:
        """Run ``b``'s decision."""
        dis = float(self.dissimilarity[b])
        own = None if self.std is None or np.isnan(self.std[b]) else float(self.std[b])
        return Decision(bool(self.published[b]), self.histogram[b], float(self.threshold[b]),
                        None if np.isnan(dis) else dis, own)


@dataclass(frozen=True)
class Sampling:
    """A level set's sampling under OBS, per run: the threshold, each level's inclusion
    probability, and the levels kept whole and those sampled."""

    threshold: np.ndarray
    p: np.ndarray
    full: np.ndarray
    partial: np.ndarray

    @classmethod
    def of(cls, threshold: np.ndarray, p: np.ndarray) -> Sampling:
        """The sampling with inclusion probabilities ``p`` (runs, levels)."""
        full = p >= 1.0
        partial = (p > 0.0) & ~full
        return cls(threshold, p, full, partial)

    def kept_whole(self, counts: np.ndarray) -> np.ndarray:
        """Each run's counts (runs, levels, d) summed over its levels kept whole, (runs, d)
        (integer sums: exact in any order)."""
        return np.matmul(self._whole, counts.astype(np.int64, copy=False))[:, 0]

    @cached_property
    def _whole(self) -> np.ndarray:
        return self.full.astype(np.int64)[:, None, :]

    @cached_property
    def partial_rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The partly sampled levels, run after run: their flat (run, level) indices, their
        probabilities, and where each run's levels begin and end in that order."""
        flat = np.flatnonzero(self.partial)
        per_run = self.partial.sum(axis=1)
        end = np.cumsum(per_run)
        return flat, self.p.ravel()[flat], end - per_run, end


class ObsCache:
    """OBS results of a batch memoised by (budgets, sizes): ledgers revisit the same budgets."""

    def __init__(self, noise: str, limit: int = 4096) -> None:
        self.noise, self.limit = noise, limit
        self._memo: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        self._sampling: dict[bytes, Sampling] = {}

    @staticmethod
    def _key(budgets: np.ndarray, sizes: np.ndarray) -> bytes:
        return f"{budgets.shape}".encode() + budgets.tobytes() + b"|" + sizes.tobytes()

    def __call__(self, budgets: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``batch_optimal_budget(budgets, sizes)``: (threshold, error) per run."""
        if compiled.available(budgets.shape[0]):  # compiled: cheaper than the memo's key
            return batch_optimal_budget(budgets, sizes, self.noise)
        key = self._key(budgets, sizes)
        hit = self._memo.get(key)
        if hit is None:
            if len(self._memo) >= self.limit:
                self._memo.clear()
            hit = self._memo[key] = batch_optimal_budget(budgets, sizes, self.noise)
        return hit

    def sampling(self, budgets: np.ndarray, sizes: np.ndarray,
                 threshold: np.ndarray | None = None) -> Sampling:
        """The Sampling Mechanism of the budgets under OBS's threshold, memoised;
        ``threshold`` is that threshold where the caller has it already."""
        key = self._key(budgets, sizes)
        hit = self._sampling.get(key)
        if hit is None:
            if len(self._sampling) >= self.limit:
                self._sampling.clear()
            theta = self(budgets, sizes)[0] if threshold is None else threshold
            hit = self._sampling[key] = Sampling.of(theta, inclusion_probabilities(budgets, theta))
        return hit


def _draw(
    rngs: Sequence[np.random.Generator],
    who: np.ndarray,
    rows_of: np.ndarray,
    sampling: Sampling,
    counts: np.ndarray,
    eps: np.ndarray,
    count: int,
    kind: str,
) -> tuple[np.ndarray, np.ndarray]:
    """Each run ``who[i]`` thins its partly sampled levels (row ``rows_of[i]`` of ``sampling``
    and ``counts``) and draws ``count`` noise values at ``eps[i]``
    (:func:`~mechanisms.release.run_draws.draw_runs`)."""
    flat, probs, begin, end = sampling.partial_rows
    rows = counts.reshape(-1, counts.shape[-1])[flat]
    return draw_runs(rngs, who, rows, probs, begin[rows_of], end[rows_of], eps, count, kind)


class ReleaseRule:
    """PWSM's decision (Algorithm 2) with either OBS's error or the noise scale as threshold.

    ``test="obs"`` publishes when dis > sqrt(err_opt) (PBD, PBA); ``test="scale"`` publishes
    when dis > 1/eps2, Kellaris et al.'s test for the homogeneous BD and BA.

    ``sensitivity`` is the L1 sensitivity of a count under the neighbouring relation: 1 when
    neighbouring streams differ by one report added or removed, 2 when by one report's value
    changed. The rule then runs on budgets divided by it (OBS, sampling, noise and the tests),
    which is the same as scaling every noise by it; the ledgers charge the full budgets.

    With integer noise, a threshold below the exact sampler's smallest budget
    (:data:`~mechanisms.noise.calibrated.DISCRETE_MIN_EPS`) counts as no budget: a dissimilarity
    threshold below it is not tested (as a zero one), a publication threshold below it does not
    publish.
    Ledgers can plan such budgets (a publication budget halved at every publication of a
    window, a dynamic budget's remainder); spending less than planned is always private.

    The rule decides a batch of independent runs at once (:meth:`decide_runs`): every per-level
    and per-cell array carries a leading run axis, everything deterministic is computed for the
    whole batch, and each run draws from its own generator exactly the values it draws alone,
    so a run's release does not depend on the batch it is in. :meth:`decide` is a batch of one.

    ``estimator="ipw"`` releases an unbiased histogram
    (:func:`~mechanisms.release.ipw.ipw_release`) in place of the paper's thinned one; it spends
    what the paper's does.
    """

    def __init__(self, d: int, noise: str = "laplace", test: str = "obs",
                 sensitivity: int = 1, estimator: str = "paper") -> None:
        if estimator not in ESTIMATORS:
            raise ValueError(f"estimator must be one of {ESTIMATORS}, got {estimator!r}")
        self.estimator = estimator
        if d < 1:
            raise ValueError(f"domain size d must be >= 1, got {d}")
        if test not in TESTS:
            raise ValueError(f"test must be one of {TESTS}, got {test!r}")
        if sensitivity not in (1, 2):
            raise ValueError(f"sensitivity must be 1 or 2, got {sensitivity!r}")
        draw_noise(1.0, 0, np.random.default_rng(0), noise)  # validates the noise kind
        self.d, self.noise, self.test, self.sensitivity = d, noise, test, sensitivity
        self.floor = DISCRETE_MIN_EPS if noise == "discrete" else 0.0
        self.obs = ObsCache(noise)

    def usable(self, threshold: np.ndarray) -> np.ndarray:
        """Whether each (scaled) threshold is a budget the rule draws noise for: positive, and
        with integer noise at least the exact sampler's smallest budget."""
        return (threshold > 0) & (threshold >= self.floor)

    def noise_std(self, threshold: float) -> np.ndarray:
        """Per cell, the standard deviation of the noise :meth:`decide` adds when it publishes
        with ``threshold`` (its :attr:`Decision.threshold`, budgets already divided by the
        sensitivity). The levels' counts are sampled and summed first and one noise value is
        drawn per cell, so a cell's variance is that of one draw, whatever the levels."""
        return np.full(self.d, noise_std(float(threshold), self.noise))

    def noise_stds(self, thresholds: np.ndarray) -> np.ndarray:
        """:meth:`noise_std` of each of ``thresholds``, one value each (every cell's)."""
        return noise_stds(thresholds, self.noise)

    def scaled(self, eps: np.ndarray) -> np.ndarray:
        """Budgets divided by the sensitivity, as the rule runs on them."""
        return eps if self.sensitivity == 1 else eps / self.sensitivity

    def sampling(self, eps: np.ndarray, sizes: np.ndarray) -> Sampling:
        """The Sampling Mechanism of (runs, levels) budgets ``eps`` (already scaled) under
        OBS's threshold (memoised: the ledgers revisit the same budgets)."""
        return self.obs.sampling(eps, sizes)

    def decide(
        self,
        plan: SlotPlan,
        counts: np.ndarray,
        sizes: np.ndarray,
        last: np.ndarray,
        rng: np.random.Generator,
    ) -> Decision:
        """Run the rule on a (levels, d) count matrix; ``last`` is the last publication."""
        if plan.nullified:
            return Decision(False, last, 0.0, None)
        sizes = np.asarray(sizes)
        return self.decide_runs(
            plan.eps1[None], plan.eps2[None], np.zeros(1, dtype=bool), plan.adaptive,
            np.asarray(counts)[None], sizes[None], np.asarray(last)[None], [rng],
        ).run(0)

    def decide_runs(
        self,
        eps1: np.ndarray,
        eps2: np.ndarray,
        nullified: np.ndarray,
        adaptive: bool,
        counts: np.ndarray,
        sizes: np.ndarray,
        last: np.ndarray,
        rngs: Sequence[np.random.Generator],
        first: Sampling | None = None,
    ) -> RunsDecision:
        """Decide and release one slot of every run: budgets and sizes are (runs, levels),
        counts (runs, levels, d), ``last`` each run's last publication (runs, d). A padded
        level has budget 0 and no users. ``first`` is :meth:`sampling` of the scaled ``eps1``
        when the caller keeps it."""
        d, noise, runs = self.d, self.noise, len(rngs)
        eps2 = self.scaled(eps2)
        live = ~nullified
        if self.estimator == "levels":
            return self._decide_levels(eps2, nullified, counts, sizes, last, rngs)
        theta2, err2 = self.obs(eps2, sizes)
        if adaptive:
            # the dissimilarity (Algorithm 3): each run draws its sample and its noise
            first = first if first is not None else self.sampling(self.scaled(eps1), sizes)
            theta1 = first.threshold
            sampled = first.kept_whole(counts)
            testing = self.usable(theta1)
            drawing = np.flatnonzero(live & testing)
            noise1 = np.zeros(runs)
            if drawing.size:
                # Laplace noise of scale 1/(d theta1) on the mean; integer noise on the sum
                eps1 = theta1[drawing] * d if noise == "laplace" else theta1[drawing]
                thinned, drawn = _draw(rngs, drawing, drawing, first, counts, eps1, 1, noise)
                sampled[drawing] += thinned
                noise1[drawing] = drawn[:, 0]
            # with integer noise the sum of absolute differences (sensitivity 1) is perturbed
            # and then divided by d, so no floating-point Laplace is drawn
            total = np.abs(sampled - last).sum(axis=1).astype(np.float64)
            tested = total / d + noise1 if noise == "laplace" else (total + noise1) / d
            tested[~testing] = np.inf
            dis = tested.copy()
            dis[nullified] = np.nan
            # (a run without a usable threshold does not publish, whatever its bar)
            bar = np.sqrt(err2) if self.test == "obs" else 1.0 / np.where(theta2 > 0, theta2, 1.0)
            publish = live & self.usable(theta2) & (tested > bar)
        else:
            dis = np.full(runs, np.nan)
            publish = live & self.usable(theta2)
        histogram = np.array(last, copy=True)
        writing = np.flatnonzero(publish)
        std = None
        if writing.size and self.estimator == "ipw":
            second = self.obs.sampling(eps2[writing], sizes[writing], theta2[writing])
            std = np.full(runs, np.nan)
            estimate, std[writing] = ipw_runs(rngs, writing, counts[writing], second.p,
                                              theta2[writing], noise)
            histogram[writing] = estimate if noise == "laplace" else np.rint(estimate)
        elif writing.size:
            # OBS of a row depends on that row alone: the publishing runs' sampling is that of
            # their rows (memoised, as the ledgers revisit the same budgets)
            second = self.obs.sampling(eps2[writing], sizes[writing], theta2[writing])
            sub = counts[writing]
            sampled2 = second.kept_whole(sub)
            thinned, drawn = _draw(rngs, writing, np.arange(writing.size), second, sub,
                                   theta2[writing], d, noise)
            histogram[writing] = sampled2 + thinned + drawn.astype(histogram.dtype)
        threshold = theta2.copy()
        threshold[nullified] = 0.0
        return RunsDecision(publish, histogram, threshold, dis, std)

    def _decide_levels(self, eps2: np.ndarray, nullified: np.ndarray, counts: np.ndarray,
                       sizes: np.ndarray, last: np.ndarray,
                       rngs: Sequence[np.random.Generator]) -> RunsDecision:
        """The ``"levels"`` estimator (:mod:`mechanisms.release.levels`), which publishes at
        every slot not nullified where a level with users has a usable budget. The decision's
        threshold is the largest budget a group published with: a release combining groups of
        different budgets is marked thinned (no bars: its error is the model's, not the
        noise's alone)."""
        runs = len(rngs)
        usable = self.usable(eps2)
        publish = ~nullified & (usable & (sizes > 0)).any(axis=1)
        histogram = np.array(last, copy=True)
        threshold = np.zeros(runs)
        std = np.full(runs, np.nan)
        writing = np.flatnonzero(publish)
        if writing.size:
            estimate, std[writing], threshold[writing] = levels_runs(
                rngs, writing, counts[writing], eps2[writing], sizes[writing],
                usable[writing], last[writing], self.noise)
            histogram[writing] = estimate if self.noise == "laplace" else np.rint(estimate)
        return RunsDecision(publish, histogram, threshold, np.full(runs, np.nan), std)


def release_rule(name: str, d: int, noise: str = "laplace", sensitivity: int = 1,
                 rule: type[ReleaseRule] = ReleaseRule) -> ReleaseRule:
    """The release rule the mechanism ``name`` runs: its test and estimator as
    :mod:`mechanisms.registry` names them (``rule``: the class, a variant of the rule's);
    ``ValueError`` for a mechanism without one.

    >>> rule = release_rule("ba", 4, "discrete")
    >>> rule.test, rule.estimator, rule.d
    ('scale', 'paper', 4)
    """
    s = spec(name)
    if s.test is None or s.estimator is None:
        raise ValueError(f"{s.name} does not run the release rule")
    return rule(d, noise, s.test, sensitivity, s.estimator)
