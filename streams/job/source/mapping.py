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

from streams.job.source.typed_paths import PathDecoder
from streams.records.domains import CategoryDomain, Domain, GridDomain
from streams.records.field_formats import TIME_LIMIT_MS, USER_MAX_LENGTH, Reason
from streams.records.field_parsing import RecordError, Rejection, json_type, parse_time, parse_user
from streams.records.json_limits import screen_one
from streams.records.time_columns import iso_times_ms

__all__ = ["MappedBatch", "SourceMapping", "TIME_UNITS", "parse_path"]

#: Declarable units of a time field; ``auto`` detects epoch units by magnitude.
TIME_UNITS: Final = ("auto", "s", "ms", "us", "iso")
_SECONDS_BELOW: Final = 1e11
_MILLIS_BELOW: Final = 1e14
_MISSING: Final = object()
_MAX_USER: Final = USER_MAX_LENGTH
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
        object.__setattr__(self, "_decoders", {})
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
        :mod:`streams.job.source.avro`), as :meth:`map` maps JSON records."""
        return self.map(records, extra, loads=_as_is)

    def map(self, records: Sequence[SourceRecord],
            extra: Sequence[tuple[str, ...]] = (), typed: bool = True, *,
            loads: Callable[[Any], Any] | None = None) -> MappedBatch:
        """Map one batch (module doc); never raises on bad input. ``extra``: further paths
        (as :func:`parse_path` gives them) whose values to return per mapped record.

        The records go through :class:`~streams.job.source.typed_paths.PathDecoder` first;
        those it leaves, and those whose user is not a plain string id, through
        :meth:`_map_general`, one by one. Both give the same result for a record;
        ``typed=False`` sends every record through the general path. ``loads`` (values already
        decoded by another format, :meth:`map_decoded`) takes the general path too."""
        if typed and loads is None:
            pos, users, raw_times, values, extras, left = self._map_typed(records, tuple(extra))
        else:
            pos, users, raw_times, values, extras = [], [], [], [], []
            left = list(range(len(records)))
        seen = dict.fromkeys(self.fields, len(pos))
        rejected: list[Rejection] = []
        if left:
            slow = self._map_general(records, left, tuple(extra), seen, rejected,
                                     loads or orjson.loads)
            if pos:
                pos, users, raw_times, values, extras = _merge(
                    (pos, users, raw_times, values, extras), slow)
            else:
                pos, users, raw_times, values, extras = slow
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
        if bool(keep.all()):
            return MappedBatch(np.asarray(pos, dtype=np.int64), users, times, values, cells,
                               rejected, seen, extras if extra else [])
        where = np.flatnonzero(keep)
        index = np.asarray(pos, dtype=np.int64)[where]
        kept = where.tolist()
        return MappedBatch(index, [users[j] for j in kept], times[where],
                           [values[j] for j in kept], cells[where], rejected, seen,
                           [extras[j] for j in kept] if extra else [])

    def _map_typed(self, records: Sequence[SourceRecord], extra: tuple[tuple[str, ...], ...]
                   ) -> tuple[list[int], list[str], list[Any], list[Any], list[tuple[Any, ...]],
                              list[int]]:
        """The records the typed decoder takes, as columns (position, user, raw time, value,
        extras), and the positions of the others."""
        decoder = self._decoders.get(extra)  # type: ignore[attr-defined]
        if decoder is None:
            user_keys, time_keys, value_keys = self._paths  # type: ignore[attr-defined]
            required = [user_keys, *([] if time_keys is None else [time_keys]), *value_keys]
            decoder = PathDecoder(required, extra)
            self._decoders[extra] = decoder  # type: ignore[attr-defined]
        if not decoder.usable:
            return [], [], [], [], [], list(range(len(records)))
        taken, columns, opt, left = decoder.decode([rec[1] for rec in records])
        users = columns[0]
        kinds = set(map(type, users))
        lengths = np.fromiter(map(len, users), dtype=np.int64, count=len(users)) \
            if kinds == {str} else None
        if lengths is None or (lengths.size and (int(lengths.min()) < 1
                                                 or int(lengths.max()) > _MAX_USER)):
            fine = [type(u) is str and 0 < len(u) <= _MAX_USER for u in users]
            keep = [j for j, ok in enumerate(fine) if ok]
            left = sorted(left + [taken[j] for j, ok in enumerate(fine) if not ok])
            taken = [taken[j] for j in keep]
            columns = [[col[j] for j in keep] for col in columns]
            opt = [opt[j] for j in keep] if opt else []
            users = columns[0]
        if self.time_field is None:
            raw_times = [records[i][4] for i in taken]
            first_value = 1
        else:
            raw_times = columns[1]
            first_value = 2
        if len(self._paths[2]) == 2:  # type: ignore[attr-defined]
            values = [list(pair) for pair in zip(columns[first_value], columns[first_value + 1],
                                                 strict=True)]
        else:
            values = columns[first_value]
        return taken, users, raw_times, values, opt if extra else [], left

    def _map_general(self, records: Sequence[SourceRecord], positions: list[int],
                     extra: tuple[tuple[str, ...], ...], seen: dict[str, int],
                     rejected: list[Rejection], loads: Callable[[Any], Any],
                     ) -> tuple[list[int], list[str], list[Any], list[Any], list[tuple[Any, ...]]]:
        """The records at ``positions`` one by one: each parsed whole, its rejection if any
        added to ``rejected`` and its present fields to ``seen``."""
        user_keys, time_keys, value_keys = self._paths  # type: ignore[attr-defined]
        decode_error = orjson.JSONDecodeError
        pos: list[int] = []
        users: list[str] = []
        raw_times: list[Any] = []
        values: list[Any] = []
        extras: list[tuple[Any, ...]] = []
        grid = len(value_keys) == 2
        for i in positions:
            rec = records[i]
            raw = rec[1]
            if raw is None:
                rejected.append(Rejection(i, Reason.MALFORMED_JSON, "empty value (tombstone)"))
                continue
            refused = screen_one(raw) if isinstance(raw, bytes) else None
            if refused is not None:
                rejected.append(Rejection(i, *refused))
                continue
            try:
                doc = loads(raw)
            except decode_error as exc:
                if self._rescued(i, rec, extra, seen, (pos, users, raw_times, values, extras)):
                    continue
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
            if type(user) is not str or not 0 < len(user) <= _MAX_USER:
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
        return pos, users, raw_times, values, extras

    def _rescued(self, i: int, rec: SourceRecord, extra: tuple[tuple[str, ...], ...],
                 seen: dict[str, int], out: tuple[list[Any], ...]) -> bool:
        """Whether the typed path takes record ``i``, which ``orjson`` refuses (a number beyond a
        double's range in a field the mapping skips, which the typed path skips unread); if so,
        its columns are appended to ``out``, so both paths give it the same outcome."""
        if not isinstance(rec[1], bytes):
            return False
        taken = self._map_typed([rec], extra)
        if not taken[0]:
            return False
        for name in seen:
            seen[name] += 1
        pos, users, raw_times, values, extras = out
        pos.append(i)
        users.extend(taken[1])
        raw_times.extend(taken[2])
        values.extend(taken[3])
        if extra:
            extras.extend(taken[4])
        return True

    def _times(self, raw: list[Any]) -> tuple[np.ndarray, list[tuple[int, str]]]:
        """Epoch ms per raw time (-1 where it is bad), and the bad ones' details by position:
        numbers are converted in one vectorised step, ISO 8601 strings of the usual shapes as
        columns (:func:`~streams.records.time_columns.iso_times_ms`), other strings one by one."""
        n = len(raw)
        out = np.full(n, -1, dtype=np.int64)
        bad: list[tuple[int, str]] = []
        unit = "ms" if self.time_field is None else self.time_unit  # record timestamps: ms
        all_strings = n > 0 and set(map(type, raw)) == {str}
        kinds = [] if all_strings else [type(t) for t in raw]
        if unit == "iso" or all_strings:
            numeric: list[int] = []
        else:
            numeric = [j for j, k in enumerate(kinds) if k is int or k is float]
        if len(numeric) < n:
            if unit not in ("auto", "iso"):
                strings: list[int] | range = []
            elif all_strings:
                strings = range(n)
            else:
                strings = [j for j, k in enumerate(kinds) if k is str]
            if strings:
                ms, done = iso_times_ms(raw if all_strings else [raw[j] for j in strings])
                where = np.arange(n, dtype=np.int64) if all_strings \
                    else np.asarray(strings, dtype=np.int64)
                out[where[done]] = ms[done]
                for j in where[~done].tolist():
                    try:
                        out[j] = parse_time(raw[j])
                    except RecordError as exc:
                        bad.append((j, exc.detail))
            if len(numeric) + len(strings) < n:
                taken = set(numeric) | set(strings)
                want = "an ISO 8601 string" if unit == "iso" else "a number"
                bad.extend((j, f"time must be {want}, not {json_type(t)}")
                           for j, t in enumerate(raw) if j not in taken)
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


def _merge(a: tuple[list[Any], ...], b: tuple[list[Any], ...]) -> tuple[list[Any], ...]:
    """Two column sets (positions first) as one, in position order."""
    order = np.argsort(np.asarray(a[0] + b[0], dtype=np.int64), kind="stable").tolist()
    out = []
    for col_a, col_b in zip(a, b, strict=True):
        both = col_a + col_b
        out.append([both[j] for j in order] if both else [])
    return tuple(out)


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
