"""Hand-computed cases for the utility measures (paper eqs. 5 and 6)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from mechanisms.evaluation.metrics import ajsd, amre, mae

RELEASED = [[1.0, 2.0], [3.0, 4.0]]
TRUE = [[0.0, 2.0], [3.0, 6.0]]


def test_amre_is_mean_squared_error() -> None:
    # slot 1: (1 + 0) / 2 = 0.5; slot 2: (0 + 4) / 2 = 2; mean 1.25
    assert amre(RELEASED, TRUE) == 1.25
    assert amre(TRUE, TRUE) == 0.0
    # zero true counts are fine: no division by the true value
    assert amre([[3.0, -1.0, 0.0]], [[0.0, 0.0, 0.0]]) == pytest.approx(10 / 3)


def test_mae() -> None:
    # slot 1: (1 + 0) / 2 = 0.5; slot 2: (0 + 2) / 2 = 1; mean 0.75
    assert mae(RELEASED, TRUE) == 0.75
    assert mae(np.zeros((3, 4)), np.ones((3, 4))) == 1.0


def test_ajsd_hand_computed() -> None:
    assert ajsd([[1.0, 0.0]], [[0.0, 1.0]]) == pytest.approx(math.log(2))
    # v = (0.75, 0.25): 0.5 ln(2/3) + 0.5 ln 2 + ln(4/3) = 1.5 ln(4/3), halved
    assert ajsd([[0.5, 0.5]], [[1.0, 0.0]]) == pytest.approx(0.75 * math.log(4 / 3))
    # average over slots: ln 2 and 0
    assert ajsd([[1.0, 0.0], [0.2, 0.8]], [[0.0, 1.0], [0.2, 0.8]]) == pytest.approx(
        math.log(2) / 2
    )


def test_ajsd_normalizes_counts() -> None:
    # counts (2, 2) and (4, 0) are the distributions (0.5, 0.5) and (1, 0)
    assert ajsd([[2.0, 2.0]], [[4.0, 0.0]]) == pytest.approx(0.75 * math.log(4 / 3))
    # negative noisy counts are clipped to 0 first: (-1, 5) -> (0, 1)
    assert ajsd([[-1.0, 5.0]], [[3.0, 0.0]]) == pytest.approx(math.log(2))
    # a row with nothing positive counts as uniform
    assert ajsd([[0.0, -2.0]], [[7.0, 7.0]]) == 0.0


def test_ajsd_literal_formula_without_normalizing() -> None:
    # eq. 6 on raw values: r = (2, 0), c = (0, 2), v = (1, 1): (2 ln 2 + 2 ln 2) / 2
    assert ajsd([[2.0, 0.0]], [[0.0, 2.0]], normalize=False) == pytest.approx(2 * math.log(2))
    with pytest.raises(ValueError, match="non-negative"):
        ajsd([[-1.0, 1.0]], [[0.0, 1.0]], normalize=False)


@pytest.mark.parametrize("metric", [amre, ajsd, mae])
def test_validation(metric) -> None:
    with pytest.raises(ValueError, match="shape mismatch"):
        metric(np.ones((2, 3)), np.ones((2, 2)))
    with pytest.raises(ValueError, match="2-D"):
        metric(np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="NaN or infinite"):
        metric([[1.0, np.nan]], [[1.0, 1.0]])
    with pytest.raises(ValueError, match="NaN or infinite"):
        metric([[1.0, 1.0]], [[np.inf, 1.0]])
    with pytest.raises(ValueError, match="at least one"):
        metric(np.ones((0, 2)), np.ones((0, 2)))


counts = arrays(np.float64, (4, 3), elements=st.floats(-50, 500, allow_nan=False))


@example(np.array([[1.0, 0.0, 0.0]] + [[0.0] * 3] * 3),
         np.array([[1.0, 5e-324, 5e-324]] + [[5e-324] * 3] * 3))  # halving a subnormal gives 0
@given(counts, counts)
def test_ajsd_bounds_and_symmetry(r: np.ndarray, c: np.ndarray) -> None:
    value = ajsd(r, c)
    assert -1e-12 <= value <= math.log(2) + 1e-12
    assert value == pytest.approx(ajsd(c, r), abs=1e-12)
    assert ajsd(r, r) == pytest.approx(0.0, abs=1e-12)


@given(counts, counts)
def test_amre_and_mae_against_definition(r: np.ndarray, c: np.ndarray) -> None:
    T, d = r.shape
    expected_amre = sum(sum((r[t, j] - c[t, j]) ** 2 for j in range(d)) / d for t in range(T)) / T
    expected_mae = sum(sum(abs(r[t, j] - c[t, j]) for j in range(d)) / d for t in range(T)) / T
    assert amre(r, c) == pytest.approx(expected_amre, rel=1e-12, abs=1e-12)
    assert mae(r, c) == pytest.approx(expected_mae, rel=1e-12, abs=1e-12)


def test_coverage_counts_only_slots_with_bars():
    from mechanisms.evaluation.metrics import coverage

    true = np.array([[10.0, 10.0], [10.0, 10.0], [10.0, 10.0]])
    # a Laplace bar of std sqrt(2) at 95% has half-width ln(20) ~ 2.996
    released = np.array([[12.0, 13.5], [10.0, 50.0], [11.0, 9.0]])
    std = np.full(3, np.sqrt(2.0))
    assert coverage(released, true, np.array([True, False, True]), std) == 0.75
    assert coverage(released, true, np.array([True, True, True]), std) == 4 / 6
    assert np.isnan(coverage(released, true, np.zeros(3, dtype=bool), std))
