"""Exact discrete Laplace noise (integer arithmetic), and the rational scale a budget is
rounded down to.

Sampling follows Canonne, Kamath and Steinke (2020), "The Discrete Gaussian for Differential
Privacy", Algorithm 2, on numpy arrays with integer arithmetic only, from the random words of
:mod:`mechanisms.noise.bits` and the Bernoulli draws of :mod:`mechanisms.noise.bernoulli`.

Algorithm 2 needs X ~ Geometric(exp(-1/t)); Y = floor(X/s) then has P(Y = y) proportional to
exp(-y s/t). CKS draw X = U + t V with U < t kept with probability exp(-U/t) (0.63 of the
trials) and V ~ Geometric(exp(-1)). Where 64 divides t (t and s scaled by the same factor, which
keeps t/s), X = R + (t/64) G splits the same way with R < t/64, kept with probability
exp(-R/t) >= exp(-1/64) (0.99 of the trials, the first comparison nearly always deciding), and
P(G >= g) = exp(-g/64), drawn from one 64-bit word by inversion against exact thresholds
(:mod:`mechanisms.noise.geometric`). About 1.8 random words per sample instead of 5. Where
s/t >= 1/2 (small scales), Y itself is drawn by such an inversion, one word per trial.
"""

from __future__ import annotations

import math

import numpy as np

from mechanisms.noise.bernoulli import (
    bernoulli_exp_below1,
    bernoulli_exp_small,
    leading_successes,
)
from mechanisms.noise.bits import RandomBits, chunk_width, chunks
from mechanisms.noise.geometric import geometric, geometric_64th, inversion

_U64 = np.uint64
_MAX_SCALE = 2**40  # t/s; outputs then fit in int64 unless V >= 2**22 (probability e**-2**22)


def _batch(need: int, rate: float) -> int:
    """Draws to make for ``need`` successes at ``rate`` (a 3-sigma margin; sizes only)."""
    return math.ceil((need + 3 * math.sqrt(need) + 8) / rate)


def _geometric_exp1(n: int, bits: RandomBits) -> np.ndarray:
    """``n`` draws of V, P(V >= v) = exp(-v): the runs of successes in one stream of
    Bernoulli(exp(-1)) = (J even), cut at its failures."""
    v = np.empty(n, _U64)
    filled = carry = 0
    while filled < n:
        length = _batch(n - filled, -math.expm1(-1))
        fails = np.flatnonzero(leading_successes(length, 2, bits) & 1 == 0)[: n - filled]
        if fails.size:
            runs = v[filled : filled + fails.size]
            runs[0] = carry + fails[0]
            np.subtract(fails[1:], fails[:-1] + 1, out=runs[1:], casting="unsafe")
            filled += fails.size
            carry = length - 1 - int(fails[-1])
        else:
            carry += length
    return v


def _quotient(u: np.ndarray, v: np.ndarray, t: int, s: int) -> np.ndarray:
    """floor((u + t*v) / s) = q*v + floor((u + r*v) / s), (q, r) = divmod(t, s), as int64 for
    u < t < 2**63, s < 2**63, t/s <= 2**40 (so y < 2**63 while v < 2**22), without overflow."""
    q, r = divmod(t, s)
    vmax = int(v.max(initial=0))
    if vmax >= 2**22:  # probability exp(-2**22)
        raise OverflowError("a discrete Laplace sample does not fit in int64")
    if t * (vmax + 1) < 2**64:  # u + t*v < t*(v+1): one division
        return ((u + v * _U64(t)) // _U64(s)).astype(np.int64)
    if r * vmax < 2**63:  # u + r*v < 2**64
        return (v * _U64(q) + (u + v * _U64(r)) // _U64(s)).astype(np.int64)
    y, acc = u // _U64(s), u % _U64(s)
    for i in range(vmax):  # add r to acc v times (acc + r < 2s < 2**64), carrying into y
        acc += (v > i) * _U64(r)
        carry = acc >= s
        acc -= carry * _U64(s)
        y += carry
    return (y + v * _U64(q)).astype(np.int64)


def _signed(y: np.ndarray, bits: RandomBits) -> np.ndarray:
    """Y with a sign B ~ Bernoulli(1/2), without the draws B = 1, Y = 0 (rejected)."""
    neg = np.unpackbits(chunks(bits, -(-y.size // 8), 8), count=y.size).view(bool)
    y *= 1 - 2 * neg.view(np.int8)
    zero = neg & (y == 0)
    return np.compress(~zero, y) if zero.any() else y


def _split_scale(t: int, s: int) -> tuple[int, int] | None:
    """(t', s') = (t, s) times 64/gcd(t, 64), so that 64 divides t', where t' < 2**63 and
    s' < 2**40; else None. The distribution depends on t/s only."""
    g = math.gcd(t, 64)
    t2, s2 = t * 64 // g, s * 64 // g
    return (t2, s2) if t2 < 2**63 and s2 < 2**40 else None


def _laplace_split(t: int, s: int, size: int, bits: RandomBits) -> np.ndarray:
    """Algorithm 2 with X ~ Geometric(exp(-1/t)) drawn as X = R + b G, b = t/64: R and G are
    independent, R on [0, b) with P(R = r) proportional to exp(-r/t) (uniform, kept with
    probability exp(-r/t) >= exp(-1/64)), and P(G >= g) = exp(-g/64) (one word by inversion)."""
    b = t // 64
    mask = (1 << (b - 1).bit_length()) - 1
    accept = b / (mask + 1) * 64 * -math.expm1(-1 / 64) * (1 + math.exp(-s / t)) / 2
    out, filled = np.empty(size, np.int64), 0
    while filled < size:
        need, trials = size - filled, _batch(size - filled, accept)
        if b == 1:
            r = np.zeros(trials, _U64)
        else:
            r = chunks(bits, trials, chunk_width(mask)) & _U64(mask)
            if mask + 1 != b:
                r = np.compress(r < b, r)
            r = np.compress(bernoulli_exp_small(r, t, bits), r)
        y = _signed(_quotient(r, geometric_64th(r.size, bits), b, s), bits)[:need]
        out[filled : filled + y.size] = y
        filled += y.size
    return out


def _laplace_inversion(t: int, s: int, size: int, bits: RandomBits) -> np.ndarray:
    """Y ~ Geometric(exp(-s/t)) drawn directly, one word each by inversion against exact
    thresholds of exp(-y s/t) (tables cached per s/t, which must be >= 1/64); with a sign,
    (-, 0) rejected."""
    g = math.gcd(t, s)
    tab = inversion(s // g, t // g)
    accept = (1 + math.exp(-s / t)) / 2
    out, filled = np.empty(size, np.int64), 0
    while filled < size:
        need, trials = size - filled, _batch(size - filled, accept)
        y = _signed(geometric(tab, trials, bits).astype(np.int64), bits)[:need]
        out[filled : filled + y.size] = y
        filled += y.size
    return out


def _path(t: int, s: int) -> str:
    """How Y is drawn: ``inversion`` of Y itself for s/t >= 1/2 (at most 57 thresholds),
    ``split`` X = R + (t/64) G where t and s scale to fit, else ``cks``, X = U + t V."""
    if 2 * s >= t:
        return "inversion"
    return "split" if _split_scale(t, s) is not None else "cks"


def discrete_laplace(t: int, s: int, size: int, bits: RandomBits) -> np.ndarray:
    """``size`` exact samples (int64) with P(x) proportional to exp(-|x| s/t), for
    ``1 <= t, s < 2**63`` and ``t/s <= 2**40``: CKS Algorithm 2 on batches of trials,
    Y = floor(X/s) for X ~ Geometric(exp(-1/t)) with a sign, (-, 0) rejected; Y is drawn as
    :func:`_path` says."""
    t, s = int(t), int(s)
    if not (1 <= t < 2**63 and 1 <= s < 2**63 and t <= s * _MAX_SCALE):
        raise ValueError(f"need 1 <= t, s < 2**63 and t/s <= 2**40, got t={t}, s={s}")
    path = _path(t, s)
    if path == "inversion":
        return _laplace_inversion(t, s, size, bits)
    if path == "split":
        return _laplace_split(*_split_scale(t, s), size, bits)
    mask = (1 << (t - 1).bit_length()) - 1  # U: masked random bits; trials with U >= t fail
    accept = -math.expm1(-1) / (mask + 1) / -math.expm1(-1 / t) * (1 + math.exp(-s / t)) / 2
    out, filled = np.empty(size, np.int64), 0
    while filled < size:
        need, trials = size - filled, _batch(size - filled, accept)
        if t == 1:
            u = np.zeros(trials, _U64)  # U/t = 0: D = 1
        else:
            u = chunks(bits, trials, chunk_width(mask)) & _U64(mask)
            if mask + 1 != t:
                u = np.compress(u < t, u)
            u = np.compress(bernoulli_exp_below1(u, t, bits)[0], u)  # D ~ Bernoulli(exp(-U/t))
        y = _quotient(u, _geometric_exp1(u.size, bits), t, s)  # Y = floor((U + t V) / s)
        y = _signed(y, bits)[:need]
        out[filled : filled + y.size] = y
        filled += y.size
    return out


def rational_scale(eps: float, sensitivity: int = 1, bits: int = 32) -> tuple[int, int]:
    """(t, s) in lowest terms with t/s = sensitivity/eps', where eps' = m / 2**k <= eps is eps
    rounded down to ``bits`` significant bits (2**(bits-1) <= m < 2**bits): the relative loss is
    under 2**-(bits-1), and the noise only grows. Supported: 2**-30 <= eps <= 2**20 and, with
    bits = 32, sensitivity/eps < 2**30 (then t < 2**63)."""
    if not (isinstance(sensitivity, int | np.integer) and sensitivity >= 1 and 2 <= bits <= 53):
        raise ValueError(f"need sensitivity >= 1, 2 <= bits <= 53; got {sensitivity!r}, {bits!r}")
    eps = float(eps)
    if not (math.isfinite(eps) and 2.0**-30 <= eps <= 2.0**20):  # also rejects eps <= 0, NaN
        raise ValueError(f"eps must be finite, > 0 and in [2**-30, 2**20], got {eps!r}")
    k = bits - math.frexp(eps)[1]  # eps * 2**k in [2**(bits-1), 2**bits)
    m = math.floor(math.ldexp(eps, k))  # exact: scaling a float by a power of two
    t, s = int(sensitivity) << max(k, 0), m << max(-k, 0)
    g = math.gcd(t, s)
    t, s = t // g, s // g
    if t >= 2**63 or t > s * _MAX_SCALE:
        raise ValueError(f"noise scale sensitivity/eps = {sensitivity}/{eps} is too large")
    return t, s


def exact_discrete_laplace(
    eps: float, size: int, bits: RandomBits, sensitivity: int = 1
) -> np.ndarray:
    """Integer noise (int64) giving eps-DP to counts of L1 sensitivity ``sensitivity``.

    eps is first rounded down to a rational (:func:`rational_scale`); ``bits`` is the random
    source: :class:`SecureBits` in the live job, a seeded :class:`GeneratorBits` in tests.

    >>> import numpy as np
    >>> from mechanisms.noise.bits import GeneratorBits, secure_bits
    >>> rational_scale(0.5)  # the scale t/s = 1/eps, as integers
    (2, 1)
    >>> noise = exact_discrete_laplace(0.5, 5, GeneratorBits(np.random.default_rng(1)))
    >>> noise.dtype, noise.shape
    (dtype('int64'), (5,))
    >>> bool((secure_bits(b"secret", "stream", 7).words(2) ==
    ...       secure_bits(b"secret", "stream", 7).words(2)).all())  # keyed, reproducible
    True
    """
    t, s = rational_scale(eps, sensitivity)
    return discrete_laplace(t, s, size, bits)
