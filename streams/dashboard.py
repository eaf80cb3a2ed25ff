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

A background task follows the releases topic with :func:`streams.client.aiter_releases`
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
from typing import Any, Final

from aiohttp import ClientSession, ClientTimeout, web
from prometheus_client.parser import text_string_to_metric_families

from streams.client import DEFAULT_CONFIDENCE, Release, ReleaseReadError, aiter_releases

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

_PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pwevent dashboard</title>
<style>
  :root { --band: __BAND__; --pub: __PUB__; --approx: __APPROX__; --null: __NULL__;
          --line: #1f5fa8; --ink: #1d2530; --muted: #6b7685; --rule: #dde1e6; }
  * { box-sizing: border-box; }
  body { margin: 0; background: #f4f6f9; color: var(--ink);
         font: 13px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
  header { display: flex; align-items: baseline; gap: 18px; padding: 12px 20px;
           background: #1d2530; color: #fff; }
  header h1 { font-size: 17px; margin: 0; font-weight: 600; }
  header .meta { color: #b8c2cf; }
  header .count { margin-left: auto; font-variant-numeric: tabular-nums; }
  #status-line { padding: 6px 20px; background: #fff4e0; color: #7a4b00; display: none; }
  #status-line.shown { display: block; }
  main { display: grid; grid-template-columns: minmax(0, 1fr) 350px; gap: 14px;
         padding: 14px 20px; }
  .card { background: #fff; border: 1px solid var(--rule); border-radius: 6px;
          padding: 10px 14px 12px; }
  .card h2 { font-size: 13px; margin: 0 0 6px; font-weight: 600; }
  .card h2 .note { font-weight: 400; color: var(--muted); margin-left: 6px; }
  .left { display: flex; flex-direction: column; gap: 14px; min-width: 0; }
  #timeline { display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr));
              gap: 6px 16px; }
  .cell-title { font-weight: 600; margin: 2px 0 0; }
  svg { display: block; overflow: visible; }
  svg text { font-size: 10px; fill: var(--muted); }
  .legend { display: flex; flex-wrap: wrap; gap: 14px; color: var(--muted); margin-top: 4px; }
  .key { display: inline-block; width: 11px; height: 11px; border-radius: 2px;
         vertical-align: -1px; margin-right: 5px; }
  .empty { color: var(--muted); padding: 18px 0; }
  #operator dl { display: grid; grid-template-columns: auto 1fr; gap: 3px 12px; margin: 0; }
  #operator dt { color: var(--muted); }
  #operator dd { margin: 0; text-align: right; font-variant-numeric: tabular-nums; }
  #operator h3 { font-size: 12px; margin: 12px 0 4px; font-weight: 600; }
  #operator .big { font-size: 26px; font-weight: 600; font-variant-numeric: tabular-nums; }
  #operator .zero { color: #b0b8c3; }
  #operator .target { display: flex; gap: 6px; align-items: center; word-break: break-all; }
  .dot { width: 8px; height: 8px; border-radius: 50%; flex: none; }
  .budget-row { display: grid; grid-template-columns: 118px 1fr 52px; gap: 8px;
                align-items: center; margin: 2px 0; font-variant-numeric: tabular-nums; }
  .budget-bar { height: 9px; background: #edf0f3; border-radius: 2px; overflow: hidden; }
  .budget-bar span { display: block; height: 100%; background: var(--pub); }
</style>
</head>
<body>
<header>
  <h1>pwevent</h1>
  <span class="meta" id="meta">connecting ...</span>
  <span class="count"><span id="slots-count" data-last-slot="">0</span> slots,
    last <span id="last-slot">-</span></span>
</header>
<div id="status-line"></div>
<main>
  <div class="left">
    <section class="card">
      <h2>Released histogram over time<span class="note" id="timeline-note"></span></h2>
      <div id="timeline"><div class="empty">waiting for the first release ...</div></div>
      <div class="legend">
        <span><span class="key" style="background: var(--band)"></span><span
          id="band-legend">confidence band of the noise (published slots)</span></span>
        <span><span class="key" style="background: var(--line)"></span>released count</span>
      </div>
    </section>
    <section class="card">
      <h2>Publish / approximate / nullify per slot<span class="note" id="strip-note"></span></h2>
      <div id="strip"></div>
      <div class="legend">
        <span><span class="key" style="background: var(--pub)"></span>published</span>
        <span><span class="key" style="background: var(--approx)"></span>approximated
          (repeats an earlier publication)</span>
        <span><span class="key" style="background: var(--null)"></span>nullified
          (its budget went to an earlier publication)</span>
      </div>
    </section>
    <section class="card">
      <h2 id="latest-title">Latest slot</h2>
      <div id="latest"></div>
    </section>
  </div>
  <aside class="card" id="operator">
    <h2>Operator</h2>
    <div id="operator-body" class="empty">loading ...</div>
  </aside>
</main>
<script>
"use strict";
const WINDOW = 120;       // slots drawn in the charts
const MAX_CHARTS = 6;     // cells drawn over time
const MAX_BARS = 40;      // cells drawn in the latest slot's chart
const KEEP = 5000;        // releases kept by the page
const SVGNS = "http://www.w3.org/2000/svg";
const BAND = "__BAND__";
const COLORS = {published: "__PUB__", approximated: "__APPROX__", nullified: "__NULL__"};
const state = {releases: [], count: 0, last: null, meta: null, operator: null};

function el(tag, attrs, parent, text) {
  const node = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}
function html(tag, attrs, parent, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  if (parent) parent.appendChild(node);
  return node;
}
function fmt(x) {
  if (x === null || x === undefined) return "-";
  if (Number.isInteger(x)) return x.toLocaleString("en");
  return Math.abs(x) >= 100 ? x.toFixed(0) : x.toFixed(2);
}
function ticks(lo, hi, n) {
  const span = hi - lo || 1, raw = span / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(m => m * mag).find(s => s >= raw) || raw;
  const out = [];
  for (let t = Math.ceil(lo / step) * step; t <= hi + 1e-9; t += step) out.push(+t.toFixed(10));
  return out;
}
function label(i) {
  const cells = state.meta && state.meta.cells;
  const text = cells && cells[i] !== undefined ? cells[i] : String(i);
  return /^\d+$/.test(text) ? "cell " + text : text;
}

function drawCell(parent, rows, i, width) {
  const height = 220, m = {l: 44, r: 8, t: 12, b: 20};
  const box = html("div", {}, parent);
  html("div", {"class": "cell-title"}, box, label(i));
  const svg = el("svg", {width: width, height: height, "class": "cell-chart"}, box);
  let lo = Infinity, hi = -Infinity;
  for (const r of rows) {
    const v = [r.histogram[i]];
    if (r.lower) v.push(r.lower[i], r.upper[i]);
    lo = Math.min(lo, ...v); hi = Math.max(hi, ...v);
  }
  if (hi - lo < 1) { lo -= 1; hi += 1; }
  const pad = (hi - lo) * 0.06; lo -= pad; hi += pad;
  const first = rows[0].slot, last = rows[rows.length - 1].slot;
  const w = width - m.l - m.r, h = height - m.t - m.b;
  const step = w / Math.max(last - first + 1, 1);
  const x = s => m.l + (s - first + 0.5) * step;
  const y = v => m.t + h - (v - lo) / (hi - lo) * h;
  for (const t of ticks(lo, hi, 4)) {
    el("line", {x1: m.l, x2: m.l + w, y1: y(t), y2: y(t),
                stroke: t === 0 ? "#9aa4b1" : "#eceff3"}, svg);
    el("text", {x: m.l - 6, y: y(t) + 3, "text-anchor": "end"}, svg, fmt(t));
  }
  const bands = el("g", {"class": "band"}, svg);
  for (const r of rows) {
    if (!r.lower) continue;
    el("rect", {x: x(r.slot) - step / 2, width: step + 0.5, y: y(r.upper[i]),
                height: Math.max(y(r.lower[i]) - y(r.upper[i]), 1), fill: BAND}, bands);
  }
  const d = rows.map((r, k) => (k ? "L" : "M") + x(r.slot).toFixed(1) + ","
                               + y(r.histogram[i]).toFixed(1)).join("");
  el("path", {d: d, fill: "none", stroke: "#1f5fa8", "stroke-width": 1.6}, svg);
  for (const r of rows) {
    el("circle", {cx: x(r.slot), cy: y(r.histogram[i]), r: rows.length > 60 ? 1.6 : 2.6,
                  fill: COLORS[r.status]}, svg);
  }
  for (const t of ticks(first, last, 6).filter(Number.isInteger)) {
    el("text", {x: x(t), y: height - 5, "text-anchor": "middle"}, svg, "slot " + t);
  }
}

function drawTimeline(rows) {
  const box = document.getElementById("timeline");
  box.replaceChildren();
  if (!rows.length) {
    html("div", {"class": "empty"}, box, "waiting for the first release ...");
    return;
  }
  const d = rows[rows.length - 1].histogram.length;
  let cells = [...Array(d).keys()];
  if (d > MAX_CHARTS) {
    const mean = i => rows.reduce((a, r) => a + r.histogram[i], 0);
    cells = cells.sort((a, b) => mean(b) - mean(a)).slice(0, MAX_CHARTS).sort((a, b) => a - b);
  }
  const note = document.getElementById("timeline-note");
  note.textContent = "last " + rows.length + " slots" + (d > MAX_CHARTS ?
    ", the " + MAX_CHARTS + " largest of " + d + " cells" : "");
  const cols = Math.max(1, Math.floor((box.clientWidth + 16) / (360 + 16)));
  const width = Math.max(200, (box.clientWidth - 16 * (Math.min(cols, cells.length) - 1))
                              / Math.min(cols, cells.length));
  for (const i of cells) drawCell(box, rows, i, width);
}

function drawStrip(rows) {
  const box = document.getElementById("strip");
  box.replaceChildren();
  if (!rows.length) return;
  const width = box.clientWidth, height = 34;
  const svg = el("svg", {width: width, height: height}, box);
  const first = rows[0].slot, last = rows[rows.length - 1].slot;
  const step = width / Math.max(last - first + 1, 1);
  const counts = {published: 0, approximated: 0, nullified: 0};
  for (const r of rows) {
    counts[r.status] += 1;
    const mark = el("rect", {x: (r.slot - first) * step + (step > 4 ? 1 : 0), y: 2,
                             width: Math.max(step - (step > 4 ? 2 : 0), 1), height: 18, rx: 2,
                             fill: COLORS[r.status], "class": "mark " + r.status}, svg);
    el("title", {}, mark, "slot " + r.slot + ": " + r.status +
       (r.approximates !== null ? " (repeats slot " + r.approximates + ")" : ""));
  }
  for (const t of ticks(first, last, 8).filter(Number.isInteger)) {
    el("text", {x: (t - first + 0.5) * step, y: height - 2, "text-anchor": "middle"}, svg,
       String(t));
  }
  document.getElementById("strip-note").textContent =
    counts.published + " published, " + counts.approximated + " approximated, " +
    counts.nullified + " nullified";
}

function drawLatest(r, rows) {
  const box = document.getElementById("latest");
  box.replaceChildren();
  const title = document.getElementById("latest-title");
  if (!r) { title.textContent = "Latest slot"; return; }
  const when = new Date(r.start).toISOString().replace("T", " ").replace(".000Z", " UTC");
  // an approximated slot repeats a publication: the bars shown are that publication's
  const source = r.lower ? r : rows.findLast(x => x.slot === r.approximates && x.lower);
  const bars = source ? {lower: source.lower, upper: source.upper} : null;
  title.textContent = "Latest slot " + r.slot + " (" + r.status +
    (r.approximates !== null ? ", repeats slot " + r.approximates +
     (bars ? ", whose bars are shown" : ", no bars") : "") + "), from " + when;
  let cells = [...r.histogram.keys()];
  if (cells.length > MAX_BARS) {
    cells = cells.sort((a, b) => r.histogram[b] - r.histogram[a]).slice(0, MAX_BARS)
                 .sort((a, b) => a - b);
  }
  const width = box.clientWidth, height = 230, m = {l: 44, r: 8, t: 8, b: 22};
  const svg = el("svg", {width: width, height: height, id: "latest-chart"}, box);
  let lo = 0, hi = 0;
  for (const i of cells) {
    const v = [r.histogram[i]];
    if (bars) v.push(bars.lower[i], bars.upper[i]);
    lo = Math.min(lo, ...v); hi = Math.max(hi, ...v);
  }
  if (hi === lo) hi = lo + 1;
  const w = width - m.l - m.r, h = height - m.t - m.b, slot = w / cells.length;
  const y = v => m.t + h - (v - lo) / (hi - lo) * h;
  for (const t of ticks(lo, hi, 4)) {
    el("line", {x1: m.l, x2: m.l + w, y1: y(t), y2: y(t),
                stroke: t === 0 ? "#9aa4b1" : "#eceff3"}, svg);
    el("text", {x: m.l - 6, y: y(t) + 3, "text-anchor": "end"}, svg, fmt(t));
  }
  cells.forEach((i, k) => {
    const cx = m.l + (k + 0.5) * slot, bw = Math.min(slot * 0.6, 90), v = r.histogram[i];
    const bar = el("rect", {x: cx - bw / 2, width: bw, y: Math.min(y(v), y(0)),
                            height: Math.max(Math.abs(y(0) - y(v)), 1),
                            fill: COLORS[r.status], opacity: 0.85}, svg);
    el("title", {}, bar, label(i) + ": " + fmt(v) +
       (bars ? " [" + fmt(bars.lower[i]) + ", " + fmt(bars.upper[i]) + "]" : ""));
    if (bars) {
      const cap = Math.min(bw * 0.3, 12);
      el("line", {x1: cx, x2: cx, y1: y(bars.lower[i]), y2: y(bars.upper[i]), stroke: "#222",
                  "stroke-width": 1.4, "class": "error-bar"}, svg);
      for (const e of [bars.lower[i], bars.upper[i]]) {
        el("line", {x1: cx - cap, x2: cx + cap, y1: y(e), y2: y(e), stroke: "#222",
                    "stroke-width": 1.4}, svg);
      }
    }
    if (slot >= 28) {
      el("text", {x: cx, y: height - 6, "text-anchor": "middle"}, svg,
         label(i).length > slot / 6 ? label(i).slice(0, Math.floor(slot / 6)) + "…"
                                    : label(i));
    }
  });
}

function drawOperator() {
  const body = document.getElementById("operator-body");
  const op = state.operator;
  body.replaceChildren();
  body.className = "";
  if (!op) { body.className = "empty"; body.textContent = "loading ..."; return; }
  body.dataset.configured = op.configured ? "yes" : "no";
  body.dataset.up = String(op.targets.filter(t => t.up).length);
  if (!op.configured) {
    body.className = "empty";
    body.textContent = "Metrics are not configured: start the dashboard with --metrics-url " +
      "http://WORKER:9464/metrics (once per worker) to see the last released slot, the " +
      "consumer lag, dead letters and the budget left.";
    return;
  }
  html("div", {"style": "color: var(--muted)"}, body, "last released slot");
  html("div", {"class": "big", id: "op-last-slot"}, body, fmt(op.last_released_slot));
  html("h3", {}, body, "Workers");
  for (const t of op.targets) {
    const row = html("div", {"class": "target", title: t.error || "up"}, body);
    html("span", {"class": "dot", style: "background: " + (t.up ? "var(--pub)" :
                                                           "var(--null)")}, row);
    html("span", {}, row, t.url.replace(/^https?:\/\//, "") + (t.up ? "" : " (down)"));
  }
  html("h3", {}, body, "Consumer lag: " + fmt(op.lag_total) + " records");
  const lag = html("dl", {}, body);
  const lags = op.lag.length > 8 ? [...op.lag].sort((a, b) => b.records - a.records).slice(0, 8)
                                 : op.lag;
  if (lags.length < op.lag.length) {
    html("div", {"class": "zero"}, body, "the 8 largest of " + op.lag.length + " partitions");
  }
  for (const l of lags) {
    html("dt", {}, lag, l.topic + " [" + l.partition + "]");
    html("dd", {"class": l.records ? "" : "zero"}, lag, fmt(l.records));
  }
  const deadTotal = Object.values(op.dead_letters).reduce((a, b) => a + b, 0);
  html("h3", {}, body, "Dead letters: " + fmt(deadTotal));
  const dead = html("dl", {id: "dead-letters"}, body);
  for (const [reason, n] of Object.entries(op.dead_letters)) {
    html("dt", {}, dead, reason.replaceAll("_", " "));
    html("dd", {"class": n ? "" : "zero"}, dead, fmt(n));
  }
  const levels = Object.entries(op.budget_left).sort((a, b) => a[1] - b[1]);
  html("h3", {}, body, "Budget left per level" + (levels.length > 10 ?
    " (the 10 lowest of " + levels.length + ")" : ""));
  if (!levels.length) html("div", {"class": "zero"}, body, "no level reported");
  for (const [level, left] of levels.slice(0, 10)) {
    const m = /^(\d+):(.+)$/.exec(level), E = m ? parseFloat(m[2]) : NaN;
    const row = html("div", {"class": "budget-row"}, body);
    html("span", {}, row, m ? "w " + m[1] + ", E " + m[2] : level);
    const bar = html("div", {"class": "budget-bar"}, row);
    const share = E > 0 ? Math.max(0, Math.min(1, left / E)) : 0;
    html("span", {style: "width: " + (share * 100).toFixed(1) + "%"}, bar);
    html("span", {style: "text-align: right"}, row, fmt(left));
  }
}

function render() {
  const rows = state.releases.slice(-WINDOW);
  const meta = state.meta;
  if (meta) {
    const parts = [];
    if (meta.stream) parts.push("stream " + meta.stream);
    if (meta.mechanism) parts.push(meta.mechanism);
    if (meta.topic) parts.push(meta.topic);
    parts.push(Math.round(meta.confidence * 1000) / 10 + "% bands");
    document.getElementById("meta").textContent = parts.join(" · ");
    document.getElementById("band-legend").textContent =
      (Math.round(meta.confidence * 1000) / 10) + "% interval of the noise (published slots)";
    const line = document.getElementById("status-line");
    line.textContent = meta.error ? "cannot read the releases: " + meta.error : "";
    line.className = meta.error ? "shown" : "";
  }
  const count = document.getElementById("slots-count");
  count.textContent = String(state.count);
  count.dataset.lastSlot = state.last === null ? "" : String(state.last);
  document.getElementById("last-slot").textContent = state.last === null ? "-" : state.last;
  drawTimeline(rows);
  drawStrip(rows);
  drawLatest(rows[rows.length - 1], state.releases);
}

async function pollReleases() {
  let more = false;
  try {
    const q = state.last === null ? "" : "?after=" + state.last;
    const resp = await fetch("api/releases" + q, {cache: "no-store"});
    const got = await resp.json();
    state.meta = got;
    for (const r of got.releases) {
      state.releases.push(r);
      state.count += 1;
      state.last = r.slot;
    }
    if (state.releases.length > KEEP) state.releases.splice(0, state.releases.length - KEEP);
    more = got.more;
  } catch (err) {
    state.meta = Object.assign({}, state.meta || {confidence: 0.95},
                               {error: "the dashboard does not answer (" + err + ")"});
  }
  render();
  setTimeout(pollReleases, more ? 0 : 1000);
}

async function pollOperator() {
  try {
    const resp = await fetch("api/operator", {cache: "no-store"});
    state.operator = await resp.json();
  } catch (err) { /* shown as it was; the releases' line says the server is gone */ }
  drawOperator();
  setTimeout(pollOperator, 2000);
}

window.addEventListener("resize", render);
pollReleases();
pollOperator();
</script>
</body>
</html>
"""

PAGE: Final = (_PAGE.replace("__BAND__", _hex(BAND_RGB))
               .replace("__PUB__", _hex(STATUS_RGB["published"]))
               .replace("__APPROX__", _hex(STATUS_RGB["approximated"]))
               .replace("__NULL__", _hex(STATUS_RGB["nullified"])))
