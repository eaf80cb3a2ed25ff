"""A live web page of one stream's releases and its workers' metrics (``pwevent dashboard``).

:func:`build_app` makes an aiohttp application serving

``GET /``
    one self-contained HTML page (inline CSS and JavaScript, charts drawn as inline SVG) that
    polls the two feeds below every second;
``GET /api/releases?after=<slot>``
    the stream's releases after slot ``after`` (all without it), oldest first, at most
    ``limit`` (default :data:`BATCH`) per answer (``more`` says whether others wait), with the
    stream's mechanism, cell labels and the error bars' confidence;
``GET /api/operator``
    a summary of the workers' Prometheus metrics scraped from the ``metrics_urls``
    (:func:`operator_summary`): last released slot, consumer lag, dead letters by reason and
    budget left per level. The dead letters are exact counts, as on the workers' metrics port:
    with metrics, the page is for operators only.

A background task follows the releases topic with :func:`streams.releases.client.aiter_releases`
(``follow=True``) into a :class:`ReleaseFeed`, and reconnects every :data:`RETRY_S` seconds when
the broker or the topic cannot be read. :class:`BackgroundDashboard` serves the page from a
thread of its own (``pwevent demo --dashboard``).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from aiohttp import ClientSession, ClientTimeout, web
from prometheus_client.parser import text_string_to_metric_families

from streams.releases.client import DEFAULT_CONFIDENCE, Release, ReleaseReadError, aiter_releases

log = logging.getLogger("pwevent.dashboard")

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8050
RETRY_S: Final = 2.0  # seconds between attempts to read the releases topic
SCRAPE_TIMEOUT_S: Final = 2.0  # per metrics URL
SCRAPE_CACHE_S: Final = 0.8  # answers of /api/operator within this long share one scrape
BATCH: Final = 2000  # releases per /api/releases answer, at most
KEPT: Final = 100_000  # releases kept in memory (the oldest are dropped)
#: the fill of the confidence bands, opaque, so that a screenshot shows it exactly
BAND_RGB: Final = (185, 211, 240)
STATUS_RGB: Final = {"published": (46, 158, 91), "approximated": (224, 165, 38),
                     "nullified": (200, 69, 59)}


def _hex(rgb: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*rgb)


# -- the releases --------------------------------------------------------------------------------


class ReleaseFeed:
    """The releases of one stream as the page reads them, by slot.

    ``stream`` ``None``: the first stream seen on the topic is the one kept."""

    def __init__(self, stream: str | None = None, confidence: float = DEFAULT_CONFIDENCE,
                 kept: int = KEPT) -> None:
        self.stream = stream
        self.confidence = confidence
        self.kept = kept
        self.mechanism: str | None = None
        self.cells: list[str] | None = None
        self.error: str | None = None  # why the topic cannot be read now, if it cannot
        self._by_slot: dict[int, dict[str, Any]] = {}
        self._slots: list[int] = []

    def __len__(self) -> int:
        return len(self._slots)

    @property
    def last_slot(self) -> int | None:
        """The latest slot held."""
        return self._slots[-1] if self._slots else None

    def add(self, rel: Release) -> bool:
        """Keep ``rel``; ``False`` when it is another stream's or its slot is held already."""
        if self.stream is None:
            self.stream = rel.stream
        if rel.stream != self.stream or rel.slot in self._by_slot:
            return False
        self.mechanism = rel.mechanism
        if rel.cells is not None:
            self.cells = list(rel.cells)
        self._by_slot[rel.slot] = {
            "slot": rel.slot, "start": rel.start, "end": rel.end, "status": rel.status,
            "approximates": rel.approximates, "histogram": list(rel.histogram),
            "lower": None if rel.lower is None else list(rel.lower),
            "upper": None if rel.upper is None else list(rel.upper),
            "threshold": rel.threshold, "users": rel.users,
        }
        bisect.insort(self._slots, rel.slot)
        while len(self._slots) > self.kept:
            del self._by_slot[self._slots.pop(0)]
        return True

    def after(self, slot: int | None, limit: int = BATCH) -> dict[str, Any]:
        """The answer of ``/api/releases?after=slot``: releases of later slots, oldest first."""
        at = 0 if slot is None else bisect.bisect_right(self._slots, slot)
        chosen = self._slots[at: at + max(limit, 1)]
        return {
            "stream": self.stream, "mechanism": self.mechanism, "cells": self.cells,
            "confidence": self.confidence, "error": self.error, "count": len(self._slots),
            "last_slot": self.last_slot, "more": at + len(chosen) < len(self._slots),
            "releases": [self._by_slot[s] for s in chosen],
        }


async def follow_releases(feed: ReleaseFeed, bootstrap: str, topic: str, *,
                          decisions_topic: str | None = None, retry_s: float = RETRY_S,
                          timeout: float = 10.0) -> None:
    """Add every release of ``topic`` to ``feed`` as it comes, until cancelled; while the broker
    or the topic cannot be read, ``feed.error`` says why and reading is tried again."""
    while True:
        try:
            async for rel in aiter_releases(bootstrap, topic, stream=feed.stream, follow=True,
                                            confidence=feed.confidence,
                                            decisions_topic=decisions_topic, timeout=timeout):
                feed.error = None
                feed.add(rel)
        except ReleaseReadError as exc:
            feed.error = str(exc)
        except Exception as exc:  # noqa: BLE001 - the page says so; reading is tried again
            feed.error = f"{type(exc).__name__}: {exc}"
            log.warning("reading %s failed: %r", topic, exc)
        task = asyncio.current_task()
        if task is not None and task.cancelling():  # a cancel the client took for an error
            raise asyncio.CancelledError
        await asyncio.sleep(retry_s)


# -- the workers' metrics -----------------------------------------------------------------------


@dataclass(frozen=True)
class Scrape:
    """One metrics URL's answer: its text, or why there is none."""

    url: str
    text: str | None
    error: str | None = None


def operator_summary(scrapes: Sequence[Scrape]) -> dict[str, Any]:
    """What the operator panel shows, from the workers' metrics in Prometheus' text format.

    ``last_released_slot``: the highest ``pwevent_last_released_slot`` of a worker that released
    slots (``None``: none did); ``lag``: ``pwevent_consumer_lag_records`` per topic and
    partition, with ``lag_total``; ``dead_letters``: the counter summed over the workers, by
    reason; ``budget_left``: ``pwevent_budget_left`` per level (the
    lowest, should two workers report a level). ``configured`` is ``False`` without URLs."""
    targets: list[dict[str, Any]] = []
    last: float | None = None
    lag: dict[tuple[str, str], float] = {}
    dead: dict[str, float] = {}
    budget: dict[str, float] = {}
    for scrape in scrapes:
        error = scrape.error
        samples: list[Any] = []
        if scrape.text is not None:
            try:
                samples = [s for fam in text_string_to_metric_families(scrape.text)
                           for s in fam.samples]
            except ValueError as exc:
                error = f"not Prometheus' text format ({exc})"
        targets.append({"url": scrape.url, "up": error is None and scrape.text is not None,
                        "error": error})
        if error is not None:
            continue
        values = {s.name: s.value for s in samples if not s.labels}
        if values.get("pwevent_slots_released_total", 0) > 0 \
                and "pwevent_last_released_slot" in values:
            slot = values["pwevent_last_released_slot"]
            last = slot if last is None else max(last, slot)
        for s in samples:
            if s.name == "pwevent_consumer_lag_records":
                key = (s.labels.get("topic", ""), s.labels.get("partition", ""))
                lag[key] = lag.get(key, 0.0) + s.value
            elif s.name == "pwevent_dead_letters_total":
                reason = s.labels.get("reason", "")
                dead[reason] = dead.get(reason, 0.0) + s.value
            elif s.name == "pwevent_budget_left":
                level = s.labels.get("level", "")
                budget[level] = min(budget.get(level, s.value), s.value)
    return {
        "configured": bool(scrapes),
        "targets": targets,
        "last_released_slot": None if last is None else int(last),
        "lag": [{"topic": t, "partition": p, "records": int(v)}
                for (t, p), v in sorted(lag.items(), key=lambda kv: (kv[0][0],
                                                                     _int(kv[0][1])))],
        "lag_total": int(sum(lag.values())),
        "dead_letters": {k: int(v) for k, v in sorted(dead.items())},
        "budget_left": dict(sorted(budget.items())),
    }


def _int(text: str) -> int:
    return int(text) if text.lstrip("-").isdigit() else 0


async def scrape(session: ClientSession, url: str,
                 timeout: float = SCRAPE_TIMEOUT_S) -> Scrape:
    """GET one metrics URL; never raises."""
    try:
        async with session.get(url, timeout=ClientTimeout(total=timeout)) as resp:
            if resp.status != 200:
                return Scrape(url, None, f"HTTP {resp.status}")
            return Scrape(url, await resp.text())
    except Exception as exc:  # noqa: BLE001 - a worker that does not answer is shown as down
        return Scrape(url, None, str(exc) or type(exc).__name__)


# -- the application ----------------------------------------------------------------------------

FEED: Final = web.AppKey("feed", ReleaseFeed)
_STATE: Final = web.AppKey("state", dict)


def build_app(feed: ReleaseFeed, metrics_urls: Sequence[str] = (), *,
              bootstrap: str | None = None, topic: str | None = None,
              decisions_topic: str | None = None) -> web.Application:
    """The dashboard's application; with ``bootstrap`` and ``topic`` it follows the topic into
    ``feed`` while it runs (else ``feed`` is filled by the caller)."""
    app = web.Application()
    app[FEED] = feed
    app[_STATE] = {"urls": list(metrics_urls), "topic": topic, "cached": None, "at": 0.0,
                   "lock": None, "session": None}

    async def background(app: web.Application) -> AsyncIterator[None]:
        state = app[_STATE]
        state["lock"] = asyncio.Lock()
        state["session"] = ClientSession()
        task = None
        if bootstrap is not None and topic is not None:
            task = asyncio.create_task(follow_releases(feed, bootstrap, topic,
                                                       decisions_topic=decisions_topic))
        try:
            yield
        finally:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await state["session"].close()

    app.cleanup_ctx.append(background)
    app.router.add_get("/", _page)
    app.router.add_get("/api/releases", _releases)
    app.router.add_get("/api/operator", _operator)
    return app


_NO_STORE: Final = {"Cache-Control": "no-store"}


async def _page(request: web.Request) -> web.Response:
    return web.Response(text=PAGE, content_type="text/html", headers=_NO_STORE)


async def _releases(request: web.Request) -> web.Response:
    try:
        after = request.query.get("after")
        slot = None if after in (None, "") else int(after)
        limit = int(request.query.get("limit", BATCH))
    except ValueError:
        raise web.HTTPBadRequest(text="after and limit must be integers\n") from None
    answer = request.app[FEED].after(slot, min(max(limit, 1), BATCH))
    answer["topic"] = request.app[_STATE]["topic"]
    return web.json_response(answer, headers=_NO_STORE)


async def _operator(request: web.Request) -> web.Response:
    state = request.app[_STATE]
    async with state["lock"]:
        if state["cached"] is None or time.monotonic() - state["at"] > SCRAPE_CACHE_S:
            got = await asyncio.gather(*(scrape(state["session"], u) for u in state["urls"]))
            state["cached"], state["at"] = operator_summary(got), time.monotonic()
        return web.json_response(state["cached"], headers=_NO_STORE)


def url_of(host: str, port: int) -> str:
    """The page's address for a server listening on ``host``:``port``."""
    shown = "127.0.0.1" if host in ("", "0.0.0.0") else host
    return f"http://[{shown}]:{port}/" if ":" in shown else f"http://{shown}:{port}/"


async def start(app: web.Application, host: str, port: int) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on ``host``:``port`` (0: a free port); the runner and the port taken.
    ``OSError`` when the port cannot be had."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    addresses = runner.addresses
    return runner, int(addresses[0][1]) if addresses else port


class BackgroundDashboard:
    """The dashboard served from a thread with its own event loop, for a synchronous caller::

        with BackgroundDashboard(bootstrap, topic, stream="demo", port=0) as url:
            ...
    """

    def __init__(self, bootstrap: str, topic: str, *, stream: str | None = None,
                 decisions_topic: str | None = None, metrics_urls: Sequence[str] = (),
                 confidence: float = DEFAULT_CONFIDENCE, host: str = DEFAULT_HOST,
                 port: int = DEFAULT_PORT) -> None:
        self.feed = ReleaseFeed(stream, confidence)
        self.bootstrap, self.topic, self.decisions_topic = bootstrap, topic, decisions_topic
        self.metrics_urls = list(metrics_urls)
        self.host, self.port = host, port
        self.url: str | None = None
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None

    def start(self, timeout: float = 30.0) -> str:
        """Start serving; the page's URL. ``OSError`` when the port cannot be had."""
        # the page says when the broker cannot be read; aiokafka's own lines would repeat it
        logging.getLogger("aiokafka").addHandler(logging.NullHandler())
        self._thread = threading.Thread(target=self._run, name="pwevent-dashboard",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("the dashboard did not start")
        if self._failure is not None:
            raise self._failure
        assert self.url is not None
        return self.url

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop ended meanwhile
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join(15)
            self._thread = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        try:
            app = build_app(self.feed, self.metrics_urls, bootstrap=self.bootstrap,
                            topic=self.topic, decisions_topic=self.decisions_topic)
            runner, port = await start(app, self.host, self.port)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller of start()
            self._failure = exc
            self._ready.set()
            return
        self.url = url_of(self.host, port)
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()


# -- the page -----------------------------------------------------------------------------------

# the page's colours are filled in from the same constants the tests read the picture with
_PAGE = Path(__file__).with_name("dashboard.html").read_text(encoding="utf-8")
PAGE: Final = (_PAGE.replace("__BAND__", _hex(BAND_RGB))
               .replace("__PUB__", _hex(STATUS_RGB["published"]))
               .replace("__APPROX__", _hex(STATUS_RGB["approximated"]))
               .replace("__NULL__", _hex(STATUS_RGB["nullified"])))
