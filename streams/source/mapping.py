"""Mapping records of an existing telemetry topic to the job's reports.

A :class:`SourceMapping` names where a record keeps its user (``--user-field``), its event time
(``--time-field``, or the Kafka record timestamp) and its value (``--value-field``: one path, or
two for a grid domain's ``[lon, lat]``), as dotted paths into nested JSON. :meth:`SourceMapping.map`
takes one fetched batch and returns the mapped reports as arrays, with a rejection (a dead
letter's reason and detail) for every record it cannot map. Values go through the stream's own
:class:`~streams.records.domains.Domain`, so a value outside the domain is ``out_of_domain``, or
counts in the domain's ``other`` label when the domain declares one.

Event times: integer or fractional epoch seconds, milliseconds or microseconds, or an ISO 8601
string with a UTC offset. Declared with a suffix of the path (``ts:s``, ``ts:ms``, ``ts:us``,
``ts:iso``) or detected per value by magnitude: below 1e11 seconds (up to the year 5138), below
1e14 milliseconds (from 1973-03-03 on), above microseconds (from 1973-03-03 on).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import orjson

from streams.records.domains import CategoryDomain, Domain, GridDomain
from streams.records.field_formats import TIME_LIMIT_MS, Reason
from streams.records.field_parsing import RecordError, Rejection, json_type, parse_time, parse_user

__all__ = ["MappedBatch", "SourceMapping", "TIME_UNITS", "parse_path"]

#: Declarable units of a time field; ``auto`` detects epoch units by magnitude.
TIME_UNITS: Final = ("auto", "s", "ms", "us", "iso")
_SECONDS_BELOW: Final = 1e11
_MILLIS_BELOW: Final = 1e14
_MISSING: Final = object()
#: One source record: ``(key, value, partition, offset, timestamp_ms)``.
SourceRecord = tuple[bytes | None, bytes | None, int, int, int]


def parse_path(text: str) -> tuple[str, ...]:
    """A dotted path (``device.id``) as its keys; raises ``ValueError`` for an empty part."""
    keys = tuple(text.split("."))
    if not text or any(not k for k in keys):
        raise ValueError(f"field path {text!r} has an empty part")
    return keys


def _as_is(doc: Any) -> Any:
    return doc


def _get(doc: Any, keys: tuple[str, ...]) -> Any:
    for k in keys:
        if type(doc) is not dict:
            return _MISSING
        doc = doc.get(k, _MISSING)
        if doc is _MISSING:
            return _MISSING
    return doc


@dataclass(frozen=True)
class MappedBatch:
    """The records of a batch that mapped: ``index`` (position in the batch), ``users``,
    ``times`` (epoch ms), ``values`` (the value as a report carries it) and ``cells``; the
    others in ``rejected`` (sorted by index). ``seen`` counts, per mapped field, the records
    where its path was present (the bad-mapping check reads it); ``extras`` holds per mapped
    record the values of the further paths :meth:`SourceMapping.map` was asked for (``None``
    where absent)."""

    index: np.ndarray
    users: list[str]
    times: np.ndarray
    values: list[Any]
    cells: np.ndarray
    rejected: list[Rejection]
    seen: dict[str, int] = field(default_factory=dict)
    extras: list[tuple[Any, ...]] = field(default_factory=list)

    def __len__(self) -> int:
        return int(self.index.shape[0])


@dataclass(frozen=True)
class SourceMapping:
    """Where a source record keeps the user, the event time and the value (module doc)."""

    user_field: str
    value_field: tuple[str, ...]
    time_field: str | None = None
    time_unit: str = "auto"
    domain_config: Mapping[str, Any] = field(default_factory=lambda: {"kind": "cells",
                                                                      "size": 2})

    def __post_init__(self) -> None:
        from streams.records.domains import domain_from_config

        parse_path(self.user_field)
        for p in self.value_field:
            parse_path(p)
        if self.time_field is not None:
            parse_path(self.time_field)
        if self.time_unit not in TIME_UNITS:
            raise ValueError(f"time unit must be one of {', '.join(TIME_UNITS)}, "
                             f"not {self.time_unit!r}")
        domain = domain_from_config(self.domain_config)
        grid = isinstance(domain, GridDomain)
        if len(self.value_field) != (2 if grid else 1):
            raise ValueError("a grid domain takes two value fields (longitude, latitude); "
                             "other domains one" if grid else
                             "only a grid domain takes two value fields")
        other = self.domain_config.get("other")
        if other is not None and not (isinstance(domain, CategoryDomain)
                                      and other in domain.labels):
            raise ValueError("a domain's 'other' must be one of its labels (a labels domain)")
        object.__setattr__(self, "_domain", domain)
        object.__setattr__(self, "_paths", (parse_path(self.user_field),
                                            None if self.time_field is None
                                            else parse_path(self.time_field),
                                            tuple(parse_path(p) for p in self.value_field)))

    @classmethod
    def from_flags(cls, user_field: str, time_field: str | None, value_fields: Sequence[str],
                   domain_config: Mapping[str, Any]) -> SourceMapping:
        """From ``--user-field``, ``--time-field PATH[:UNIT]`` and ``--value-field`` (once, or
        twice for a grid); raises ``ValueError`` with a clear message."""
        unit = "auto"
        if time_field is not None and ":" in time_field:
            time_field, unit = time_field.rsplit(":", 1)
        return cls(user_field, tuple(value_fields), time_field or None, unit,
                   dict(domain_config))

    @property
    def domain(self) -> Domain:
        """The stream's domain."""
        return self._domain  # type: ignore[attr-defined]

    @property
    def fields(self) -> dict[str, str]:
        """The mapped fields by role (``time`` only when read from the record)."""
        out = {"user": self.user_field}
        if self.time_field is not None:
            out["time"] = self.time_field
        for role, path in zip(("value", "latitude"), self.value_field, strict=False):
            out[role] = path
        return out

    def map_decoded(self, records: Sequence[tuple[Any, ...]],
                    extra: Sequence[tuple[str, ...]] = ()) -> MappedBatch:
        """Map one batch whose values another source format decoded already (dicts, e.g.
        :mod:`streams.source.avro`), as :meth:`map` maps JSON records."""
        return self.map(records, extra, loads=_as_is)  # type: ignore[arg-type]

    def map(self, records: Sequence[SourceRecord],
            extra: Sequence[tuple[str, ...]] = (), *,
            loads: Callable[[Any], Any] = orjson.loads) -> MappedBatch:
        """Map one batch (module doc); never raises on bad input. ``extra``: further paths
        (as :func:`parse_path` gives them) whose values to return per mapped record."""
        user_keys, time_keys, value_keys = self._paths  # type: ignore[attr-defined]
        decode_error = orjson.JSONDecodeError
        rejected: list[Rejection] = []
        pos: list[int] = []
        users: list[str] = []
        raw_times: list[Any] = []
        values: list[Any] = []
        extras: list[tuple[Any, ...]] = []
        seen = dict.fromkeys(self.fields, 0)
        grid = len(value_keys) == 2
        for i, rec in enumerate(records):
            raw = rec[1]
            if raw is None:
                rejected.append(Rejection(i, Reason.MALFORMED_JSON, "empty value (tombstone)"))
                continue
            try:
                doc = loads(raw)
            except decode_error as exc:
                rejected.append(Rejection(i, Reason.MALFORMED_JSON, str(exc)[:200]))
                continue
            if type(doc) is not dict:
                rejected.append(Rejection(i, Reason.BAD_TYPE, "a source record must be a JSON "
                                          f"object, not {json_type(doc)}"))
                continue
            user = _get(doc, user_keys)
            t = rec[4] if time_keys is None else _get(doc, time_keys)
            value = _get(doc, value_keys[0])
            if grid:
                lat = _get(doc, value_keys[1])
                value = _MISSING if value is _MISSING or lat is _MISSING else [value, lat]
            missing = [name for name, got in (("user", user), ("time", t), ("value", value))
                       if got is _MISSING]
            for name, got in (("user", user), ("time", t), ("value", value)):
                if got is not _MISSING and name in seen:
                    seen[name] += 1
            if grid and _get(doc, value_keys[1]) is not _MISSING:
                seen["latitude"] += 1
            if missing:
                paths = ", ".join(self.fields.get(m, "the record timestamp") for m in missing)
                rejected.append(Rejection(i, Reason.MISSING_FIELD, f"no {paths}"))
                continue
            if type(user) is not str or not 0 < len(user) <= 256:
                try:
                    user = parse_user(user)
                except RecordError as exc:
                    rejected.append(Rejection(i, exc.reason, exc.detail))
                    continue
            pos.append(i)
            users.append(user)
            raw_times.append(t)
            values.append(value)
            if extra:
                extras.append(tuple(None if (v := _get(doc, keys)) is _MISSING else v
                                    for keys in extra))
        times, bad = self._times(raw_times)
        cells, domain_rejected = self.domain.map_values(values)
        keep = (cells >= 0) & (times >= 0)
        other = self.domain_config.get("other")
        if domain_rejected:
            for r in domain_rejected:
                if other is not None and r.reason is Reason.OUT_OF_DOMAIN and times[r.index] >= 0:
                    cells[r.index] = self.domain.labels.index(other)  # type: ignore[attr-defined]
                    values[r.index] = other
                    keep[r.index] = True
                elif times[r.index] >= 0:
                    rejected.append(Rejection(pos[r.index], r.reason, r.detail))
        rejected.extend(Rejection(pos[j], Reason.BAD_TYPE, detail) for j, detail in bad)
        rejected.sort(key=lambda r: r.index)
        where = np.flatnonzero(keep)
        index = np.asarray(pos, dtype=np.int64)[where]
        kept = where.tolist()
        return MappedBatch(index, [users[j] for j in kept], times[where],
                           [values[j] for j in kept], cells[where], rejected, seen,
                           [extras[j] for j in kept] if extra else [])

    def _times(self, raw: list[Any]) -> tuple[np.ndarray, list[tuple[int, str]]]:
        """Epoch ms per raw time (-1 where it is bad), and the bad ones' details by position:
        numbers are converted in one vectorised step, strings parsed as ISO 8601."""
        n = len(raw)
        out = np.full(n, -1, dtype=np.int64)
        bad: list[tuple[int, str]] = []
        unit = "ms" if self.time_field is None else self.time_unit  # record timestamps: ms
        numeric = [j for j, t in enumerate(raw)
                   if (type(t) is int or type(t) is float) and unit != "iso"]
        if len(numeric) < n:
            for j, t in enumerate(raw):
                if (type(t) is int or type(t) is float) and unit != "iso":
                    continue
                if type(t) is str and unit in ("auto", "iso"):
                    try:
                        out[j] = parse_time(t)
                    except RecordError as exc:
                        bad.append((j, exc.detail))
                else:
                    want = "an ISO 8601 string" if unit == "iso" else "a number"
                    bad.append((j, f"time must be {want}, not {json_type(t)}"))
        if numeric:
            where = np.asarray(numeric, dtype=np.int64)
            x = np.asarray([raw[j] for j in numeric], dtype=np.float64)
            if unit == "auto":
                scale = np.where(x < _SECONDS_BELOW, 1000.0,
                                 np.where(x < _MILLIS_BELOW, 1.0, 0.001))
            else:
                scale = np.full(x.shape, {"s": 1000.0, "ms": 1.0, "us": 0.001}[unit])
            with np.errstate(invalid="ignore", over="ignore"):
                ms = np.floor(x * scale)
            ok = np.isfinite(ms) & (ms >= 0) & (ms < TIME_LIMIT_MS)
            out[where[ok]] = ms[ok].astype(np.int64)
            for j in where[~ok].tolist():
                bad.append((j, f"time {raw[j]!r} is not an epoch time in [1970, 2**53 ms)"))
        bad.sort()
        return out, bad


class MappingWatch:
    """Says loudly, once per source topic, when a mapping looks wrong: a mapped field that none
    of the first ``first`` records held, or event times that lie decades from the worker's clock
    (a wrong unit, a wrong field). ``report(topic, problem, message)`` is called once per
    problem."""

    def __init__(self, report: Any, first: int = 1000, decades_ms: int = 10 * 365 * 86_400_000
                 ) -> None:
        self.report, self.first, self.decades_ms = report, first, decades_ms
        self.counted: dict[str, int] = {}
        self.seen: dict[str, dict[str, int]] = {}
        self.done: set[str] = set()
        self.far: dict[str, int] = {}

    def take(self, topic: str, batch: MappedBatch, records: int, now_ms: int) -> None:
        """Look at one mapped batch of ``records`` records of ``topic``."""
        if topic in self.done:
            return
        seen = self.seen.setdefault(topic, {})
        for name, n in batch.seen.items():
            seen[name] = seen.get(name, 0) + n
        self.counted[topic] = self.counted.get(topic, 0) + records
        if len(batch):
            off = np.abs(batch.times - now_ms) > self.decades_ms
            self.far[topic] = self.far.get(topic, 0) + int(off.sum()) - int((~off).sum())
        if self.counted[topic] < self.first:
            return
        self.done.add(topic)
        for name, n in sorted(seen.items()):
            if n == 0:
                self.report(topic, "field_never_present",
                            f"source topic {topic}: the {name} field is in none of its first "
                            f"{self.counted[topic]} records; check the mapping")
        if self.far.get(topic, 0) > 0:
            self.report(topic, "time_decades_away",
                        f"source topic {topic}: most event times of its first "
                        f"{self.counted[topic]} records lie more than ten years from the "
                        f"worker's clock; check the time field and its unit")
