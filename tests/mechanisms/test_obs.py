import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms import optimal_budget
from mechanisms.release.obs import reporting_errors


def error_at(budgets: list[float], cand: float) -> float:
    """Definition 12's error of threshold ``cand``, one user at a time."""
    var = bias = 0.0
    for b in budgets:
        if b < cand:
            p = (np.exp(b) - 1) / (np.exp(cand) - 1)
            var += p * (1 - p)
            bias += 1 - p
    return var + bias**2 + 2 / cand**2


def brute_force(budgets: list[float]) -> tuple[float, float]:
    """Algorithm 1 written out literally, one candidate and one user at a time."""
    best, best_err = 0.0, float("inf")
    for cand in sorted({b for b in budgets if b > 0}):
        err = error_at(budgets, cand)
        if err < best_err:
            best, best_err = cand, err
    return best, best_err


def test_example_2_errors_and_choice():
    budgets = [0.1, 0.4, 0.4, 0.1, 0.4, 0.4, 0.8, 0.8, 0.8, 0.4]
    values, errors = reporting_errors(np.array([0.1, 0.4, 0.8]), np.array([2, 5, 3]))
    assert errors == pytest.approx([200.0, 15.308, 27.733], abs=5e-4)
    theta, err = optimal_budget(budgets)
    assert theta == 0.4
    assert err == pytest.approx(15.308, abs=5e-4)


def test_counts_form_equals_per_user_form():
    assert optimal_budget([0.1, 0.4, 0.8], [2, 5, 3]) == optimal_budget(
        [0.1, 0.1, 0.4, 0.4, 0.4, 0.4, 0.4, 0.8, 0.8, 0.8]
    )


def test_one_level_has_no_sampling_error():
    theta, err = optimal_budget([0.5] * 7)
    assert theta == 0.5
    assert err == pytest.approx(2 / 0.25)


def test_zero_budgets_never_threshold_but_count_as_bias():
    theta, err = optimal_budget([0.0, 0.0, 1.0])
    assert theta == 1.0
    assert err == pytest.approx(2.0**2 + 2.0)
    assert optimal_budget([0.0, 0.0]) == (0.0, float("inf"))


def test_rejects_negative_and_non_finite():
    for bad in ([-0.1, 1.0], [np.nan], [np.inf]):
        with pytest.raises(ValueError, match="budgets"):
            optimal_budget(bad)


def test_many_distinct_values_match_brute_force():
    rng = np.random.default_rng(3)
    budgets = rng.uniform(0.01, 2.0, 300).round(4).tolist()
    theta, err = optimal_budget(budgets)
    b_theta, b_err = brute_force(budgets)
    assert theta == b_theta
    assert err == pytest.approx(b_err, rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0.0, 5.0, allow_nan=False).map(lambda x: round(x, 3)), min_size=1,
                max_size=40))
def test_matches_brute_force(budgets):
    theta, err = optimal_budget(budgets)
    b_theta, b_err = brute_force(budgets)
    if b_err == float("inf"):
        assert (theta, err) == (0.0, float("inf"))
    else:
        assert err == pytest.approx(b_err, rel=1e-9)
        # a different argmin is only acceptable on a tie: the chosen threshold, one of the
        # budgets, must itself have the brute-force minimum error
        assert theta in budgets
        assert theta == b_theta or error_at(budgets, theta) == pytest.approx(b_err, rel=1e-9)
