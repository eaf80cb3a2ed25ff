"""Statistical checks of the Sampling Mechanism and of both noise kinds (seeded)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mechanisms import draw_noise, inclusion_probabilities, noise_variance, sample_counts
from mechanisms.noise.calibrated import noise_std, noise_stds
from mechanisms.release.sampling import sample_users


def test_inclusion_probabilities_formula():
    p = inclusion_probabilities(np.array([0.0, 0.1, 0.4, 0.8, 1.2]), 0.8)
    expected = [0.0, np.expm1(0.1) / np.expm1(0.8), np.expm1(0.4) / np.expm1(0.8), 1.0, 1.0]
    assert p == pytest.approx(expected)


def test_per_user_inclusion_rates():
    rng = np.random.default_rng(11)
    budgets = np.repeat([0.05, 0.2, 0.5, 1.0], 50_000)
    kept = sample_users(budgets, 1.0, rng)
    for b in (0.05, 0.2, 0.5):
        rate = kept[budgets == b].mean()
        p = np.expm1(b) / np.expm1(1.0)
        assert abs(rate - p) < 4.5 * np.sqrt(p * (1 - p) / 50_000)
    assert kept[budgets == 1.0].all()


def test_aggregate_thinning_matches_per_user_sampling():
    rng = np.random.default_rng(5)
    counts = np.array([[300, 0, 50], [100, 200, 0], [10, 10, 10]])
    eps = np.array([0.1, 0.5, 2.0])
    draws = np.array([sample_counts(counts, eps, 0.5, rng) for _ in range(4000)])
    p = inclusion_probabilities(eps, 0.5)
    mean = (counts * p[:, None]).sum(axis=0)
    var = (counts * p[:, None] * (1 - p[:, None])).sum(axis=0)
    assert draws.mean(axis=0) == pytest.approx(mean, abs=4.5 * np.sqrt(var.max() / 4000))
    assert draws.var(axis=0) == pytest.approx(var, rel=0.1)
    assert draws.dtype == np.int64


@pytest.mark.parametrize("kind", ["laplace", "discrete"])
@pytest.mark.parametrize("eps", [0.3, 1.0, 2.5])
def test_noise_variance_matches_formula(kind, eps):
    rng = np.random.default_rng(7)
    x = draw_noise(eps, 400_000, rng, kind)
    expected = float(noise_variance(eps, kind))
    assert abs(x.mean()) < 5 * np.sqrt(expected / x.size)
    assert x.var() == pytest.approx(expected, rel=0.03)
    if kind == "discrete":
        assert x.dtype == np.int64
        assert expected == pytest.approx(2 * np.exp(-eps) / (1 - np.exp(-eps)) ** 2)
    else:
        assert expected == pytest.approx(2 / eps**2)


def test_noise_rejects_bad_budget_and_kind():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="budget"):
        draw_noise(0.0, 3, rng)
    with pytest.raises(ValueError, match="noise must be"):
        draw_noise(1.0, 3, rng, "gaussian")


def test_thinned_marks_publications_that_sample_users_away():
    from mechanisms.release.sampling import thinned

    budgets = np.array([[0.1, 0.5], [0.5, 0.5], [0.1, 0.5]])
    sizes = np.array([[3, 4], [3, 4], [0, 4]])
    # run 0 keeps its 0.1 level with p < 1; run 1 keeps everyone; run 2's low level is empty
    assert thinned(budgets, sizes, np.array([0.5, 0.5, 0.5])).tolist() == [True, False, False]
    assert bool(thinned(budgets[0], sizes[0], 0.1)) is False
    # it agrees with the inclusion probabilities of the levels with users
    for b, n, th in zip(budgets, sizes, (0.5, 0.5, 0.5), strict=True):
        p = inclusion_probabilities(b, th)
        assert bool(thinned(b, n, th)) == bool(((p < 1) & (n > 0)).any())


@given(st.lists(st.tuples(st.floats(0.0, 2.0), st.integers(0, 5)), min_size=1, max_size=6),
       st.floats(1e-3, 2.0))
def test_thinned_is_any_level_with_users_kept_with_probability_below_one(levels, threshold):
    from mechanisms.release.sampling import thinned

    budgets = np.array([b for b, _ in levels])
    sizes = np.array([n for _, n in levels])
    p = inclusion_probabilities(budgets, threshold)
    assert bool(thinned(budgets, sizes, threshold)) == bool(((p < 1) & (sizes > 0)).any())


@pytest.mark.parametrize("kind", ["laplace", "discrete"])
def test_noise_stds_are_noise_std_of_each_budget(kind):
    eps = np.random.default_rng(3).uniform(1e-4, 12.0, 500)
    assert noise_stds(eps, kind).tolist() == [noise_std(e, kind) for e in eps.tolist()]
    with pytest.raises(ValueError, match="budget"):
        noise_stds(np.array([1.0, 0.0]), kind)
