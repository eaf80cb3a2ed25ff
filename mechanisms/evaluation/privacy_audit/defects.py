"""Planted defects that show the audit's power; they wrap the product's ledgers and subclass
its rule, and change nothing of the product."""


from __future__ import annotations

import numpy as np

from mechanisms.ledgers.plan import Charge, SlotPlan
from mechanisms.release.rule import ObsCache, ReleaseRule, Sampling, release_rule
from mechanisms.release.sampling import inclusion_probabilities


class HalvedNoiseRule(ReleaseRule):
    """Planted defect ``noise_halved``: the rule runs on twice the budgets the ledger charges
    (OBS, sampling, the test and the noise), so the noise has half the scale."""

    def scaled(self, eps: np.ndarray) -> np.ndarray:
        return super().scaled(eps) * 2.0


def next_level_budgets(budgets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Per (run, level), the next larger budget among the run's levels with users (the level's
    own where none is larger)."""
    budgets = np.asarray(budgets, dtype=np.float64)
    live = np.asarray(sizes) > 0
    out = budgets.copy()
    for j in range(budgets.shape[1]):
        larger = np.where(live & (budgets > budgets[:, j : j + 1]), budgets, np.inf)
        nxt = larger.min(axis=1)
        out[:, j] = np.where(np.isfinite(nxt), nxt, budgets[:, j])
    return out


class _NextLevelObs(ObsCache):
    """OBS as the product computes it, with inclusion probabilities against the next level's
    budget."""

    def sampling(self, budgets: np.ndarray, sizes: np.ndarray,
                 threshold: np.ndarray | None = None) -> Sampling:
        theta = self(budgets, sizes)[0] if threshold is None else threshold
        return Sampling.of(theta, inclusion_probabilities(next_level_budgets(budgets, sizes),
                                                          theta))


class OffByOneRule(ReleaseRule):
    """Planted defect ``threshold_off_by_one``: the Sampling Mechanism keeps each level with the
    probability of the next level's budget, so a sampled low-budget user is over-included."""

    def __init__(self, d: int, noise: str = "laplace", test: str = "obs",
                 sensitivity: int = 1, estimator: str = "paper") -> None:
        super().__init__(d, noise, test, sensitivity, estimator)
        self.obs = _NextLevelObs(noise)


class DroppedChargeLedger:
    """Planted defect ``charge_dropped``: a ledger that does not record the charge of slot
    ``dropped`` (it commits that slot as approximated while the release publishes)."""

    def __init__(self, inner: object, dropped: int) -> None:
        self.inner, self.dropped = inner, int(dropped)

    @property
    def slot(self) -> int:
        """The slot the next plan is for."""
        return self.inner.slot

    def plan(self) -> SlotPlan:
        """The inner ledger's plan."""
        return self.inner.plan()

    def commit(self, published: bool) -> Charge:
        """Commit, leaving the dropped slot's publication unrecorded."""
        if self.inner.slot != self.dropped:
            return self.inner.commit(published)
        plan = self.inner.plan()
        charge = self.inner.commit(False)
        done = bool(published) and not plan.nullified
        eps2 = plan.eps2.copy() if done else np.zeros_like(plan.eps2)
        return Charge(charge.slot, plan.eps1.copy(), eps2, done, plan.nullified)


def make_rule(mechanism: str, d: int, noise: str = "laplace", sensitivity: int = 1,
              plant: str | None = None) -> ReleaseRule:
    """The release rule the job runs for ``mechanism`` (test and estimator as the registry
    names them), or its planted variant."""
    cls = {"noise_halved": HalvedNoiseRule, "threshold_off_by_one": OffByOneRule}.get(
        plant or "", ReleaseRule)
    return release_rule(mechanism, d, noise, sensitivity, cls)
