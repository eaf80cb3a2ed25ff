"""The bounds a JSON record of any input topic must keep before anything decodes it.

A record is refused before decoding when it is longer than :data:`MAX_RECORD_BYTES`
(``too_large``) or nests arrays and objects deeper than :data:`MAX_JSON_DEPTH` (``too_deep``).
Without the depth bound one small record could stop every worker: a report whose value is a
thousand nested brackets (about 2 KB) makes a recursive decoder raise ``RecursionError`` (or, in
compiled code without a guard, overflow the C stack), and the same record waits after a restart.
Every decoder of input records (reports, requirements, source topics, watermark records) calls
:func:`screen` first, on the fast path and on the per-record path alike, so both reach the same
outcome for every record.

The depth is measured without decoding: counting ``[`` and ``{`` bytes bounds it from above, so
a batch's bracket bytes are counted per record in one vectorised pass, and only a record with
more than :data:`MAX_JSON_DEPTH` of them is scanned exactly (:func:`json_depth`, vectorised, and
aware of strings and their escapes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np

from streams.records.field_formats import Reason
from streams.records.field_parsing import Rejection

__all__ = ["MAX_JSON_DEPTH", "MAX_RECORD_BYTES", "json_depth", "screen", "screen_one"]

#: The deepest nesting of arrays and objects a JSON record may have (a report's value is at most
#: 2 deep; a source record's mapped paths rarely 10).
MAX_JSON_DEPTH: Final = 64
#: The longest record value accepted, in bytes (Kafka's default ``message.max.bytes`` is about
#: 1 MB, so a record within it is never refused for its size).
MAX_RECORD_BYTES: Final = 4 * 1024 * 1024

_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_OPEN = (ord("["), ord("{"))
_CLOSE = (ord("]"), ord("}"))


def json_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in ``raw``, outside strings: exact for valid
    JSON, and for any bytes the depth a decoder would reach before failing on them."""
    a = np.frombuffer(raw, dtype=np.uint8)
    if a.size == 0:
        return 0
    backslash = a == _BACKSLASH
    idx = np.arange(a.size)
    # position of the last byte up to i that is not a backslash
    last_plain = np.maximum.accumulate(np.where(backslash, -1, idx))
    run_before = np.empty(a.size, dtype=np.int64)  # backslashes just before i
    run_before[0] = 0
    run_before[1:] = idx[:-1] - last_plain[:-1]
    quotes = (a == _QUOTE) & (run_before % 2 == 0)
    outside = (np.cumsum(quotes) % 2 == 0) & ~quotes
    step = (((a == _OPEN[0]) | (a == _OPEN[1])) & outside).astype(np.int64)
    step -= (((a == _CLOSE[0]) | (a == _CLOSE[1])) & outside)
    return max(int(np.cumsum(step).max()), 0)


def screen_one(raw: bytes) -> tuple[Reason, str] | None:
    """Why ``raw`` must not be decoded (``too_large`` or ``too_deep``, with a detail), or
    ``None`` when it keeps the bounds."""
    if len(raw) > MAX_RECORD_BYTES:
        return Reason.TOO_LARGE, (f"{len(raw)} bytes, more than the {MAX_RECORD_BYTES} a record "
                                  "may have")
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH:
        depth = json_depth(raw)
        if depth > MAX_JSON_DEPTH:
            return Reason.TOO_DEEP, (f"nested {depth} deep, more than the {MAX_JSON_DEPTH} "
                                     "levels a record may have")
    return None


def screen(values: Sequence[bytes | None]) -> list[Rejection]:
    """The rejections of the values (by position) that must not be decoded (:func:`screen_one`);
    ``None`` values (tombstones) are left to the decoders. The bracket bytes of the whole batch
    are counted in one vectorised pass; only the values with more than :data:`MAX_JSON_DEPTH`
    of them are looked at one by one."""
    if not values:
        return []
    plain = values if None not in values else [b"" if v is None else v for v in values]
    lengths = np.fromiter(map(len, plain), dtype=np.int64, count=len(plain))  # type: ignore[arg-type]
    suspects = lengths > MAX_RECORD_BYTES
    if int(lengths.sum()) > MAX_JSON_DEPTH:
        a = np.frombuffer(b"".join(plain), dtype=np.uint8)  # type: ignore[arg-type]
        # "[" (0x5b) and "{" (0x7b) are the only bytes that become 0x7b with bit 0x20 set
        hits = np.flatnonzero((a | 0x20) == _OPEN[1])
        per_value = np.diff(np.searchsorted(hits, np.cumsum(lengths)), prepend=0)
        suspects |= per_value > MAX_JSON_DEPTH
    out: list[Rejection] = []
    for i in np.flatnonzero(suspects).tolist():
        found = screen_one(plain[i])  # type: ignore[arg-type]
        if found is not None:
            out.append(Rejection(i, found[0], found[1]))
    return out
