"""The exact discrete Laplace sampler: determinism, exact distributions (chi-square at fixed
seeds, threshold p = 1e-6), rounding of eps, overflow safety and argument checks."""

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from mechanisms.noise import bernoulli as bn
from mechanisms.noise import discrete_laplace as dl
from mechanisms.noise.bernoulli import bernoulli, bernoulli_exp, factorial_run
from mechanisms.noise.bits import GeneratorBits, SecureBits, secure_bits, uniform_below
from mechanisms.noise.discrete_laplace import (
    discrete_laplace,
    exact_discrete_laplace,
    rational_scale,
)


def bits(seed: int) -> GeneratorBits:
    return GeneratorBits(np.random.default_rng(seed))


def chi2_limit(df: int, z: float = 4.753) -> float:
    """Chi-square quantile (Wilson-Hilferty) at the standard normal quantile z (p = 1e-6)."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi2(observed: np.ndarray, probs: np.ndarray) -> tuple[float, float]:
    """(statistic, limit) of a goodness-of-fit test; bins expecting < 5 merge into a neighbour."""
    n = observed.sum()
    obs, exp = list(observed.astype(float)), list(np.asarray(probs) * n)
    assert abs(sum(exp) - n) < 1e-6 * n
    while len(exp) > 2 and min(exp) < 5:
        i = int(np.argmin(exp))
        j = i + 1 if i == 0 or (i + 1 < len(exp) and exp[i + 1] < exp[i - 1]) else i - 1
        exp[j], obs[j] = exp[j] + exp[i], obs[j] + obs[i]
        del exp[i], obs[i]
    o, e = np.array(obs), np.array(exp)
    return float(((o - e) ** 2 / e).sum()), chi2_limit(len(e) - 1)


def laplace_sf(k: np.ndarray, t: int, s: int) -> np.ndarray:
    """P(X >= k) of the exact pmf (1-p)/(1+p) p^|x|, p = exp(-s/t): p^k / (1+p) for k >= 1,
    else 1 - P(X >= 1-k) by symmetry."""
    k = np.asarray(k, dtype=float)
    tail = np.exp(-np.where(k >= 1, k, 1 - k) * s / t) / (1 + math.exp(-s / t))
    return np.where(k >= 1, tail, 1 - tail)


def pmf_check(x: np.ndarray, t: int, s: int) -> tuple[float, float]:
    """Chi-square of samples against the exact pmf, on bins at multiples of the scale."""
    scale = t / s
    cuts = np.array([0.02, 0.1, 0.25, 0.5, 0.8, 1.2, 1.7, 2.4, 3.3, 4.5, 6.0])
    cuts = np.floor(scale * cuts)
    edges = np.unique(np.concatenate([np.arange(-3, 5), cuts, -cuts]))
    counts = np.bincount(np.searchsorted(edges, x, side="right"), minlength=edges.size + 1)
    cdf = np.concatenate([[0.0], 1 - laplace_sf(edges, t, s), [1.0]])  # P(X < edge)
    return chi2(counts, np.diff(cdf))


# -- random bits ------------------------------------------------------------------------------


def test_secure_bits_is_a_deterministic_keyed_stream():
    a, b = SecureBits(b"k" * 32), SecureBits(b"k" * 32)
    first = a.words(3)
    assert first.dtype == np.uint64
    split = np.concatenate([first, a.words(10_000), a.words(5)])
    assert np.array_equal(split, b.words(10_008))  # the call pattern does not matter
    assert not np.array_equal(SecureBits(b"j" * 32).words(8), SecureBits(b"k" * 32).words(8))
    # pinned (a change would change every recomputed slot); cross-checked with
    # `openssl enc -aes-256-ctr -K <BLAKE2b-256(32 zero bytes, person="pwevent-bits")> -iv 0`
    assert f"{int(SecureBits(bytes(32)).words(1)[0]):016x}" == "381f3e5ff1bcc6e5"
    words = SecureBits(b"u" * 32).words(200_000)  # bytes look uniform
    counts = np.bincount(words.view(np.uint8), minlength=256)
    stat, limit = chi2(counts, np.full(256, 1 / 256))
    assert stat < limit


def test_secure_bits_labels_are_unambiguous():
    def first(*labels):
        return tuple(secure_bits(b"secret", *labels).words(2))

    keys = [
        first("stream", 1),
        first("stream", 1),
        first("stream", 2),
        first("stream1"),
        first("stream", "1"),
        first(b"stream", 1),
        first("str", "eam", 1),
        first("stream", 1, 0),
        first("stream", -1),
        first("stream", 256),
    ]
    assert keys[0] == keys[1]
    assert len(set(keys[1:])) == len(keys) - 1
    assert first("a") != tuple(secure_bits(b"other", "a").words(2))
    with pytest.raises(ValueError):
        secure_bits(b"", "a")
    with pytest.raises(TypeError):
        secure_bits(b"s", 1.5)
    with pytest.raises(ValueError):
        SecureBits(b"short")


def test_samples_are_deterministic_per_key_and_int64():
    x = exact_discrete_laplace(0.3, 5000, secure_bits(b"s", "cells", 7))
    assert x.dtype == np.int64 and x.shape == (5000,)
    assert np.array_equal(x, exact_discrete_laplace(0.3, 5000, secure_bits(b"s", "cells", 7)))
    assert not np.array_equal(x, exact_discrete_laplace(0.3, 5000, secure_bits(b"s", "cells", 8)))
    g = exact_discrete_laplace(0.3, 5000, bits(1))
    assert np.array_equal(g, exact_discrete_laplace(0.3, 5000, bits(1)))
    assert exact_discrete_laplace(1.0, 0, bits(1)).shape == (0,)


# -- building blocks --------------------------------------------------------------------------


def test_uniform_below_is_exactly_uniform_for_any_bound():
    bounds = np.array([1, 2, 3, 5, 6, 7, 10, 100, 1000, 3 << 40, 2**63 + 5], dtype=np.uint64)
    n = 30_000
    x = uniform_below(np.repeat(bounds, n).reshape(bounds.size, n), bits(2))
    assert x.dtype == np.uint64 and x.shape == (bounds.size, n)
    assert (x < bounds[:, None]).all() and (x[0] == 0).all()
    for b, row in zip(bounds[1:9], x[1:9], strict=True):
        counts = np.bincount(row.astype(np.int64), minlength=int(b))
        stat, limit = chi2(counts, np.full(int(b), 1 / int(b)))
        assert stat < limit, b
    top = (x[9] >> np.uint64(40)).astype(np.int64)  # 3 * 2**40: the top bits are uniform on 0..2
    stat, limit = chi2(np.bincount(top, minlength=3), np.full(3, 1 / 3))
    assert stat < limit
    assert (x[10] >= np.uint64(2**62)).mean() == pytest.approx(0.5, abs=0.02)
    with pytest.raises(ValueError):
        uniform_below(np.array([3, 0]), bits(0))


def test_bernoulli_rational_frequencies():
    cases = [(0, 1), (5, 5), (1, 3), (2, 3), (1, 2**20 + 1), (2**62 - 1, 2**62 + 1), (7, 2**40)]
    n = 200_000
    num = np.repeat([c[0] for c in cases], n)
    den = np.repeat([c[1] for c in cases], n)
    hits = bernoulli(num, den, bits(3)).reshape(len(cases), n)
    assert not hits[0].any() and hits[1].all()
    for (a, b), row in zip(cases[2:], hits[2:], strict=True):
        p = a / b
        assert abs(row.mean() - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-12, (a, b)
    assert bernoulli(1, 3, bits(3)).shape == ()
    with pytest.raises(ValueError):
        bernoulli(4, 3, bits(0))


def j_check(j: np.ndarray) -> tuple[float, float]:
    """Chi-square of J draws against P(J >= k) = 1/k!."""
    sf = np.array([1 / math.factorial(k) for k in range(1, 11)])  # P(J >= k)
    counts = np.bincount(np.minimum(j.astype(np.int64), 10), minlength=11)[1:]
    return chi2(counts, np.append(sf[:-1] - sf[1:], sf[-1]))  # J = 1..9, J >= 10


def test_factorial_run_distribution():
    j = factorial_run(600_000, bits(4))
    stat, limit = j_check(j)
    assert stat < limit
    assert j.max() >= 8  # the continuation past the first table was used


def test_bernoulli_exp_frequencies():
    # gamma: 0, 1/3, 1/2, just below 1 (runs past six Bernoulli(gamma) draws), 1, 5/2, 7, and
    # two large denominators, one a power of two
    cases = [
        (0, 1),
        (1, 3),
        (1, 2),
        (2**20 - 1, 2**20),
        (1, 1),
        (5, 2),
        (7, 1),
        ((2**40 + 3) * 2, 2**41 + 5),
        (3 << 37, 2**40),
    ]
    n = 200_000
    num = np.repeat([c[0] for c in cases], n)
    den = np.repeat([c[1] for c in cases], n)
    hits = bernoulli_exp(num, den, bits(5)).reshape(len(cases), n)
    assert hits[0].all()
    for (a, b), row in zip(cases[1:], hits[1:], strict=True):
        p = math.exp(-a / b)
        assert abs(row.mean() - p) < 5 * math.sqrt(p * (1 - p) / n), (a, b)
    with pytest.raises(ValueError):
        bernoulli_exp(1, 0, bits(0))


def test_bernoulli_exp_small_frequencies():
    # u/t: 0, tiny, just below 1/64 (the split's range), a non-power-of-two t, small t (digits
    # by division), and near 1, where the loop past A_1 decides most draws
    cases = [(0, 2**38), (1, 2**38), (2**32 - 1, 2**38), (2**31, 3 * 2**32), (5, 7), (1, 1000),
             (9, 10), (255, 256)]
    n = 200_000
    for u, t in cases:
        d = bn.bernoulli_exp_small(np.full(n, u, np.uint64), t, bits(21))
        p = math.exp(-u / t)
        assert abs(d.mean() - p) <= 5 * math.sqrt(p * (1 - p) / n), (u, t)


def test_bexp_small_ties_continue_with_the_rest_of_the_expansion():
    n = 40_000  # u/t = 1/3 with t = 3 * 2**20: every 16-bit chunk 0x5555 ties A_1's digits
    script = np.full(n // 4, 0x5555_5555_5555_5555, np.uint64)
    d = bn.bernoulli_exp_small(np.full(n, 2**20, np.uint64), 3 * 2**20, ScriptedBits(script, 22))
    p = math.exp(-1 / 3)
    assert abs(d.mean() - p) < 5 * math.sqrt(p * (1 - p) / n)


class ScriptedBits:
    """Given words first, then a seeded generator's: steers the rare paths."""

    def __init__(self, script: np.ndarray, seed: int) -> None:
        self.script, self.rest = np.asarray(script, np.uint64), bits(seed)

    def words(self, n: int) -> np.ndarray:
        head, self.script = self.script[:n], self.script[n:]
        return np.concatenate([head, self.rest.words(n - head.size)])


def test_digits_are_exact():
    rng = np.random.default_rng(14)
    for den in [1, 3, 2**10, 2**16, 2**40, 2**62, 2**40 + 3, 2**50 + 1, 2**62 + 12345]:
        r = np.append(rng.integers(0, den, 300, dtype=np.uint64), [0, den - 1, den])
        digit, rest = bn._digits(r.astype(np.uint64), den)
        assert [int(d) for d in digit] == [(int(a) << 16) // den for a in r]
        assert [int(m) for m in rest] == [(int(a) << 16) % den for a in r]


def test_ties_continue_with_the_rest_of_the_expansion():
    n = 40_000
    tie = np.full(6 * n // 4, 0x5555_5555_5555_5555, np.uint64)  # each 16-bit digit of 1/3
    x = bernoulli(np.ones(n, np.uint64), 3, ScriptedBits(tie[: n // 4], 15))
    assert abs(x.mean() - 1 / 3) < 5 * math.sqrt(2 / 9 / n)
    # in Bernoulli(exp(-1/3)), all six C_k draws tie: each is then Bernoulli(1/3)
    script = np.concatenate([bits(16).words(n // 4), tie])
    d, void = bn.bernoulli_exp_below1(np.ones(n, np.uint64), 3, ScriptedBits(script, 17))
    d = d[~void]
    p = math.exp(-1 / 3)
    assert abs(d.mean() - p) < 5 * math.sqrt(p * (1 - p) / d.size)


def test_long_runs_continue_exactly():
    # J > 6 (16-bit chunk 0) and C_1..C_6 all succeed (chunks 0 < gamma = 255/256): the outcome
    # is then decided by J's continuation and C_7, C_8, ...
    n, gamma = 40_000, 255 / 256
    script = np.zeros(n // 4 + 6 * n // 4, np.uint64)
    d, void = bn.bernoulli_exp_below1(np.full(n, 255, np.uint64), 256, ScriptedBits(script, 18))
    assert not void.any()
    # m = min(J, G) given J >= 7, G >= 6: P(m >= 6 + i) = 7!/(6+i)! * gamma**i for i >= 1
    fall = [math.factorial(7) / math.factorial(6 + i) for i in range(1, 20)]
    at_least = [1.0] + [f * gamma**i for i, f in enumerate(fall, 1)]
    p = sum(at_least[i] - at_least[i + 1] for i in range(0, 19, 2))  # m even
    assert abs(d.mean() - p) < 5 * math.sqrt(p * (1 - p) / n)


def test_rejected_chunks_fail_the_trial_or_are_redrawn():
    ones = np.full(4, 2**64 - 1, np.uint64)  # 16-bit chunks 65535 >= 13 * 7!: rejected
    d, void = bn.bernoulli_exp_below1(np.zeros(16, np.uint64), 5, ScriptedBits(ones, 19))
    assert void.all() and not d.any()
    assert bernoulli_exp(np.zeros(16, np.uint64), 5, ScriptedBits(ones, 19)).all()  # exp(0)
    n = 40_000
    j = factorial_run(n, ScriptedBits(np.full(n // 4, 2**64 - 1, np.uint64), 20))
    stat, limit = j_check(j)
    assert stat < limit


def test_geometric_runs_across_batches(monkeypatch):
    sf = np.exp(-np.arange(12.0))  # P(V >= v)
    probs = np.append(sf[:-1] - sf[1:], sf[-1])
    v = dl._geometric_exp1(200_000, bits(6)).astype(np.int64)
    stat, limit = chi2(np.bincount(np.minimum(v, 11), minlength=12), probs)
    assert stat < limit
    monkeypatch.setattr(dl, "_batch", lambda need, rate: 3)  # tiny batches: runs span them
    v = dl._geometric_exp1(6000, bits(6)).astype(np.int64)
    stat, limit = chi2(np.bincount(np.minimum(v, 11), minlength=12), probs)
    assert stat < limit


# -- the discrete Laplace ---------------------------------------------------------------------


SCALES = [  # (eps or None, t, s, the path taken by default)
    (1.0, 1, 1, "inversion"),
    (10.0, 1, 10, "inversion"),
    (3.7, None, None, "inversion"),  # t = 2**28, a table of 7 thresholds
    (None, 7, 5, "inversion"),
    (0.1, None, None, "split"),  # t = 2**33: R masked without rejection
    (None, 3, 1, "split"),  # t' = 192: R rejected above t'/64 = 3
    (None, 2**33 + 1, 3, "split"),  # large t, not a power of two
    (1e-9, None, None, "split"),  # t = 2**61: a scale of 1e9
]


def scale_paths() -> list:
    """Every scale on its default path, on CKS's, and on the split or an inversion table
    where it can take them (a table needs s/t >= 1/64)."""
    cases = []
    for eps, t, s, default in SCALES:
        if eps is not None:
            t, s = rational_scale(eps)
        paths = ["default", "cks", "split" if default == "inversion" else "inversion"]
        cases += [(eps, t, s, default, path) for path in paths
                  if path != "inversion" or 64 * s >= t]
    return cases


@pytest.mark.parametrize("eps, t, s, default, path", scale_paths())
def test_discrete_laplace_matches_exact_pmf(eps, t, s, default, path, monkeypatch):
    assert dl._path(t, s) == default
    if path == "split":
        assert dl._split_scale(t, s) is not None
    if path != "default":
        monkeypatch.setattr(dl, "_path", lambda t, s: path)
    n = 200_000
    x = discrete_laplace(t, s, n, bits(7))
    assert x.dtype == np.int64
    stat, limit = pmf_check(x, t, s)
    assert stat < limit
    assert (x > 0).sum() == pytest.approx((x < 0).sum(), abs=5 * math.sqrt(n))  # symmetric
    if eps is not None and eps <= 1:  # (at eps = 10, only ~20 samples are not zero)
        sd = math.sqrt(2 * math.exp(-eps)) / -math.expm1(-eps)
        assert x.std() == pytest.approx(sd, rel=0.02)


def test_tiny_eps_has_a_spread_near_its_scale():
    x = exact_discrete_laplace(1e-9, 20_000, bits(8))
    assert np.median(np.abs(x)) == pytest.approx(math.log(2) * 1e9, rel=0.05)
    assert len(np.unique(x)) > 0.99 * x.size


def test_pmf_check_rejects_a_wrong_scale():
    t, s = 13, 10
    x = discrete_laplace(t, s, 200_000, bits(9))
    assert pmf_check(x, t, s)[0] < pmf_check(x, t, s)[1]
    stat, limit = pmf_check(x, t * 103, s * 100)  # 3% more noise
    assert stat > limit


def test_small_batches_keep_the_distribution(monkeypatch):
    monkeypatch.setattr(dl, "_batch", lambda need, rate: 7)
    t, s = rational_scale(0.5)
    x = discrete_laplace(t, s, 3000, bits(10))
    stat, limit = pmf_check(x, t, s)
    assert stat < limit
    assert np.array_equal(x, discrete_laplace(t, s, 3000, bits(10)))


def test_large_t_does_not_overflow():
    t, s = 2**60 + 12345, 2**30 + 7  # scale 2**30: U + t*V overflows 64 bits for V >= 16
    assert dl._path(t, s) == "cks"  # 64 t >= 2**63: X = U + t V
    x = discrete_laplace(t, s, 50_000, bits(11))
    stat, limit = pmf_check(x, t, s)
    assert stat < limit
    t, s = 2**62 + 1, 3 * 2**60 + 7  # t mod s near 2**60: r*V overflows, exact carry path
    x = discrete_laplace(t, s, 50_000, bits(12))
    stat, limit = pmf_check(x, t, s)
    assert stat < limit


def test_quotient_is_exact_at_the_limits():
    rng = np.random.default_rng(13)
    cases = [(2**62 + 1, 3 * 2**60 + 7), (2**63 - 1, 2**23 + 1), (2**60 + 12345, 2**30 + 7), (5, 7)]
    for t, s in cases:
        u = np.append(rng.integers(0, t, 200, dtype=np.uint64), [0, t - 1]).astype(np.uint64)
        v = np.append(rng.integers(0, 60, 200), [0, 59]).astype(np.uint64)
        y = dl._quotient(u, v, t, s)
        assert y.dtype == np.int64
        exact = [(int(a) + t * int(b)) // s for a, b in zip(u, v, strict=True)]
        assert [int(a) for a in y] == exact


# -- eps as a rational ------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    eps=st.floats(min_value=2.0**-30, max_value=2.0**20, allow_nan=False),
    sensitivity=st.integers(1, 4),
)
def test_rational_scale_rounds_eps_down_by_less_than_2_pow_minus_31(eps, sensitivity):
    assume(sensitivity / eps < 2**30)  # the documented range
    t, s = rational_scale(eps, sensitivity)
    assert math.gcd(t, s) == 1 and 1 <= t < 2**63
    eps_used = Fraction(sensitivity * s, t)
    assert eps_used <= Fraction(eps)
    assert eps_used > Fraction(eps) * (1 - Fraction(1, 2**31))


def test_rational_scale_values_and_errors():
    assert rational_scale(1.0) == (1, 1)
    assert rational_scale(0.5) == (2, 1)
    assert rational_scale(2.0, sensitivity=3) == (3, 2)
    t, s = rational_scale(0.1)
    assert Fraction(s, t) < Fraction(0.1) and t == 2**33
    for bad in (0.0, -1.0, math.nan, math.inf, -math.inf, 2.0**-31, 2.0**21):
        with pytest.raises(ValueError):
            rational_scale(bad)
        with pytest.raises(ValueError):
            exact_discrete_laplace(bad, 10, bits(0))
    with pytest.raises(ValueError):
        rational_scale(1e-9, sensitivity=8)  # t would reach 2**63
    with pytest.raises(ValueError):
        rational_scale(1.0, sensitivity=0)
    for t, s in [(0, 1), (1, 0), (2**63, 1), (2**41, 1)]:
        with pytest.raises(ValueError):
            discrete_laplace(t, s, 10, bits(0))
