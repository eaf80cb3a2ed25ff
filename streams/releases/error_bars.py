"""Error bars of a published release: per cell, the exact quantile of the noise the job added
(the formulas are in :mod:`streams.releases.client`)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np

DEFAULT_CONFIDENCE: Final = 0.95
#: The noise distributions whose quantiles the client knows.
DISTRIBUTIONS: Final = ("discrete_laplace", "laplace")

Number = int | float


@dataclass(frozen=True)
class Noise:
    """The noise a published slot added: its distribution and per-cell standard deviation;
    ``thinned``: the publication sampled users away, so its bars would not hold the true
    count at their confidence and none are given."""

    distribution: str
    scale: tuple[float, ...]
    thinned: bool = False


def check_confidence(confidence: float) -> None:
    """``ValueError`` unless ``confidence`` lies in (0, 1)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"the confidence must be in (0, 1), got {confidence!r}")


def half_widths(distribution: str, scale: Iterable[float], confidence: float) -> np.ndarray:
    """Per cell, the smallest q with P(|noise| <= q) >= ``confidence`` for zero-mean noise of
    standard deviation ``scale`` (formulas: :mod:`streams.releases.client`); integers for
    ``discrete_laplace``."""
    check_confidence(confidence)
    s = np.asarray(list(scale), dtype=np.float64)
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError("noise scales must be finite and >= 0")
    miss = 1.0 - confidence
    if distribution == "laplace":
        return (s / math.sqrt(2.0)) * -math.log(miss)
    if distribution != "discrete_laplace":
        raise ValueError(f"unknown noise distribution {distribution!r}")
    v = s * s
    # a from v = 2a/(1-a)^2, in the form without cancellation for small v
    a = v / (v + 1.0 + np.sqrt(2.0 * v + 1.0))
    positive = a > 0
    safe = np.where(positive, a, 0.5)

    def tail(k: np.ndarray) -> np.ndarray:  # P(|noise| > k)
        return 2.0 * safe ** (k + 1.0) / (1.0 + safe)

    with np.errstate(divide="ignore"):
        k = np.ceil(np.log(miss * (1.0 + safe) / 2.0) / np.log(safe)) - 1.0
    k = np.maximum(k, 0.0)
    k = np.where(tail(k) > miss, k + 1.0, k)  # rounding at a boundary, either way
    k = np.where((k > 0) & (tail(k - 1.0) <= miss), k - 1.0, k)
    return np.where(positive, k, 0.0).astype(np.int64)


def error_bars(histogram: Iterable[Number], noise: Noise,
               confidence: float = DEFAULT_CONFIDENCE) -> tuple[tuple[Number, ...],
                                                                tuple[Number, ...]]:
    """``(lower, upper)`` per cell: the histogram minus and plus :func:`half_widths`."""
    h = np.asarray(list(histogram))
    q = half_widths(noise.distribution, noise.scale, confidence)
    if q.shape != h.shape:
        raise ValueError(f"{q.size} noise scales for {h.size} cells")
    if not np.issubdtype(h.dtype, np.integer):
        h, q = h.astype(np.float64), q.astype(np.float64)
    return tuple((h - q).tolist()), tuple((h + q).tolist())
