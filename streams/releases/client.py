"""A typed consumer of the releases topic, with error bars.

:func:`iter_releases` reads a releases topic (``aiokafka``) and yields one :class:`Release` per
slot: the record's fields (``streams/records/schemas/releases.json``) plus, for a published slot, an
interval per cell at a confidence level computed from the noise the job added::

    from streams.releases.client import iter_releases

    for rel in iter_releases("localhost:9092", "pwevent.releases", stream="trips"):
        print(rel.slot, rel.status, rel.histogram, rel.lower, rel.upper)

* **Error bars.** The job adds zero-mean noise of a known distribution and per-cell standard
  deviation (``noise.scale``). The half-width q of a cell is the smallest with
  P(|noise| <= q) >= confidence, from the exact distribution: for Laplace(b), b = scale/sqrt(2),
  q = b ln(1/(1 - confidence)); for the discrete Laplace, P(k) proportional to a^|k| with
  scale^2 = 2a/(1-a)^2, P(|noise| > k) = 2a^(k+1)/(1+a) and q is the smallest such integer k.
  [histogram - q, histogram + q] then holds the count the noise was added to with probability at
  least ``confidence``. That count is the exact one unless the Sampling Mechanism thinned users
  whose budget is below the slot's threshold; that error is not in the bars. An approximated or
  nullified slot repeats an earlier publication (``approximates``): no noise, no bars.
* **Deduplication.** A release is keyed ``<stream>/<slot>``; one emitted again after a restart
  is byte-identical, and only the first per key is yielded.
* **Versions.** A record of a newer ``schema_version`` than :data:`KNOWN_VERSION` is read all
  the same (fields are only added within a version's contract); only one that cannot be read is
  skipped, with a :class:`ReleaseFormatWarning`. A version-1 record (no ``schema_version``) has
  no ``cells`` and no ``noise``: its bars are ``None``.

From async code use :func:`aiter_releases`; :func:`decode_releases` does the decoding,
deduplication and filtering on records already read.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import signal
import time
import warnings
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np
import orjson

from streams.records.output_formats import RELEASE_VERSION

__all__ = [
    "DEFAULT_CONFIDENCE",
    "KNOWN_VERSION",
    "Noise",
    "Release",
    "ReleaseFormatWarning",
    "ReleaseReadError",
    "UnreadableRelease",
    "aiter_releases",
    "decode_releases",
    "error_bars",
    "half_widths",
    "iter_releases",
    "parse_release",
]

#: The newest release format this client knows.
KNOWN_VERSION: Final = RELEASE_VERSION
DEFAULT_CONFIDENCE: Final = 0.95
#: The noise distributions whose quantiles the client knows.
DISTRIBUTIONS: Final = ("discrete_laplace", "laplace")

#: A record as read: key, value and Kafka timestamp (ms).
RawRecord = tuple[bytes | None, bytes | None, int | None]
Number = int | float


class ReleaseFormatWarning(UserWarning):
    """A record on the releases topic was skipped: it could not be read, or it is a second,
    different record under a key already seen."""


class UnreadableRelease(ValueError):
    """A release record lacks a field or has one of the wrong type."""


class ReleaseReadError(RuntimeError):
    """The broker or the topic could not be read."""


@dataclass(frozen=True)
class Noise:
    """The noise a published slot added: its distribution and per-cell standard deviation."""

    distribution: str
    scale: tuple[float, ...]


@dataclass(frozen=True)
class Release:
    """One slot's release with its error bars (module doc)."""

    key: str
    stream: str
    slot: int
    start: int
    end: int
    mechanism: str
    published: bool
    nullified: bool
    histogram: tuple[Number, ...]
    threshold: float
    users: int
    schema_version: int
    #: the cell labels (None: a version-1 record, or a reference not resolved)
    cells: tuple[str, ...] | None
    #: the key of the start record holding the labels of a large domain
    cells_ref: str | None
    noise: Noise | None
    approximates: int | None
    confidence: float
    #: per cell, the interval holding the noised count with probability >= confidence
    lower: tuple[Number, ...] | None
    upper: tuple[Number, ...] | None
    #: the Kafka record's timestamp (the job sets it to ``end``)
    timestamp_ms: int | None = None

    @property
    def status(self) -> str:
        """``"published"``, ``"approximated"`` or ``"nullified"``."""
        if self.published:
            return "published"
        return "nullified" if self.nullified else "approximated"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with stable field names (``pwevent releases --json``)."""
        noise = None if self.noise is None else {"distribution": self.noise.distribution,
                                                 "scale": list(self.noise.scale)}
        return {
            "key": self.key,
            "stream": self.stream,
            "slot": self.slot,
            "start": self.start,
            "end": self.end,
            "timestamp_ms": self.timestamp_ms,
            "mechanism": self.mechanism,
            "status": self.status,
            "published": self.published,
            "nullified": self.nullified,
            "approximates": self.approximates,
            "cells": None if self.cells is None else list(self.cells),
            "histogram": list(self.histogram),
            "confidence": self.confidence,
            "lower": None if self.lower is None else list(self.lower),
            "upper": None if self.upper is None else list(self.upper),
            "noise": noise,
            "threshold": self.threshold,
            "users": self.users,
            "schema_version": self.schema_version,
        }


# -- error bars ---------------------------------------------------------------------------------


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"the confidence must be in (0, 1), got {confidence!r}")


def half_widths(distribution: str, scale: Iterable[float], confidence: float) -> np.ndarray:
    """Per cell, the smallest q with P(|noise| <= q) >= ``confidence`` for zero-mean noise of
    standard deviation ``scale`` (module doc); integers for ``discrete_laplace``."""
    _check_confidence(confidence)
    s = np.asarray(list(scale), dtype=np.float64)
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise ValueError("noise scales must be finite and >= 0")
    miss = 1.0 - confidence
    if distribution == "laplace":
        return (s / math.sqrt(2.0)) * -math.log(miss)
    if distribution != "discrete_laplace":
        raise ValueError(f"unknown noise distribution {distribution!r}")
    v = s * s
    # a from v = 2a/(1-a)^2, in the form without cancellation for small v
    a = v / (v + 1.0 + np.sqrt(2.0 * v + 1.0))
    positive = a > 0
    safe = np.where(positive, a, 0.5)

    def tail(k: np.ndarray) -> np.ndarray:  # P(|noise| > k)
        return 2.0 * safe ** (k + 1.0) / (1.0 + safe)

    with np.errstate(divide="ignore"):
        k = np.ceil(np.log(miss * (1.0 + safe) / 2.0) / np.log(safe)) - 1.0
    k = np.maximum(k, 0.0)
    k = np.where(tail(k) > miss, k + 1.0, k)  # rounding at a boundary, either way
    k = np.where((k > 0) & (tail(k - 1.0) <= miss), k - 1.0, k)
    return np.where(positive, k, 0.0).astype(np.int64)


def error_bars(histogram: Iterable[Number], noise: Noise,
               confidence: float = DEFAULT_CONFIDENCE) -> tuple[tuple[Number, ...],
                                                                tuple[Number, ...]]:
    """``(lower, upper)`` per cell: the histogram minus and plus :func:`half_widths`."""
    h = np.asarray(list(histogram))
    q = half_widths(noise.distribution, noise.scale, confidence)
    if q.shape != h.shape:
        raise ValueError(f"{q.size} noise scales for {h.size} cells")
    if not np.issubdtype(h.dtype, np.integer):
        h, q = h.astype(np.float64), q.astype(np.float64)
    return tuple((h - q).tolist()), tuple((h + q).tolist())


# -- decoding -----------------------------------------------------------------------------------


def _get(doc: dict[str, Any], name: str, kinds: tuple[type, ...]) -> Any:
    if name not in doc:
        raise UnreadableRelease(f"no {name}")
    value = doc[name]
    if type(value) not in kinds:
        raise UnreadableRelease(f"{name} is {type(value).__name__}")
    return value


def _numbers(value: Any, name: str) -> tuple[Number, ...]:
    if type(value) is not list or not value or \
            not all(type(x) in (int, float) for x in value):
        raise UnreadableRelease(f"{name} is not a non-empty list of numbers")
    return tuple(value)


def _cells(doc: dict[str, Any], d: int) -> tuple[tuple[str, ...] | None, str | None]:
    cells = doc.get("cells")
    if cells is None:
        return None, None
    if type(cells) is dict and type(cells.get("ref")) is str:
        return None, cells["ref"]
    if type(cells) is list and len(cells) == d and all(type(c) is str for c in cells):
        return tuple(cells), None
    raise UnreadableRelease("cells are neither one label per cell nor a reference")


def _noise(doc: dict[str, Any], d: int) -> Noise | None:
    noise = doc.get("noise")
    if noise is None:
        return None
    if type(noise) is not dict or type(noise.get("distribution")) is not str:
        raise UnreadableRelease("noise has no distribution")
    scale = _numbers(noise.get("scale"), "noise.scale")
    if len(scale) != d:
        raise UnreadableRelease(f"{len(scale)} noise scales for {d} cells")
    return Noise(noise["distribution"], tuple(float(x) for x in scale))


def parse_release(value: bytes | dict[str, Any], *, confidence: float = DEFAULT_CONFIDENCE,
                  timestamp_ms: int | None = None) -> Release:
    """One release record as a :class:`Release`; :class:`UnreadableRelease` when a field it
    needs is missing or mistyped. Unknown fields are ignored."""
    _check_confidence(confidence)
    try:
        doc = orjson.loads(value) if isinstance(value, bytes | bytearray) else value
    except orjson.JSONDecodeError:
        raise UnreadableRelease("not JSON") from None
    if type(doc) is not dict:
        raise UnreadableRelease("not a JSON object")
    version = doc.get("schema_version", 1)
    if type(version) is not int:
        raise UnreadableRelease("schema_version is not an integer")
    stream = _get(doc, "stream", (str,))
    slot = _get(doc, "slot", (int,))
    histogram = _numbers(doc.get("histogram"), "histogram")
    published = _get(doc, "published", (bool,))
    cells, ref = _cells(doc, len(histogram))
    noise = _noise(doc, len(histogram)) if published else None
    lower = upper = None
    if noise is not None and noise.distribution in DISTRIBUTIONS:
        lower, upper = error_bars(histogram, noise, confidence)
    approximates = doc.get("approximates")
    if approximates is not None and type(approximates) is not int:
        raise UnreadableRelease("approximates is not an integer")
    return Release(
        key=f"{stream}/{slot}", stream=stream, slot=slot,
        start=_get(doc, "start", (int,)), end=_get(doc, "end", (int,)),
        mechanism=_get(doc, "mechanism", (str,)), published=published,
        nullified=_get(doc, "nullified", (bool,)), histogram=histogram,
        threshold=float(_get(doc, "threshold", (int, float))),
        users=_get(doc, "users", (int,)), schema_version=version, cells=cells, cells_ref=ref,
        noise=noise, approximates=None if published else approximates, confidence=confidence,
        lower=lower, upper=upper, timestamp_ms=timestamp_ms,
    )


def _key_of(key: bytes | None, value: bytes) -> tuple[str, str, int] | None:
    """``(key, stream, slot)`` of a record, from its key (``<stream>/<slot>``) or its value."""
    if key is not None:
        text = key.decode("utf-8", "replace")
        stream, _, slot = text.rpartition("/")
        digits = slot[1:] if slot.startswith("-") else slot
        if stream and digits.isascii() and digits.isdigit():
            return text, stream, int(slot)
    with contextlib.suppress(orjson.JSONDecodeError):
        doc = orjson.loads(value)
        if type(doc) is dict and type(doc.get("stream")) is str \
                and type(doc.get("slot")) is int:
            return f"{doc['stream']}/{doc['slot']}", doc["stream"], doc["slot"]
    return None


def decode_releases(records: Iterable[RawRecord], *, stream: str | None = None,
                    from_slot: int | None = None, confidence: float = DEFAULT_CONFIDENCE,
                    seen: dict[str, bytes] | None = None) -> Iterator[Release]:
    """Releases of raw ``(key, value, timestamp_ms)`` records, in order: only ``stream``'s (all
    when None), from ``from_slot`` on, the first per key. ``seen`` (key to value digest) carries
    the keys already yielded across calls. Unreadable records are skipped with a
    :class:`ReleaseFormatWarning`."""
    _check_confidence(confidence)
    seen = {} if seen is None else seen
    for key, value, timestamp in records:
        if value is None:
            continue  # a tombstone
        ident = _key_of(key, value)
        if ident is None:
            warnings.warn(f"release record without a <stream>/<slot> key or fields skipped "
                          f"({value[:80]!r})", ReleaseFormatWarning, stacklevel=2)
            continue
        name, rec_stream, slot = ident
        if stream is not None and rec_stream != stream:
            continue
        if from_slot is not None and slot < from_slot:
            continue
        digest = hashlib.blake2b(value, digest_size=16).digest()
        if name in seen:
            if seen[name] != digest:
                warnings.warn(f"release {name} seen again with other content: the first is "
                              "kept", ReleaseFormatWarning, stacklevel=2)
            continue
        seen[name] = digest
        try:
            yield parse_release(value, confidence=confidence, timestamp_ms=timestamp)
        except UnreadableRelease as exc:
            version = _version(value)
            newer = (f" of schema version {version}, newer than the {KNOWN_VERSION} this "
                     "client knows," if version is not None and version > KNOWN_VERSION else "")
            warnings.warn(f"release {name}{newer} cannot be read ({exc}): skipped",
                          ReleaseFormatWarning, stacklevel=2)


def _version(value: bytes) -> int | None:
    with contextlib.suppress(orjson.JSONDecodeError):
        doc = orjson.loads(value)
        if type(doc) is dict and type(doc.get("schema_version")) is int:
            return int(doc["schema_version"])
    return None


# -- reading Kafka ------------------------------------------------------------------------------


async def _start_record(bootstrap: str, topic: str, key: str, timeout: float) -> dict | None:
    """The last value under ``key`` on ``topic`` (read from the beginning to its end)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from streams.kafka.settings import client_options

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options(),
                                enable_auto_commit=False,
                                request_timeout_ms=int(timeout * 1000))
    found: dict | None = None
    try:
        await asyncio.wait_for(consumer.start(), timeout)
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic)
                                                         or ())]
        if not tps:
            return None
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        todo = {tp for tp in tps if ends[tp] > 0}
        deadline = time.monotonic() + timeout
        while todo and time.monotonic() < deadline:
            batch = await consumer.getmany(*todo, timeout_ms=300)
            for tp, recs in batch.items():
                for r in recs:
                    if r.offset < ends[tp] and r.key == key.encode() and r.value is not None:
                        found = orjson.loads(r.value)
            for tp in list(todo):
                if await consumer.position(tp) >= ends[tp]:
                    todo.discard(tp)
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()
    return found


async def aiter_releases(bootstrap: str, topic: str, *, stream: str | None = None,
                         from_beginning: bool = True, follow: bool = False,
                         from_slot: int | None = None,
                         confidence: float = DEFAULT_CONFIDENCE,
                         decisions_topic: str | None = None,
                         timeout: float = 30.0) -> AsyncIterator[Release]:
    """The async form of :func:`iter_releases` (connection settings: those of
    :mod:`streams.kafka.settings`)."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    from streams.kafka.settings import client_options

    _check_confidence(confidence)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options(),
                                enable_auto_commit=False,
                                auto_offset_reset="earliest",
                                request_timeout_ms=int(timeout * 1000))
    seen: dict[str, bytes] = {}
    labels: dict[str, tuple[str, ...] | None] = {}
    try:
        try:
            await asyncio.wait_for(consumer.start(), timeout)
            if topic not in await consumer.topics():
                raise ReleaseReadError(f"no topic {topic} on {bootstrap}")
        except ReleaseReadError:
            raise
        except Exception as exc:  # aiokafka's connection errors, the timeout
            raise ReleaseReadError(f"cannot read {topic} from {bootstrap}: "
                                   f"{exc or type(exc).__name__}") from None
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic)
                                                         or ())]
        consumer.assign(tps)
        if from_beginning:
            await consumer.seek_to_beginning(*tps)
        else:
            await consumer.seek_to_end(*tps)
        ends = await consumer.end_offsets(tps)
        progress = time.monotonic()
        while True:
            if not follow:
                positions = {tp: await consumer.position(tp) for tp in tps}
                if all(positions[tp] >= ends[tp] for tp in tps):
                    return
                if time.monotonic() - progress > timeout:
                    raise ReleaseReadError(f"reading {topic} from {bootstrap} made no progress "
                                           f"for {timeout:g} s")
            batch = await consumer.getmany(timeout_ms=500)
            raw = [(r.key, r.value, r.timestamp) for tp, recs in sorted(batch.items())
                   for r in recs if follow or r.offset < ends[tp]]
            if batch:
                progress = time.monotonic()
            for rel in decode_releases(raw, stream=stream, from_slot=from_slot,
                                       confidence=confidence, seen=seen):
                if rel.cells is None and rel.cells_ref and decisions_topic:
                    if rel.cells_ref not in labels:
                        start = await _start_record(bootstrap, decisions_topic, rel.cells_ref,
                                                    timeout)
                        got = ((start or {}).get("config") or {}).get("cells")
                        labels[rel.cells_ref] = tuple(got) if type(got) is list else None
                    cells = labels[rel.cells_ref]
                    if cells is not None and len(cells) == len(rel.histogram):
                        rel = replace(rel, cells=cells)
                yield rel
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()


def iter_releases(bootstrap: str, topic: str, *, stream: str | None = None,
                  from_beginning: bool = True, follow: bool = False,
                  from_slot: int | None = None, confidence: float = DEFAULT_CONFIDENCE,
                  decisions_topic: str | None = None,
                  timeout: float = 30.0) -> Iterator[Release]:
    """Yield the releases on ``topic``, one :class:`Release` per key, in topic order.

    ``stream``: only this stream's (default: all). ``from_beginning``: start at the topic's
    beginning, else at its end. ``follow``: keep waiting for new releases, else stop at the end
    the topic had when reading began. ``from_slot``: skip earlier slots. ``confidence``: of the
    error bars. ``decisions_topic``: where to look up the cell labels of a large domain (else
    :attr:`Release.cells` stays ``None`` with :attr:`Release.cells_ref` set). ``timeout``:
    seconds allowed to connect and, when not following, without progress. Raises
    :class:`ReleaseReadError` when the broker or the topic cannot be read. Runs its own event
    loop: from async code use :func:`aiter_releases`.
    """
    agen = aiter_releases(bootstrap, topic, stream=stream, from_beginning=from_beginning,
                          follow=follow, from_slot=from_slot, confidence=confidence,
                          decisions_topic=decisions_topic, timeout=timeout)
    loop = asyncio.new_event_loop()
    task: asyncio.Future[Release] | None = None
    try:
        while True:
            task = asyncio.ensure_future(agen.__anext__(), loop=loop)
            try:
                item = _run_interruptibly(loop, task)
            except StopAsyncIteration:
                return
            yield item
    finally:
        if task is not None and not task.done():  # interrupted without the handler
            task.cancel()
            with contextlib.suppress(BaseException):
                loop.run_until_complete(task)
        with contextlib.suppress(Exception):
            loop.run_until_complete(agen.aclose())
        loop.close()


def _run_interruptibly(loop: asyncio.AbstractEventLoop, task: asyncio.Future[Release]) -> Release:
    """Run ``task``; Ctrl-C (SIGINT, main thread only) cancels it, so the consumer stops
    cleanly, and then raises :class:`KeyboardInterrupt`."""
    interrupted = False

    def interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    previous = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, interrupt)
        installed = True
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
        installed = False
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        if installed:
            loop.remove_signal_handler(signal.SIGINT)
            if previous is not None:  # None: a handler not set from Python, left as it was
                signal.signal(signal.SIGINT, previous)
