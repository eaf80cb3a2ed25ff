"""Fast batch parsing of the reports topic: :func:`parse_reports` turns a batch of raw report
values into a :class:`ReportBatch` of arrays (user, time, cell), with the rejections."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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

__all__ = ["ReportBatch", "parse_reports", "source_order"]


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
    f_user, f_time, f_value = REPORT_FIELDS
    rejected: list[Rejection] = []
    pos: list[int] = []
    users: list[str] = []
    times: list[int] = []
    raw_values: list[object] = []
    sources: list[int] = []
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
