"""The level-combining estimator (``pbu``, docs/design.md "The level-combining estimator"): its
groups, its weights against an exact-rational reference of the formula, and its release, drawn
the way the module says, from public inputs and the groups' noisy counts only."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms.noise.calibrated import noise_std
from mechanisms.release.levels import combining_weights, group_levels, level_weights, levels_runs


def reference_weights(variances: list[Fraction], users: list[int], v: Fraction
                      ) -> tuple[list[Fraction], Fraction]:
    """a_g = u n_g/(s_g^2 + v n_g), u = N / sum_g n_g^2/(s_g^2 + v n_g), and the model's error
    sum_g a_g^2 s_g^2 + v sum_g (a_g - 1)^2 n_g, in exact arithmetic (groups with users)."""
    share = [Fraction(n) / (s + v * n) for s, n in zip(variances, users, strict=True)]
    u = Fraction(sum(users)) / sum(n * sh for n, sh in zip(users, share, strict=True))
    a = [u * sh for sh in share] if len(users) > 1 else [Fraction(1)]
    error = (sum(x * x * s for x, s in zip(a, variances, strict=True))
             + v * sum((x - 1) ** 2 * n for x, n in zip(a, users, strict=True)))
    return a, error


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 400), st.integers(1, 10_000)), min_size=1, max_size=6),
       st.integers(0, 250))
def test_weights_are_the_formula_in_exact_arithmetic(groups, v_quarter_thousandths):
    variances = [Fraction(s) for s, _ in groups]
    users = [n for _, n in groups]
    v = Fraction(v_quarter_thousandths, 1000)
    want_a, want_error = reference_weights(variances, users, v)
    a, error = combining_weights(np.array([[float(s) for s in variances]]),
                                 np.array([users]), np.array([float(v)]))
    assert np.allclose(a[0], [float(x) for x in want_a], rtol=1e-12, atol=0)
    assert np.isclose(error[0], float(want_error), rtol=1e-12)
    # the weighted total of the groups' users is every registered user: no bias when the
    # groups report alike
    assert sum(x * n for x, n in zip(want_a, users, strict=True)) == sum(users)


def test_one_group_is_its_own_histogram_plus_one_draw():
    a, error = combining_weights(np.array([[9.0, np.inf]]), np.array([[50, 0]]), np.array([0.2]))
    assert a[0].tolist() == [1.0, 0.0] and error[0] == 9.0


def test_levels_of_equal_budget_form_one_group_in_decreasing_budget():
    eps = np.array([[0.1, 0.5, 0.1, 0.25, 0.5]])
    sizes = np.array([[3, 4, 5, 0, 6]])
    group, budgets, users = group_levels(eps, sizes, eps > 0)
    assert group[0].tolist() == [1, 0, 1, -1, 0]  # the 0.25 level has no users
    assert budgets[0].tolist() == [0.5, 0.1] and users[0].tolist() == [10, 8]


def test_a_release_is_the_weighted_sum_of_each_groups_noisy_histogram():
    counts = np.array([[[3, 1], [0, 4], [2, 2]]])  # levels x cells
    eps = np.array([[0.5, 0.1, 0.5]])
    sizes = np.array([[4, 4, 4]])
    last = np.array([[6.0, 6.0]])
    estimate, std, top = levels_runs([np.random.default_rng(7)], np.array([0]), counts, eps,
                                     sizes, eps > 0, last)
    # group 0: levels 0 and 2 at 0.5, group 1: level 1 at 0.1; one draw per (group, cell)
    drawn = np.random.default_rng(7).laplace(0.0, 1.0, (2, 2)) / np.array([[0.5], [0.1]])
    variances = np.array([[noise_std(0.5) ** 2, noise_std(0.1) ** 2]])
    v = np.array([0.25])  # each cell half of the 12 users in the last release
    a, error = combining_weights(variances, np.array([[8, 4]]), v)
    grouped = np.array([[5, 3], [0, 4]])
    assert np.allclose(estimate[0], a[0] @ (grouped + drawn), rtol=1e-12)
    assert np.isclose(std[0], np.sqrt(error[0])) and top[0] == 0.5
    weights, model_std = level_weights(eps[0], sizes[0], last[0])
    assert np.allclose(weights, a[0][[0, 1, 0]]) and np.isclose(model_std, std[0])
