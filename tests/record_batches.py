"""Kafka record batches built in process, and fetched as aiokafka's fetcher stores them, for tests
and benchmarks of what a consumer unpacks."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["fetched_partition", "record_batches"]


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


def fetched_partition(data: bytes, tp: Any, topics: dict[str, bool], start: int = 0,
                      aborted: Sequence[tuple[int, int]] = ()) -> Any:
    """Partition ``tp`` of ``data`` fetched from offset ``start`` (``read_committed``, with
    ``aborted`` transactions), stored in a ``RawFetched`` of ``topics`` as aiokafka's fetcher
    stores it, with its assignment; call it in a running event loop, as aiokafka's consumer
    makes its assignment in one."""
    from aiokafka.consumer.fetcher import READ_COMMITTED, FetchResult, PartitionRecords
    from aiokafka.consumer.subscription_state import SubscriptionState
    from aiokafka.record.memory_records import MemoryRecords

    from streams.job.worker.raw_fetch import RawFetched

    state = SubscriptionState()
    state.assign_from_user({tp})
    state.seek(tp, start)
    records = PartitionRecords(tp, MemoryRecords(data), list(aborted), start, None, None, True,
                               READ_COMMITTED)
    store = RawFetched(topics, {})
    store[tp] = FetchResult(tp, assignment=state.subscription.assignment,
                            partition_records=records, backoff=0)
    return store[tp]
