"""The reports the source stage writes (:mod:`streams.job.source.rekey`): a mapped report's
value with its source position, one at a time or a batch of one source partition at once, and a
mapped batch put back together after :func:`~streams.job.isolation.isolated` took records out
of it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Final

import numpy as np
import orjson

from streams.job.source.mapping import MappedBatch
from streams.records.field_parsing import Rejection


def report_value(user: str, time_ms: int, value: Any, source: tuple[int, int, int]) -> bytes:
    """The value of a mapped report: the report's fields and its source position."""
    return orjson.dumps({"user": user, "time": time_ms, "value": value, "source": source})


REPORT_FORMAT: Final = b'{"user":%b,"time":%d,"value":%b,"source":[%d,%d,%d]}'


def report_values(users: Sequence[str], times: Sequence[int], values: Sequence[Any],
                  topic_index: int, partition: int, offsets: Sequence[int]) -> list[bytes]:
    """:func:`report_value` of a batch of one source partition, byte for byte, without a
    document per report: each field serialised on its own and the record formatted once."""
    dumps = orjson.dumps
    return [REPORT_FORMAT % (u, t, v, topic_index, partition, o)
            for u, t, v, o in zip(map(dumps, users), times, map(dumps, values), offsets,
                                  strict=True)]


def remapped(keep: list[int], batch: MappedBatch, broken: list[Rejection]) -> MappedBatch:
    """A batch mapped from the records at positions ``keep`` with its indices turned back into
    positions of the whole batch, and the ``broken`` records' rejections added
    (:func:`~streams.job.isolation.isolated`)."""
    if not broken:
        return batch
    at = np.asarray(keep, dtype=np.int64)
    rejected = broken + [Rejection(keep[r.index], r.reason, r.detail) for r in batch.rejected]
    rejected.sort(key=lambda r: r.index)
    return dataclasses.replace(batch, index=at[batch.index], rejected=rejected)
