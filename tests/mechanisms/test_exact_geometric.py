"""Geometric draws by inversion: exact bounds and thresholds (checked against decimal
arithmetic), bucket look-ups equal to a full search, exact ties, the tail, the distribution."""

import math
from decimal import Decimal, localcontext

import numpy as np
import pytest

from mechanisms.noise import geometric as eg
from mechanisms.noise.bits import GeneratorBits


def exp_floor(num: int, den: int, prec: int) -> int:
    """floor(exp(-num/den) * 2**prec) from decimal arithmetic with ample digits."""
    with localcontext() as ctx:
        ctx.prec = prec // 3 + 60 + len(str(num))
        return int((Decimal(-num) / den).exp() * (Decimal(2) ** prec))


def q_power(g: int, prec: int) -> int:
    """floor(exp(-g/64) * 2**prec)."""
    return exp_floor(g, 64, prec)


TAB = eg.inversion(1, 64)
K = len(TAB.thresholds) - 2


class Script:
    """Given words first, then a seeded generator's; counts the words drawn."""

    def __init__(self, script: list[int], seed: int = 0) -> None:
        self.script, self.rest, self.drawn = list(script), GeneratorBits(
            np.random.default_rng(seed)), 0

    def words(self, n: int) -> np.ndarray:
        head, self.script = self.script[:n], self.script[n:]
        self.drawn += n
        return np.concatenate([np.array(head, np.uint64), self.rest.words(n - len(head))])


def test_exp_bounds_bracket_the_exact_value():
    cases = [(0, 1), (1, 64), (5, 64), (1000, 64), (123_456, 64), (1, 1), (1, 2), (7, 5),
             (993211187, 268435456), (2748779069, 2**38), (300, 1), (2**20, 1)]
    for num, den in cases:
        for prec in (64, 128, 200, 400):
            lo, hi = eg.exp_bounds(num, den, prec)
            exact = exp_floor(num, den, prec)
            assert lo <= exact <= hi and hi - lo <= 4, (num, den, prec)


@pytest.mark.parametrize("num, den", [(1, 64), (1, 2), (1, 1), (993211187, 268435456), (50, 1),
                                      (2**20, 1)])
def test_thresholds_are_the_exact_floors(num, den):
    tab = eg.inversion(num, den)
    top = len(tab.thresholds) - 2
    assert tab.thresholds[0] == 2**64 and tab.thresholds[-1] == 0
    for g in range(1, top + 1):
        assert tab.thresholds[g] == exp_floor(g * num, den, 64), g
    # the last kept threshold is the last at or above 2**24 (p**K >= 2**-40), or T_1
    assert top == max(1, sum(exp_floor(g * num, den, 64) >= 2**24 for g in range(1, top + 2)))
    assert [int(x) for x in tab.ascending] == tab.thresholds[top:0:-1]


def test_tables_need_distinct_thresholds():
    assert len(TAB.thresholds) - 2 == 1774  # exp(-1774/64) > 2**-40 > exp(-1775/64)
    with pytest.raises(ValueError):
        eg.inversion(1, 65)


def full_count(w: np.ndarray) -> np.ndarray:
    """#{g in 1..K : w < T_g}, by a search of every threshold."""
    return TAB.ascending.size - np.searchsorted(TAB.ascending, w, side="right")


def test_bucket_lookups_count_like_a_full_search():
    tab = TAB
    edges = np.arange(1 << eg._BITS, dtype=np.uint64) << np.uint64(eg._BUCKET)
    near = np.concatenate([tab.ascending + np.uint64(1), tab.ascending - np.uint64(1)])
    w = np.concatenate([
        np.random.default_rng(1).integers(0, 2**64, 200_000, dtype=np.uint64),
        edges, edges - np.uint64(1), edges + np.uint64(1), near,
    ])
    w = w[(full_count(w) < K) & ~np.isin(w, tab.ascending)]  # no tail, no tie: one word
    bits = Script(w.tolist())
    assert np.array_equal(eg.geometric_64th(w.size, bits), full_count(w).astype(np.uint64))
    assert bits.drawn == w.size


def test_a_tie_is_settled_by_further_digits():
    g = 5
    t = TAB.thresholds[g]
    assert t == q_power(g, 64)
    digits = q_power(g, 128) & (2**64 - 1)  # the next 64 binary digits of exp(-5/64)
    after = q_power(g, 192) & (2**64 - 1)
    assert min(digits, after) >= 4 and max(digits, after) < 2**64 - 5
    # the bounds are within 4 units around the exact floor: 4 below or 5 above it decides
    below, above = Script([t, digits - 4]), Script([t, digits + 5])
    assert eg.geometric_64th(1, below)[0] == g and below.drawn == 2  # W < q**5
    assert eg.geometric_64th(1, above)[0] == g - 1 and above.drawn == 2  # W > q**5
    # equal digits again: the third word decides
    for third, expect in ((after - 4, g), (after + 5, g - 1)):
        bits = Script([t, digits, third])
        assert eg.geometric_64th(1, bits)[0] == expect and bits.drawn == 3


def test_ties_follow_the_conditional_probability():
    g, n = 300, 40_000
    t = TAB.thresholds[g]
    p = (q_power(g, 64 + 53) - (t << 53)) / 2**53  # P(W < q**g | floor(W 2**64) = t)
    draws = eg.geometric_64th(n, Script([t] * n, seed=2))
    assert set(np.unique(draws).tolist()) <= {g - 1, g}
    assert abs((draws == g).mean() - p) < 5 * math.sqrt(p * (1 - p) / n)


def test_the_tail_continues_with_a_fresh_draw():
    small = int(TAB.ascending[0]) - 1  # w < T_K: G >= K
    assert eg.geometric_64th(1, Script([small, 2**64 - 1]))[0] == K
    assert eg.geometric_64th(1, Script([small, small, 2**64 - 1]))[0] == 2 * K
    assert eg.geometric_64th(1, Script([0, TAB.thresholds[3] + 1]))[0] == K + 2
    # one threshold only (p = exp(-30) < 2**-40): every G >= 1 goes on through the tail
    one = eg.inversion(30, 1)
    t1 = one.thresholds[1]
    assert len(one.thresholds) == 3 and 0 < t1 < 2**24
    assert eg.geometric(one, 1, Script([t1 - 1, t1 - 1, t1 + 1]))[0] == 2
    assert eg.geometric(one, 1, Script([t1 + 1]))[0] == 0
    # p = exp(-50): T_1 = 0, so only w = 0 is open; the next word (5 < exp(-50) * 2**64 * 2**64)
    # puts W below p, and the fresh draw of the tail is 0 (w = 2**64 - 1)
    zero = eg.inversion(50, 1)
    assert zero.thresholds == [2**64, 0, 0]
    assert eg.geometric(zero, 2, Script([0, 1, 5, 2**64 - 1]))[0:2].tolist() == [1, 0]


def test_distribution_is_geometric():
    n = 400_000
    g = eg.geometric_64th(n, GeneratorBits(np.random.default_rng(3))).astype(np.int64)
    edges = np.arange(0, 641, 16)  # bins of 16, the last one open
    counts = np.bincount(np.minimum(g // 16, edges.size - 1), minlength=edges.size)
    sf = np.exp(-edges / 64.0)  # P(G >= edge)
    probs = np.append(sf[:-1] - sf[1:], sf[-1])
    expected = probs * n
    stat = float(((counts - expected) ** 2 / expected).sum())
    df = edges.size - 1
    assert stat < df * (1 - 2 / (9 * df) + 4.753 * math.sqrt(2 / (9 * df))) ** 3  # p = 1e-6
    assert abs(g.mean() - 1 / math.expm1(1 / 64)) < 0.5
