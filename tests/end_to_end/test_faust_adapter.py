"""The Faust internals that ``streams/job/worker/ingest.py`` relies on are still there, in the same
shape.

``streams/job/worker/ingest.py`` is the one module of ``streams`` allowed to touch Faust's private
internals: it replaces the fetch loop of faust-streaming's aiokafka consumer and keeps Faust's
ack bookkeeping itself. Faust may change any of that in any release, so ``pyproject.toml`` pins
faust-streaming below its next minor version, and this file is the check that goes with the pin:
run it against a new version (and adapt ``streams/job/worker/ingest.py``) before moving the pin.
Every failure names the installed faust-streaming version and the internal that is missing or
changed.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import contextvars
import inspect
import threading
import tomllib
import typing
import weakref
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

import faust
import faust.streams
import faust.types.tuples
import mode.utils.futures
import pytest
from aiokafka.structs import ConsumerRecord
from faust.events import Event
from faust.transport import base as faust_base
from faust.transport import consumer as faust_consumer
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from faust.types.tuples import Message
from hypothesis import example, given, settings
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.version import Version
from record_batches import fetched_partition, record_batches

FAUST = version("faust-streaming")

try:
    from streams.job.worker import ingest, raw_fetch
    from streams.job.worker.tables import TrackedTable, changelog_written
except ImportError as exc:  # a Faust internal that streams/job/worker/ingest.py imports is gone
    pytest.fail(f"faust-streaming {FAUST}: streams/job/worker/ingest.py no longer imports ({exc}); "
                "adapt it and this test before moving the faust-streaming pin in pyproject.toml",
                pytrace=False)
ROOT = Path(__file__).resolve().parents[2]
INGEST = ROOT / "streams" / "job" / "worker" / "ingest.py"
Consumer = faust_aiokafka.Consumer


def broken(internal: str, problem: str) -> None:
    """Fail with the installed Faust version and the internal the adapter can no longer use."""
    pytest.fail(
        f"faust-streaming {FAUST}: {internal} {problem}. streams/job/worker/ingest.py relies on it "
        "(see 'Faust internals' in its module docstring): adapt streams/job/worker/ingest.py and "
        "this test before moving the faust-streaming pin in pyproject.toml",
        pytrace=False,
    )


#: the apps the running test made (:func:`new_app`), whose consumer threads' loops it closes
_APPS: list[faust.App] = []


def new_app(name: str, **settings: Any) -> faust.App:
    """An app with the batch consumer installed; nothing is started or connected."""
    app = faust.App(f"adapter-{name}", broker="kafka://127.0.0.1:9", web_enabled=False,
                    **ingest.ingest_settings(**settings))
    ingest.install_batch_consumer(app)
    _APPS.append(app)
    return app


@pytest.fixture(autouse=True)
def _close_thread_loops() -> typing.Iterator[None]:
    """A consumer's thread makes its own event loop when the consumer is built; the apps here
    are never started, so the test closes those loops itself."""
    yield
    while _APPS:
        app = _APPS.pop()
        thread = getattr(app._consumer, "_thread", None) if app._consumer is not None else None
        loop = getattr(thread, "thread_loop", None)
        if loop is not None and not loop.is_running() and not loop.is_closed():
            loop.close()


# -- methods --------------------------------------------------------------------------------

#: (class, method, awaited by streams/job/worker/ingest.py, parameters it passes or overrides, in
#: order; "*" for a method called with any number of positional arguments).
METHODS: list[tuple[type, str, bool, list[str] | str]] = [
    (Consumer, "_drain_messages", True, ["fetcher"]),  # overridden: the fetch loop
    (Consumer, "_wait_next_records", True, ["timeout"]),
    (Consumer, "_getmany", True, ["active_partitions", "timeout"]),  # overridden: a deadline
    (Consumer, "_add_gap", True, ["tp", "offset_from", "offset_to"]),
    (Consumer, "_to_message", False, ["tp", "record"]),
    (Consumer, "_new_offset", False, ["tp"]),  # overridden: numpy, the same books
    # overridden: the books corrected after a refused commit
    (Consumer, "_commit_offsets", True, ["offsets", "start_new_transaction"]),
    (Consumer, "_commit", True, ["offsets"]),
    (Consumer, "on_start", True, []),  # overridden
    (Consumer, "on_partitions_revoked", True, ["revoked"]),  # overridden
    (Consumer, "perform_seek", True, []),
    (Consumer, "commit", True, []),
    (Consumer, "highwater", False, ["tp"]),
    (Consumer, "wait_first", True, "*"),
    (Consumer, "_new_consumer_thread", False, []),  # overridden: the thread below
    (faust_aiokafka.AIOKafkaConsumerThread, "_create_worker_consumer", False, ["transport"]),
    # overridden: the fetcher's store of fetched partitions replaced (RawFetched)
    (faust_aiokafka.AIOKafkaConsumerThread, "_fetch_records", True,
     ["consumer", "active_partitions", "timeout", "max_records"]),
    (faust_base.Transport, "__init__", False, ["url", "app"]),
    (Message, "__init__", False, ["topic", "partition", "offset", "timestamp", "timestamp_type",
                                  "headers", "key", "value", "checksum"]),
    (Event, "__init__", False, ["app", "key", "value", "headers", "message"]),
]

#: Methods of :class:`streams.job.worker.ingest.BatchConsumer` that Faust calls: the same
#: parameters.
OVERRIDES = ("_drain_messages", "_getmany", "on_start", "on_partitions_revoked", "_new_offset",
             "_new_consumer_thread", "_commit_offsets")


@pytest.mark.parametrize(("owner", "name", "awaited", "params"), METHODS,
                         ids=[f"{o.__qualname__}.{n}" for o, n, _a, _p in METHODS])
def test_method_shape(owner: type, name: str, awaited: bool, params: list[str] | str) -> None:
    where = f"{owner.__module__}.{owner.__qualname__}.{name}"
    fn = getattr(owner, name, None)
    if fn is None:
        broken(where, "no longer exists")
    if awaited and not inspect.iscoroutinefunction(fn):
        broken(where, "is no longer a coroutine function (it is awaited)")
    if not awaited and inspect.iscoroutinefunction(fn):
        broken(where, "became a coroutine function (it is called without await)")
    sig = inspect.signature(fn)
    parameters = [p for p in sig.parameters.values() if p.name != "self"]
    if params == "*":
        if not any(p.kind is p.VAR_POSITIONAL for p in parameters):
            broken(where, f"no longer takes *args: {sig}")
        return
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in positional[: len(params)]]
    if names != params:
        broken(where, f"has parameters {names}, expected {params} (positionally): {sig}")
    rest = [p for p in parameters[len(params):]
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if rest:
        broken(where, f"has new required parameters {[p.name for p in rest]}: {sig}")


@pytest.mark.parametrize("name", OVERRIDES)
def test_overrides_keep_faust_signatures(name: str) -> None:
    ours = list(inspect.signature(getattr(ingest.BatchConsumer, name)).parameters)
    theirs = list(inspect.signature(getattr(Consumer, name)).parameters)
    if ours != theirs:
        broken(f"{Consumer.__qualname__}.{name}", f"has parameters {theirs}, the override in "
               f"streams.job.worker.ingest.BatchConsumer has {ours}")


def test_fetcher_drives_the_consumer_through_drain_messages() -> None:
    task = faust_consumer.Fetcher.__dict__.get("_fetcher")
    fun = getattr(task, "fun", task)
    if fun is None:
        broken("faust.transport.consumer.Fetcher._fetcher", "no longer exists")
    source = inspect.getsource(fun)
    if "._drain_messages(self)" not in source:
        broken("faust.transport.consumer.Fetcher._fetcher",
               "no longer awaits consumer._drain_messages(fetcher), the loop BatchConsumer "
               "replaces")


def test_wait_next_records_returns_records_and_active_partitions() -> None:
    ret = inspect.signature(Consumer._wait_next_records).return_annotation
    if typing.get_origin(ret) is not tuple or len(typing.get_args(ret)) != 2:
        broken("Consumer._wait_next_records", f"no longer returns (records, active): {ret}")
    tp = TP("adapter.t", 0)

    async def run() -> Any:
        consumer = new_app("wait").consumer

        async def getmany(active_partitions: Any, timeout: float) -> dict:
            return {tp: ["record"]}

        consumer._getmany = getmany  # type: ignore[method-assign]
        consumer._get_active_partitions = lambda: {tp}  # type: ignore[method-assign]
        return await consumer._wait_next_records(0.01)

    got = asyncio.run(run())
    if got != ({tp: ["record"]}, {tp}):
        broken("Consumer._wait_next_records", f"returned {got!r}, expected (records, active)")


# -- attributes and module names ---------------------------------------------------------------


def test_module_level_internals() -> None:
    current = getattr(faust.streams, "_current_event", None)
    if not isinstance(current, contextvars.ContextVar):
        broken("faust.streams._current_event", f"is no longer a ContextVar: {current!r}")
    lock = getattr(faust.types.tuples, "ack_lock", None)
    if type(lock) is not type(threading.RLock()):
        broken("faust.types.tuples.ack_lock", f"is no longer a reentrant lock: {lock!r}")
    if not isinstance(getattr(faust_consumer, "CONSUMER_FETCHING", None), str):
        broken("faust.transport.consumer.CONSUMER_FETCHING", "no longer exists")
    if not callable(getattr(mode.utils.futures, "notify", None)):
        broken("mode.utils.futures.notify", "no longer exists")
    if getattr(faust_aiokafka.Transport, "Consumer", None) is not Consumer:
        broken("faust.transport.drivers.aiokafka.Transport.Consumer",
               "is no longer the aiokafka Consumer that BatchConsumer extends")


def test_app_internals() -> None:
    for name in ("_transport", "_consumer"):
        if not hasattr(faust.App, name):
            broken(f"faust.App.{name}", "no longer exists")
    prop = inspect.getattr_static(faust.App, "transport", None)
    if not isinstance(prop, property) or prop.fset is None:
        broken("faust.App.transport", "is no longer a settable property")
    app = new_app("app")
    if not isinstance(app.transport, ingest.BatchTransport):
        broken("faust.App.transport", "setter no longer installs the given transport")
    if type(app.consumer) is not ingest.BatchConsumer:
        broken("faust.App.consumer", f"is not made by the installed transport: {app.consumer!r}")
    ingest.install_batch_consumer(app)  # a second install is a no-op
    if not isinstance(app.consumer_generation_id, int):
        broken("faust.App.consumer_generation_id", "is no longer an int")
    for name in ("acks_enabled_for", "add"):
        if not callable(getattr(app.topics, name, None)):
            broken(f"app.topics.{name}", "no longer exists")
    awaited = {"app.flow_control.acquire": app.flow_control.acquire,
               "app.producer.buffer.wait_until_ebb": app.producer.buffer.wait_until_ebb}
    for where, fn in awaited.items():
        if not inspect.iscoroutinefunction(fn):
            broken(where, "is no longer a coroutine function")
    monitor = app.monitor
    if list(inspect.signature(monitor.track_tp_end_offset).parameters) != ["tp", "offset"]:
        broken("Monitor.track_tp_end_offset", "no longer takes (tp, offset)")
    if not hasattr(monitor.stream_inbound_time, "__setitem__"):
        broken("Monitor.stream_inbound_time", "is no longer a mapping")
    for name in ("messages_received_total", "events_total"):
        if not isinstance(getattr(monitor, name, None), int):
            broken(f"Monitor.{name}", "is no longer an int counter")


#: Instance attributes of Faust's consumer used by BatchConsumer, and what each must look like.
CONSUMER_ATTRIBUTES: dict[str, Callable[[Any, Any], bool]] = {
    "_read_offset": lambda v, tp: v[tp] is None,
    "_committed_offset": lambda v, tp: v[tp] is None,
    "_acked": lambda v, tp: v[tp] == [] and isinstance(v[tp], list),
    "_acked_index": lambda v, tp: v[tp] == set() and isinstance(v[tp], set),
    "_unacked_messages": lambda v, tp: hasattr(v, "add") and hasattr(v, "discard"),
    "_buffered_partitions": lambda v, tp: isinstance(v, set),
    "_n_acked": lambda v, tp: isinstance(v, int),
    "_gap": lambda v, tp: not v[tp] and callable(getattr(v[tp], "overlap", None)),
    "_commit_every": lambda v, tp: v == ingest.INGEST_SETTINGS["broker_commit_every"],
    "_waiting_for_ack": lambda v, tp: v is None,
    "_stopped": lambda v, tp: callable(getattr(v, "is_set", None)),
    "diag": lambda v, tp: callable(getattr(v, "set_flag", None))
    and callable(getattr(v, "unset_flag", None)),
    "flow_active": lambda v, tp: isinstance(v, bool),
    "should_stop": lambda v, tp: isinstance(v, bool),
    "suspend_flow": lambda v, tp: callable(getattr(v, "wait", None)),
    "callback": lambda v, tp: callable(v),
    "consumer_stopped_errors": lambda v, tp: isinstance(v, tuple),
}


@pytest.mark.parametrize("name", CONSUMER_ATTRIBUTES)
def test_consumer_attribute(name: str) -> None:
    consumer = new_app(f"attr{name}").consumer
    if not hasattr(consumer, name):
        broken(f"Consumer.{name}", "no longer exists")
    if not CONSUMER_ATTRIBUTES[name](getattr(consumer, name), TP("adapter.t", 0)):
        broken(f"Consumer.{name}", f"changed shape: {getattr(consumer, name)!r}")


def test_app_tasks_start_after_recovery() -> None:
    """``run_when_started`` puts the worker's tasks and timers on ``App._app_tasks``, the list
    that ``@app.task`` and ``@app.timer`` fill; ``App.on_started`` starts every one of them
    (``on_started_init_extra_tasks``) once the tables are recovered."""
    app = new_app("tasks")
    tasks = getattr(app, "_app_tasks", None)
    if not isinstance(tasks, list) or tasks:
        broken("App._app_tasks", f"is no longer an empty list on a new app: {tasks!r}")
    started = inspect.getsource(faust.App.on_started_init_extra_tasks)
    if "for task in self._app_tasks" not in started or "self.add_future(task())" not in started:
        broken("App.on_started_init_extra_tasks", "no longer starts each of App._app_tasks")
    on_started = inspect.getsource(faust.App.on_started)
    recovered = on_started.find("_wait_for_table_recovery_completed")
    if recovered < 0 or on_started.find("on_started_init_extra_tasks") < recovered:
        broken("App.on_started", "no longer starts App._app_tasks after table recovery")

    ticks: list[int] = []

    async def once() -> None:
        ticks.append(0)

    async def tick() -> None:
        ticks.append(1)
        if len(ticks) >= 3:
            raise asyncio.CancelledError

    ingest.run_when_started(app, once)
    ingest.run_when_started(app, tick, every=0.01)
    assert app._app_tasks[0] is once and len(app._app_tasks) == 2

    async def run_both() -> None:
        await app._app_tasks[0]()
        with contextlib.suppress(asyncio.CancelledError):
            await app._app_tasks[1]()

    asyncio.run(run_both())
    assert ticks == [0, 1, 1]


#: aiokafka internals behind ``BatchConsumer.coordination_failure``
MEMBERSHIP_INTERNALS = ("_thread", "_consumer", "_coordinator", "_coordination_task")


def test_membership_task_internals() -> None:
    """``Consumer._thread`` is Faust's consumer thread, whose ``_consumer`` (``None`` until the
    thread starts) is the aiokafka consumer; aiokafka's consumer keeps its group coordinator in
    ``_coordinator`` and the coordinator runs the membership as the task
    ``_coordination_task``."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.consumer.group_coordinator import GroupCoordinator

    thread = getattr(new_app("membership").consumer, "_thread", None)
    if not isinstance(thread, faust_aiokafka.AIOKafkaConsumerThread):
        broken("Consumer._thread", f"is no longer an AIOKafkaConsumerThread: {thread!r}")
    if getattr(thread, "_consumer", "missing") is not None:
        broken("AIOKafkaConsumerThread._consumer", "is not None before the thread starts")
    if "self._coordinator = GroupCoordinator(" not in inspect.getsource(AIOKafkaConsumer.start):
        broken("aiokafka AIOKafkaConsumer._coordinator", "no longer holds the GroupCoordinator")
    init = inspect.getsource(GroupCoordinator.__init__)
    if "self._coordination_task = create_task(self._coordination_routine())" not in init:
        broken("aiokafka GroupCoordinator._coordination_task", "no longer runs the membership")


def test_the_worker_consumer_reads_only_what_transactions_committed() -> None:
    """``CommittedReadThread`` sets the aiokafka consumer's ``_isolation_level`` after Faust built
    it and before it starts; aiokafka's ``start()`` hands that attribute to its fetcher."""
    from aiokafka import AIOKafkaConsumer

    from streams.kafka.settings import ISOLATION_LEVEL

    sig = inspect.signature(faust_aiokafka.AIOKafkaConsumerThread._create_worker_consumer)
    theirs = list(sig.parameters)
    ours = list(inspect.signature(ingest.CommittedReadThread._create_worker_consumer).parameters)
    if ours != theirs:
        broken("AIOKafkaConsumerThread._create_worker_consumer",
               f"has parameters {theirs}, the override in CommittedReadThread {ours}")
    if "isolation_level=self._isolation_level" not in inspect.getsource(AIOKafkaConsumer.start):
        broken("aiokafka AIOKafkaConsumer._isolation_level", "is no longer what start() reads")
    app = new_app("isolation")
    thread = app.consumer._thread
    assert isinstance(thread, ingest.CommittedReadThread)

    async def built_isolation() -> str:
        consumer = thread._create_worker_consumer(app.transport)
        await consumer.stop()  # never started: closes its client
        return consumer._isolation_level

    assert asyncio.run(built_isolation()) == ISOLATION_LEVEL == "read_committed"


#: aiokafka internals behind ``RawFetched`` (streams/job/worker/raw_fetch.py)
RAW_FETCH_INTERNALS = ("_fetcher", "_records", "_partition_records", "_topic_partition",
                       "check_assignment", "_update_position", "getall", "has_more",
                       "_records_iterator", "_consumer_record", "_tp", "_check_crcs",
                       "_isolation_level", "_aborted_producers", "_consume_aborted_up_to",
                       "_contains_abort_marker", "next_fetch_offset")


def test_raw_fetch_internals() -> None:
    """Faust's ``_fetch_records`` reads the aiokafka consumer's ``_fetcher``; aiokafka's fetcher
    keeps its fetched partitions in ``_records``, storing each as a ``FetchResult`` whose
    ``getall`` the fetcher calls; a ``PartitionRecords`` hands its records out through the
    generator ``_records_iterator``, made in ``__init__`` and making each record with
    ``_consumer_record(tp, record)``, and skips aborted transactions with the helpers named
    here."""
    from aiokafka.consumer import fetcher

    records, result = fetcher.PartitionRecords, fetcher.FetchResult
    # (where, the line it must still hold, the internal, what changed if it does not)
    expected = [
        (faust_aiokafka.AIOKafkaConsumerThread._fetch_records, "fetcher = consumer._fetcher",
         "AIOKafkaConsumerThread._fetch_records", "no longer reads consumer._fetcher"),
        (fetcher.Fetcher.__init__, "self._records = collections.OrderedDict()",
         "aiokafka Fetcher._records", "is no longer an OrderedDict made in __init__"),
        (fetcher.Fetcher, "self._records[tp] = FetchResult(", "aiokafka Fetcher._records",
         "no longer stores FetchResults by item assignment"),
        (fetcher.Fetcher.fetched_records, "records = res_or_error.getall(max_records)",
         "aiokafka FetchResult.getall", "is no longer how the fetcher takes records"),
        (fetcher.Fetcher.fetched_records, "if type(res_or_error) is FetchResult:",
         "aiokafka Fetcher.fetched_records", "no longer tells results by their exact class "
         "(RawFetched may then swap the FetchResult's class instead of its getall)"),
        (fetcher.Fetcher.fetched_records, "if not res_or_error.has_more():",
         "aiokafka FetchResult.has_more", "no longer tells the fetcher a partition is done"),
        (result.__init__, "self._partition_records = partition_records",
         "aiokafka FetchResult._partition_records", "no longer holds the PartitionRecords"),
        (result.__init__, "self._topic_partition = tp",
         "aiokafka FetchResult._topic_partition", "no longer holds the partition"),
        (result.getall, "if not self.check_assignment(tp) or not self.has_more():",
         "aiokafka FetchResult.getall", "no longer checks the assignment first"),
        (result._update_position,
         "state.consumed_to(self._partition_records.next_fetch_offset)",
         "aiokafka FetchResult._update_position", "no longer moves the consumer's position"),
        (records.__init__, "self._records_iterator = self._unpack_records()",
         "aiokafka PartitionRecords._records_iterator", "is no longer made in __init__"),
        (records.__next__, "return next(self._records_iterator)",
         "aiokafka PartitionRecords.__next__", "no longer reads _records_iterator"),
        (records._unpack_records, "self._consumer_record(tp, record)",
         "aiokafka PartitionRecords._consumer_record", "no longer makes each record"),
        (records._unpack_records, "self._consume_aborted_up_to(next_batch.base_offset)",
         "aiokafka PartitionRecords._consume_aborted_up_to", "is no longer how aborted "
         "transactions are followed"),
        (records._unpack_records, "self._contains_abort_marker(next_batch)",
         "aiokafka PartitionRecords._contains_abort_marker", "is no longer how an abort "
         "marker is read"),
        (records._unpack_records, "next_batch.producer_id in self._aborted_producers",
         "aiokafka PartitionRecords._aborted_producers", "no longer holds the aborted "
         "producers"),
    ]
    for where, line, internal, problem in expected:
        if line not in inspect.getsource(where):
            broken(internal, problem)
    made = records(None, None, [], 0, None, None, True, 1)
    for name in ("_tp", "_records", "_check_crcs", "_isolation_level", "_aborted_producers",
                 "next_fetch_offset"):
        if not hasattr(made, name):
            broken(f"aiokafka PartitionRecords.{name}", "is no longer set in __init__")


_RECORD = st.tuples(st.none() | st.binary(max_size=8), st.none() | st.binary(max_size=16),
                    st.integers(0, 2**40))


def _fetched(data: bytes, aborted: list, start: int, topics: dict[str, bool]) -> Any:
    """Partition ("adapter.raw", 3) of ``data`` from ``start``, fetched into a ``RawFetched``."""
    from aiokafka.structs import TopicPartition

    return fetched_partition(data, TopicPartition("adapter.raw", 3), topics, start, aborted)


@settings(max_examples=80, deadline=None)
@given(batches=st.lists(st.tuples(st.sampled_from([0, 7, 9]),
                                  st.lists(_RECORD, min_size=1, max_size=6)),
                        min_size=1, max_size=5),
       aborted_from=st.none() | st.integers(0, 30), start=st.integers(0, 8),
       timed=st.booleans(), sizes=st.lists(st.none() | st.integers(1, 7), max_size=12))
def test_raw_fetched_records_are_aiokafka_records_as_tuples(batches, aborted_from, start,
                                                            timed, sizes) -> None:
    """The records of a batch topic, fetched through ``RawFetched``, are aiokafka's own records
    of the same fetch (aborted transactions skipped, a fetch starting inside a batch) as the
    tuples a batch handler takes, whether iterated or taken by ``getall`` in any counts; after
    each ``getall`` the consumer's position lies after what was handed out and at or before
    the next record, and the fetch ends where aiokafka's does."""
    asyncio.run(_same_records(record_batches(batches, headers=[("h", b"x")]),
                              [] if aborted_from is None else [(9, aborted_from)], start,
                              timed, sizes))


async def _same_records(data: bytes, aborted: list, start: int, timed: bool,
                        sizes: list[int | None]) -> None:
    from aiokafka.consumer.fetcher import FetchResult

    width = 5 if timed else 4

    def as_tuple(r: ConsumerRecord) -> tuple:
        return (r.key, r.value, 3, r.offset, r.timestamp)[:width]

    theirs = _fetched(data, aborted, start, {"adapter.other": timed})
    their_records = theirs._partition_records
    want = [as_tuple(r) for r in theirs.getall()]
    end = their_records.next_fetch_offset  # where aiokafka's fetch ends
    iterated = _fetched(data, aborted, start, {"adapter.raw": timed})._partition_records
    assert list(iterated) == want
    assert iterated.next_fetch_offset == end
    ours = _fetched(data, aborted, start, {"adapter.raw": timed})
    assert type(ours) is FetchResult  # the fetcher tells results from errors by the class
    assert ours.getall != theirs.getall
    state = ours._assignment.state_value(ours._topic_partition)
    got: list[tuple] = []
    for size in [*sizes, None]:
        taken = ours.getall(size)
        assert size is None or len(taken) <= size
        assert len(taken) == min(size or len(want), len(want) - len(got))
        got += taken
        if got:
            assert state.position > got[-1][3]
        if len(got) < len(want):
            assert state.position <= want[len(got)][3]
        if not ours.has_more():
            break
    assert got == want
    assert not ours.has_more() and ours.getall() == []
    assert state.position == end
    gone = weakref.ref(ours)
    del ours
    assert gone() is None  # freed at once (no reference cycle holds its fetched bytes)
    assert all(isinstance(r, ConsumerRecord) for r in
               _fetched(data, aborted, start, {"adapter.other": timed})._partition_records)


def test_raw_fetched_hands_nothing_out_once_the_position_moved() -> None:
    """As aiokafka's: a partition paused, or sought elsewhere, since the fetch gives nothing,
    and its fetched records are dropped (to be fetched again from the new position)."""
    asyncio.run(_nothing_once_moved())


async def _nothing_once_moved() -> None:
    data = record_batches([(0, [(b"k", b"v", 5), (b"k", b"w", 6)])])
    paused = _fetched(data, [], 0, {"adapter.raw": True})
    paused._assignment.state_value(paused._topic_partition).pause()
    assert paused.getall() == [] and not paused.has_more()
    sought = _fetched(data, [], 0, {"adapter.raw": True})
    assert sought.getall(1) == [(b"k", b"v", 3, 0, 5)] and sought.has_more()
    sought._assignment.state_value(sought._topic_partition).seek(0)
    assert sought.getall() == [] and not sought.has_more()


def test_raw_fetched_records_begun_by_aiokafka_go_on_as_tuples() -> None:
    """A partition whose records aiokafka began to hand out before it was stored keeps
    aiokafka's generator and getall; the records still to come are tuples."""
    asyncio.run(_begun_by_aiokafka())


async def _begun_by_aiokafka() -> None:
    from aiokafka.consumer.fetcher import FetchResult

    data = record_batches([(0, [(b"k", b"v", 5), (b"k", b"w", 6), (b"k", b"x", 7)])])
    plain = _fetched(data, [], 0, {"adapter.other": True})
    first = plain.getall(1)
    assert isinstance(first[0], ConsumerRecord) and first[0].offset == 0
    store = raw_fetch.RawFetched({"adapter.raw": True}, {plain._topic_partition: plain})
    begun = store[plain._topic_partition]
    assert "getall" not in vars(begun) and type(begun) is FetchResult
    assert begun.getall() == [(b"k", b"w", 3, 1, 6), (b"k", b"x", 3, 2, 7)]
    assert not begun.has_more()
    assert begun._assignment.state_value(begun._topic_partition).position == 3


def test_raw_fetched_leaves_errors_and_other_topics() -> None:
    """Only fetched partitions of batch topics are changed, those already fetched included."""
    from aiokafka.consumer.fetcher import FetchError, FetchResult, PartitionRecords
    from aiokafka.record.memory_records import MemoryRecords
    from aiokafka.structs import TopicPartition

    def result(topic: str) -> FetchResult:
        tp = TopicPartition(topic, 0)
        records = PartitionRecords(tp, MemoryRecords(record_batches([(0, [(b"k", b"v", 5)])])),
                                   [], 0, None, None, True, 1)
        return FetchResult(tp, assignment=None, partition_records=records, backoff=0)

    error = FetchError(error=RuntimeError("broken"), backoff=0)
    store = raw_fetch.RawFetched({"adapter.batch": True},
                              {TP("adapter.batch", 0): result("adapter.batch")})
    store[TP("adapter.plain", 0)] = result("adapter.plain")
    store[TP("adapter.batch", 1)] = error
    assert list(store[TP("adapter.batch", 0)]._partition_records) == [(b"k", b"v", 0, 0, 5)]
    assert isinstance(next(store[TP("adapter.plain", 0)]._partition_records), ConsumerRecord)
    assert store[TP("adapter.batch", 1)] is error


def test_fetcher_stopped_event() -> None:
    fetcher = faust_consumer.Fetcher(new_app("fetcher"))
    if not callable(getattr(getattr(fetcher, "_stopped", None), "is_set", None)):
        broken("Fetcher._stopped", "no longer exists (mode.Service._stopped)")


# -- behaviour ----------------------------------------------------------------------------------


def test_ack_range_keeps_the_same_books_as_consumer_ack(monkeypatch) -> None:
    """BatchConsumer._ack_range must leave exactly what Consumer.ack leaves, offset by offset."""
    app = new_app("ack")
    consumer = app.consumer
    monkeypatch.setattr(app.topics, "acks_enabled_for", lambda topic: True)
    by_ack, by_range = TP("adapter.a", 0), TP("adapter.b", 0)
    for offset in range(10):
        message = Message(by_ack.topic, 0, offset, 0.0, 0, [], None, None, None)
        if not consumer.ack(message):
            broken("Consumer.ack", f"did not acknowledge offset {offset}")
    consumer._ack_range(by_range, 0, 10)
    if consumer._n_acked != 20:
        broken("Consumer._n_acked", f"is {consumer._n_acked} after 2 x 10 acks")
    if (consumer._acked[by_ack], consumer._acked_index[by_ack]) != (
            consumer._acked[by_range], consumer._acked_index[by_range]):
        broken("Consumer._acked/_acked_index", "are no longer filled as Consumer.ack does")
    for tp in (by_ack, by_range):
        if consumer._new_offset(tp) != 10:
            broken("Consumer._new_offset", f"gives {consumer._new_offset(tp)} for offsets "
                   "0..9 acknowledged, expected 10: the ack bookkeeping changed")


def test_to_message_and_event_from_an_aiokafka_record() -> None:
    app = new_app("message")
    tp = TP("adapter.t", 2)
    record = ConsumerRecord("adapter.t", 2, 41, 1_000, 0, b"k", b"v", None, 1, 1, [])
    message = app.consumer._to_message(tp, record)
    got = (message.tp, message.offset, message.key, message.value, message.acked)
    if got != (tp, 41, b"k", b"v", False):
        broken("Consumer._to_message", f"made {got!r} from an aiokafka record")
    event = Event(app, message.key, message.value, message.headers, message)
    if event.message is not message:
        broken("faust.events.Event", "no longer keeps the message it is made from")


def test_partition_context_routes_table_writes() -> None:
    app = new_app("context", topic_partitions=4)
    table = app.Table("adapter-table", partitions=4, key_type=bytes, value_type=bytes)
    with ingest.partition_context(app, "adapter.source", 3):
        event = faust.current_event()
        if event is None or event.message.partition != 3:
            broken("faust.streams._current_event", "no longer backs faust.current_event()")
        if table.partition_for_key(b"key") != 3:
            broken("faust.streams._current_event", "no longer routes table writes")
    if faust.current_event() is not None:
        broken("faust.streams._current_event", "is not reset by partition_context")


def test_tracked_table_waits_for_every_changelog_write_until_acknowledged() -> None:
    """A write to a table goes to its changelog through the producer's buffer, whose task hands
    it to the client later; ``changelog_written`` returns only once the broker acknowledged each
    one (here: once its future is resolved), and raises what a refused one raised."""
    asyncio.run(_tracked_table())


async def _tracked_table() -> None:
    app = new_app("tracked", topic_partitions=4)
    table = app.tables.add(TrackedTable(app, name="tracked", beacon=app.tables.beacon,
                                        partitions=4, key_type=bytes, value_type=bytes))
    with ingest.partition_context(app, "adapter.source", 2):
        table[b"a"] = b"1"
        table[b"b"] = b"2"
    pending = app.producer.buffer.pending
    if pending.qsize() != 2:
        broken("Collection.send_changelog", "is no longer what a table write sends through")
    first, second = pending.get_nowait(), pending.get_nowait()
    assert (first.message.partition, second.message.partition) == (2, 2)
    waiting = asyncio.ensure_future(changelog_written(table, {b"plain": b"mapping"}))
    await asyncio.sleep(0.05)
    assert not waiting.done()  # both on their way: the buffer is empty, nothing acknowledged
    first.set_result(None)
    await asyncio.sleep(0.05)
    assert not waiting.done()  # one is not acknowledged yet
    second.set_result(None)
    await asyncio.wait_for(waiting, 1)
    with ingest.partition_context(app, "adapter.source", 1):
        table[b"c"] = b"3"
    pending.get_nowait().set_exception(RuntimeError("refused"))
    with pytest.raises(RuntimeError, match="refused"):
        await changelog_written(table)
    await changelog_written(table)  # a write is waited for once


def test_committed_offsets_reads_faust_books() -> None:
    consumer = new_app("committed").consumer
    consumer._committed_offset[TP("adapter.t", 1)] = 7
    consumer._committed_offset[TP("adapter.other", 0)] = 3
    assert ingest.committed_offsets(consumer.app, "adapter.t") == {1: 7}


def test_a_refused_commit_leaves_no_offset_in_the_books(monkeypatch) -> None:
    """The commit of offset 120 is refused (the group rebalanced), and the partition was revoked
    and given back while it was on its way, with no commit on the broker: Faust's own commit
    would record 120 as committed, and the acks of offsets 0-119 read again would be dropped,
    so that the partition never committed. The books hold nothing instead, the acks count, and
    the next commit is 120."""
    tp = TP("adapter.t", 0)
    sent: list[dict] = []

    async def run() -> tuple[bool, Any, int | None]:
        consumer = new_app("refused").consumer
        monkeypatch.setattr(consumer.app.topics, "acks_enabled_for", lambda topic: True)
        consumer.assignment = lambda: {tp}  # type: ignore[method-assign]

        async def flush() -> None:
            return None

        async def rebalanced(offsets: Any) -> bool:
            consumer._committed_offset.pop(tp, None)  # revoked and given back meanwhile
            return False

        async def accepted(offsets: Any) -> bool:
            sent.append(dict(offsets))
            return True

        consumer.app.producer.flush = flush  # type: ignore[method-assign]
        consumer._commit = rebalanced  # type: ignore[method-assign]
        consumer._committed_offset[tp] = 40
        refused = await consumer._commit_offsets({tp: 120})
        books = consumer._committed_offset.get(tp)
        consumer._ack_range(tp, 0, 120)
        consumer._commit = accepted  # type: ignore[method-assign]
        return refused, books, consumer._new_offset(tp)

    refused, books, offset = asyncio.run(run())
    assert (refused, books, offset) == (False, None, 120)


# -- the adapter's coverage and the pin -------------------------------------------------------


def _checked_names() -> set[str]:
    names = {name for _owner, name, _a, _p in METHODS} | set(CONSUMER_ATTRIBUTES)
    return names | {"_current_event", "_transport", "_consumer", "_isolation_level",
                    "_app_tasks",  # test_app_tasks_start_after_recovery
                    *MEMBERSHIP_INTERNALS, *RAW_FETCH_INTERNALS}


def _own_names(tree: ast.AST) -> set[str]:
    """Private names ``streams/job/worker/ingest.py`` defines itself and Faust's consumer does not
    have."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
    return {n for n in own if not hasattr(Consumer, n) and n not in CONSUMER_ATTRIBUTES}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def test_every_faust_private_the_adapter_uses_is_checked_here() -> None:
    tree = ast.parse(INGEST.read_text())
    used: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            used |= {a.name for a in node.names if _private(a.name)}
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _private(node.name):
            used.add(node.name)
    unchecked = sorted(used - _own_names(tree) - _checked_names())
    assert not unchecked, (
        f"streams/job/worker/ingest.py uses private name(s) {unchecked} that "
        f"tests/end_to_end/test_faust_adapter.py does not check (faust-streaming {FAUST}): "
        "add them to METHODS or CONSUMER_ATTRIBUTES"
    )


def _faust_private_vocabulary() -> set[str]:
    app = new_app("vocabulary")
    objects = [app, app.consumer, app.transport, app.topics, app.producer, app.monitor,
               faust_consumer.Fetcher(app)]
    names: set[str] = set()
    for obj in objects:
        names |= {n for n in dir(obj) if _private(n)}
    return names


def test_no_faust_private_outside_the_adapter() -> None:
    """Other modules of ``streams`` use Faust's public API, or public functions of the adapter."""
    vocabulary = _faust_private_vocabulary()
    modules = [p for p in sorted((ROOT / "streams").rglob("*.py")) if p != INGEST]
    trees = {p: ast.parse(p.read_text()) for p in modules}
    ours: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                ours.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                ours.add(node.attr)
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in (
                    "faust", "mode"):
                found += [f"{path.name}:{node.lineno} imports {a.name}"
                          for a in node.names if _private(a.name)]
            elif (isinstance(node, ast.Attribute) and node.attr in vocabulary
                  and node.attr not in ours
                  and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))):
                found.append(f"{path.name}:{node.lineno} uses .{node.attr}")
    assert not found, (
        f"Faust private internals used outside streams/job/worker/ingest.py "
        f"(faust-streaming {FAUST}): {found}; add a public function to "
        "streams/job/worker/ingest.py and call that instead"
    )


def test_pin_holds_the_installed_version_below_the_next_minor() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [Requirement(d) for d in deps if Requirement(d).name == "faust-streaming"]
    assert len(pins) == 1, f"pyproject.toml should name faust-streaming once: {deps}"
    spec = pins[0].specifier
    installed = Version(FAUST)
    ceiling = Version(f"{installed.major}.{installed.minor + 1}")
    if installed not in spec:
        broken("the installed version", f"is outside the pin {spec} in pyproject.toml")
    if ceiling in spec or not any(s.operator == "<" for s in spec):
        broken("the pin", f"{spec} in pyproject.toml does not stop below {ceiling}")


@settings(max_examples=300, deadline=None)
@given(acked=st.lists(st.integers(0, 40), max_size=40), committed=st.none() | st.integers(0, 40),
       gap=st.none() | st.tuples(st.integers(0, 40), st.integers(1, 5)))
@example(acked=[2], committed=0, gap=None)  # Faust takes a commit at 0 for none
@example(acked=[7, 5, 6, 9, 10], committed=3, gap=None)  # a gap after the commit
@example(acked=[4, 5, 5, 6], committed=3, gap=None)  # a repeat ends a run
@example(acked=[2, 3], committed=None, gap=(4, 2))  # gaps: Faust's own code
def test_new_offset_gives_what_faust_gives(acked, committed, gap) -> None:
    """BatchConsumer._new_offset (numpy) leaves the offset and the books Faust's leaves."""
    app = new_app("new-offset")
    ours = app.consumer
    if not isinstance(ours, ingest.BatchConsumer):
        broken("app.consumer", f"is not the BatchConsumer: {ours!r}")
    tp = TP("adapter.n", 0)
    books = []
    for new_offset in (ingest.BatchConsumer._new_offset, faust_aiokafka.Consumer._new_offset):
        ours._acked[tp] = list(acked)
        ours._acked_index[tp] = set(acked)
        ours._committed_offset[tp] = committed
        ours._gap[tp].clear()
        if gap is not None:
            ours._gap[tp].addi(gap[0], gap[0] + gap[1])
        offset = new_offset(ours, tp)
        books.append((offset, list(ours._acked[tp]), set(ours._acked_index[tp]),
                      sorted(ours._gap[tp])))
    assert books[0] == books[1]
