"""Exact geometric draws by inversion of one 64-bit word: P(G >= g) = p**g, p = exp(-num/den).

G = #{g >= 1 : W < p**g} for W uniform in [0, 1) has P(G >= g) = p**g. With w = floor(W * 2**64)
(one random word) and T_g = floor(p**g * 2**64), w < T_g means W < p**g and w > T_g means
W > p**g (p**g * 2**64 is irrational for g >= 1). Only w == T_g leaves the comparison open: it is
decided exactly by further random words against further binary digits of p**g. The digits come
from integer bounds on exp(-x) (the alternating Taylor series, after halving x until it is at
most 1/64, then squaring back with directed rounding). No floating point enters the
distribution.

The count is found with two table look-ups: the top 12 bits of w pick a bucket, which holds at
most one threshold (base: the thresholds above the bucket; bound: the one inside it). Buckets
holding several thresholds are searched. The table stops at the last threshold K with
p**K >= 2**-40 (at least one); G >= K continues with a fresh draw, as G - K is again such a G
given G >= K. Thresholds must be distinct, so num/den >= 1/64.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from mechanisms.noise.bits import RandomBits

_U64 = np.uint64
_BITS = 12  # the top 12 bits of w pick one of 4096 buckets
_BUCKET = 64 - _BITS
_FLOOR = 2**24  # thresholds kept: T_g >= 2**24 (p**g >= 2**-40), and always T_1



def exp_bounds(num: int, den: int, prec: int) -> tuple[int, int]:
    """(lo, hi) with lo <= exp(-num/den) * 2**prec <= hi, for integers num >= 0, den >= 1,
    prec >= 0; hi - lo is a few units. x = num/den is halved m times to at most 1/64, where the
    alternating series sum (-x)**k / k! brackets exp(-x) between consecutive partial sums; m
    squarings rounded down and up bring the bounds back."""
    if num < 0 or den < 1 or prec < 0:
        raise ValueError("need num >= 0, den >= 1, prec >= 0")
    m = 0
    while 64 * num > den << m:
        m += 1
    work = prec + 2 * m + 16
    b = den << m  # x = num / b <= 1/64
    # S_n = sum_k (-1)**k c_k / (b**n n!) with c_k = num**k b**(n-k) n!/k!, all integers
    n = 2
    while (n + 1) * 6 + math.lgamma(n + 2) / math.log(2) < work + 4:  # x**(n+1)/(n+1)! small
        n += 2
    n += 1  # odd: S_n is a lower bound, S_{n-1} an upper one
    c = b**n * math.factorial(n)
    denom, total, last = c, 0, 0
    for k in range(n + 1):
        total += -c if k % 2 else c
        last = c
        if k < n:
            c = c * num // (b * (k + 1))
    lo = (total << work) // denom
    hi = -((-(total + last) << work) // denom)
    for _ in range(m):
        lo, hi = (lo * lo) >> work, -((-hi * hi) >> work)
    shift = work - prec
    return lo >> shift, -((-hi) >> shift)


class Inversion(NamedTuple):
    """The thresholds of p = exp(-num/den) and their bucket tables."""

    num: int
    den: int
    thresholds: list[int]  # T_0 = 2**64, T_1 > ... > T_K, T_{K+1} = 0 (a sentinel)
    ascending: np.ndarray  # T_K, ..., T_1 as uint64
    base: np.ndarray  # per bucket: thresholds above it (uint16)
    bound: np.ndarray  # per bucket: the threshold inside it, or its lowest w (uint64)
    low: int  # buckets below this hold several thresholds: searched


def _thresholds(num: int, den: int) -> list[int]:
    """[2**64, T_1, ..., T_K], T_g = floor(exp(-g num/den) * 2**64) exactly: running products
    of the bounds of p, with more guard bits wherever a floor is not yet determined."""
    guard = 96
    while True:
        work = 64 + guard
        plo, phi = exp_bounds(num, den, work)
        lo = hi = 1 << work
        values = [1 << 64]
        while True:
            lo, hi = (lo * plo) >> work, -((-hi * phi) >> work)
            if lo >> guard != hi >> guard:
                break
            if len(values) > 1 and lo >> guard < _FLOOR:
                return values
            values.append(lo >> guard)
        guard *= 2


@functools.lru_cache(maxsize=256)
def inversion(num: int, den: int) -> Inversion:
    """The inversion table of P(G >= g) = exp(-g num/den), for num/den >= 1/64."""
    if not (num >= 1 and den >= 1 and 64 * num >= den):
        raise ValueError(f"need num/den >= 1/64, got {num}/{den}")
    values = _thresholds(num, den)
    if any(a <= b for a, b in zip(values[1:], values[2:], strict=False)):
        raise AssertionError("thresholds must be distinct")  # pragma: no cover
    k = len(values) - 1
    values.append(0)
    ascending = np.array(values[k:0:-1], dtype=_U64)
    starts = np.arange(1 << _BITS, dtype=_U64) << _U64(_BUCKET)  # lowest w of each bucket
    tops = starts + _U64((1 << _BUCKET) - 1)
    # thresholds > top: base; thresholds in (start, top]: inside (w < T counts for those only)
    base = ascending.size - np.searchsorted(ascending, tops, side="right")
    inside = ascending.size - np.searchsorted(ascending, starts, side="right") - base
    first_in = np.minimum(ascending.size - base - 1, ascending.size - 1)
    bound = np.where(inside == 1, ascending[first_in], starts).astype(_U64)
    # searched: buckets with several thresholds, and bucket 0, which holds T_K (T_K < 2**44)
    low = int(np.flatnonzero(inside > 1).max(initial=0)) + 1
    return Inversion(num, den, values, ascending, base.astype(np.uint16), bound, low)


def _below_threshold(w: int, g: int, num: int, den: int, bits: RandomBits) -> bool:
    """Whether W < exp(-g num/den) for W = (w + W') / 2**64, W' uniform from further words,
    given w == T_g: the digits are compared 64 bits at a time until they settle."""
    x, extra = w, 0
    while True:
        x, extra = (x << 64) | int(bits.words(1)[0]), extra + 64
        lo, hi = exp_bounds(g * num, den, 64 + extra)
        if x + 1 <= lo:  # W < (x + 1) / 2**(64+extra) <= p**g
            return True
        if x >= hi:  # W >= x / 2**(64+extra) >= p**g
            return False


def geometric(tab: Inversion, n: int, bits: RandomBits) -> np.ndarray:
    """``n`` draws (uint64) of G with P(G >= g) = exp(-g num/den), one 64-bit word each (plus,
    rarely, a search, and for ties of probability about 2**-64, further words)."""
    w = bits.words(n)
    bucket = w >> _U64(_BUCKET)
    bound = tab.bound.take(bucket)
    g = tab.base.take(bucket).astype(_U64)
    g += w < bound
    odd = np.flatnonzero((w == bound) | (bucket < _U64(tab.low)))
    if odd.size:
        top = len(tab.thresholds) - 2  # K
        wo = w[odd]
        go = (tab.ascending.size - np.searchsorted(tab.ascending, wo, side="right")).astype(_U64)
        for i, (word, count) in enumerate(zip(wo.tolist(), go.tolist(), strict=True)):
            nxt = count + 1  # W < p**count is settled; W against p**(count+1) may be open
            if nxt <= top and word == tab.thresholds[nxt] and _below_threshold(
                    word, nxt, tab.num, tab.den, bits):
                go[i] = nxt
        tail = np.flatnonzero(go == _U64(top))  # W < p**K: G - K is a fresh draw
        if tail.size:
            go[tail] += geometric(tab, tail.size, bits)
        g[odd] = go
    return g


def geometric_64th(n: int, bits: RandomBits) -> np.ndarray:
    """``n`` draws (uint64) of G with P(G >= g) = exp(-g/64)."""
    return geometric(inversion(1, 64), n, bits)
