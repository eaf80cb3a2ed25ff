"""Operating a worker: its health and readiness endpoints and the metrics server.

:class:`Observer` is a :class:`mode.Service` started with the worker, before its app: an aiohttp
server inside the worker's event loop (a request never blocks the loop, and an answer proves that
it runs), and a timer that measures the consumer lag and whether the broker answers. It serves

``GET /metrics``
    the registry of :class:`~streams.job.operations.worker_metrics.WorkerMetrics` in Prometheus'
    text format;
``GET /healthz``
    200 while the worker's event loop answers (liveness);
``GET /readyz``
    200 when the worker holds at least one partition of the reports topic and the broker answered
    within the last :data:`BROKER_FRESH_S` seconds; 503 with the reason otherwise (readiness).

The broker probe connects like every other Kafka client of the process
(:func:`streams.kafka.settings.client_options`: TLS, SASL), and a refused login is reported as
such, not as an unreachable broker (:mod:`streams.kafka.errors`).

The worker's JSON log lines are made in :mod:`streams.job.operations.json_logs`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any, Final, Protocol

from aiohttp import web
from mode import Service
from prometheus_client import CONTENT_TYPE_LATEST

from streams.job.operations.worker_metrics import WorkerMetrics
from streams.kafka.errors import authentication_failed, authentication_failure
from streams.kafka.settings import client_options

log = logging.getLogger("pwevent.observe")

METRICS_PORT: Final = 9464  # the port Prometheus' exporters conventionally start from
METRICS_HOST: Final = "0.0.0.0"
REFRESH_S: Final = 1.5  # how often the lag gauges are updated and the broker is probed
PROBE_TIMEOUT_S: Final = 2.0  # a broker that does not answer a metadata request in this long
BROKER_FRESH_S: Final = 5.0  # ... for this long makes the worker not ready


class ObservedJob(Protocol):
    """What :class:`Observer` reads of a :class:`~streams.job.worker.faust_job.Job`."""

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
        #: the broker refused the probe's login (one line), or ``None``
        self.login_refused: str | None = None
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
        """Ask the broker for its metadata (bounded by :data:`PROBE_TIMEOUT_S`), connecting with
        the process's Kafka settings; remember when it last answered, or whether it refused the
        login. Never raises."""
        from aiokafka.client import AIOKafkaClient

        try:
            if self._client is None:
                client = AIOKafkaClient(bootstrap_servers=self.job.broker, **client_options(),
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
            refused = await authentication_failure(self.job.broker, exc, PROBE_TIMEOUT_S)
            self.login_refused = (None if refused is None
                                  else authentication_failed(self.job.broker, refused))
            return False
        self.broker_seen = time.monotonic()
        self.login_refused = None
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
            if self.login_refused is not None:
                return self.login_refused
            return (f"broker {self.job.broker} not reachable within {BROKER_FRESH_S:g} s "
                    f"({self.broker_error})")
        if not self.assigned():
            return f"no partition of {self.job.topics.reports} assigned"
        return None

    async def _metrics(self, _request: web.Request) -> web.Response:
        metrics = self.job.metrics
        metrics.set_coordinator(self.job.coordinator)
        metrics.set_event_time(*self.job.event_time_status())
        return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        reason = self.not_ready()
        if reason is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=reason + "\n")

