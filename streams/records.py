"""Record formats of the job: fast batch parsing of reports, domains, requirements, dead letters.

Every rejection carries one reason from :class:`Reason` (the fixed set the dead-letter topic
accepts) and a human-readable detail. Nothing is clipped or coerced silently: a value outside the
domain is rejected as ``out_of_domain``; a float where an integer is required is ``bad_type``.

Conventions:

* ``user`` is a non-empty string (at most 256 characters) or a non-negative integer; an integer id
  is normalised to its decimal string, so ``7`` and ``"7"`` are the same user. When the record key
  is given it must equal the user id (UTF-8), because the key decides the partition and a user's
  reports must meet in one partition worker; a mismatch is ``bad_type``. In the job every report
  and requirement must carry its key (``missing_key`` otherwise) and sit on the partition Kafka's
  default partitioner assigns to it (``wrong_partition``, :mod:`streams.admission`).
* ``time`` is the event time: integer epoch milliseconds in ``[0, 2**53)``, or an ISO 8601 string
  *with* a UTC offset (``Z`` or ``+hh:mm``); a string without one is ambiguous and ``bad_type``.
* ``value`` is interpreted by the stream's :class:`Domain`.
"""

from __future__ import annotations

import base64
import math
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any, Final, NamedTuple

import numpy as np
import orjson

__all__ = [
    "REASONS",
    "SCHEMA_DIR",
    "BinDomain",
    "CategoryDomain",
    "CellDomain",
    "Domain",
    "DynamicRequirement",
    "FixedRequirement",
    "GridDomain",
    "Reason",
    "RecordError",
    "Rejection",
    "ReportBatch",
    "Requirement",
    "RequirementRemoval",
    "dead_letter",
    "decode_dead_letter",
    "domain_from_config",
    "load_schema",
    "parse_reports",
    "parse_requirement",
    "parse_time",
    "parse_user",
]

SCHEMA_DIR: Final = Path(__file__).with_name("schemas")

_MAX_TIME_MS: Final = 2**53
_MAX_USER_LEN: Final = 256
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MS: Final = timedelta(milliseconds=1)


class Reason(StrEnum):
    """Why a record was rejected (the ``reason`` of a dead letter)."""

    MALFORMED_JSON = "malformed_json"
    MISSING_FIELD = "missing_field"
    BAD_TYPE = "bad_type"
    OUT_OF_DOMAIN = "out_of_domain"
    DUPLICATE_IN_SLOT = "duplicate_in_slot"
    LATE = "late"
    FUTURE = "future"
    UNREGISTERED_USER = "unregistered_user"
    INVALID_REQUIREMENT = "invalid_requirement"
    MISSING_KEY = "missing_key"
    WRONG_PARTITION = "wrong_partition"
    UNAUTHENTICATED_CONTROL = "unauthenticated_control"


#: All reason strings, in a fixed order.
REASONS: Final = tuple(r.value for r in Reason)


class Rejection(NamedTuple):
    """A rejected record: its index in the input batch, the reason and a detail."""

    index: int
    reason: Reason
    detail: str


class RecordError(ValueError):
    """A single record is invalid; ``reason`` is one of :class:`Reason`."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


def load_schema(topic_key: str) -> dict[str, Any]:
    """Load the JSON Schema of a logical topic (``"reports"``, ``"dead-letters"``, ...)."""
    return orjson.loads((SCHEMA_DIR / f"{topic_key}.json").read_bytes())


# -- fields -------------------------------------------------------------------------------------


def parse_user(user: object) -> str:
    """Validate a user id and return it as a string; raise :class:`RecordError`."""
    if type(user) is str:
        if 0 < len(user) <= _MAX_USER_LEN:
            return user
        raise RecordError(Reason.BAD_TYPE, f"user must have 1 to {_MAX_USER_LEN} characters")
    if type(user) is int:
        if user >= 0:
            return str(user)
        raise RecordError(Reason.BAD_TYPE, "an integer user id must be non-negative")
    raise RecordError(Reason.BAD_TYPE, f"user must be a string or integer, not {_jtype(user)}")


def parse_time(value: object) -> int:
    """Validate an event time and return epoch milliseconds; raise :class:`RecordError`."""
    if type(value) is int:
        if 0 <= value < _MAX_TIME_MS:
            return value
        raise RecordError(Reason.BAD_TYPE, f"time {value} is outside [0, 2**53) ms")
    if type(value) is str:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise RecordError(Reason.BAD_TYPE, f"time {value[:64]!r} is not ISO 8601") from None
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise RecordError(Reason.BAD_TYPE, f"time {value[:64]!r} has no UTC offset")
        ms = (moment - _EPOCH) // _MS
        if 0 <= ms < _MAX_TIME_MS:
            return int(ms)
        raise RecordError(Reason.BAD_TYPE, f"time {value[:64]!r} is before 1970")
    raise RecordError(
        Reason.BAD_TYPE, f"time must be epoch ms or an ISO 8601 string, not {_jtype(value)}"
    )


def _jtype(value: object) -> str:
    """JSON type name of a decoded value, for details."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _is_number(value: object) -> bool:
    return (type(value) is int or type(value) is float) and math.isfinite(value)


# -- domains ------------------------------------------------------------------------------------


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
                    Rejection(i, Reason.BAD_TYPE, f"value must be a cell index, not {_jtype(v)}")
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
                        Rejection(i, Reason.BAD_TYPE, f"value must be a number, not {_jtype(v)}")
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
        cells = np.full(len(values), -1, dtype=np.int64)
        rejected: list[Rejection] = []
        for i, v in enumerate(values):
            if type(v) is not str:
                rejected.append(
                    Rejection(i, Reason.BAD_TYPE, f"value must be a label, not {_jtype(v)}")
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


# -- reports ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReportBatch:
    """The accepted reports of a batch as arrays, plus the rejections.

    ``index[i]`` is the position in the input batch of the ``i``-th accepted report; the arrays are
    in input order. ``rejected`` is sorted by index.
    """

    index: np.ndarray
    users: np.ndarray
    times: np.ndarray
    cells: np.ndarray
    rejected: list[Rejection]

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def select(self, keep: np.ndarray) -> ReportBatch:
        """The accepted reports where ``keep`` (a boolean mask over them) holds."""
        return ReportBatch(self.index[keep], self.users[keep], self.times[keep],
                           self.cells[keep], self.rejected)


def parse_reports(
    values: Sequence[bytes | None],
    domain: Domain,
    keys: Sequence[bytes | None] | None = None,
) -> ReportBatch:
    """Parse and validate a batch of raw report values (JSON bytes).

    ``keys``, when given, are the records' keys; a key that is present must equal the user id.
    """
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    rejected: list[Rejection] = []
    pos: list[int] = []
    users: list[str] = []
    times: list[int] = []
    raw_values: list[object] = []
    for i, raw in enumerate(values):
        if raw is None:
            rejected.append(Rejection(i, Reason.MALFORMED_JSON, "empty value (tombstone)"))
            continue
        try:
            doc = loads(raw)
        except decode_error as exc:
            rejected.append(Rejection(i, Reason.MALFORMED_JSON, str(exc)[:200]))
            continue
        if type(doc) is not dict:
            rejected.append(
                Rejection(i, Reason.BAD_TYPE, f"report must be a JSON object, not {_jtype(doc)}")
            )
            continue
        try:
            user = doc["user"]
            t = doc["time"]
            value = doc["value"]
        except KeyError:
            missing = [f for f in ("user", "time", "value") if f not in doc]
            rejected.append(Rejection(i, Reason.MISSING_FIELD, f"missing {', '.join(missing)}"))
            continue
        # fast path: the common well-formed shapes, checked inline
        if type(user) is not str or not 0 < len(user) <= _MAX_USER_LEN:
            try:
                user = parse_user(user)
            except RecordError as exc:
                rejected.append(Rejection(i, exc.reason, exc.detail))
                continue
        if type(t) is not int or not 0 <= t < _MAX_TIME_MS:
            try:
                t = parse_time(t)
            except RecordError as exc:
                rejected.append(Rejection(i, exc.reason, exc.detail))
                continue
        if keys is not None:
            key = keys[i]
            if key is None:
                rejected.append(Rejection(i, Reason.MISSING_KEY,
                                          "a report must be keyed by its user"))
                continue
            if key != user.encode():
                rejected.append(
                    Rejection(i, Reason.BAD_TYPE, f"record key {key[:64]!r} differs from user")
                )
                continue
        pos.append(i)
        users.append(user)
        times.append(t)
        raw_values.append(value)

    cells, domain_rejected = domain.map_values(raw_values)
    index = np.asarray(pos, dtype=np.int64)
    users_arr = np.empty(len(users), dtype=object)
    users_arr[:] = users
    times_arr = np.asarray(times, dtype=np.int64)
    if domain_rejected:
        keep = cells >= 0
        for r in domain_rejected:
            rejected.append(Rejection(pos[r.index], r.reason, r.detail))
        rejected.sort(key=lambda r: r.index)
        index, users_arr, times_arr, cells = (
            index[keep],
            users_arr[keep],
            times_arr[keep],
            cells[keep],
        )
    return ReportBatch(index, users_arr, times_arr, cells, rejected)


# -- requirements -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FixedRequirement:
    """w-event requirement: at most ``E`` over any ``w`` consecutive slots."""

    user: str
    w: int
    E: float


@dataclass(frozen=True, slots=True)
class DynamicRequirement:
    """Dynamic requirement: backward window ``(wB, EB)`` and forward window ``(wF, EF)``."""

    user: str
    wB: int
    EB: float
    wF: int
    EF: float


@dataclass(frozen=True, slots=True)
class RequirementRemoval:
    """A tombstone on the compacted requirements topic: the user is unregistered."""

    user: str


Requirement = FixedRequirement | DynamicRequirement

_FIXED: Final = ("w", "E")
_DYNAMIC: Final = ("wB", "EB", "wF", "EF")


def _window(doc: Mapping[str, Any], name: str) -> int:
    w = doc[name]
    if type(w) is not int:
        raise RecordError(Reason.BAD_TYPE, f"{name} must be an integer, not {_jtype(w)}")
    if w < 1:
        raise RecordError(Reason.INVALID_REQUIREMENT, f"{name} = {w} must be at least 1")
    return w


def _budget(doc: Mapping[str, Any], name: str) -> float:
    e = doc[name]
    if type(e) is not int and type(e) is not float:
        raise RecordError(Reason.BAD_TYPE, f"{name} must be a number, not {_jtype(e)}")
    if not math.isfinite(e) or e <= 0:
        raise RecordError(Reason.INVALID_REQUIREMENT, f"{name} = {e} must be positive and finite")
    return float(e)


def parse_requirement(
    value: bytes | None, key: bytes | None = None
) -> FixedRequirement | DynamicRequirement | RequirementRemoval:
    """Parse one record of the requirements topic; raise :class:`RecordError` with a reason.

    Fixed ``{user, w, E}`` or dynamic ``{user, wB, EB, wF, EF}``; mixing the two, or giving only
    part of either, is ``invalid_requirement``. A ``None`` value with a key is a removal.
    """
    if value is None:
        if key is None:
            raise RecordError(Reason.MISSING_FIELD, "tombstone without a key")
        try:
            return RequirementRemoval(parse_user(key.decode()))
        except UnicodeDecodeError:
            raise RecordError(Reason.BAD_TYPE, "key is not UTF-8") from None
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise RecordError(Reason.MALFORMED_JSON, str(exc)[:200]) from None
    if type(doc) is not dict:
        raise RecordError(Reason.BAD_TYPE, f"requirement must be an object, not {_jtype(doc)}")
    if "user" not in doc:
        raise RecordError(Reason.MISSING_FIELD, "missing user")
    user = parse_user(doc["user"])
    if key is not None and key != user.encode():
        raise RecordError(Reason.BAD_TYPE, f"record key {key[:64]!r} differs from user")
    fixed = [f for f in _FIXED if f in doc]
    dynamic = [f for f in _DYNAMIC if f in doc]
    if fixed and dynamic:
        raise RecordError(
            Reason.INVALID_REQUIREMENT,
            f"mixes fixed ({', '.join(fixed)}) and dynamic ({', '.join(dynamic)}) fields",
        )
    if not fixed and not dynamic:
        raise RecordError(Reason.MISSING_FIELD, "needs w and E, or wB, EB, wF and EF")
    if fixed:
        missing = [f for f in _FIXED if f not in doc]
        if missing:
            raise RecordError(Reason.MISSING_FIELD, f"fixed requirement lacks {missing[0]}")
        return FixedRequirement(user, _window(doc, "w"), _budget(doc, "E"))
    missing = [f for f in _DYNAMIC if f not in doc]
    if missing:
        raise RecordError(Reason.MISSING_FIELD, f"dynamic requirement lacks {', '.join(missing)}")
    return DynamicRequirement(
        user,
        _window(doc, "wB"),
        _budget(doc, "EB"),
        _window(doc, "wF"),
        _budget(doc, "EF"),
    )


# -- dead letters -------------------------------------------------------------------------------


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def dead_letter(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    reason: Reason | str,
    detail: str,
) -> bytes:
    """Encode a dead-letter record; key and value are the original bytes, base64-encoded."""
    reason = Reason(reason)
    return orjson.dumps(
        {
            "topic": topic,
            "partition": partition,
            "offset": offset,
            "key": _b64(key),
            "value": _b64(value),
            "reason": reason.value,
            "detail": detail,
        }
    )


def decode_dead_letter(data: bytes) -> dict[str, Any]:
    """Decode a dead-letter record, turning ``key`` and ``value`` back into bytes."""
    doc = orjson.loads(data)
    for field in ("key", "value"):
        if doc.get(field) is not None:
            doc[field] = base64.b64decode(doc[field])
    return doc
