"""The local-DP collector's releases (``<prefix>.ldp-releases``, docs/ldp-reports.md) read
back, with normal error bars from the standard deviations they carry."""

from __future__ import annotations

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
    quantile; None when the release has no ``std``). A record that is not such a release is
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
        doc["lower"] = None if std is None else [c - z * s for c, s in zip(doc["counts"], std,
                                                                            strict=True)]
        doc["upper"] = None if std is None else [c + z * s for c, s in zip(doc["counts"], std,
                                                                            strict=True)]
        out.append(doc)
    return out
