"""The local-DP collector's releases (``<prefix>.ldp-releases``, docs/ldp-reports.md) read
back, with normal error bars from the standard deviations they carry."""

from __future__ import annotations

import math
from collections.abc import Iterable
from statistics import NormalDist
from typing import Any

import orjson

from streams.ldp_collector.stream_time import RELEASE_SCHEMA


def decode_ldp_releases(records: Iterable[tuple[bytes | None, bytes | None]], *,
                        stream: str | None = None, from_slot: int | None = None,
                        confidence: float = 0.95) -> list[dict[str, Any]]:
    """The releases on the topic, the first per key (one sent again after a restart is the
    same bytes), of ``stream`` (all when None) from ``from_slot`` on, in topic order; each
    with ``confidence``, ``lower`` and ``upper`` per cell (``counts ± z std``, z the normal
    quantile; None when the release has no ``std``, or at a cell whose ``std`` is None: an mtsp
    cell sharing its interval). A record that is not such a release is
    skipped."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    seen: set[bytes] = set()
    out = []
    for key, value in records:
        if key is None or value is None or key in seen:
            continue
        try:
            doc = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(doc, dict) or doc.get("schema") != RELEASE_SCHEMA:
            continue
        seen.add(key)
        if (stream is not None and doc["stream"] != stream) or \
                (from_slot is not None and doc["slot"] < from_slot):
            continue
        std = doc.get("std")
        doc["confidence"] = confidence
        doc["lower"] = None if std is None else [
            None if s is None else c - z * s for c, s in zip(doc["counts"], std, strict=True)]
        doc["upper"] = None if std is None else [
            None if s is None else c + z * s for c, s in zip(doc["counts"], std, strict=True)]
        out.append(doc)
    return out


def range_queries(docs: list[dict[str, Any]], a: int, b: int, *, delta: int = 1,
                  ratio: float | None = None, margin: float = 0.0) -> list[dict[str, Any]]:
    """MTSP-LDP's budget-free queries (papers/002 M4, :mod:`mechanisms.baselines.stream_queries`)
    over one stream's releases, oldest first: each release gains ``range``, with ``from`` and
    ``to`` (the value cells [a, b]), ``count`` (the range's count at the slot: its cells' counts
    summed left to right, which is the released tree's minimum cover, every node summing its
    cells), ``std`` (the count's standard deviation when the release's bars cover the range:
    every cell estimated alone, or for mtsp a range of whole intervals; None otherwise),
    ``period`` (the counts of the ``delta`` slots ending there, summed oldest first; None for
    the first delta - 1) and, with ``ratio``, ``event`` (1 when the period exceeds ``ratio``
    times the previous period, clipped at 0, plus ``margin``; 0 without a previous period).
    Every sum runs left to right, as the client libraries compute it. Releases are
    post-processing: no budget is spent. ValueError for a range outside the cells or a delta
    longer than the releases."""
    if not docs:
        return docs
    d = len(docs[0]["counts"])
    if not 0 <= a <= b < d:
        raise ValueError(f"the range must satisfy 0 <= A <= B < {d} (the value cells), got "
                         f"{a}:{b}")
    if not 1 <= delta <= len(docs):
        raise ValueError(f"--delta must lie in [1, {len(docs)}] (the releases read), got "
                         f"{delta}")
    counts = [_sum(doc["counts"][a : b + 1]) for doc in docs]
    periods: list[float | None] = [
        None if i + 1 < delta else _sum(counts[i + 1 - delta : i + 1])
        for i in range(len(docs))]
    for i, doc in enumerate(docs):
        doc["range"] = {"from": a, "to": b, "count": counts[i], "std": _range_std(doc, a, b),
                        "period": periods[i]}
        if ratio is not None:
            before = periods[i - delta] if i >= delta else None
            doc["range"]["event"] = int(before is not None and periods[i] > ratio * max(
                before, 0.0) + margin)  # type: ignore[operator]
    return docs


def _sum(values: Iterable[float]) -> float:
    """The values' sum, left to right."""
    total = 0.0
    for x in values:
        total += x
    return total


def _range_std(doc: dict[str, Any], a: int, b: int) -> float | None:
    """The standard deviation of the sum of cells [a, b] of one release, or None. Cells are
    estimated from independent bits (OUE; GRR's negative covariance only makes the sum of
    variances larger), so the variances add; an mtsp range adds its whole intervals'."""
    intervals = doc.get("intervals")
    if intervals is not None:
        starts = intervals["starts"]
        if a not in starts or b + 1 not in starts:  # cells past b share b's interval
            return None
        chosen = intervals["std"][starts.index(a) : starts.index(b + 1)]
    else:
        std = doc.get("std")
        if std is None or any(s is None for s in std[a : b + 1]):
            return None
        chosen = std[a : b + 1]
    return math.sqrt(_sum(s * s for s in chosen))
