"""Fetched records of batch topics as the handlers' tuples, a record batch at a time.

aiokafka's consumer turns every fetched record into a ``ConsumerRecord`` (a dataclass of eleven
fields, its headers copied) in the consumer's thread, and hands them out one at a time through a
generator: ``FetchResult.getall`` calls ``PartitionRecords.__next__``, which resumes the
generator, which makes the record, about four Python frames a record. For a topic whose records
go to a batch handler (:mod:`streams.job.batch_handling`) none of that is needed:

* :class:`RawFetched` replaces the aiokafka fetcher's store of fetched partitions
  (``Fetcher._records``); a partition of a batch topic stored there gets the class of its
  ``PartitionRecords`` swapped to :class:`RawRecords` (or :class:`RawRecordsUntimed`, for
  handlers that take no timestamp), and its ``FetchResult`` (which keeps its class: the fetcher
  tells results from errors by it) a ``getall`` of its own.
* :meth:`RawRecords.take` makes the handler's tuples ``(key, value, partition, offset,
  timestamp)`` of a whole record batch in one list comprehension, and that ``getall`` hands
  out as many as asked, cutting a batch where the count ends.

What is left to aiokafka, through its own helpers: a batch's CRC check, the aborted transactions
of a ``read_committed`` fetch (``_consume_aborted_up_to``, ``_contains_abort_marker``) and the
control batches, skipped as the Kafka protocol says (KIP-98). The fetch position
(``next_fetch_offset``) is after the last record handed out, or after the batch when the batch
is done, as aiokafka's is. A hypothesis test holds the tuples and positions to aiokafka's own
records over generated batches, aborted transactions, fetches starting inside a batch and any
sizes of ``getall`` (``tests/end_to_end/test_faust_adapter.py``), and another checks that the
aiokafka internals named here still have the shape used.

A partition whose records aiokafka had begun to hand out before it was stored here keeps
aiokafka's generator; its records still come out as tuples (``_consumer_record``).
"""

from __future__ import annotations

import collections
import functools
import inspect
import itertools
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

from aiokafka.consumer.fetcher import READ_COMMITTED, FetchResult, PartitionRecords
from aiokafka.errors import CorruptRecordException

__all__ = ["RawFetched", "RawRecords", "RawRecordsUntimed"]


class RawRecords(PartitionRecords):
    """aiokafka's records of one fetched partition, each as the tuple a batch handler takes,
    ``(key, value, partition, offset, timestamp)``, made a record batch at a time."""

    _pending: list[tuple[Any, ...]]  # the current batch's tuples not handed out yet
    _pending_end: int  # the offset after the current batch
    _batches: Iterator[tuple[list[tuple[Any, ...]], int]] | None

    def _consumer_record(self, tp: Any, record: Any) -> tuple[Any, ...]:
        return (record.key, record.value, tp.partition, record.offset, record.timestamp)

    def _tuples(self, batch: Any, start: int) -> list[tuple[Any, ...]]:
        """A record batch's tuples, those before offset ``start`` left out."""
        p = self._tp.partition
        if batch.base_offset >= start:
            return [(r.key, r.value, p, r.offset, r.timestamp) for r in batch]
        return [(r.key, r.value, p, r.offset, r.timestamp) for r in batch if r.offset >= start]

    def _start_batches(self) -> None:
        """Read from the first record batch on, a batch at a time (before anything was read)."""
        self._pending, self._pending_end = [], self.next_fetch_offset
        self._batches = self._batch_tuples()
        # __next__ (aiokafka's getone, iteration) hands out one tuple at a time, through take
        self._records_iterator = itertools.chain.from_iterable(iter(lambda: self.take(1), []))

    def _batch_tuples(self) -> Iterator[tuple[list[tuple[Any, ...]], int]]:
        """Per record batch to hand out: its tuples from the fetch position on, and the offset
        after it. Batches that are not handed out (control batches, aborted transactions) move
        the position past them."""
        records = self._records
        committed = self._isolation_level == READ_COMMITTED
        while records.has_next():
            batch = records.next_batch()
            if self._check_crcs and not batch.validate_crc():
                raise CorruptRecordException(f"Invalid CRC - {self._tp}")
            if committed and batch.producer_id is not None:
                self._consume_aborted_up_to(batch.base_offset)
                if batch.is_control_batch and self._contains_abort_marker(batch):
                    self._aborted_producers.discard(batch.producer_id)
                if batch.is_transactional and batch.producer_id in self._aborted_producers:
                    self.next_fetch_offset = batch.next_offset
                    continue
            if batch.is_control_batch:
                self.next_fetch_offset = batch.next_offset
                continue
            yield self._tuples(batch, self.next_fetch_offset), batch.next_offset

    def take(self, limit: int | None = None) -> list[tuple[Any, ...]]:
        """The next ``limit`` tuples (all that are left: ``None``), fewer only when the fetched
        records run out; the fetch position moves past them."""
        out: list[tuple[Any, ...]] = []
        while limit is None or len(out) < limit:
            pending = self._pending
            if not pending:
                if self._batches is None:
                    break
                following = next(self._batches, None)
                if following is None:
                    self._batches = None
                    break
                self._pending, self._pending_end = following
                if not self._pending:
                    self.next_fetch_offset = self._pending_end
                continue
            room = len(pending) if limit is None else limit - len(out)
            if room >= len(pending):
                out.extend(pending)
                self._pending = []
                self.next_fetch_offset = self._pending_end
            else:
                out.extend(pending[:room])
                self._pending = pending[room:]
                self.next_fetch_offset = out[-1][3] + 1
        return out

    def exhausted(self) -> bool:
        """Whether every fetched record was handed out."""
        return self._batches is None and not self._pending


class RawRecordsUntimed(RawRecords):
    """:class:`RawRecords` without the timestamp: ``(key, value, partition, offset)``."""

    def _consumer_record(self, tp: Any, record: Any) -> tuple[Any, ...]:
        return (record.key, record.value, tp.partition, record.offset)

    def _tuples(self, batch: Any, start: int) -> list[tuple[Any, ...]]:
        p = self._tp.partition
        if batch.base_offset >= start:
            return [(r.key, r.value, p, r.offset) for r in batch]
        return [(r.key, r.value, p, r.offset) for r in batch if r.offset >= start]


def _getall(owner: weakref.ref[FetchResult], max_records: int | None = None
            ) -> list[tuple[Any, ...]]:
    """A batch topic's ``FetchResult.getall``: up to ``max_records`` tuples (all: ``None``),
    handed out as aiokafka's ``getall`` hands out records, none when the partition is no longer
    assigned, was paused or was sought elsewhere (its records then dropped). The result is
    held by a weak reference, so that it and its fetched bytes are freed as soon as the fetcher
    drops it, not at a later pass of the cycle collector."""
    result = owner()
    if result is None:
        return []
    records = result._partition_records
    if records is None or not result.check_assignment(result._topic_partition):
        return []
    out = records.take(max_records)
    result._update_position()
    if records.exhausted():
        result._partition_records = None
    return out


class RawFetched(collections.OrderedDict):
    """The aiokafka fetcher's fetched partitions (``Fetcher._records``), whose records of batch
    topics come out as raw tuples (:data:`~streams.job.batch_handling.RawRecord`), a record
    batch at a time (module doc); every other partition, and every error, is left as stored."""

    def __init__(self, timestamps: Mapping[str, bool], fetched: Mapping[Any, Any]) -> None:
        super().__init__()
        self.kinds = {topic: RawRecords if timed else RawRecordsUntimed
                      for topic, timed in timestamps.items()}
        for tp, result in fetched.items():
            self[tp] = result

    def __setitem__(self, tp: Any, result: Any) -> None:
        kind = self.kinds.get(tp.topic)
        if kind is not None and type(result) is FetchResult:
            records = result._partition_records
            if type(records) is PartitionRecords:
                records.__class__ = kind  # records still to come are tuples from here on
                unread = records._records_iterator
                if inspect.isgenerator(unread) \
                        and inspect.getgeneratorstate(unread) == inspect.GEN_CREATED:
                    records._start_batches()
                    # the fetcher tells results from errors by their exact class: the result
                    # stays a FetchResult, with this partition's getall its own
                    result.getall = functools.partial(_getall, weakref.ref(result))
        super().__setitem__(tp, result)
