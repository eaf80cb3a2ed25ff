"""The collector's HTTP endpoints: Prometheus metrics on ``/metrics``, liveness on ``/healthz``
and readiness on ``/readyz`` (ready once the topic was read to the offsets it had at start),
like the central job's worker (docs/operations.md)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from streams.ldp_collector.stream_time import NO_MARK

log = logging.getLogger("pwevent.ldp")

if TYPE_CHECKING:
    from streams.ldp_collector.kafka_job import LdpJob


class _Snapshot:
    """Reads the job's counters and event time when Prometheus scrapes."""

    def __init__(self, job: LdpJob) -> None:
        self.job = job

    def describe(self) -> list:
        return []

    def collect(self):  # type: ignore[no-untyped-def]
        job, counters = self.job, self.job.counters
        records = CounterMetricFamily("pwevent_ldp_records", "records read from the reports "
                                      "topic, watermark records included")
        records.add_metric([], counters["records"])
        released = CounterMetricFamily("pwevent_ldp_releases", "slot releases sent")
        released.add_metric([], counters["released"])
        marks = CounterMetricFamily("pwevent_ldp_watermarks_written",
                                    "watermark records this worker wrote (live)")
        marks.add_metric([], counters["watermarks"])
        dead = CounterMetricFamily("pwevent_ldp_refused", "records the collector did not count, "
                                   "by reason (sent to the dead letters once)", labels=["reason"])
        for key, value in sorted(counters.items()):
            if key.startswith("dead:"):
                dead.add_metric([key[5:]], value)
        decided = CounterMetricFamily("pwevent_ldp_decisions", "decisions sent (lbd, lba)")
        decided.add_metric([], counters["decided"])
        yield from (records, released, decided, marks, dead)
        stream = job.stream
        if stream is None:
            return
        next_slot = GaugeMetricFamily("pwevent_ldp_next_slot", "the next slot to close")
        next_slot.add_metric([], stream.collector.next_release)
        waiting = GaugeMetricFamily("pwevent_ldp_waiting_records", "records that wait for a "
                                    "decision (lbd, lba), per partition", labels=["partition"])
        for p, (keys, _values, _offsets) in enumerate(stream.waiting):
            waiting.add_metric([str(p)], len(keys))
        yield from (next_slot, waiting)
        partition, mark = stream.holding()
        holding = GaugeMetricFamily("pwevent_ldp_holding_partition", "the partition whose "
                                    "watermark holds the stream back (the smallest)")
        holding.add_metric([], partition)
        behind = GaugeMetricFamily("pwevent_ldp_holding_behind_ms", "how far, in event time, "
                                   "the smallest partition watermark lies behind the largest "
                                   "(-1: a partition has none yet)")
        top = int(stream.marks.max())
        behind.add_metric([], -1 if mark == NO_MARK else top - mark)
        yield from (holding, behind)


class MetricsServer:
    """The endpoints of one :class:`~streams.ldp_collector.kafka_job.LdpJob` on ``host:port``
    (port 0: none)."""

    def __init__(self, job: LdpJob, host: str, port: int) -> None:
        """A server of ``job``'s metrics; :meth:`start` it in the job's event loop."""
        self.job, self.host, self.port = job, host, port
        self.registry = CollectorRegistry()
        self.registry.register(_Snapshot(job))
        self.up = Gauge("pwevent_ldp_caught_up", "1 once the topic was read to the offsets it "
                        "had at start", registry=self.registry)
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        """Listen (nothing when the port is 0)."""
        if not self.port:
            return
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", lambda _r: web.Response(text="ok\n"))
        app.router.add_get("/readyz", self._ready)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        try:
            await web.TCPSite(self.runner, self.host, self.port).start()
        except OSError as exc:  # the collector runs on; its operator is told why
            log.error("metrics cannot listen on %s:%d (%s); give another --metrics-port",
                      self.host, self.port, exc.strerror or exc)

    async def stop(self) -> None:
        """Stop listening."""
        if self.runner is not None:
            await self.runner.cleanup()

    async def _metrics(self, _request: web.Request) -> web.Response:
        self.up.set(1 if self.job.caught_up.is_set() else 0)
        return web.Response(body=generate_latest(self.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _ready(self, _request: web.Request) -> web.Response:
        if self.job.caught_up.is_set():
            return web.Response(text="ready\n")
        return web.Response(status=503, text="reading the reports topic to its end\n")
