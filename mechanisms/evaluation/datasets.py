"""Input streams for the experiments: synthetic binary streams and the Taxi / Foursquare data.

Synthetic streams follow section 6.1 of the personalised w-event paper: at slot t every user is
independently in state 1 with probability p_t (d = 2). Real data (Taxi, Foursquare) is read by
``streams.data.loaders`` into a :class:`StreamData`, the per-slot cell of every user.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

__all__ = [
    "JavaRandom",
    "StreamData",
    "TlnsTrace",
    "fdlibm_log",
    "log_probabilities",
    "sin_probabilities",
    "synthetic_stream",
    "tlns_probabilities",
    "tlns_trace",
]

# ---------------------------------------------------------------------------------------------
# Bit-exact java.util.Random and StrictMath.log
# ---------------------------------------------------------------------------------------------


def _bits(x: float) -> int:
    """Raw IEEE-754 bits of ``x`` as an unsigned 64-bit integer."""
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def _from_bits(bits: int) -> float:
    """Double whose raw IEEE-754 bits are ``bits`` (taken modulo 2**64)."""
    return struct.unpack("<d", struct.pack("<Q", bits & 0xFFFFFFFFFFFFFFFF))[0]


def _hi_word(x: float) -> int:
    """Signed high 32-bit word of ``x``."""
    hi = _bits(x) >> 32
    return hi - (1 << 32) if hi & 0x80000000 else hi


_LN2_HI = _from_bits(0x3FE62E42FEE00000)
_LN2_LO = _from_bits(0x3DEA39EF35793C76)
_TWO54 = _from_bits(0x4350000000000000)
_LG1 = _from_bits(0x3FE5555555555593)
_LG2 = _from_bits(0x3FD999999997FA04)
_LG3 = _from_bits(0x3FD2492494229359)
_LG4 = _from_bits(0x3FCC71C51D8E78AF)
_LG5 = _from_bits(0x3FC7466496CB03DE)
_LG6 = _from_bits(0x3FC39A09D078C69F)
_LG7 = _from_bits(0x3FC2F112DF3E5244)


def fdlibm_log(x: float) -> float:
    """Natural logarithm, bit-identical to fdlibm's ``__ieee754_log`` (Java's ``StrictMath.log``).

    Reduces ``x = 2**k * (1 + f)`` with ``sqrt(2)/2 < 1 + f < sqrt(2)``, then evaluates
    ``log(1 + f) = f - s*(f - R)`` with ``s = f / (2 + f)`` and a degree-14 minimax polynomial
    ``R(s*s)``, adding ``k * ln2`` in two parts; every step is one IEEE double operation.
    """
    hx = _hi_word(x)
    lx = _bits(x) & 0xFFFFFFFF
    k = 0
    if hx < 0x00100000:  # zero, negative or subnormal
        if ((hx & 0x7FFFFFFF) | lx) == 0:
            return -math.inf
        if hx < 0:
            return math.nan
        k -= 54
        x *= _TWO54
        hx = _hi_word(x)
    if hx >= 0x7FF00000:  # inf or NaN
        return x + x
    k += (hx >> 20) - 1023
    hx &= 0x000FFFFF
    i = (hx + 0x95F64) & 0x100000
    x = _from_bits(((hx | (i ^ 0x3FF00000)) << 32) | (_bits(x) & 0xFFFFFFFF))
    k += i >> 20
    f = x - 1.0
    if (0x000FFFFF & (2 + hx)) < 3:  # |f| < 2**-20
        if f == 0.0:
            if k == 0:
                return 0.0
            dk = float(k)
            return dk * _LN2_HI + dk * _LN2_LO
        r = f * f * (0.5 - 0.33333333333333333 * f)
        if k == 0:
            return f - r
        dk = float(k)
        return dk * _LN2_HI - ((r - dk * _LN2_LO) - f)
    s = f / (2.0 + f)
    dk = float(k)
    z = s * s
    i = hx - 0x6147A
    w = z * z
    j = 0x6B851 - hx
    t1 = w * (_LG2 + w * (_LG4 + w * _LG6))
    t2 = z * (_LG1 + w * (_LG3 + w * (_LG5 + w * _LG7)))
    i |= j
    r = t2 + t1
    if i > 0:
        hfsq = 0.5 * f * f
        if k == 0:
            return f - (hfsq - s * (hfsq + r))
        return dk * _LN2_HI - ((hfsq - (s * (hfsq + r) + dk * _LN2_LO)) - f)
    if k == 0:
        return f - s * (f - r)
    return dk * _LN2_HI - ((s * (f - r) - dk * _LN2_LO) - f)


class JavaRandom:
    """``java.util.Random``: the 48-bit linear congruential generator and its derived draws."""

    _MULTIPLIER = 0x5DEECE66D
    _ADDEND = 0xB
    _MASK = (1 << 48) - 1

    def __init__(self, seed: int) -> None:
        self._seed = (seed ^ self._MULTIPLIER) & self._MASK
        self._next_gaussian: float | None = None

    def next_bits(self, bits: int) -> int:
        """``next(bits)``: the top ``bits`` bits of the new state, as a signed Java int."""
        if not 1 <= bits <= 32:
            raise ValueError(f"bits must be in 1..32, got {bits}")
        self._seed = (self._seed * self._MULTIPLIER + self._ADDEND) & self._MASK
        value = self._seed >> (48 - bits)
        return value - (1 << 32) if value & 0x80000000 else value

    def next_long(self) -> int:
        """``nextLong()`` as a signed 64-bit integer."""
        value = ((self.next_bits(32) << 32) + self.next_bits(32)) & 0xFFFFFFFFFFFFFFFF
        return value - (1 << 64) if value >> 63 else value

    def next_double(self) -> float:
        """``nextDouble()``: uniform on [0, 1) with 53 random bits."""
        return ((self.next_bits(26) << 27) + self.next_bits(27)) * 1.1102230246251565e-16

    def next_gaussian(self) -> float:
        """``nextGaussian()``: Marsaglia's polar method with ``StrictMath`` log and sqrt."""
        if self._next_gaussian is not None:
            value, self._next_gaussian = self._next_gaussian, None
            return value
        while True:
            v1 = 2.0 * self.next_double() - 1.0
            v2 = 2.0 * self.next_double() - 1.0
            s = v1 * v1 + v2 * v2
            if 0.0 < s < 1.0:
                break
        multiplier = math.sqrt(-2.0 * fdlibm_log(s) / s)
        self._next_gaussian = v2 * multiplier
        return v1 * multiplier


# ---------------------------------------------------------------------------------------------
# Synthetic probability sequences
# ---------------------------------------------------------------------------------------------


def _round2(x: float) -> float:
    """``Math.round(x * 100) / 100.0`` (round half up to two decimals), as Java computes it."""
    y = x * 100.0
    fl = math.floor(y)
    return float(fl + 1 if y - fl >= 0.5 else fl) / 100.0


def _round2_array(x: np.ndarray) -> np.ndarray:
    """Vectorised :func:`_round2`."""
    y = x * 100.0
    fl = np.floor(y)
    return (fl + (y - fl >= 0.5)) / 100.0


def _check_length(T: int) -> None:
    if isinstance(T, bool) or not isinstance(T, int | np.integer) or T < 0:
        raise ValueError(f"T must be a non-negative integer, got {T!r}")


class TlnsTrace(NamedTuple):
    """A TLNS path with its inputs: p_1..p_T, the Gaussian draws g_1..g_T, and the clipping
    flags (-1 where round2(...) fell below 0 and was set to 0, +1 where it exceeded 1, else 0)."""

    probabilities: np.ndarray
    gaussians: np.ndarray
    clipped: np.ndarray


def tlns_trace(T: int, *, seed: int = 1, p0: float = 0.05, step: float = 0.0025) -> TlnsTrace:
    """TLNS sequence p_t = clamp[0,1](round2(p_{t-1} + step * g_t)) for t = 1..T.

    g_t are successive ``nextGaussian()`` values of ``java.util.Random(seed)`` and round2 is
    ``Math.round(x * 100) / 100.0``; the result is bit-identical to the JDK computation. (The
    usual Java round-to-two-decimals idioms, e.g. BigDecimal HALF_UP or ``Math.rint``, give the
    same path for the default parameters over at least 10,000 slots.)
    """
    _check_length(T)
    rnd = JavaRandom(seed)
    probabilities = np.empty(T, dtype=np.float64)
    gaussians = np.empty(T, dtype=np.float64)
    clipped = np.zeros(T, dtype=np.int8)
    p = float(p0)
    for t in range(T):
        g = rnd.next_gaussian()
        q = _round2(p + step * g)
        if q < 0.0:
            q, clipped[t] = 0.0, -1
        elif q > 1.0:
            q, clipped[t] = 1.0, 1
        gaussians[t] = g
        probabilities[t] = p = q
    return TlnsTrace(probabilities, gaussians, clipped)


def tlns_probabilities(T: int) -> np.ndarray:
    """Probabilities p_1..p_T of the TLNS stream (p_0 = 0.05, Java ``Random(1)``); see
    :func:`tlns_trace`."""
    return tlns_trace(T).probabilities


def sin_probabilities(T: int) -> np.ndarray:
    """Sin stream: p_t = round2(0.05 * sin(0.01 t) + 0.075) for t = 1..T."""
    _check_length(T)
    t = np.arange(1, T + 1, dtype=np.float64)
    return _round2_array(0.05 * np.sin(0.01 * t) + 0.075)


def log_probabilities(T: int) -> np.ndarray:
    """Log stream: p_t = round2(0.25 / (1 + exp(-0.01 t))) for t = 1..T."""
    _check_length(T)
    t = np.arange(1, T + 1, dtype=np.float64)
    return _round2_array(0.25 / (1.0 + np.exp(-0.01 * t)))


def synthetic_stream(
    probabilities: Iterable[float], n_users: int, rng: np.random.Generator
) -> Iterator[np.ndarray]:
    """Binary stream (d = 2): per slot, an int64 array of ``n_users`` states, each 1 with
    probability p_t and 0 otherwise, independently across users and slots."""
    if isinstance(n_users, bool) or not isinstance(n_users, int | np.integer) or n_users < 0:
        raise ValueError(f"n_users must be a non-negative integer, got {n_users!r}")
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator")
    for t, p in enumerate(probabilities, start=1):
        p = float(p)
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"probability at slot {t} must be in [0, 1], got {p!r}")
        yield (rng.random(n_users) < p).astype(np.int64)


# ---------------------------------------------------------------------------------------------
# Real data
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamData:
    """Per-slot location of every user.

    Attributes:
        users: shape (n,), the user ids in ascending order (int64, or str if not all integers).
        cells: shape (T, n), int64; ``cells[t, i]`` is the cell of user ``i`` at slot ``t``, the
            cell of the user's latest report up to the end of that slot, or -1 before the first.
        d: number of cells; valid cells are 0..d-1.
        slot_starts: shape (T,), ``datetime64[s]`` start of each slot (times as in the source:
            T-Drive local time, Foursquare UTC).
        slot_seconds: length of a slot in seconds.
        labels: shape (d,), a name for each cell.
    """

    users: np.ndarray
    cells: np.ndarray
    d: int
    slot_starts: np.ndarray
    slot_seconds: int
    labels: np.ndarray

    def __post_init__(self) -> None:
        if self.cells.ndim != 2 or self.cells.dtype != np.int64:
            raise ValueError("cells must be a 2-D int64 array")
        T, n = self.cells.shape
        if self.users.shape != (n,) or self.slot_starts.shape != (T,):
            raise ValueError("users / slot_starts do not match the shape of cells")
        if self.labels.shape != (self.d,):
            raise ValueError("labels must have one entry per cell")
        if self.cells.size and (self.cells.min() < -1 or self.cells.max() >= self.d):
            raise ValueError("cells must lie in -1..d-1")

    @property
    def T(self) -> int:
        """Number of slots."""
        return self.cells.shape[0]

    @property
    def n(self) -> int:
        """Number of users."""
        return self.cells.shape[1]

    def histograms(self) -> np.ndarray:
        """True counts: shape (T, d), users per cell at each slot (users not yet seen excluded)."""
        offsets = self.cells + self.d * np.arange(self.T, dtype=np.int64)[:, None]
        counts = np.bincount(offsets[self.cells >= 0], minlength=self.T * self.d)
        return counts.reshape(self.T, self.d)
