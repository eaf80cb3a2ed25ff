"""Exact Bernoulli draws with integer arithmetic: Bernoulli(num/den), Bernoulli(exp(-gamma))
and the runs of Bernoulli(1/k) successes they are made of.

Sampling follows Canonne, Kamath and Steinke (2020), "The Discrete Gaussian for Differential
Privacy", Algorithm 1 for Bernoulli(exp(-gamma)), on numpy arrays with integer arithmetic only.
Algorithm 1's Bernoulli(gamma/k) is drawn as Bernoulli(1/k) AND Bernoulli(gamma); runs of
Bernoulli(1/k) successes come from look-ups of 16-bit chunks, and Bernoulli(num/den) compares 16
random bits at a time with the binary expansion of num/den. Rare cases (ties, long runs,
rejected chunks) are finished exactly on small arrays. The random words come from
:mod:`mechanisms.noise.bits`.
"""

from __future__ import annotations

import functools

import numpy as np

from mechanisms.noise.bits import RandomBits, chunks

_U64 = np.uint64


def _at(a: np.ndarray | int, idx: np.ndarray) -> np.ndarray | int:
    return a if np.ndim(a) == 0 else a[idx]


def _digits(r: np.ndarray, den: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """(floor(r * 2**16 / den), r * 2**16 mod den) for r <= den < 2**63, without overflow."""
    if np.ndim(den) == 0 and int(den) & (int(den) - 1) == 0:  # den = 2**e: shifts
        e = int(den).bit_length() - 1
        if e < 16:
            return r << _U64(16 - e), np.zeros_like(r)
        return r >> _U64(e - 16), (r & _U64((1 << e - 16) - 1)) << _U64(16)
    step = 64 - int(np.max(den)).bit_length()  # r << step < 2**64
    digit, width = np.zeros(r.shape, _U64), 16
    while width:
        k = min(step, width)
        r = r << _U64(k)
        q = r // den
        r -= q * den
        digit = (digit << _U64(k)) | q if width < 16 else q
        width -= k
    return digit, r


def _bern(r: np.ndarray, den: np.ndarray | int, bits: RandomBits) -> np.ndarray:
    out, idx = np.zeros(r.size, bool), np.arange(r.size)
    while idx.size:
        digit, r = _digits(r, _at(den, idx))
        x = chunks(bits, idx.size, 16)
        out[idx] = x < digit
        tie = (x == digit) & (r > 0)  # equal so far; if the expansion ended, x >= p
        idx, r = idx[tie], r[tie]
    return out


def bernoulli(num: np.ndarray | int, den: np.ndarray | int, bits: RandomBits) -> np.ndarray:
    """Bernoulli(num/den) for ``0 <= num <= den``, ``1 <= den < 2**63``: a uniform x in [0, 1)
    is compared with num/den 16 binary digits at a time until they differ; True if x < p."""
    num, den = np.broadcast_arrays(np.asarray(num, _U64), np.asarray(den, _U64))
    if not (den.min(initial=1) >= 1 and den.max(initial=1) < 2**63 and np.all(num <= den)):
        raise ValueError("need 0 <= num <= den and 1 <= den < 2**63")
    return _bern(num.ravel(), den.ravel(), bits).reshape(num.shape)


@functools.cache
def _run_table(k0: int) -> tuple[np.ndarray, int]:
    """(table, c): for a 16-bit chunk, the number (0..c) of leading successes among
    Bernoulli(1/k0), ..., Bernoulli(1/(k0+c-1)), or 255 to reject it. c is the longest run with
    m = k0 (k0+1) ... (k0+c-1) leaving under 2**8 of the 2**16 chunks rejected (at least 1)."""
    c, m = 1, k0
    while m * (k0 + c) <= 2**16 and 2**16 % (m * (k0 + c)) < 2**8:
        m, c = m * (k0 + c), c + 1
    reps = 2**16 // m
    zm = np.arange(reps * m) // reps  # uniform in [0, m)
    hits, p = np.zeros(zm.size, np.uint8), m
    for i in range(c):
        p //= k0 + i  # P(zm < p) = 1 / (k0 ... (k0+i))
        hits += zm < p
    return np.concatenate([hits, np.full(2**16 - zm.size, 255, np.uint8)]), c


def leading_successes(n: int, k0: int, bits: RandomBits) -> np.ndarray:
    """Leading successes (uint8) among Bernoulli(1/k0), Bernoulli(1/(k0+1)), ..."""
    if k0 > 200:  # 198 successes in a row: probability < 1/199! < 2**-1200
        raise OverflowError("run of Bernoulli(1/k) successes too long")
    table, c = _run_table(k0)
    h = table.take(chunks(bits, n, 16))
    rare = np.flatnonzero(h >= c)  # rejected chunks, complete runs (1 in 2000 at k0 = 2)
    if rare.size:
        redo, more = rare[h[rare] == 255], rare[h[rare] == c]
        if redo.size:
            h[redo] = leading_successes(redo.size, k0, bits)
        if more.size:
            h[more] += leading_successes(more.size, k0 + c, bits)
    return h


_RUN2, _COLS = _run_table(2)  # J - 1 for J <= 6, 6 for J > 6; C_1.._COLS are drawn up front


def factorial_run(n: int, bits: RandomBits) -> np.ndarray:
    """``n`` draws of J, P(J >= j) = 1/j!: leading successes of Bernoulli(1/k), k = 1, 2, ..."""
    return leading_successes(n, 2, bits) + np.uint8(1)


def bernoulli_exp_below1(
    num: np.ndarray, den: np.ndarray | int, bits: RandomBits
) -> tuple[np.ndarray, np.ndarray]:
    """(D, void): D ~ Bernoulli(exp(-num/den)) for 0 <= num < den (CKS Algorithm 1), except
    where ``void`` (a rejected chunk, probability 2**-12, independent of all else): redraw those.
    With A_k = Bernoulli(1/k) AND C_k, C_k ~ Bernoulli(num/den), K - 1 = min(J, G) counts the
    leading successes and D = (K odd). J comes from one look-up; C_1..C_6 compare 16 random bits
    with the first 16 binary digits of num/den; J > 6 with G >= 6 continues one C_k at a time."""
    n = num.size
    h = _RUN2.take(chunks(bits, n, 16))  # J - 1, 6 for J > 6, 255 void
    first = _digits(num, den)[0].astype(np.uint16)  # num/den's first 16 binary digits
    x = chunks(bits, _COLS * n, 16).reshape(_COLS, n)
    c = x < first
    tie = np.flatnonzero(x == first)  # 1 in 65536: C_k ~ Bernoulli(rest of the expansion)
    if tie.size:
        rows = tie % n
        c.flat[tie] = _bern(_digits(num[rows], _at(den, rows))[1], _at(den, rows), bits)
    run = c[0].copy()
    lead = run.view(np.uint8).copy()  # G, capped at _COLS
    for k in range(1, _COLS):
        run &= c[k]
        lead += run
    m = np.minimum(h + np.uint8(1), lead)
    more = np.flatnonzero(h == _COLS)  # J > 6 (1 in 5040) ...
    more = more[lead[more] == _COLS]  # ... and G >= 6
    if more.size:
        j = leading_successes(more.size, _COLS + 2, bits) + np.uint8(_COLS + 1)
        k = _COLS + 1
        while more.size:  # J >= k and C_1..C_{k-1} succeeded: draw C_k
            ok = _bern(num[more], _at(den, more), bits)
            m[more[ok]] = k
            more, j = more[ok & (j > k)], j[ok & (j > k)]
            k += 1
    void = h == 255
    return ((m & 1) == 0) & ~void, void


def bernoulli_exp(num: np.ndarray | int, den: np.ndarray | int, bits: RandomBits) -> np.ndarray:
    """Bernoulli(exp(-num/den)) for integers ``num >= 0``, ``1 <= den < 2**63``; gamma >= 1 uses
    floor(gamma) Bernoulli(exp(-1)) trials and one Bernoulli(exp(-(gamma - floor(gamma))))."""
    num, den = np.broadcast_arrays(np.asarray(num, _U64), np.asarray(den, _U64))
    if not (den.min(initial=1) >= 1 and den.max(initial=1) < 2**63):
        raise ValueError("need 1 <= den < 2**63")
    whole = (num // den).ravel()
    frac, den = num.ravel() - whole * den.ravel(), den.ravel()
    out, void = bernoulli_exp_below1(frac, den, bits)
    redo = np.flatnonzero(void)
    while redo.size:
        out[redo], void = bernoulli_exp_below1(frac[redo], den[redo], bits)
        redo = redo[void]
    idx = np.flatnonzero(out & (whole > 0))
    rem = whole[idx]
    while idx.size:
        hit = leading_successes(idx.size, 2, bits) & 1 == 1  # Bernoulli(exp(-1)) = (J even)
        out[idx[~hit]] = False
        rem -= _U64(1)
        keep = hit & (rem > 0)
        idx, rem = idx[keep], rem[keep]
    return out.reshape(num.shape)


def bernoulli_exp_small(u: np.ndarray, t: int, bits: RandomBits) -> np.ndarray:
    """D ~ Bernoulli(exp(-u/t)) for 0 <= u < t (CKS Algorithm 1), cheap where u/t < 1/64: the
    first trial A_1 = Bernoulli(u/t) compares 16 random bits with u/t's first 16 binary digits
    (a tie goes on with the rest of the expansion), and D = 1 where it fails; elsewhere the loop
    goes on from k = 2 (:func:`_bexp_continued`)."""
    shift = t.bit_length() - 17  # t = 2**16 ... 2**62: the digits are a shift
    power = t & (t - 1) == 0 and shift >= 0
    first = (u >> _U64(shift) if power else _digits(u, t)[0]).astype(np.uint16)
    x = chunks(bits, u.size, 16)
    a1 = x < first
    tie = np.flatnonzero(x == first)  # 1 in 65536
    if tie.size:
        a1[tie] = _bern(_digits(u[tie], t)[1], t, bits)
    d = ~a1
    went = np.flatnonzero(a1)
    if went.size:
        d[went] = _bexp_continued(u[went], t, bits)
    return d


def _bexp_continued(u: np.ndarray, t: int, bits: RandomBits) -> np.ndarray:
    """D of CKS Algorithm 1 given that A_1 succeeded: K = 2 + the leading successes among A_k =
    Bernoulli(1/k) AND Bernoulli(u/t), k = 2, 3, ...; D = (K odd). The Bernoulli(1/k) run comes
    from :func:`leading_successes`; Bernoulli(u/t) is drawn while the run lasts."""
    run = leading_successes(u.size, 2, bits)
    count = np.zeros(u.size, np.uint8)
    idx = np.flatnonzero(run > 0)
    while idx.size:
        c = _bern(u[idx], t, bits)
        idx = idx[c]
        count[idx] += 1
        idx = idx[count[idx] < run[idx]]
    return count % 2 == 1
