"""The domains of a stream: how report values map to histogram cells.

A :class:`Domain` maps raw report values to cell indices ``0..size-1`` and never clips: a value of
the wrong kind is rejected as ``bad_type``, one outside the domain as ``out_of_domain``. Cell
indices (:class:`CellDomain`), equal-width bins of numbers (:class:`BinDomain`), a grid over a box
of points (:class:`GridDomain`) or labels (:class:`CategoryDomain`); :func:`domain_from_config`
rebuilds any of them from :meth:`Domain.to_config`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from streams.records.field_formats import Reason
from streams.records.field_parsing import RecordError, Rejection, json_type

__all__ = [
    "BinDomain",
    "CategoryDomain",
    "CellDomain",
    "Domain",
    "GridDomain",
    "domain_from_config",
]


def _is_number(value: object) -> bool:
    return (type(value) is int or type(value) is float) and math.isfinite(value)


class Domain(ABC):
    """Maps raw report values to cell indices ``0..size-1``; never clips."""

    size: int

    @abstractmethod
    def map_values(self, values: Sequence[object]) -> tuple[np.ndarray, list[Rejection]]:
        """Return ``cells`` (int64, ``-1`` where rejected) and the rejections (by position)."""

    @abstractmethod
    def to_config(self) -> dict[str, Any]:
        """A JSON-ready description that :func:`domain_from_config` turns back into the domain."""

    def cell(self, value: object) -> int:
        """Map one value; raise :class:`RecordError` if it is rejected."""
        cells, rejected = self.map_values([value])
        if rejected:
            raise RecordError(rejected[0].reason, rejected[0].detail)
        return int(cells[0])


@dataclass(frozen=True)
class CellDomain(Domain):
    """Values are cell indices: integers in ``[0, size)``."""

    size: int

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError("a domain needs at least one cell")

    def map_values(self, values: Sequence[object]) -> tuple[np.ndarray, list[Rejection]]:
        """Vectorised when every value is an integer of a sane size."""
        n = len(values)
        rejected: list[Rejection] = []
        if all(type(v) is int for v in values):
            try:
                cells = np.fromiter(values, dtype=np.int64, count=n)
            except OverflowError:
                cells = None
            if cells is not None:
                bad = np.flatnonzero((cells < 0) | (cells >= self.size))
                for i in bad.tolist():
                    rejected.append(self._out(i, values[i]))
                cells[bad] = -1
                return cells, rejected
        cells = np.full(n, -1, dtype=np.int64)
        for i, v in enumerate(values):
            if type(v) is not int:
                rejected.append(
                    Rejection(i, Reason.BAD_TYPE, f"value must be a cell index, not {json_type(v)}")
                )
            elif 0 <= v < self.size:
                cells[i] = v
            else:
                rejected.append(self._out(i, v))
        return cells, rejected

    def _out(self, i: int, v: object) -> Rejection:
        return Rejection(i, Reason.OUT_OF_DOMAIN, f"cell {v} outside [0, {self.size})")

    def to_config(self) -> dict[str, Any]:
        """``{"kind": "cells", "size": d}``."""
        return {"kind": "cells", "size": self.size}


def _bin(values: np.ndarray, low: float, high: float, bins: int) -> np.ndarray:
    """Equal-width bins over ``[low, high]``; ``high`` itself falls in the last bin."""
    idx = np.floor((values - low) * (bins / (high - low))).astype(np.int64)
    return np.minimum(idx, bins - 1)


@dataclass(frozen=True)
class BinDomain(Domain):
    """Values are numbers in ``[low, high]``, split into ``bins`` equal-width cells."""

    low: float
    high: float
    bins: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.low) and math.isfinite(self.high) and self.low < self.high):
            raise ValueError("need finite low < high")
        if self.bins < 1:
            raise ValueError("a domain needs at least one cell")

    @property
    def size(self) -> int:  # type: ignore[override]
        """Number of cells."""
        return self.bins

    def map_values(self, values: Sequence[object]) -> tuple[np.ndarray, list[Rejection]]:
        """Numbers outside ``[low, high]`` are ``out_of_domain``; non-numbers ``bad_type``."""
        n = len(values)
        cells = np.full(n, -1, dtype=np.int64)
        rejected: list[Rejection] = []
        ok = [i for i, v in enumerate(values) if _is_number(v)]
        if len(ok) < n:
            okset = set(ok)
            for i, v in enumerate(values):
                if i not in okset:
                    rejected.append(
                        Rejection(i, Reason.BAD_TYPE, f"value must be a number, not {json_type(v)}")
                    )
        if ok:
            pos = np.asarray(ok, dtype=np.int64)
            x = np.asarray([values[i] for i in ok], dtype=np.float64)
            inside = (x >= self.low) & (x <= self.high)
            cells[pos[inside]] = _bin(x[inside], self.low, self.high, self.bins)
            for i in pos[~inside].tolist():
                rejected.append(
                    Rejection(
                        i,
                        Reason.OUT_OF_DOMAIN,
                        f"value {values[i]} outside [{self.low}, {self.high}]",
                    )
                )
        rejected.sort(key=lambda r: r.index)
        return cells, rejected

    def to_config(self) -> dict[str, Any]:
        """``{"kind": "bins", "low": ..., "high": ..., "bins": ...}``."""
        return {"kind": "bins", "low": self.low, "high": self.high, "bins": self.bins}


@dataclass(frozen=True)
class GridDomain(Domain):
    """Values are points ``[lon, lat]`` in a box, split into ``cols`` x ``rows`` cells.

    The cell of a point is ``row * cols + col``; the box is closed, so points on its east or north
    edge fall in the last column or row.
    """

    lon_min: float
    lon_max: float
    lat_min: float
    lat_max: float
    cols: int
    rows: int

    def __post_init__(self) -> None:
        box = (self.lon_min, self.lon_max, self.lat_min, self.lat_max)
        if not all(math.isfinite(v) for v in box):
            raise ValueError("the box must be finite")
        if not (self.lon_min < self.lon_max and self.lat_min < self.lat_max):
            raise ValueError("need lon_min < lon_max and lat_min < lat_max")
        if self.cols < 1 or self.rows < 1:
            raise ValueError("a grid needs at least one cell")

    @property
    def size(self) -> int:  # type: ignore[override]
        """Number of cells."""
        return self.cols * self.rows

    def map_values(self, values: Sequence[object]) -> tuple[np.ndarray, list[Rejection]]:
        """Non-points are ``bad_type``; points outside the box are ``out_of_domain``."""
        n = len(values)
        cells = np.full(n, -1, dtype=np.int64)
        rejected: list[Rejection] = []
        ok: list[int] = []
        for i, v in enumerate(values):
            if type(v) is list and len(v) == 2 and _is_number(v[0]) and _is_number(v[1]):
                ok.append(i)
            else:
                rejected.append(
                    Rejection(i, Reason.BAD_TYPE, "value must be a point [lon, lat] of numbers")
                )
        if ok:
            pos = np.asarray(ok, dtype=np.int64)
            pts = np.asarray([values[i] for i in ok], dtype=np.float64)
            lon, lat = pts[:, 0], pts[:, 1]
            inside = (
                (lon >= self.lon_min)
                & (lon <= self.lon_max)
                & (lat >= self.lat_min)
                & (lat <= self.lat_max)
            )
            col = _bin(lon[inside], self.lon_min, self.lon_max, self.cols)
            row = _bin(lat[inside], self.lat_min, self.lat_max, self.rows)
            cells[pos[inside]] = row * self.cols + col
            for i in pos[~inside].tolist():
                rejected.append(
                    Rejection(i, Reason.OUT_OF_DOMAIN, f"point {values[i]} outside the grid box")
                )
        rejected.sort(key=lambda r: r.index)
        return cells, rejected

    def to_config(self) -> dict[str, Any]:
        """``{"kind": "grid", ...}`` with the box and the cell counts."""
        return {
            "kind": "grid",
            "lon_min": self.lon_min,
            "lon_max": self.lon_max,
            "lat_min": self.lat_min,
            "lat_max": self.lat_max,
            "cols": self.cols,
            "rows": self.rows,
        }


@dataclass(frozen=True)
class CategoryDomain(Domain):
    """Values are labels (a country code, a sensor state); cell ``i`` is ``labels[i]``."""

    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.labels:
            raise ValueError("a domain needs at least one cell")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError("labels must be distinct")
        object.__setattr__(self, "_index", {label: i for i, label in enumerate(self.labels)})

    @property
    def size(self) -> int:  # type: ignore[override]
        """Number of cells."""
        return len(self.labels)

    def map_values(self, values: Sequence[object]) -> tuple[np.ndarray, list[Rejection]]:
        """Unknown labels are ``out_of_domain``; non-strings ``bad_type``."""
        index: dict[str, int] = self._index  # type: ignore[attr-defined]
        if set(map(type, values)) <= {str}:
            found = list(map(index.get, values))
            if None not in found:  # every value a known label: no rejection
                return np.asarray(found, dtype=np.int64).reshape(len(values)), []
        cells = np.full(len(values), -1, dtype=np.int64)
        rejected: list[Rejection] = []
        for i, v in enumerate(values):
            if type(v) is not str:
                rejected.append(
                    Rejection(i, Reason.BAD_TYPE, f"value must be a label, not {json_type(v)}")
                )
                continue
            cell = index.get(v)
            if cell is None:
                rejected.append(Rejection(i, Reason.OUT_OF_DOMAIN, f"unknown label {v[:64]!r}"))
            else:
                cells[i] = cell
        return cells, rejected

    def to_config(self) -> dict[str, Any]:
        """``{"kind": "labels", "labels": [...]}``."""
        return {"kind": "labels", "labels": list(self.labels)}


def domain_from_config(config: Mapping[str, Any]) -> Domain:
    """Build a domain from the output of :meth:`Domain.to_config`."""
    kind = config.get("kind")
    if kind == "cells":
        return CellDomain(int(config["size"]))
    if kind == "bins":
        return BinDomain(float(config["low"]), float(config["high"]), int(config["bins"]))
    if kind == "grid":
        return GridDomain(
            float(config["lon_min"]),
            float(config["lon_max"]),
            float(config["lat_min"]),
            float(config["lat_max"]),
            int(config["cols"]),
            int(config["rows"]),
        )
    if kind == "labels":
        return CategoryDomain(tuple(str(x) for x in config["labels"]))
    raise ValueError(f"unknown domain kind {kind!r}")
