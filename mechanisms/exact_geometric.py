"""Exact draws of G with P(G >= g) = exp(-g/64), by inversion of one 64-bit word.

G = #{g >= 1 : W < q**g}, q = exp(-1/64), for W uniform in [0, 1); then P(G >= g) = q**g. With
w = floor(W * 2**64) (one random word) and T_g = floor(q**g * 2**64), w < T_g means W < q**g and
w > T_g means W > q**g (q**g * 2**64 is irrational). Only w == T_g leaves the comparison open: it
is decided exactly by further random words against further binary digits of q**g, computed with
integers from the alternating Taylor series of exp(-1/64) under directed rounding. No floating
point enters the distribution.

The count is found with two table look-ups: the top 16 bits of w pick a bucket, which holds at
most one threshold (base: the thresholds above the bucket; bound: the one inside it). Buckets
holding several thresholds (w < 2**54, about 1 in 1000 words) are searched; G >= N (w < T_N,
probability 2**-40) continues with a fresh draw, as G - N is again such a G given G >= N.
"""

from __future__ import annotations

import functools
from fractions import Fraction
from typing import NamedTuple, Protocol

import numpy as np

_U64 = np.uint64
_N = 1774  # q**N > 2**-40: thresholds T_1 > ... > T_N, all above 2**23 and distinct
_BITS = 12  # the top 12 bits of w pick one of 4096 buckets
_BUCKET = 64 - _BITS


class RandomBits(Protocol):
    """A deterministic source of uniform 64-bit words."""

    def words(self, n: int) -> np.ndarray: ...


@functools.cache
def _q_bounds(prec: int) -> tuple[int, int]:
    """(lo, hi) with lo <= exp(-1/64) * 2**prec <= hi: partial sums of the alternating series
    sum (-1/64)**k / k!, whose terms decrease, bracket it; the last term is below 2**-prec."""
    total, term, k = Fraction(1), Fraction(1), 0
    while True:
        k += 1
        term = term / (64 * k)
        before = total
        total += -term if k % 2 else term
        if term * 2 ** (prec + 2) < 1 and k % 2:  # before: an upper bound, total: a lower one
            return (total.numerator << prec) // total.denominator, -(
                (-before.numerator << prec) // before.denominator)


def power_bounds(g: int, prec: int) -> tuple[int, int]:
    """(lo, hi) with lo <= exp(-g/64) * 2**prec <= hi and hi - lo small (a few units for
    g < 2**20): binary powers of the bounds of exp(-1/64), rounded down and up."""
    if g < 0 or prec < 0:
        raise ValueError("need g >= 0 and prec >= 0")
    work = prec + 2 * g.bit_length() + 8  # guard bits against the roundings
    blo, bhi = _q_bounds(work)
    lo = hi = 1 << work
    while g:
        if g & 1:
            lo, hi = (lo * blo) >> work, -((-hi * bhi) >> work)
        blo, bhi = (blo * blo) >> work, -((-bhi * bhi) >> work)
        g >>= 1
    shift = work - prec
    return lo >> shift, -((-hi) >> shift)


class _Table(NamedTuple):
    thresholds: list[int]  # T_0 = 2**64, T_1, ..., T_N, T_{N+1} = 0 (a sentinel)
    ascending: np.ndarray  # T_N, ..., T_1 as uint64
    base: np.ndarray  # per bucket: thresholds above it (uint64)
    bound: np.ndarray  # per bucket: the threshold inside it, or its lowest w
    low: int  # buckets below this hold several thresholds: searched


@functools.cache
def _table() -> _Table:
    """Thresholds T_g = floor(exp(-g/64) * 2**64), g = 1..N, exact, and the bucket tables."""
    guard = 128
    while True:
        blo, bhi = _q_bounds(64 + guard)
        lo = hi = 1 << (64 + guard)
        values = [1 << 64]
        for _ in range(_N):
            lo, hi = (lo * blo) >> (64 + guard), -((-hi * bhi) >> (64 + guard))
            if lo >> guard != hi >> guard:  # floor not yet determined: more guard bits
                break
            values.append(lo >> guard)
        else:
            break
        guard *= 2
    if any(a <= b for a, b in zip(values, values[1:], strict=False)) or values[-1] < 2**23:
        raise AssertionError("thresholds must be distinct")  # pragma: no cover
    values.append(0)
    ascending = np.array(values[_N:0:-1], dtype=_U64)
    starts = np.arange(1 << _BITS, dtype=_U64) << _U64(_BUCKET)  # lowest w of each bucket
    tops = starts + _U64((1 << _BUCKET) - 1)
    # thresholds > top: base; thresholds in (start, top]: inside (w < T counts for those only)
    base = (ascending.size - np.searchsorted(ascending, tops, side="right")).astype(np.uint16)
    inside = ascending.size - np.searchsorted(ascending, starts, side="right") - base
    first_in = np.minimum(ascending.size - base.astype(np.int64) - 1, ascending.size - 1)
    bound = np.where(inside == 1, ascending[first_in], starts)
    low = int(np.flatnonzero(inside > 1).max()) + 1
    return _Table(values, ascending, base, bound.astype(_U64), low)


def _below_threshold(w: int, g: int, bits: RandomBits) -> bool:
    """Whether W < exp(-g/64) for W = (w + W') / 2**64, W' uniform from further words, given
    w == T_g: the digits are compared 64 bits at a time until they settle."""
    x, extra = w, 0
    while True:
        x, extra = (x << 64) | int(bits.words(1)[0]), extra + 64
        lo, hi = power_bounds(g, 64 + extra)
        if x + 1 <= lo:  # W < (x + 1) / 2**(64+extra) <= exp(-g/64)
            return True
        if x >= hi:  # W >= x / 2**(64+extra) >= exp(-g/64)
            return False


def geometric_64th(n: int, bits: RandomBits) -> np.ndarray:
    """``n`` draws (uint64) of G with P(G >= g) = exp(-g/64), one 64-bit word each (plus, for
    about 1 in 1000, a search, and for ties of probability 2**-64, further words)."""
    tab = _table()
    w = bits.words(n)
    bucket = w >> _U64(_BUCKET)
    bound = tab.bound.take(bucket)
    g = tab.base.take(bucket).astype(_U64)
    g += w < bound
    odd = np.flatnonzero((w == bound) | (bucket < _U64(tab.low)))
    if odd.size:
        wo = w[odd]
        go = tab.ascending.size - np.searchsorted(tab.ascending, wo, side="right")
        for i, (word, count) in enumerate(zip(wo.tolist(), go.tolist(), strict=True)):
            nxt = count + 1  # W < q**count is settled; W against q**(count+1) may be open
            if nxt <= _N and word == tab.thresholds[nxt] and _below_threshold(word, nxt, bits):
                go[i] = nxt
        tail = np.flatnonzero(go == _N)  # W < q**N: G - N is a fresh draw
        if tail.size:
            go[tail] += geometric_64th(tail.size, bits).astype(np.int64)
        g[odd] = go.astype(_U64)
    return g
