"""Kafka record batches built in process, for tests and benchmarks of what a consumer unpacks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["record_batches"]


def record_batches(batches: Sequence[tuple[int, Sequence[tuple[Any, Any, int]]]],
                   headers: Sequence[tuple[str, bytes]] = ()) -> bytes:
    """Uncompressed record batches (v2) one after the other, at consecutive offsets from 0: per
    batch its producer id (0: not transactional; else transactional, epoch 0) and its records
    ``(key, value, timestamp)``, each with ``headers``."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    out, offset = bytearray(), 0
    for producer, records in batches:
        builder = DefaultRecordBatchBuilder(2, 0, 1 if producer else 0, producer or -1,
                                            0 if producer else -1, 0 if producer else -1,
                                            1 << 24)
        for i, (key, value, stamp) in enumerate(records):
            builder.append(i, timestamp=stamp, key=key, value=value, headers=list(headers))
        built = bytearray(builder.build())
        built[:8] = offset.to_bytes(8, "big")  # the batch's base offset
        out += built
        offset += len(records)
    return bytes(out)
