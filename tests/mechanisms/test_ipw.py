"""The unbiased (inverse-probability weighted) Sampling Mechanism option (seeded)."""

import numpy as np
import pytest

from mechanisms.build import build
from mechanisms.ledgers.fixed import AbsorptionLedger, DistributionLedger
from mechanisms.ledgers.plan import SlotPlan
from mechanisms.release.ipw import ipw_release
from mechanisms.release.rule import ReleaseRule
from mechanisms.requirements import FixedRequirements
from mechanisms.run.fixed import FixedMechanism

COUNTS = np.array([[3000, 1000, 0], [500, 1500, 40], [200, 0, 900]])
P = np.array([0.3, 1.0, 0.6])
THETA = 0.5


def _draws(runs: int = 20_000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(3)
    drawn = [ipw_release(rng, COUNTS, P, THETA) for _ in range(runs)]
    return np.array([h for h, _ in drawn]), np.array([s for _, s in drawn])


def test_ipw_is_unbiased_and_its_variance_is_the_formula():
    est, std = _draws()
    truth = COUNTS.sum(axis=0)
    partial = P < 1
    noise_var = 2 / THETA**2 * (1 + (1 / P[partial] ** 2).sum())
    var = noise_var + (COUNTS[partial] * ((1 - P[partial]) / P[partial])[:, None]).sum(axis=0)
    assert est.mean(axis=0) == pytest.approx(truth, abs=4.5 * float(np.sqrt(var.max() / len(est))))
    assert est.var(axis=0) == pytest.approx(var, rel=0.05)
    # the paper's thinned count is biased by -(1 - p) c per level: 2,100 + 80 here on cell 0
    paper = (COUNTS * P[:, None]).sum(axis=0)
    assert truth[0] - paper[0] == pytest.approx(2180)
    assert np.allclose(std, np.sqrt(noise_var))


def test_ipw_std_is_a_function_of_public_parameters_only():
    # the per-cell std a release carries reads the threshold and the inclusion probabilities
    # (public: from the requirements and level sizes), never the exact counts
    rng = np.random.default_rng(0)
    _, a = ipw_release(rng, COUNTS, P, THETA)
    _, b = ipw_release(rng, COUNTS * 7 + 1, P, THETA)
    assert a == b == pytest.approx(np.sqrt(2 / THETA**2 * (1 + 1 / 0.09 + 1 / 0.36)))


def test_ipw_under_integer_noise_releases_rounded_counts():
    rng = np.random.default_rng(2)
    est = np.array([ipw_release(rng, COUNTS, P, THETA, "discrete")[0] for _ in range(20_000)])
    truth = COUNTS.sum(axis=0)
    assert est.mean(axis=0) == pytest.approx(truth, rel=0.01)
    plan = SlotPlan(1, np.zeros(3), np.array([0.3, 1.0, 0.5]), nullified=False, adaptive=False)
    hist = ReleaseRule(3, "discrete", estimator="ipw").decide(
        plan, COUNTS, np.array([4000, 2000, 1100]), np.zeros(3, dtype=np.int64), rng).histogram
    assert hist.dtype == np.int64


def test_a_known_estimator_is_required():
    with pytest.raises(ValueError, match="estimator"):
        ReleaseRule(3, estimator="horvitz")


def test_ipw_mechanisms_keep_the_paper_ledgers():
    req = FixedRequirements(("a", "b"), np.array([4, 2]), np.array([1.0, 0.5]))
    assert isinstance(build("pbd_ipw", req, 2, np.random.default_rng(0)).ledger,
                      DistributionLedger)
    assert isinstance(build("pba_ipw", req, 2, np.random.default_rng(0)).ledger,
                      AbsorptionLedger)


@pytest.mark.parametrize("name", ["pbd", "pba"])
def test_ipw_equals_the_paper_where_nothing_is_sampled(name):
    # every user at one budget: OBS keeps every level whole, so both draw the same values
    req = FixedRequirements(tuple(map(str, range(300))), np.full(300, 5), np.full(300, 1.0))
    paper = FixedMechanism(name, req, 3, np.random.default_rng(9))
    ipw = FixedMechanism(f"{name}_ipw", req, 3, np.random.default_rng(9))
    cells = np.random.default_rng(1).integers(0, 3, size=(30, 300))
    for slot in cells:
        a, b = paper.step(slot), ipw.step(slot)
        assert a.published == b.published
        assert np.array_equal(a.histogram, b.histogram)


def test_the_rule_with_ipw_removes_the_sampling_bias():
    # 100 users at 0.01 next to 1,900 at 0.02: OBS keeps the small level with p ~ 0.4975
    eps = np.array([0.01, 0.02])
    sizes = np.array([100, 1900])
    counts = np.array([[100, 0], [0, 1900]])
    plan = SlotPlan(1, np.zeros(2), eps, nullified=False, adaptive=False)
    p = ReleaseRule(2).sampling(eps[None], sizes[None]).p[0]
    assert 0.45 < p[0] < 0.55 and p[1] == 1.0
    out = {}
    for estimator in ("paper", "ipw"):
        rule, rng = ReleaseRule(2, estimator=estimator), np.random.default_rng(4)
        out[estimator] = np.array([rule.decide(plan, counts, sizes, np.zeros(2), rng).histogram
                                   for _ in range(4000)])
    sem = out["ipw"][:, 0].std() / np.sqrt(4000)
    assert out["ipw"][:, 0].mean() == pytest.approx(100, abs=4.5 * sem)
    assert out["paper"][:, 0].mean() == pytest.approx(100 * p[0], abs=4.5 * sem)
    # the price: the weighted noise (and thinning) of the sampled level
    assert out["ipw"][:, 0].var() > 4 * out["paper"][:, 0].var()
