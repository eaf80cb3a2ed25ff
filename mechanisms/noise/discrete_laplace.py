"""Exact discrete Laplace noise from cryptographically keyed random bits (integer arithmetic).

Randomness comes from a *bits* object whose ``words(n)`` returns ``n`` uniform ``np.uint64``:

* :class:`SecureBits`: the AES-256-CTR keystream (OpenSSL through the ``cryptography`` package;
  with AES-NI about 6.6 GB/s, against 5.7 for ChaCha20 and 0.6 for SHAKE-256 in ``hashlib``) under
  the key BLAKE2b-256(key, person="pwevent-bits"), the 128-bit big-endian counter block starting
  at zero, read as little-endian 64-bit words. It is a pure stream: the words returned depend only
  on the key and on how many were drawn before. Keystream is made in 64 KiB blocks, encrypted
  into a fresh buffer (no copy of the output).
* :class:`GeneratorBits`: a seeded ``np.random.Generator`` (tests, offline evaluation; not secure).

Sampling follows Canonne, Kamath and Steinke (2020), "The Discrete Gaussian for Differential
Privacy": Algorithm 1 for Bernoulli(exp(-gamma)), Algorithm 2 for the discrete Laplace, on numpy
arrays with integer arithmetic only. Algorithm 1's Bernoulli(gamma/k) is drawn as Bernoulli(1/k)
AND Bernoulli(gamma); runs of Bernoulli(1/k) successes come from look-ups of 16-bit chunks, and
Bernoulli(num/den) compares 16 random bits at a time with the binary expansion of num/den. Rare
cases (ties, long runs, rejected chunks) are finished exactly on small arrays.

Algorithm 2 needs X ~ Geometric(exp(-1/t)); Y = floor(X/s) then has P(Y = y) proportional to
exp(-y s/t). CKS draw X = U + t V with U < t kept with probability exp(-U/t) (0.63 of the
trials) and V ~ Geometric(exp(-1)). Where 64 divides t (t and s scaled by the same factor, which
keeps t/s), X = R + (t/64) G splits the same way with R < t/64, kept with probability
exp(-R/t) >= exp(-1/64) (0.99 of the trials, the first comparison nearly always deciding), and
P(G >= g) = exp(-g/64), drawn from one 64-bit word by inversion against exact thresholds
(:mod:`mechanisms.exact_geometric`). About 1.8 random words per sample instead of 5. Where
s/t >= 1/2 (small scales), Y itself is drawn by such an inversion, one word per trial.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import math

import numpy as np

from mechanisms.exact_geometric import RandomBits, geometric, geometric_64th, inversion

_U64 = np.uint64
_BLOCK = 1 << 16  # keystream bytes made per AES call
_MAX_SCALE = 2**40  # t/s; outputs then fit in int64 unless V >= 2**22 (probability e**-2**22)


class SecureBits:
    """AES-256-CTR keystream keyed by BLAKE2b-256(key), as ``np.uint64`` words."""

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        if not isinstance(key, bytes) or len(key) < 16:
            raise ValueError("the key must be at least 16 bytes")
        k = hashlib.blake2b(key, digest_size=32, person=b"pwevent-bits").digest()
        self._stream = Cipher(algorithms.AES256(k), modes.CTR(bytes(16))).encryptor()
        self._buf, self._pos = np.empty(0, _U64), 0

    def words(self, n: int) -> np.ndarray:
        """The next ``n`` words of the stream."""
        have = self._buf.size - self._pos
        if n <= have:
            self._pos += n
            return self._buf[self._pos - n : self._pos]
        size = (max(_BLOCK, 8 * (n - have)) + 15) & ~15  # whole AES blocks
        out = bytearray(8 * have + size + 15)  # update_into may ask for a block's room more
        out[: 8 * have] = self._buf[self._pos :].tobytes()  # the words not yet read come first
        self._stream.update_into(_zeros(size), memoryview(out)[8 * have :])
        self._buf, self._pos = np.frombuffer(out, "<u8", count=have + size // 8), n
        return self._buf[:n]


@functools.cache
def _zeros(size: int) -> bytes:
    """``size`` zero bytes, the plaintext whose encryption is the keystream."""
    return bytes(size)


class GeneratorBits:
    """Words from a seeded numpy Generator: reproducible, not secure."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def words(self, n: int) -> np.ndarray:
        """``n`` uniform 64-bit words."""
        return self.rng.integers(0, 2**64, n, dtype=_U64)


def secure_bits(secret: bytes, *labels: bytes | str | int) -> SecureBits:
    """Stream keyed by HMAC-SHA256(secret, labels), each label typed and length-prefixed."""
    if not isinstance(secret, bytes) or not secret:
        raise ValueError("the randomness secret must be non-empty bytes")
    msg = [b"pwevent-exact-noise"]
    for label in labels:
        if isinstance(label, bytes):
            tag, raw = b"b", label
        elif isinstance(label, str):
            tag, raw = b"s", label.encode()
        elif isinstance(label, int) and not isinstance(label, bool):
            tag, raw = b"i", label.to_bytes(label.bit_length() // 8 + 1, "big", signed=True)
        else:
            raise TypeError(f"labels must be bytes, str or int, got {type(label).__name__}")
        msg.append(tag + len(raw).to_bytes(8, "big") + raw)
    return SecureBits(hmac.digest(secret, b"".join(msg), "sha256"))


def _chunks(bits: RandomBits, n: int, width: int) -> np.ndarray:
    """``n`` uniform unsigned integers of ``width`` (8, 16, 32 or 64) bits."""
    words = bits.words(-(-n * width // 64)).astype("<u8", copy=False)
    return words.view(f"<u{width // 8}")[:n]


def _width(top: int) -> int:
    """The narrowest chunk width holding ``top``."""
    return next(w for w in (8, 16, 32, 64) if top < 2**w)


def _at(a: np.ndarray | int, idx: np.ndarray) -> np.ndarray | int:
    return a if np.ndim(a) == 0 else a[idx]


def uniform_below(n: np.ndarray | int, bits: RandomBits) -> np.ndarray:
    """Exactly uniform ``np.uint64`` in ``[0, n)`` for each bound ``1 <= n < 2**64``: random
    bits masked to the bound's bit length, redrawn while ``>= n``."""
    bound = np.asarray(n, dtype=_U64).ravel()
    if not bound.min(initial=1) >= 1:
        raise ValueError("bounds must be >= 1")
    mask = bound - _U64(1)
    for shift in (1, 2, 4, 8, 16, 32):
        mask |= mask >> _U64(shift)
    width = _width(int(mask.max(initial=0)))
    out, idx = np.zeros(mask.size, _U64), np.arange(mask.size)
    while idx.size:
        x = _chunks(bits, idx.size, width) & mask[idx]
        ok = x < bound[idx]
        out[idx[ok]] = x[ok]
        idx = idx[~ok]
    return out.reshape(np.shape(n))


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
        x = _chunks(bits, idx.size, 16)
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


def _runs(n: int, k0: int, bits: RandomBits) -> np.ndarray:
    """Leading successes (uint8) among Bernoulli(1/k0), Bernoulli(1/(k0+1)), ..."""
    if k0 > 200:  # 198 successes in a row: probability < 1/199! < 2**-1200
        raise OverflowError("run of Bernoulli(1/k) successes too long")
    table, c = _run_table(k0)
    h = table.take(_chunks(bits, n, 16))
    rare = np.flatnonzero(h >= c)  # rejected chunks, complete runs (1 in 2000 at k0 = 2)
    if rare.size:
        redo, more = rare[h[rare] == 255], rare[h[rare] == c]
        if redo.size:
            h[redo] = _runs(redo.size, k0, bits)
        if more.size:
            h[more] += _runs(more.size, k0 + c, bits)
    return h


_RUN2, _COLS = _run_table(2)  # J - 1 for J <= 6, 6 for J > 6; C_1.._COLS are drawn up front


def factorial_run(n: int, bits: RandomBits) -> np.ndarray:
    """``n`` draws of J, P(J >= j) = 1/j!: leading successes of Bernoulli(1/k), k = 1, 2, ..."""
    return _runs(n, 2, bits) + np.uint8(1)


def _bexp_below1(
    num: np.ndarray, den: np.ndarray | int, bits: RandomBits
) -> tuple[np.ndarray, np.ndarray]:
    """(D, void): D ~ Bernoulli(exp(-num/den)) for 0 <= num < den (CKS Algorithm 1), except
    where ``void`` (a rejected chunk, probability 2**-12, independent of all else): redraw those.
    With A_k = Bernoulli(1/k) AND C_k, C_k ~ Bernoulli(num/den), K - 1 = min(J, G) counts the
    leading successes and D = (K odd). J comes from one look-up; C_1..C_6 compare 16 random bits
    with the first 16 binary digits of num/den; J > 6 with G >= 6 continues one C_k at a time."""
    n = num.size
    h = _RUN2.take(_chunks(bits, n, 16))  # J - 1, 6 for J > 6, 255 void
    first = _digits(num, den)[0].astype(np.uint16)  # num/den's first 16 binary digits
    x = _chunks(bits, _COLS * n, 16).reshape(_COLS, n)
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
        j = _runs(more.size, _COLS + 2, bits) + np.uint8(_COLS + 1)
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
    out, void = _bexp_below1(frac, den, bits)
    redo = np.flatnonzero(void)
    while redo.size:
        out[redo], void = _bexp_below1(frac[redo], den[redo], bits)
        redo = redo[void]
    idx = np.flatnonzero(out & (whole > 0))
    rem = whole[idx]
    while idx.size:
        hit = _runs(idx.size, 2, bits) & 1 == 1  # Bernoulli(exp(-1)) = (J even)
        out[idx[~hit]] = False
        rem -= _U64(1)
        keep = hit & (rem > 0)
        idx, rem = idx[keep], rem[keep]
    return out.reshape(num.shape)


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
        fails = np.flatnonzero(_runs(length, 2, bits) & 1 == 0)[: n - filled]
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


def _bexp_small(u: np.ndarray, t: int, bits: RandomBits) -> np.ndarray:
    """D ~ Bernoulli(exp(-u/t)) for 0 <= u < t (CKS Algorithm 1), cheap where u/t < 1/64: the
    first trial A_1 = Bernoulli(u/t) compares 16 random bits with u/t's first 16 binary digits
    (a tie goes on with the rest of the expansion), and D = 1 where it fails; elsewhere the loop
    goes on from k = 2 (:func:`_bexp_continued`)."""
    shift = t.bit_length() - 17  # t = 2**16 ... 2**62: the digits are a shift
    power = t & (t - 1) == 0 and shift >= 0
    first = (u >> _U64(shift) if power else _digits(u, t)[0]).astype(np.uint16)
    x = _chunks(bits, u.size, 16)
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
    from :func:`_runs`; Bernoulli(u/t) is drawn while the run lasts."""
    run = _runs(u.size, 2, bits)
    count = np.zeros(u.size, np.uint8)
    idx = np.flatnonzero(run > 0)
    while idx.size:
        c = _bern(u[idx], t, bits)
        idx = idx[c]
        count[idx] += 1
        idx = idx[count[idx] < run[idx]]
    return count % 2 == 1


def _signed(y: np.ndarray, bits: RandomBits) -> np.ndarray:
    """Y with a sign B ~ Bernoulli(1/2), without the draws B = 1, Y = 0 (rejected)."""
    neg = np.unpackbits(_chunks(bits, -(-y.size // 8), 8), count=y.size).view(bool)
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
            r = _chunks(bits, trials, _width(mask)) & _U64(mask)
            if mask + 1 != b:
                r = np.compress(r < b, r)
            r = np.compress(_bexp_small(r, t, bits), r)
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
            u = _chunks(bits, trials, _width(mask)) & _U64(mask)
            if mask + 1 != t:
                u = np.compress(u < t, u)
            u = np.compress(_bexp_below1(u, t, bits)[0], u)  # D ~ Bernoulli(exp(-U/t))
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
