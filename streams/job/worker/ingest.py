"""Batched ingest of raw records from a Kafka topic inside a Faust worker.

Why this exists
---------------
A plain Faust agent reads a few thousand small records per second from the embedded broker, while
raw aiokafka ``getmany`` plus orjson reads several hundred thousand. Profiling the agent shows the
time going to per-record event-loop traffic, not to Kafka: for *every* record Faust's fetch loop
(``Consumer._drain_messages``) awaits ``wait_first(callback(message), suspend_flow.wait())``,
which creates two tasks and an ``asyncio.wait``; the conductor then decodes the record and puts an
``Event`` into the agent's queue, and the stream takes it out again, acks it and updates sensors.
About three loop cycles and four task creations per record. ``stream.take(n)``,
``take_with_timeout``, ``noack``, ``events()``, a larger ``stream_buffer_maxsize`` or
``broker_max_poll_records`` do not remove any of that: they only regroup events *after* they have
crossed the queue one at a time (measured in ``benchmarks/bench_ingest.py``).

What this does
--------------
:class:`BatchConsumer` replaces the fetch loop of Faust's aiokafka consumer. Records of topics
registered with :class:`BatchIngest` are handed to a coroutine one fetched batch per partition at a
time, as a list of ``(key, value, partition, offset)`` tuples (raw bytes, nothing decoded; what a
handler receives and may answer is in :mod:`streams.job.batch_handling`), which the consumer's
thread makes straight from the fetched record batches (:mod:`.raw_fetch`). Every other topic
(tables' changelogs during recovery, ordinary agents) still goes through Faust's conductor record
by record, exactly as before. Faust keeps everything else:

* partition assignment, rebalancing, pausing and seeking (records are only delivered for active
  partitions of the current generation; a batch fetched while the flow is stopped is dropped and
  the partitions are rewound to their committed offsets, as Faust does);
* offset commits: when the handler returns, every offset of the batch is acknowledged through
  Faust's own bookkeeping (the same structures ``Consumer.ack`` fills), so the commit timer,
  ``broker_commit_every`` and the commit on rebalance and shutdown work unchanged. A batch being
  handled counts as an unacknowledged message, so a rebalance waits for it (``wait_empty``) before
  committing;
* tables: while the handler runs, Faust's "current event" is the batch's last record, so table
  writes inside the handler are routed to the changelog partition of the batch's partition, as
  inside ``async for event in stream``.

Delivery is at least once: a batch whose handler raises, or that is interrupted by a crash, is not
acknowledged and is delivered again after a restart or rebalance. A raising handler stops the
worker (the fetcher crashes, like an agent error would); handlers are expected to route bad input
to a dead-letter topic instead of raising.

Settings (:func:`ingest_settings`)
----------------------------------
``broker_max_poll_records``
    Records per fetch returned to the loop. 20,000 balances per-batch overhead against latency.
``consumer_max_fetch_size``
    Bytes per partition per fetch (``max.partition.fetch.bytes``). The default 1 MiB caps a fetch
    at ~15,000 small reports per partition; 16 MiB lets one fetch fill a batch.
``broker_commit_every``
    Commit after this many acknowledged records. Faust's default (10,000) would commit several
    times a second at this rate; 200,000 leaves commits to the timer (``broker_commit_interval``).
``stream_buffer_maxsize``
    Irrelevant for batch topics (they skip the queues); kept at Faust's default for other agents.

Faust internals
---------------
This module is the one place in ``streams`` that touches Faust's private internals; everything
else uses Faust's public API, or the public functions here (:func:`partition_context`,
:func:`committed_offsets`). It relies on:

* ``faust.streams._current_event`` (the context variable behind ``faust.current_event()``, which
  routes table writes) and ``faust.types.tuples.ack_lock`` (guards ack bookkeeping);
* ``App._transport`` and ``App._consumer`` (to install :class:`BatchTransport` in time);
* ``App._app_tasks``, the list of coroutine functions that the app starts once its tables are
  recovered (``App.on_started_init_extra_tasks``), where :func:`run_when_started` puts the
  worker's tasks and timers;
* on ``faust.transport.drivers.aiokafka.Consumer``: the ``_drain_messages(fetcher)`` hook that
  ``Fetcher`` awaits, ``_wait_next_records``, ``_to_message``, ``_add_gap``, the bookkeeping
  ``_read_offset``, ``_committed_offset``, ``_acked``, ``_acked_index``, ``_n_acked``,
  ``_commit_every``, ``_unacked_messages``, ``_waiting_for_ack``, ``_buffered_partitions``,
  ``_gap``, ``_new_offset`` (which :class:`BatchConsumer` computes with numpy, the same value and
  books), ``_commit_offsets`` (whose books :class:`BatchConsumer` corrects after a refused
  commit), and mode's ``Service._stopped`` on the consumer and the fetcher;
* the consumer's ``_thread`` and its aiokafka consumer ``_consumer``, whose ``_coordinator`` runs
  the group membership as ``_coordination_task`` (:meth:`BatchConsumer.check_coordination`);
* ``Consumer._new_consumer_thread`` and ``AIOKafkaConsumerThread._create_worker_consumer``, and
  aiokafka's ``AIOKafkaConsumer._isolation_level``, which ``start()`` hands to its fetcher
  (:class:`CommittedReadThread`);
* ``AIOKafkaConsumerThread._fetch_records`` and, in aiokafka, the consumer's ``_fetcher`` and
  the fetcher's store of fetched partitions ``_records``, and the parts of ``FetchResult`` and
  ``PartitionRecords`` that :mod:`streams.job.worker.raw_fetch` names;
* the less private parts that the replacement fetch loop shares with Faust's: ``diag``,
  ``flow_active``, ``perform_seek``, ``highwater``, ``wait_first``, ``suspend_flow``,
  ``callback``, ``commit``, the app's ``flow_control``, producer buffer and monitor counters,
  and the positional signatures of ``Message`` and ``Event``.

The pin of ``faust-streaming`` in ``pyproject.toml`` (below its next minor version) and
``tests/end_to_end/test_faust_adapter.py`` go together: the test checks that every internal above
still exists with the shape used here (attributes, coroutines, parameters) and fails naming the
Faust version and the internal that changed. Move the pin only with that test passing against the
new version, after adapting this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any, Final

import numpy as np
from faust.events import Event
from faust.streams import _current_event
from faust.transport.consumer import CONSUMER_FETCHING
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, AppT, TopicT
from faust.types.tuples import ConsumerMessage, Message, ack_lock
from mode import Service
from mode.utils.futures import notify
from mode.utils.objects import qualname

from streams.job.batch_handling import BatchHandler, RawRecord, Rewind
from streams.job.worker.raw_fetch import RawFetched
from streams.kafka.settings import ISOLATION_LEVEL

__all__ = ["BatchConsumer", "BatchIngest", "BatchTransport", "CoordinationFailed", "FetchStalled",
           "committed_offsets", "ingest_settings", "install_batch_consumer", "run_when_started"]

logger = logging.getLogger(__name__)

#: Faust settings for a worker whose hot path is :class:`BatchIngest` (see the module docstring).
INGEST_SETTINGS: Final[Mapping[str, Any]] = {
    "broker_max_poll_records": 20_000,
    "consumer_max_fetch_size": 16 * 1024 * 1024,
    "broker_commit_every": 200_000,
    "broker_commit_interval": 2.0,
}

_ROUTES: weakref.WeakKeyDictionary[Any, dict[str, BatchIngest]] = weakref.WeakKeyDictionary()


@contextlib.contextmanager
def partition_context(app: AppT, topic: str, partition: int) -> Iterator[None]:
    """Make Faust's "current event" a record of ``topic``'s ``partition``, so that table writes
    outside a handler (from a task of our own) go to that partition's store and changelog."""
    message = Message(topic, partition, -1, time.time(), 0, [], None, None, None)
    event = Event(app, None, None, {}, message)
    token = _current_event.set(weakref.ref(event))
    try:
        yield
    finally:
        _current_event.reset(token)


def committed_offsets(app: AppT, topic: str) -> dict[int, int | None]:
    """Per partition of ``topic`` that ``app``'s consumer has held, the offset it last committed
    (``None`` before its first commit); read from Faust's own bookkeeping, no broker round trip."""
    committed = app.consumer._committed_offset  # type: ignore[attr-defined]
    return {tp.partition: offset for tp, offset in committed.items() if tp.topic == topic}


def run_when_started(app: AppT, run: Callable[[], Awaitable[Any]], *,
                     every: float | None = None) -> None:
    """Start ``run`` once the app has started, after its tables are recovered: once, or every
    ``every`` seconds, as ``@app.task`` and ``@app.timer`` start theirs (the same list, the same
    timer). Those decorators also register each function for ``app.discover()`` through
    venusian, whose frame lookup maps the file of every loaded module: about 0.08 s of CPU at
    each worker start, for a discovery the job never runs."""
    if every is None:
        app._app_tasks.append(run)  # type: ignore[attr-defined]
        return
    interval = float(every)
    name = qualname(run)

    async def periodic() -> None:
        async for _ in app.itertimer(interval, name=name):
            await run()

    app._app_tasks.append(periodic)  # type: ignore[attr-defined]


def ingest_settings(**overrides: Any) -> dict[str, Any]:
    """Return :data:`INGEST_SETTINGS` updated with ``overrides``, for ``faust.App(**settings)``."""
    settings = dict(INGEST_SETTINGS)
    settings.update(overrides)
    return settings


class BatchIngest:
    """Deliver a topic's records to ``handler`` in fetched batches, inside a Faust worker.

    Create it before the app starts::

        app = faust.App("pwevent", broker=..., store="rocksdb://", **ingest_settings())
        BatchIngest(app, "pwevent.reports", handle_reports)

    ``handler(records)`` is awaited once per fetched batch of one partition. The topic is
    subscribed through Faust (it joins the consumer group's assignment like an agent's topic).
    """

    def __init__(self, app: AppT, topic: str, handler: BatchHandler,
                 timestamps: bool = False) -> None:
        """Register ``handler`` for ``topic`` on ``app`` and install :class:`BatchConsumer`;
        ``timestamps``: each record also carries its Kafka timestamp (epoch ms) as a fifth
        member."""
        install_batch_consumer(app)
        routes = _ROUTES.setdefault(app, {})
        if topic in routes:
            raise ValueError(f"topic {topic!r} already has a batch handler")
        self.app = app
        self.topic_name = topic
        self.handler = handler
        self.timestamps = timestamps
        self.topic: TopicT = app.topic(
            topic,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        self.records_delivered = 0
        self.batches_delivered = 0
        routes[topic] = self


def install_batch_consumer(app: AppT) -> None:
    """Make ``app`` use :class:`BatchTransport`; must run before the app's consumer exists."""
    current = app._transport  # type: ignore[attr-defined]
    if isinstance(current, BatchTransport):
        return
    if app._consumer is not None:  # type: ignore[attr-defined]
        raise RuntimeError("install the batch consumer before the app's consumer is created")
    if current is not None and not isinstance(current, faust_aiokafka.Transport):
        raise RuntimeError(f"batch ingest needs the aiokafka transport, not {current!r}")
    app.transport = BatchTransport(app.conf.broker_consumer, app)


class FetchStalled(RuntimeError):
    """The Kafka consumer's thread did not answer a fetch in time: the worker must restart."""


#: Seconds a fetch (asked with a one-second timeout) may take before the consumer is taken to
#: be wedged (see :meth:`BatchConsumer._getmany`).
FETCH_STALL_S: Final = 30.0


class CoordinationFailed(RuntimeError):
    """The Kafka consumer's group membership ended with an error: the worker must restart."""


#: How often the consumer's group membership is looked at
#: (:meth:`BatchConsumer.check_coordination`).
COORDINATION_CHECK_S: Final = 1.0


def _offset(record: Any) -> int:
    """A fetched record's offset, a raw tuple's (:class:`RawFetched`) or a ``ConsumerRecord``'s."""
    return record[3] if type(record) is tuple else record.offset


def _raw_records(route: BatchIngest, partition: int, batch: Sequence[Any]) -> list[RawRecord]:
    """``batch`` as its handler takes it: as fetched (:class:`RawFetched`), or made of the
    ``ConsumerRecord`` s that a partition fetched before the fetcher's store was replaced."""
    if not batch or type(batch[0]) is tuple:
        return batch  # type: ignore[return-value]
    if route.timestamps:
        return [(r.key, r.value, partition, r.offset, r.timestamp)  # type: ignore[misc]
                for r in batch]
    return [(r.key, r.value, partition, r.offset) for r in batch]


class CommittedReadThread(faust_aiokafka.AIOKafkaConsumerThread):
    """Faust's consumer thread, whose aiokafka consumer reads only what transactions committed
    (:data:`streams.kafka.settings.ISOLATION_LEVEL`), like every other consumer of pwevent.
    Faust chooses ``read_committed`` only for an app that writes in transactions itself, which
    the job does not; a source topic written by a transactional producer must not have its
    aborted records counted."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        consumer._isolation_level = ISOLATION_LEVEL  # read by start(), which builds the fetcher
        return consumer

    async def _fetch_records(self, consumer: Any, active_partitions: Any,
                             timeout: float | None = None, max_records: int | None = None) -> Any:
        """Faust's fetch, with the records of batch topics fetched as :class:`RawFetched`."""
        fetcher = consumer._fetcher
        if not isinstance(fetcher._records, RawFetched):
            routes = _ROUTES.get(self.consumer.app, {})
            fetcher._records = RawFetched(
                {topic: route.timestamps for topic, route in routes.items()}, fetcher._records)
        return await super()._fetch_records(consumer, active_partitions, timeout, max_records)


class BatchConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer with a fetch loop that hands whole batches to batch topics."""

    #: Per partition, the next offset to acknowledge when a handler holds records back.
    _ack_next: dict[TP, int]

    def _new_consumer_thread(self) -> CommittedReadThread:
        """Faust's consumer thread, reading only what transactions committed."""
        return CommittedReadThread(self, loop=self.loop, beacon=self.beacon)

    async def _getmany(self, active_partitions: Any, timeout: float) -> Any:
        """Faust's fetch through its consumer thread, with a deadline.

        Rarely (seen when two workers of a group start within a second of each other), the
        fetch that Faust hands to its consumer thread never comes back, though the thread is
        idle and the partitions are assigned and not paused: the worker then holds its
        partitions and reads nothing, for ever. A fetch asked with a ``timeout`` of about a
        second that has not returned after :data:`FETCH_STALL_S` raises :class:`FetchStalled`,
        which stops the worker with that reason (exit status 1), so that its supervisor starts
        it again; with static membership it takes its partitions back at once."""
        try:
            return await asyncio.wait_for(super()._getmany(active_partitions, timeout),
                                          FETCH_STALL_S + timeout)
        except TimeoutError:
            if self.should_stop:
                return {}
            message = (f"the Kafka consumer did not answer a fetch within {FETCH_STALL_S:g} s; "
                       f"stopping so that the worker is restarted")
            logger.error(message)
            raise FetchStalled(message) from None

    def coordination_failure(self) -> BaseException | None:
        """The error that ended the Kafka consumer's group membership, if it ended with one:
        aiokafka runs the membership (join, sync, heartbeats) as a task in Faust's consumer
        thread, and nothing tells Faust when that task dies."""
        consumer = self._thread._consumer
        if consumer is None:  # the consumer thread has not started
            return None
        task = consumer._coordinator._coordination_task
        if not task.done() or task.cancelled():
            return None
        return task.exception()

    def check_coordination(self) -> None:
        """Raise :class:`CoordinationFailed` when the consumer's group membership died.

        Seen on the embedded broker when two workers start within a fraction of a second of each
        other: the broker holds both joins until the rebalance timeout, then gives the group
        leader an empty assignment, and aiokafka's membership task dies on it. That worker
        would hold no partition, read nothing and never join again, while the other rejoins
        for ever waiting for it. Raised in the consumer's timer, the error stops the worker with
        that reason (exit status 1), so that its supervisor starts it again."""
        failure = self.coordination_failure()
        if failure is None or self.should_stop:
            return
        message = (f"the Kafka consumer's group membership failed ({failure}); stopping so that "
                   f"the worker is restarted")
        logger.error(message)
        raise CoordinationFailed(message) from failure

    @Service.timer(COORDINATION_CHECK_S)
    async def _coordination(self) -> None:
        """:meth:`check_coordination` every :data:`COORDINATION_CHECK_S` seconds."""
        self.check_coordination()

    async def _commit_offsets(self, offsets: Any, start_new_transaction: bool = True) -> bool:
        """Faust's commit, without its books claiming offsets the broker refused.

        Faust records ``offsets`` as committed whether or not the commit went through. A commit
        the broker refuses because the group rebalanced meanwhile can return after the
        partitions were revoked and given back, so the partition's books would claim an offset
        its broker commit never reached: :meth:`_ack_range` would then drop the acks of the
        records read again from the broker's commit, and the partition would never commit
        again. A refused offset is taken out of the books (unknown until the next commit);
        acknowledgements are contiguous from the read position, so nothing is skipped."""
        committed = await super()._commit_offsets(offsets, start_new_transaction)
        if not committed:
            books = self._committed_offset
            for tp, offset in offsets.items():
                if books.get(tp) == offset:
                    books.pop(tp, None)
        return committed

    async def on_partitions_revoked(self, revoked: Any) -> None:
        """Forget held-back offsets of revoked partitions; their delivery restarts from commits."""
        for tp in revoked:
            self._ack_next.pop(tp, None)
        await super().on_partitions_revoked(revoked)

    async def on_start(self) -> None:
        """Subscribe the batch topics through the conductor, then start as usual."""
        self._ack_next = {}
        for route in _ROUTES.get(self.app, {}).values():
            self.app.topics.add(route.topic)
        await super().on_start()

    async def _drain_messages(self, fetcher: Any) -> None:  # noqa: C901 - one hot loop
        routes = _ROUTES.get(self.app, {})
        consumer_stopped = self._stopped.is_set
        fetcher_stopped = fetcher._stopped.is_set
        diag = self.diag
        try:
            while not (consumer_stopped() or fetcher_stopped()):
                diag.set_flag(CONSUMER_FETCHING)
                records, active = await self._wait_next_records(1.0)
                await asyncio.sleep(0)
                if not records or self.should_stop:
                    diag.unset_flag(CONSUMER_FETCHING)
                    continue
                if not self.flow_active:
                    # fetched while a rebalance stopped the flow: fetched again later
                    await self._refetch_all(records)
                    diag.unset_flag(CONSUMER_FETCHING)
                    continue
                generation = self.app.consumer_generation_id
                pending = dict(records)
                for tp, batch in records.items():
                    if not self.flow_active or self.app.consumer_generation_id != generation:
                        await self._refetch_all(pending)
                        break
                    del pending[tp]
                    if not (active is None or tp in active or tp in self._buffered_partitions):
                        await self._refetch(tp, _offset(batch[0]))
                        continue
                    self.app.monitor.track_tp_end_offset(tp, self.highwater(tp))
                    route = routes.get(tp.topic)
                    if route is not None:
                        await self._deliver_batch(route, tp, batch, generation)
                    else:
                        await self._deliver_each(tp, batch)
                    if self._n_acked >= self._commit_every:
                        self._n_acked = 0
                        await self.commit()
                diag.unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        except Exception as exc:
            self.log.exception("Batch drain raised: %r", exc)
            raise
        finally:
            diag.unset_flag(CONSUMER_FETCHING)

    async def _refetch_all(self, records: Mapping[TP, Sequence[Any]]) -> None:
        """Fetch every partition of ``records`` again from its first record: none of them is
        handed over. Not Faust's ``perform_seek`` (a seek to the committed offsets): aiokafka's
        ``seek_to_committed`` leaves a partition without a commit, or committed at 0, where the
        fetch moved it, and its records would never be read (seen on Apache Kafka, when
        requirements sent during a rebalance went unread by the group for ever)."""
        for tp, batch in records.items():
            if batch:
                await self._refetch(tp, _offset(batch[0]))

    async def _refetch(self, tp: TP, offset: int) -> None:
        """Fetch ``tp`` again from ``offset``: records fetched for a partition paused meanwhile
        are not handed over, but the fetch moved the consumer past them (seen after a worker was
        killed and restarted, when Faust's set of active partitions was empty during a fetch and
        aiokafka returned those of paused partitions too). Without the seek they would be
        skipped until a later record shows the gap. A partition no longer assigned is left."""
        try:
            await self.seek(tp, offset)
        except Exception as exc:  # noqa: BLE001 - a rebalance may have taken the partition
            logger.info("%s[%d] not fetched again from %d: %r", tp.topic, tp.partition, offset,
                        exc)

    async def _deliver_each(self, tp: TP, batch: Sequence[Any]) -> None:
        """Faust's record-by-record path, for topics without a batch handler."""
        read_offset = self._read_offset
        acks_enabled = self.app.topics.acks_enabled_for(tp.topic)
        for record in batch:
            offset = record.offset
            r_offset = read_offset[tp]
            if r_offset is not None and offset < r_offset:
                continue
            if r_offset and offset - r_offset > 1 and acks_enabled:
                await self._add_gap(tp, r_offset + 1, offset)
            message = self._to_message(tp, record)
            await self.wait_first(self.callback(message), self.suspend_flow.wait())
            read_offset[tp] = offset

    async def _deliver_batch(
        self, route: BatchIngest, tp: TP, batch: Sequence[Any], generation: int
    ) -> None:
        records = _raw_records(route, tp.partition, batch)
        r_offset = self._read_offset[tp]
        if r_offset is not None and records and records[0][3] < r_offset:
            records = [r for r in records if r[3] >= r_offset]
        if not records:
            return
        app = self.app
        await app.flow_control.acquire()
        await app.producer.buffer.wait_until_ebb()
        last = self._raw_message(tp, records[-1])
        event = Event(app, last.key, last.value, last.headers, last)
        self._unacked_messages.add(last)
        token = _current_event.set(weakref.ref(event))
        try:
            ack_until = await route.handler(records)
        finally:
            _current_event.reset(token)
        rewind = ack_until.offset if isinstance(ack_until, Rewind) else None
        hold = rewind if rewind is not None else ack_until
        if app.consumer_generation_id == generation:
            first = records[0][3]
            start = first if r_offset is None else min(first, r_offset + 1)
            end = records[-1][3] + 1
            stop = end if hold is None else min(int(hold), end)
            start = self._ack_next.get(tp, start)
            if stop > start:
                self._ack_range(tp, start, stop)
                self._ack_next[tp] = stop
            elif tp not in self._ack_next:
                self._ack_next[tp] = start
            if rewind is None:
                self._read_offset[tp] = records[-1][3]
            else:
                await self.seek(tp, rewind)  # also the read offset: the records come again
        with ack_lock:  # Faust's lock over ack bookkeeping (``Consumer.ack``)
            last.acked = True
            self._unacked_messages.discard(last)
        notify(self._waiting_for_ack)
        route.records_delivered += len(records)
        route.batches_delivered += 1
        monitor = app.monitor
        if monitor is not None:
            monitor.stream_inbound_time[tp] = time.monotonic()
            monitor.messages_received_total += len(records)
            monitor.events_total += len(records)

    def _raw_message(self, tp: TP, record: RawRecord) -> Any:
        """Faust's message of a raw record, as ``_to_message`` makes it of an aiokafka record:
        the batch's last record stands for the batch in Faust's books and event."""
        key, value, _partition, offset = record[:4]
        stamp = record[4] / 1000.0 if len(record) > 4 else None  # type: ignore[misc]
        return ConsumerMessage(tp.topic, tp.partition, offset, stamp, 0, [], key, value, None,
                               -1 if key is None else len(key),
                               -1 if value is None else len(value), tp,
                               generation_id=self.app.consumer_generation_id)

    def acknowledge(self, tp: TP, stop: int) -> None:
        """Acknowledge a batch topic's partition up to ``stop`` (exclusive): records its handler
        held back (answering an offset) and has finished with since. Nothing happens for a
        partition no longer assigned."""
        start = self._ack_next.get(tp)
        if start is None or stop <= start:
            return
        self._ack_range(tp, start, stop)
        self._ack_next[tp] = stop

    def _new_offset(self, tp: TP) -> int | None:
        """Faust's next offset to commit for ``tp``, the same value and the same books, with the
        first run of consecutive acknowledged offsets found by numpy: Faust walks the offsets
        one by one in Python, a few hundred nanoseconds each, and a batch acknowledges tens of
        thousands at once. With gaps recorded (records Faust skipped) Faust's own code runs."""
        acked = self._acked[tp]
        if not acked or self._gap[tp]:
            return super()._new_offset(tp)
        acked.sort()
        committed = self._committed_offset[tp]
        if committed and acked[0] - committed > 1:
            return None
        steps = np.diff(np.asarray(acked, dtype=np.int64)) != 1
        end = int(np.argmax(steps)) + 1 if bool(steps.any()) else len(acked)
        run = acked[:end]
        del acked[:end]
        self._acked_index[tp].difference_update(run)
        return run[-1] + 1

    def _ack_range(self, tp: TP, start: int, stop: int) -> None:
        """Acknowledge offsets ``start..stop-1`` (records and any gaps between them) at once."""
        if not self.app.topics.acks_enabled_for(tp.topic):
            return
        with ack_lock:  # the same critical section as Faust's ``Consumer.ack``
            committed = self._committed_offset[tp]
            if committed is not None:
                start = max(start, committed)
            if start >= stop:
                return
            index = self._acked_index[tp]
            offsets = range(start, stop)
            if index and not index.isdisjoint(offsets):
                new = [o for o in offsets if o not in index]
            else:
                new = list(offsets)
            index.update(new)
            self._acked[tp].extend(new)
            self._n_acked += len(new)


class BatchTransport(faust_aiokafka.Transport):
    """Faust's aiokafka transport with :class:`BatchConsumer` as its consumer."""

    Consumer = BatchConsumer
