"""The default configuration's choice (mechanisms/defaults.py): from public inputs only, the
per-slot signal-to-noise ratio picks ``pbu`` + ``kalman_split`` or ``pbad`` + ``round``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mechanisms.defaults import SNR_THRESHOLD, choose, per_slot_snr
from mechanisms.registry import spec
from mechanisms.requirements import FixedRequirements


def reqs(n: int, E: float, w: int) -> FixedRequirements:  # noqa: N803
    """``n`` users, the first at (E, w), the others at twice E and w (the same per-slot
    budget E/w): the strictest is (E, w)."""
    return FixedRequirements.from_arrays([f"u{i}" for i in range(n)], [w] + [2 * w] * (n - 1),
                                         [E] + [2 * E] * (n - 1))


def test_snr_is_the_mean_cell_count_over_the_strictest_even_spends_noise():
    assert math.isclose(per_slot_snr(10_000, 2, 0.6, 120), 5000 / (math.sqrt(2) * 200))
    with pytest.raises(ValueError, match="d >= 1"):
        per_slot_snr(10, 0, 1.0, 10)


@pytest.mark.parametrize(("n", "d", "E", "w", "want"), [
    (10_000, 2, 0.2, 120, ("pbu", "kalman_split")),  # the synthetic streams
    (4_969, 3, 0.2, 120, ("pbu", "kalman_split")),  # foursquare at its lowest
    (8_466, 100, 0.6, 40, ("pbad", "round")),  # taxi at its highest
    (8_466, 100, 0.2, 120, ("pbad", "round")),
])
def test_the_choice_follows_the_ratio(n, d, E, w, want):
    choice = choose(reqs(n, E, w), d)
    assert (choice.mechanism, choice.postprocess) == want
    assert choice.snr == per_slot_snr(n, d, E, w)
    assert spec(choice.mechanism).in_job  # the job runs both branches


@pytest.mark.parametrize(("n", "want"), [(2828, "pbad"), (2829, "pbu")])
def test_the_threshold_separates_the_two(n, want):
    # one cell, E = 1, w = 2000: the noise std is sqrt(2) * 2000 = 2828.43 per slot
    r = FixedRequirements.from_arrays([f"u{i}" for i in range(n)], np.full(n, 2000),
                                      np.full(n, 1.0))
    assert (per_slot_snr(n, 1, 1.0, 2000) >= SNR_THRESHOLD) == (want == "pbu")
    assert choose(r, 1).mechanism == want
