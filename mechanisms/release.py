"""The global release rule: OBS, the Sampling Mechanism, the publish/approximate test, noise.

It works on aggregates only: a (levels, d) matrix of report counts and each level's budgets,
which is what the partitions of the job send (docs/design.md, ledger and release rule).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mechanisms.ledgers.plan import SlotPlan
from mechanisms.noise import draw_noise, noise_std
from mechanisms.obs import optimal_budget
from mechanisms.sampling import sample_counts

TESTS = ("obs", "scale")


@dataclass(frozen=True)
class Decision:
    """The rule's outcome for one slot."""

    published: bool
    histogram: np.ndarray
    threshold: float
    dissimilarity: float | None


class ObsCache:
    """OBS results memoised by (budgets, sizes): ledgers revisit the same budget vectors."""

    def __init__(self, noise: str, limit: int = 4096) -> None:
        self.noise, self.limit = noise, limit
        self._memo: dict[bytes, tuple[float, float]] = {}

    def __call__(self, budgets: np.ndarray, sizes: np.ndarray) -> tuple[float, float]:
        """``optimal_budget(budgets, sizes)``."""
        key = budgets.tobytes() + b"|" + sizes.tobytes()
        hit = self._memo.get(key)
        if hit is None:
            if len(self._memo) >= self.limit:
                self._memo.clear()
            hit = self._memo[key] = optimal_budget(budgets, sizes, self.noise)
        return hit


def dissimilarity(
    counts: np.ndarray,
    level_eps1: np.ndarray,
    sizes: np.ndarray,
    last: np.ndarray,
    rng: np.random.Generator,
    noise: str,
    obs: ObsCache | None = None,
) -> tuple[float, float]:
    """Algorithm 3: mean |sampled count - last publication| plus noise; returns (dis, theta1).

    With integer noise the sum of absolute differences (sensitivity 1) is perturbed by the
    two-sided geometric and then divided by d, so no floating-point Laplace is drawn.
    """
    d = counts.shape[1]
    theta, _ = (obs or ObsCache(noise))(level_eps1, sizes)
    if theta <= 0:
        return float("inf"), 0.0
    sampled = sample_counts(counts, level_eps1, theta, rng)
    total = float(np.abs(sampled - last).sum())
    if noise == "laplace":
        return total / d + float(rng.laplace(0.0, 1.0 / (d * theta))), theta
    return (total + float(draw_noise(theta, 1, rng, "discrete")[0])) / d, theta


class ReleaseRule:
    """PWSM's decision (Algorithm 2) with either OBS's error or the noise scale as threshold.

    ``test="obs"`` publishes when dis > sqrt(err_opt) (PBD, PBA); ``test="scale"`` publishes
    when dis > 1/eps2, Kellaris et al.'s test for the homogeneous BD and BA.

    ``sensitivity`` is the L1 sensitivity of a count under the neighbouring relation: 1 when
    neighbouring streams differ by one report added or removed, 2 when by one report's value
    changed. The rule then runs on budgets divided by it (OBS, sampling, noise and the tests),
    which is the same as scaling every noise by it; the ledgers charge the full budgets.
    """

    def __init__(self, d: int, noise: str = "laplace", test: str = "obs",
                 sensitivity: int = 1) -> None:
        if d < 1:
            raise ValueError(f"domain size d must be >= 1, got {d}")
        if test not in TESTS:
            raise ValueError(f"test must be one of {TESTS}, got {test!r}")
        if sensitivity not in (1, 2):
            raise ValueError(f"sensitivity must be 1 or 2, got {sensitivity!r}")
        draw_noise(1.0, 0, np.random.default_rng(0), noise)  # validates the noise kind
        self.d, self.noise, self.test, self.sensitivity = d, noise, test, sensitivity
        self.obs = ObsCache(noise)

    def noise_std(self, threshold: float) -> np.ndarray:
        """Per cell, the standard deviation of the noise :meth:`decide` adds when it publishes
        with ``threshold`` (its :attr:`Decision.threshold`, budgets already divided by the
        sensitivity). The levels' counts are sampled and summed first and one noise value is
        drawn per cell, so a cell's variance is that of one draw, whatever the levels."""
        return np.full(self.d, noise_std(float(threshold), self.noise))

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
        eps1, eps2 = plan.eps1, plan.eps2
        if self.sensitivity != 1:
            eps1, eps2 = eps1 / self.sensitivity, eps2 / self.sensitivity
        theta2, err2 = self.obs(eps2, sizes)
        dis: float | None = None
        if plan.adaptive:
            dis, _ = dissimilarity(counts, eps1, sizes, last, rng, self.noise, self.obs)
        if theta2 <= 0:
            return Decision(False, last, 0.0, dis)
        if dis is not None:
            bar = np.sqrt(err2) if self.test == "obs" else 1.0 / theta2
            if not dis > bar:
                return Decision(False, last, theta2, dis)
        sampled = sample_counts(counts, eps2, theta2, rng)
        histogram = sampled + draw_noise(theta2, self.d, rng, self.noise)
        return Decision(True, histogram, theta2, dis)

