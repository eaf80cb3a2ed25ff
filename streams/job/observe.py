"""Operating a worker: its Prometheus metrics, health and readiness endpoints, JSON log lines.

:class:`WorkerMetrics` holds the worker's metrics registry; :class:`~streams.job.faust_job.Job`
updates it where it counts records, once per batch (never once per record). :class:`Observer` is a
:class:`mode.Service` started with the worker, before its app: an aiohttp server inside the
worker's event loop (a request never blocks the loop, and an answer proves that it runs), and a
timer that measures the consumer lag and whether the broker answers. It serves

``GET /metrics``
    the registry in Prometheus' text format;
``GET /healthz``
    200 while the worker's event loop answers (liveness);
``GET /readyz``
    200 when the worker holds at least one partition of the reports topic and the broker answered
    within the last :data:`BROKER_FRESH_S` seconds; 503 with the reason otherwise (readiness).

:func:`json_logging_config` configures Python's logging (Faust's included) to write one JSON
object per line, made by :class:`JsonFormatter`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter as Tally
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Protocol

import numpy as np
import orjson
from aiohttp import web
from mode import Service
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from mechanisms.ledgers.fixed import (
    AbsorptionLedger,
    BudgetLedger,
    DistributionLedger,
    SampleLedger,
    UniformLedger,
)
from streams.records.field_formats import Reason

log = logging.getLogger("pwevent.observe")

METRICS_PORT: Final = 9464  # the port Prometheus' exporters conventionally start from
METRICS_HOST: Final = "0.0.0.0"
REFRESH_S: Final = 1.5  # how often the lag gauges are updated and the broker is probed
PROBE_TIMEOUT_S: Final = 2.0  # a broker that does not answer a metadata request in this long
BROKER_FRESH_S: Final = 5.0  # ... for this long makes the worker not ready
#: seconds from the partial that completed a slot to its release
RELEASE_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                          60.0)
ACCEPTED: Final = "accepted"


def accepted_since(open_before: int, open_now: int, messages: Iterable[Mapping]) -> int:
    """Reports a partition accumulator counted while it took one batch, from its open slots'
    ``accepted`` totals before and after, plus the counts of the slots that closed meanwhile
    (partial messages; under ``dpbd``/``dpba``, plans): O(slots), whatever the batch's size.
    Under ``dpbd``/``dpba`` a report withdrawn with its user's removal is not counted."""
    closed = 0
    for msg in messages:
        if "plan" in msg:
            closed += int(msg.get("accepted", 0))
        else:
            closed += sum(int(part["accepted"]) for part in msg.get("slots", {}).values())
    return max(open_now + closed - open_before, 0)


def window_spend(ledger: BudgetLedger) -> np.ndarray | None:
    """Per ledger row, the budget charged over the row's current window (its last ``w``
    released slots), or ``None`` for a ledger this does not know.

    Exact for ``pbd``/``bd`` (their ledger keeps each slot's publication charge), ``uniform``
    and ``sample``, counting the dissimilarity charge at every released slot of the window
    (the ledger does not record since when a level exists). For ``pba``/``ba`` the ledger keeps
    only the latest publication, so an earlier publication inside the same window is missing:
    a lower bound."""
    w, E = ledger.w.astype(np.float64), ledger.E
    released = np.minimum(ledger.w, ledger.slot - 1).astype(np.float64)
    share = E / (2.0 * w)
    if isinstance(ledger, DistributionLedger):
        recent = ledger.recent
        in_window = np.arange(recent.shape[1])[None, :] < ledger.w[:, None]
        return released * share + np.where(in_window, recent, 0.0).sum(axis=1)
    if isinstance(ledger, UniformLedger):
        return released * E / w
    if isinstance(ledger, SampleLedger):
        published = (ledger.last > 0) & (ledger.last >= ledger.slot - ledger.w)
        return np.where(published, E, 0.0)
    if isinstance(ledger, AbsorptionLedger):
        last = ledger.last_published
        published = (last > 0) & (last >= ledger.slot - ledger.w)
        return released * share + np.where(published, ledger.shares * share, 0.0)
    return None


class WorkerMetrics:
    """The worker's metrics registry (names in README.md, "Operating a worker")."""

    def __init__(self, reports_topic: str) -> None:
        # no ``*_created`` series beside every counter (a process-wide switch of the client;
        # a worker's process has no other registry)
        disable_created_metrics()
        self.reports_topic = reports_topic
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.reports = Counter("pwevent_reports", "Records of the reports topic taken, by "
                               "outcome: accepted, or the reason of their dead letter",
                               ["outcome"], registry=r)
        self.requirements = Counter("pwevent_requirements", "Requirement records applied "
                                    "(registrations and removals)", registry=r)
        self.dead_letters = Counter("pwevent_dead_letters", "Dead letters, by reason",
                                    ["reason"], registry=r)
        self.dead_letters_failed = Counter("pwevent_dead_letters_failed", "Dead letters the "
                                           "broker refused (logged)", registry=r)
        self.rewinds = Counter("pwevent_rewinds", "Batches not taken because they skipped "
                               "records; the partition was read again", registry=r)
        self.slots_released = Counter("pwevent_slots_released", "Slots this worker's "
                                      "coordinator released (emitted to the releases topic)",
                                      registry=r)
        self.last_released_slot = Gauge("pwevent_last_released_slot", "The last slot this "
                                        "worker's coordinator released", registry=r)
        self.slot_release_seconds = Histogram(
            "pwevent_slot_release_seconds", "Seconds from the coordinator's receipt of the "
            "partial that completed a slot to the slot's release", buckets=RELEASE_BUCKETS,
            registry=r)
        self.consumer_lag = Gauge("pwevent_consumer_lag_records", "Records behind the log end "
                                  "(highwater minus position), per assigned reports partition",
                                  ["topic", "partition"], registry=r)
        self.ledger_levels = Gauge("pwevent_ledger_levels", "Requirement levels in the "
                                   "ledger of this worker's coordinator (0 without one)",
                                   registry=r)
        self.budget_spent = Gauge("pwevent_budget_spent", "Budget a level's current window "
                                  "has spent (fixed mechanisms, coordinator's ledger)",
                                  ["level"], registry=r)
        self.budget_left = Gauge("pwevent_budget_left", "A level's budget E minus what its "
                                 "current window has spent", ["level"], registry=r)
        # every series exists from the start, so that rate() sees the first increment
        self.reports.labels(ACCEPTED)
        for reason in Reason:
            self.dead_letters.labels(reason.value)
            if reason is not Reason.INVALID_REQUIREMENT:
                self.reports.labels(reason.value)

    # -- counting, once per batch ------------------------------------------------------------

    def took_reports(self, accepted: int) -> None:
        """A batch of reports was taken, ``accepted`` of them counted (see :func:`accepted_since`;
        the others are dead letters, counted by :meth:`dead`, or control records)."""
        if accepted:
            self.reports.labels(ACCEPTED).inc(accepted)

    def took_requirements(self, applied: int) -> None:
        """``applied`` requirement records were applied."""
        if applied:
            self.requirements.inc(applied)

    def dead(self, letters: Sequence[Any]) -> None:
        """Dead letters (``topic`` and ``reason`` of each) are being sent."""
        if not letters:
            return
        for (topic, reason), n in Tally((d.topic, d.reason) for d in letters).items():
            self.dead_letters.labels(reason).inc(n)
            if topic == self.reports_topic:
                self.reports.labels(reason).inc(n)

    def dead_letter_failed(self) -> None:
        """The broker refused a dead letter."""
        self.dead_letters_failed.inc()

    def rewound(self) -> None:
        """A batch was not taken; its partition is read again."""
        self.rewinds.inc()

    def released(self, emitted: Sequence[tuple[int, bytes | None, bytes]]) -> None:
        """The coordinator emitted ``(slot, release, decision)`` records (``release`` ``None``:
        a stream's start record, not a slot)."""
        slots = [slot for slot, release, _ in emitted if release is not None]
        if slots:
            self.slots_released.inc(len(slots))
            self.last_released_slot.set(max(slots))

    def release_took(self, emitted: Sequence[tuple[int, bytes | None, bytes]],
                     received: float) -> None:
        """The slots in ``emitted`` were released; the partial that completed them arrived at
        ``received`` (``time.monotonic()``)."""
        took = max(time.monotonic() - received, 0.0)
        for _slot, release, _ in emitted:
            if release is not None:
                self.slot_release_seconds.observe(took)

    # -- gauges --------------------------------------------------------------------------------

    def set_lag(self, lags: Mapping[int, int]) -> None:
        """Lag per assigned reports partition (partitions not given are no longer assigned)."""
        self.consumer_lag.clear()
        for p, lag in sorted(lags.items()):
            self.consumer_lag.labels(self.reports_topic, str(p)).set(lag)

    def set_coordinator(self, coordinator: Any) -> None:
        """The ledger gauges from this worker's coordinator (``None``: it runs elsewhere)."""
        self.budget_spent.clear()
        self.budget_left.clear()
        # the level ledger of a coordinator keeping it (CoordinatorLedgerRelease)
        engine = getattr(getattr(coordinator, "placement", None), "engine", None)
        if engine is None:  # no coordinator here, or the ledgers are in the partitions
            self.ledger_levels.set(0)
            return
        rows: dict[str, int] = engine.row_of
        self.ledger_levels.set(len(rows))
        spent = window_spend(engine.ledger)
        if spent is None:
            return
        for level, row in rows.items():
            self.budget_spent.labels(level).set(float(spent[row]))
            self.budget_left.labels(level).set(float(engine.ledger.E[row] - spent[row]))

    def render(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)


# -- the server ------------------------------------------------------------------------------


class ObservedJob(Protocol):
    """What :class:`Observer` reads of a :class:`~streams.job.faust_job.Job`."""

    app: Any
    broker: str
    topics: Any
    metrics: WorkerMetrics
    coordinator: Any


class Observer(Service):
    """The worker's HTTP endpoints and the timer behind the lag gauges and readiness."""

    def __init__(self, job: ObservedJob, host: str = METRICS_HOST, port: int = METRICS_PORT,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.job, self.host, self.port = job, host, port
        self.broker_seen: float | None = None  # time.monotonic() of the last broker answer
        self.broker_error = "not probed yet"
        self._runner: web.AppRunner | None = None
        self._client: Any = None

    @property
    def url(self) -> str:
        """Where the server listens."""
        return f"http://{self.host}:{self.port}"

    async def on_start(self) -> None:
        """Listen; a port that cannot be had is logged, and the worker runs without it."""
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
        except OSError as exc:
            await runner.cleanup()
            log.error("metrics server cannot listen on %s:%d (%s); the worker runs without it",
                      self.host, self.port, exc)
            return
        self._runner = runner
        log.info("metrics, /healthz and /readyz on %s", self.url)

    async def on_stop(self) -> None:
        """Stop listening; close the broker probe's connection."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()
        client, self._client = self._client, None
        if client is not None:
            with contextlib.suppress(Exception):
                await client.close()

    @Service.timer(REFRESH_S, exec_first=True)
    async def _refresh(self) -> None:
        if self._runner is None:
            return  # nobody can ask
        await self.probe_broker()
        try:
            await self.update_lag()
        except Exception as exc:  # noqa: BLE001 - a gauge must never stop the worker
            log.debug("consumer lag not updated: %r", exc)

    # -- what the endpoints report -------------------------------------------------------------

    async def probe_broker(self) -> bool:
        """Ask the broker for its metadata (bounded by :data:`PROBE_TIMEOUT_S`); remember when
        it last answered. Never raises."""
        from aiokafka.client import AIOKafkaClient

        try:
            if self._client is None:
                client = AIOKafkaClient(bootstrap_servers=self.job.broker,
                                        client_id="pwevent-probe",
                                        request_timeout_ms=int(PROBE_TIMEOUT_S * 1000))
                try:
                    await asyncio.wait_for(client.bootstrap(), PROBE_TIMEOUT_S)
                except BaseException:
                    with contextlib.suppress(Exception):
                        await client.close()
                    raise
                self._client = client
            else:
                await asyncio.wait_for(self._client.fetch_all_metadata(), PROBE_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - the answer is "not reachable"
            self.broker_error = type(exc).__name__
            return False
        self.broker_seen = time.monotonic()
        return True

    def assigned(self) -> list[int]:
        """The reports partitions this worker holds (none while its consumer is not running)."""
        app = self.job.app
        if not app.started:
            return []
        try:
            assignment = app.consumer.assignment()
        except Exception:  # noqa: BLE001 - the consumer is not started yet, or is stopping
            return []
        topic = self.job.topics.reports
        return sorted(tp.partition for tp in assignment if tp.topic == topic)

    async def update_lag(self) -> None:
        """Set the lag gauge of every assigned reports partition: highwater minus position."""
        if not self.job.app.started:
            return  # its consumer is created when the app starts, not before
        consumer = self.job.app.consumer
        topic = self.job.topics.reports
        lags: dict[int, int] = {}
        for tp in [tp for tp in consumer.assignment() if tp.topic == topic]:
            with contextlib.suppress(Exception):  # revoked meanwhile, or no fetch yet
                highwater = consumer.highwater(tp)
                position = await asyncio.wait_for(consumer.position(tp), PROBE_TIMEOUT_S)
                if highwater is not None and position is not None:
                    lags[tp.partition] = max(int(highwater) - int(position), 0)
        self.job.metrics.set_lag(lags)

    def not_ready(self) -> str | None:
        """Why the worker is not ready, or ``None`` when it is."""
        seen = self.broker_seen
        if seen is None or time.monotonic() - seen > BROKER_FRESH_S:
            return (f"broker {self.job.broker} not reachable within {BROKER_FRESH_S:g} s "
                    f"({self.broker_error})")
        if not self.assigned():
            return f"no partition of {self.job.topics.reports} assigned"
        return None

    async def _metrics(self, _request: web.Request) -> web.Response:
        metrics = self.job.metrics
        metrics.set_coordinator(self.job.coordinator)
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        reason = self.not_ready()
        if reason is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=reason + "\n")


# -- JSON log lines ----------------------------------------------------------------------------

#: attributes every log record has: anything else was given with ``extra=``
_RECORD_ATTRS: Final = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (UTC, ISO 8601), ``level``, ``logger``,
    ``message``, then the fields given with ``extra=``, and ``exc``/``stack`` when present."""

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        stamp = datetime.fromtimestamp(record.created, UTC)
        doc: dict[str, Any] = {
            "time": stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRS and not key.startswith("_"):
                doc.setdefault(key, value)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(doc, default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode()


def json_logging_config(loglevel: str | int = "info") -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` document: every record, Faust's included, as one
    JSON line on standard output."""
    level = logging.getLevelName(loglevel.upper()) if isinstance(loglevel, str) else loglevel
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "json",
                                 "stream": "ext://sys.stdout", "level": level}},
        "root": {"level": level, "handlers": ["default"]},
    }
