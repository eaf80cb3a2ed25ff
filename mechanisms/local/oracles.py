"""OUE and GRR randomisation from uniform 32-bit words, as every client library draws it.

Each Bernoulli draw compares one uniform word ``u`` in ``[0, 2**32)`` with an integer threshold
``T``: the outcome is ``u < T``, probability exactly ``T / 2**32``.

- OUE (optimised unary encoding, papers/002 2.3): the true cell's bit is 1 with probability 1/2
  (``T = 2**31``), every other bit with ``q = 1/(e^eps + 1)`` rounded *up* to
  ``T = ceil(q 2**32)``: OUE's privacy ratio ``(1 - q)/q`` shrinks as ``q`` grows, so the
  effective epsilon is at most ``eps``. Bit ``j`` uses word ``j``: ``d`` words per report.
- GRR (generalised randomised response): the true cell is kept with probability
  ``p = e^eps/(e^eps + d - 1)`` rounded *down* to ``T = floor(p 2**32)`` (keeping less often
  lowers the ratio), on word 0; otherwise the reported cell is ``(cell + 1 + r) mod d`` with
  ``r`` uniform in ``[0, d - 1)``, drawn by rejection from the following words (a word at or
  above the largest multiple of ``d - 1`` below ``2**32`` is skipped), so it is exactly uniform.

``e^eps`` is :func:`portable_exp`: range reduction and a Taylor polynomial in plain double
arithmetic, which Python, JavaScript and Java compute bit for bit alike (a platform's ``exp``
may differ in its last bit between libraries and browsers, and so could a threshold).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

WORD = 2**32
HALF_WORD = 2**31
#: The largest budget a report may spend (e^500 is finite; beyond ~50 nothing is hidden anyway).
MAX_EPS = 500.0

_LN2_HI = 6.93147180369123816490e-01  # ln 2 with its low 21 bits zero: k * _LN2_HI is exact
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e00
_DEGREE = 13
_COEFFICIENTS = [1.0 / float(math.factorial(n)) for n in range(_DEGREE + 1)]


def portable_exp(x: float) -> float:
    """e^x for 0 <= x <= 500 in double arithmetic alone (every operation correctly rounded, so
    every language gets the same bits): x = k ln 2 + r with |r| <= ln 2 / 2, e^r by its Taylor
    polynomial of degree 13 (truncation below 1e-17), times 2^k. Within a few ulp of e^x."""
    if not 0.0 <= x <= MAX_EPS:
        raise ValueError(f"portable_exp takes 0 <= x <= {MAX_EPS}, got {x!r}")
    k = math.floor(x * _INV_LN2 + 0.5)
    r = (x - k * _LN2_HI) - k * _LN2_LO
    p = _COEFFICIENTS[_DEGREE]
    for n in range(_DEGREE - 1, -1, -1):
        p = p * r + _COEFFICIENTS[n]
    return math.ldexp(p, k)  # exact: 2^k times p in [0.7, 1.5), far from overflow


def check_eps(eps: float) -> float:
    """``eps`` as a float, or ValueError unless it is finite and in (0, MAX_EPS]."""
    e = float(eps)
    if not 0.0 < e <= MAX_EPS:
        raise ValueError(f"a report's budget must lie in (0, {MAX_EPS}], got {eps!r}")
    return e


def oue_threshold(eps: float) -> int:
    """OUE's threshold for the bits of the other cells: ceil(q 2**32), q = 1/(e^eps + 1)."""
    q = 1.0 / (portable_exp(check_eps(eps)) + 1.0)
    return max(1, math.ceil(q * 4294967296.0))


def grr_keep_threshold(eps: float, d: int) -> int:
    """GRR's threshold for keeping the true cell: floor(p 2**32), p = e^eps/(e^eps + d - 1)."""
    e = portable_exp(check_eps(eps))
    return math.floor(e / (e + float(d - 1)) * 4294967296.0)


def plbu_uses_grr(eps: float, d: int) -> bool:
    """Whether PLBU reports through GRR at budget ``eps`` over ``d`` cells: as the evaluation
    (:class:`mechanisms.baselines.ldp.Plbu`), when GRR's variance (e^eps + d - 2)/(e^eps - 1)^2
    is below OUE's 4 e^eps/(e^eps - 1)^2, i.e. when e^eps + d - 2 < 4 e^eps."""
    e = portable_exp(check_eps(eps))
    return e + float(d - 2) < 4.0 * e


def oue_bits(cell: int, d: int, threshold: int, words: np.ndarray) -> np.ndarray:
    """The OUE report of ``cell`` over ``d`` cells (a bool array) from ``d`` uniform words."""
    w = np.asarray(words, dtype=np.uint32)
    if w.shape != (d,):
        raise ValueError(f"OUE over {d} cells takes {d} words, got {w.shape}")
    bits = w < np.uint32(threshold)
    bits[cell] = bool(w[cell] < HALF_WORD)
    return bits


def grr_cell(cell: int, d: int, keep: int, next_word: Callable[[], int]) -> int:
    """The GRR report of ``cell`` over ``d`` cells, drawing words from ``next_word`` (none over
    one cell, which is always kept)."""
    if d == 1:
        return cell
    if next_word() < keep:
        return cell
    others = d - 1
    limit = WORD - WORD % others
    while True:
        u = next_word()
        if u < limit:
            return (cell + 1 + u % others) % d


def pack_bits(bits: np.ndarray) -> bytes:
    """``d`` bits as ceil(d/8) bytes: bit j is bit (j mod 8) of byte j // 8 (least significant
    first), the unused high bits of the last byte zero."""
    return np.packbits(np.asarray(bits, dtype=bool), bitorder="little").tobytes()


def unpack_bits(data: bytes, d: int) -> np.ndarray:
    """The ``d`` bits :func:`pack_bits` packed; ValueError for a wrong length or a set unused
    bit (the packing is unambiguous: one byte string per bit vector)."""
    if len(data) != (d + 7) // 8:
        raise ValueError(f"{d} bits take {(d + 7) // 8} bytes, got {len(data)}")
    bits = np.unpackbits(np.frombuffer(data, dtype=np.uint8), bitorder="little")
    if bits[d:].any():
        raise ValueError("the unused high bits of the last byte must be zero")
    return bits[:d].astype(bool)
