"""ISO 8601 event times of a whole batch at once (:func:`iso_times_ms`).

:func:`~streams.records.field_parsing.parse_time` parses one string with ``datetime`` in about
2 us. Telemetry writes its times in a few fixed shapes, ``2026-12-03T10:15:00.123Z`` above all,
so here the strings of those shapes are read as columns of character codes and converted with
integer arithmetic over the batch. Every string of another shape, and every string of these
shapes that is not a valid time of 1970 or later (a month 13, a 30 February, an hour 24), is left
to ``parse_time``, which gives it the same value or the same rejection as before: a string is
converted here only where ``parse_time`` would give exactly this value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

__all__ = ["iso_times_ms"]

#: ``YYYY-MM-DDThh:mm:ss``: the positions of the digits and of the separators.
_BASE: Final = 19
_SEPARATORS: Final = {4: "-", 7: "-", 10: "T", 13: ":", 16: ":"}
_DIGITS: Final = (0, 1, 2, 3, 5, 6, 8, 9, 11, 12, 14, 15, 17, 18)
#: Fraction digits taken on the fast path (``.fff`` and ``.ffffff``, or none).
_FRACTIONS: Final = (0, 3, 6)
_DAYS_IN_MONTH: Final = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31], np.int64)
_MS_PER_DAY: Final = 86_400_000


def _number(codes: np.ndarray, start: int, width: int) -> np.ndarray:
    """The decimal number of ``width`` digit codes from position ``start`` (int64 per
    string; ``codes`` holds a row per position)."""
    out = codes[start] - 48
    for k in range(start + 1, start + width):
        out = out * 10 + (codes[k] - 48)
    return out


def _days_from_civil(y: np.ndarray, m: np.ndarray, d: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of the proleptic Gregorian dates (years >= 1)."""
    y = y - (m <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m + np.where(m > 2, -3, 9)) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def _shape_of(length: int) -> tuple[int, int] | None:
    """(fraction digits, offset length) of a fast-path string of ``length`` characters."""
    for frac in _FRACTIONS:
        head = _BASE + (frac + 1 if frac else 0)
        if length == head + 1:
            return frac, 1  # Z
        if length == head + 6:
            return frac, 6  # +hh:mm
    return None


def _convert(codes: np.ndarray, frac: int, tz: int) -> tuple[np.ndarray, np.ndarray]:
    """Epoch ms and validity of strings of one shape (character codes, a row per position
    and a column per string)."""
    n = codes.shape[1]
    digit = (codes >= 48) & (codes <= 57)
    ok = digit[list(_DIGITS)].all(axis=0)
    for k, ch in _SEPARATORS.items():
        ok &= codes[k] == ord(ch)
    head = _BASE
    if frac:
        ok &= codes[_BASE] == ord(".")
        ok &= digit[_BASE + 1:_BASE + 1 + frac].all(axis=0)
        head = _BASE + 1 + frac
    if tz == 1:
        ok &= codes[head] == ord("Z")
        offset_min = np.zeros(n, dtype=np.int64)
    else:
        sign = codes[head]
        ok &= ((sign == ord("+")) | (sign == ord("-"))) & (codes[head + 3] == ord(":"))
        ok &= digit[[head + 1, head + 2, head + 4, head + 5]].all(axis=0)
        oh, om = _number(codes, head + 1, 2), _number(codes, head + 4, 2)
        ok &= (oh <= 23) & (om <= 59)
        offset_min = np.where(sign == ord("-"), -1, 1) * (oh * 60 + om)
    if not ok.all():
        codes = np.where(ok[None, :], codes, 48)  # strings already refused read as zeros
    y, mo, d = _number(codes, 0, 4), _number(codes, 5, 2), _number(codes, 8, 2)
    h, mi, s = _number(codes, 11, 2), _number(codes, 14, 2), _number(codes, 17, 2)
    ms = _number(codes, _BASE + 1, 3) if frac else np.zeros_like(y)
    leap = ((y % 4 == 0) & (y % 100 != 0)) | (y % 400 == 0)
    month_days = _DAYS_IN_MONTH[np.clip(mo, 0, 12)] + ((mo == 2) & leap)
    ok &= (y >= 1) & (mo >= 1) & (mo <= 12) & (d >= 1) & (d <= month_days)
    ok &= (h <= 23) & (mi <= 59) & (s <= 59)
    days = _days_from_civil(np.maximum(y, 1), np.clip(mo, 1, 12), np.maximum(d, 1))
    out = (days * _MS_PER_DAY + ((h * 60 + mi) * 60 + s) * 1000 + ms
           - offset_min * 60_000)
    ok &= out >= 0  # before 1970: parse_time's rejection
    return out, ok


def iso_times_ms(values: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Epoch ms of each string and whether it was converted here (module doc).

    Where the mask is false the value is ``-1`` and the caller parses the string itself.
    """
    n = len(values)
    out = np.full(n, -1, dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    if not n:
        return out, done
    lengths = list(map(len, values))
    kinds = set(lengths)
    for length in sorted(kinds):
        shape = _shape_of(length)
        if shape is None:
            continue
        if len(kinds) == 1:
            rows, texts = np.arange(n), list(values)
        else:
            rows = np.flatnonzero(np.asarray(lengths) == length)
            texts = [values[i] for i in rows.tolist()]
        ms, ok = _convert(_codes(texts, length), *shape)
        out[rows[ok]] = ms[ok]
        done[rows[ok]] = True
    return out, done


def _codes(texts: list[str], length: int) -> np.ndarray:
    """The character codes of strings of one length: a row per position, a column per
    string (int64)."""
    blob = "".join(texts)
    if blob.isascii():
        flat = np.frombuffer(blob.encode("ascii"), dtype=np.uint8)
    else:
        flat = np.array(texts, dtype=f"<U{length}").view(np.uint32)
    return flat.reshape(len(texts), length).T.astype(np.int64, order="C")
