"""Fast batch parsing of the reports topic: :func:`parse_reports` turns a batch of raw report
values into a :class:`ReportBatch` of arrays (user, time, cell), with the rejections."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np
import orjson

from streams.records.domains import Domain
from streams.records.field_formats import TIME_LIMIT_MS, USER_MAX_LENGTH, Reason
from streams.records.field_parsing import (
    RecordError,
    Rejection,
    json_type,
    parse_time,
    parse_user,
)
from streams.records.input_formats import REPORT_FIELDS
from streams.records.json_limits import screen, screen_one

__all__ = ["ReportBatch", "decode_report", "parse_reports", "source_order"]


@dataclass(frozen=True)
class ReportBatch:
    """The accepted reports of a batch as arrays, plus the rejections.

    ``index[i]`` is the position in the input batch of the ``i``-th accepted report; the arrays are
    in input order. ``rejected`` is sorted by index. ``sources`` holds each report's source
    position packed by :func:`source_order` (-1 for a report without one).
    """

    index: np.ndarray
    users: np.ndarray
    times: np.ndarray
    cells: np.ndarray
    rejected: list[Rejection]
    sources: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def select(self, keep: np.ndarray) -> ReportBatch:
        """The accepted reports where ``keep`` (a boolean mask over them) holds."""
        return ReportBatch(self.index[keep], self.users[keep], self.times[keep],
                           self.cells[keep], self.rejected,
                           None if self.sources is None else self.sources[keep])


#: Bounds of a source position ``[topic index, partition, offset]`` (:func:`source_order`).
SOURCE_TOPICS, SOURCE_PARTITIONS, SOURCE_OFFSETS = 2**7, 2**16, 2**40


def source_order(source: object) -> int:
    """A report's ``source`` position ``[topic index, partition, offset]`` (written by the
    source stage, :mod:`streams.job.source.rekey`) packed into one non-negative integer that orders
    positions as tuples; raises :class:`RecordError` (``bad_type``) for anything else."""
    if (type(source) is list and len(source) == 3 and all(type(x) is int for x in source)
            and 0 <= source[0] < SOURCE_TOPICS and 0 <= source[1] < SOURCE_PARTITIONS
            and 0 <= source[2] < SOURCE_OFFSETS):
        return (source[0] << 56) | (source[1] << 40) | source[2]
    raise RecordError(Reason.BAD_TYPE, "source must be [topic index < 128, partition < 65536, "
                      "offset < 2**40] of non-negative integers")


class _Report(msgspec.Struct, kw_only=True, gc=False):
    """A report's fields as the typed decoder reads them (the other fields are skipped); left
    untracked by the cycle collector, as it holds decoded JSON only (no cycle can form)."""

    user: Any
    time: Any
    value: Any
    source: tuple[int, int, int] | None = None


#: One report of the common shape, its fields (``user``, ``time``, ``value``, ``source``) read
#: by the typed decoder; raises on anything else (:func:`parse_reports` then takes it one by one).
decode_report = msgspec.json.Decoder(_Report).decode
_INT_LOW, _INT_HIGH = -(2**63), 2**63


def _plain_value(value: Any) -> bool:
    """Whether a value decodes alike under msgspec and orjson: a string, float, boolean, null,
    integer within 64 bits, or a list of those (a grid's ``[lon, lat]``)."""
    t = type(value)
    if t is str or t is float or value is None or t is bool:
        return True
    if t is int:
        return _INT_LOW <= value < _INT_HIGH
    return t is list and all(type(v) is not list and _plain_value(v) for v in value)


def _pack_sources(sources: list[tuple[int, int, int] | None]) -> tuple[list[int], list[bool]]:
    """Each source position packed as :func:`source_order` packs it (-1: none), and whether it
    is within bounds; vectorised when every report has one."""
    if sources and None not in sources:
        try:
            a = np.array(sources, dtype=np.int64)
        except OverflowError:
            a = None
        if a is not None:
            fine = ((a >= 0) & (a < np.array([SOURCE_TOPICS, SOURCE_PARTITIONS, SOURCE_OFFSETS])
                                )).all(axis=1)
            packed = np.where(fine, (a[:, 0] << 56) | (a[:, 1] << 40) | a[:, 2], -1)
            return packed.tolist(), fine.tolist()
    packed_list: list[int] = []
    fine_list: list[bool] = []
    for src in sources:
        if src is None:
            packed_list.append(-1)
            fine_list.append(True)
        elif (0 <= src[0] < SOURCE_TOPICS and 0 <= src[1] < SOURCE_PARTITIONS
              and 0 <= src[2] < SOURCE_OFFSETS):
            packed_list.append((src[0] << 56) | (src[1] << 40) | src[2])
            fine_list.append(True)
        else:
            packed_list.append(-1)
            fine_list.append(False)
    return packed_list, fine_list


def _typed(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None
           ) -> tuple[list[int], list[str], list[int], list[object], list[int], list[int]]:
    """The reports of the common shape, decoded with msgspec into columns (positions, users,
    times, values, packed sources), and the positions of the others, which
    :func:`_parse_general` takes one by one with the same outcome."""
    refused = {r.index for r in screen(values)}  # for the general path to reject
    try:
        if refused:
            raise TypeError
        reports = list(map(decode_report, values))  # type: ignore[arg-type]
        taken = list(range(len(values)))
        left: list[int] = []
    except Exception:  # noqa: BLE001 - a report to leave: decode them one by one
        reports, taken, left = [], [], []
        for i, raw in enumerate(values):
            if i in refused:
                left.append(i)
                continue
            try:
                reports.append(decode_report(raw))  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - the general path says why
                left.append(i)
                continue
            taken.append(i)
    users = [r.user for r in reports]
    times = [r.time for r in reports]
    vals = [r.value for r in reports]
    srcs = [r.source for r in reports]
    ok = [type(u) is str and 0 < len(u) <= USER_MAX_LENGTH and type(t) is int
          and 0 <= t < TIME_LIMIT_MS for u, t in zip(users, times, strict=True)]
    if keys is not None:
        ok = [good and keys[i] == u.encode() for good, i, u in zip(ok, taken, users, strict=True)]
    packed, in_range = _pack_sources(srcs)
    if not all(in_range):
        ok = [good and fine for good, fine in zip(ok, in_range, strict=True)]
    if set(map(type, vals)) - {str, float, bool, type(None)}:
        ok = [good and _plain_value(v) for good, v in zip(ok, vals, strict=True)]
    if all(ok):
        return taken, users, times, vals, packed, left
    keep = [j for j, good in enumerate(ok) if good]
    left = sorted(left + [taken[j] for j, good in enumerate(ok) if not good])
    return ([taken[j] for j in keep], [users[j] for j in keep], [times[j] for j in keep],
            [vals[j] for j in keep], [packed[j] for j in keep], left)


def parse_reports(
    values: Sequence[bytes | None],
    domain: Domain,
    keys: Sequence[bytes | None] | None = None,
    typed: bool = True,
) -> ReportBatch:
    """Parse and validate a batch of raw report values (JSON bytes).

    ``keys``, when given, are the records' keys; a key that is present must equal the user id.
    Reports of the common shape are decoded as columns (:func:`_typed`), the others one by one;
    both give the same outcome for a report (``typed=False``: all one by one, as the tests
    compare)."""
    rejected: list[Rejection] = []
    if typed:
        pos, users, times, raw_values, sources, left = _typed(values, keys)
    else:
        pos, users, times, raw_values, sources, left = [], [], [], [], [], list(range(len(values)))
    if left:
        slow = _parse_general(values, keys, left, rejected)
        if pos:
            order = np.argsort(np.asarray(pos + slow[0], dtype=np.int64), kind="stable").tolist()
            pos, users, times, raw_values, sources = (
                [both[j] for j in order] for both in
                (pos + slow[0], users + slow[1], times + slow[2], raw_values + slow[3],
                 sources + slow[4]))
        else:
            pos, users, times, raw_values, sources = slow
    return _batch(pos, users, times, raw_values, sources, rejected, domain)


def _parse_general(values: Sequence[bytes | None], keys: Sequence[bytes | None] | None,
                   positions: list[int], rejected: list[Rejection]
                   ) -> tuple[list[int], list[str], list[int], list[object], list[int]]:
    """The reports at ``positions`` parsed whole, one by one; rejections into ``rejected``."""
    loads = orjson.loads
    decode_error = orjson.JSONDecodeError
    f_user, f_time, f_value = REPORT_FIELDS
    pos: list[int] = []
    users: list[str] = []
    times: list[int] = []
    raw_values: list[object] = []
    sources: list[int] = []
    for i in positions:
        raw = values[i]
        if raw is None:
            rejected.append(Rejection(i, Reason.MALFORMED_JSON, "empty value (tombstone)"))
            continue
        refused = screen_one(raw)
        if refused is not None:
            rejected.append(Rejection(i, *refused))
            continue
        try:
            doc = loads(raw)
        except decode_error as exc:
            # a number beyond a double's range in a field the typed path skips unread: both
            # paths take the report alike
            rescued = _typed([raw], None if keys is None else [keys[i]])
            if rescued[0]:
                pos.append(i)
                users.extend(rescued[1])
                times.extend(rescued[2])
                raw_values.extend(rescued[3])
                sources.extend(rescued[4])
                continue
            rejected.append(Rejection(i, Reason.MALFORMED_JSON, str(exc)[:200]))
            continue
        if type(doc) is not dict:
            rejected.append(
                Rejection(i, Reason.BAD_TYPE, f"report must be a JSON object, not {json_type(doc)}")
            )
            continue
        try:
            user = doc[f_user]
            t = doc[f_time]
            value = doc[f_value]
        except KeyError:
            missing = [f for f in REPORT_FIELDS if f not in doc]
            rejected.append(Rejection(i, Reason.MISSING_FIELD, f"missing {', '.join(missing)}"))
            continue
        # fast path: the common well-formed shapes, checked inline
        if type(user) is not str or not 0 < len(user) <= USER_MAX_LENGTH:
            try:
                user = parse_user(user)
            except RecordError as exc:
                rejected.append(Rejection(i, exc.reason, exc.detail))
                continue
        if type(t) is not int or not 0 <= t < TIME_LIMIT_MS:
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
        source = doc.get("source")
        if source is not None:
            try:
                source = source_order(source)
            except RecordError as exc:
                rejected.append(Rejection(i, exc.reason, exc.detail))
                continue
        pos.append(i)
        users.append(user)
        times.append(t)
        raw_values.append(value)
        sources.append(-1 if source is None else source)
    return pos, users, times, raw_values, sources


def _batch(pos: list[int], users: list[str], times: list[int], raw_values: list[object],
           sources: list[int], rejected: list[Rejection], domain: Domain) -> ReportBatch:
    """The accepted reports as arrays, their values mapped to cells by ``domain``."""
    cells, domain_rejected = domain.map_values(raw_values)
    index = np.asarray(pos, dtype=np.int64)
    users_arr = np.empty(len(users), dtype=object)
    users_arr[:] = users
    times_arr = np.asarray(times, dtype=np.int64)
    sources_arr = np.asarray(sources, dtype=np.int64)
    if domain_rejected:
        keep = cells >= 0
        for r in domain_rejected:
            rejected.append(Rejection(pos[r.index], r.reason, r.detail))
        rejected.sort(key=lambda r: r.index)
        index, users_arr, times_arr, cells, sources_arr = (
            index[keep],
            users_arr[keep],
            times_arr[keep],
            cells[keep],
            sources_arr[keep],
        )
    return ReportBatch(index, users_arr, times_arr, cells, rejected, sources_arr)
