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
  whose budget is below the slot's threshold (``noise.thinned``): such a slot gets no bars, as
  their measured coverage of the true count is below nominal (docs/results.md). An approximated
  or nullified slot repeats an earlier publication (``approximates``): no noise, no bars.
* **Deduplication.** A release is keyed ``<stream>/<slot>``; one emitted again after a restart
  is byte-identical, and only the first per key is yielded.
* **Versions.** A record of a newer ``schema_version`` than :data:`KNOWN_VERSION` is read all
  the same (fields are only added within a version's contract); only one that cannot be read is
  skipped, with a :class:`ReleaseFormatWarning`. A version-1 record (no ``schema_version``) has
  no ``cells`` and no ``noise``: its bars are ``None``.

From async code use :func:`aiter_releases`; :func:`decode_releases` does the decoding,
deduplication and filtering on records already read. Every name above is importable from here;
:mod:`streams.releases.decoding` (the record type and its decoding) and
:mod:`streams.releases.error_bars` (the quantiles) hold them, and this module reads Kafka.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace

import orjson

from streams.kafka.consumer_stop import stop_consumer
from streams.releases.decoding import (
    KNOWN_VERSION,
    Release,
    ReleaseFormatWarning,
    UnreadableRelease,
    decode_releases,
    parse_release,
)
from streams.releases.error_bars import (
    DEFAULT_CONFIDENCE,
    Noise,
    check_confidence,
    error_bars,
    half_widths,
)

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


class ReleaseReadError(RuntimeError):
    """The broker or the topic could not be read."""


async def read_start_record(bootstrap: str, topic: str, key: str, timeout: float) -> dict | None:
    """The last value under ``key`` on ``topic`` (read from the beginning to its end); None
    when there is none or the end is not reached within ``timeout`` seconds."""
    from aiokafka import AIOKafkaConsumer

    from streams.kafka.offsets import records_to_end, topic_partitions
    from streams.kafka.settings import consumer_options

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **consumer_options(),
                                enable_auto_commit=False, auto_offset_reset="earliest",
                                request_timeout_ms=int(timeout * 1000))
    try:
        await asyncio.wait_for(consumer.start(), timeout)
        tps = await topic_partitions(consumer, topic)
        if not tps:
            return None
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        try:
            got = await records_to_end(consumer, tps, timeout)
        except TimeoutError:
            return None  # the labels stay unknown; the releases are read all the same
    finally:
        with contextlib.suppress(Exception):
            await stop_consumer(consumer)
    values = [r.value for tp in tps for r in got[tp] if r.key == key.encode() and r.value]
    return orjson.loads(values[-1]) if values else None


async def aiter_releases(bootstrap: str, topic: str, *, stream: str | None = None,
                         from_beginning: bool = True, follow: bool = False,
                         from_slot: int | None = None,
                         confidence: float = DEFAULT_CONFIDENCE,
                         decisions_topic: str | None = None,
                         timeout: float = 30.0) -> AsyncIterator[Release]:
    """The async form of :func:`iter_releases` (connection settings: those of
    :mod:`streams.kafka.settings`)."""
    from aiokafka import AIOKafkaConsumer

    from streams.kafka.errors import authentication_failed, authentication_failure
    from streams.kafka.offsets import topic_partitions
    from streams.kafka.settings import consumer_options

    check_confidence(confidence)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **consumer_options(),
                                enable_auto_commit=False,
                                # the position a seek asks for, and the one a reset that
                                # assign() started may still set after it (seen on Apache Kafka)
                                auto_offset_reset="earliest" if from_beginning else "latest",
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
            refused = await authentication_failure(bootstrap, exc, timeout)
            if refused is not None:
                raise ReleaseReadError(authentication_failed(bootstrap, refused)) from None
            raise ReleaseReadError(f"cannot read {topic} from {bootstrap}: "
                                   f"{exc or type(exc).__name__}") from None
        tps = await topic_partitions(consumer, topic)
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
                        start = await read_start_record(bootstrap, decisions_topic,
                                                        rel.cells_ref, timeout)
                        got = ((start or {}).get("config") or {}).get("cells")
                        labels[rel.cells_ref] = tuple(got) if type(got) is list else None
                    cells = labels[rel.cells_ref]
                    if cells is not None and len(cells) == len(rel.histogram):
                        rel = replace(rel, cells=cells)
                yield rel
    finally:
        with contextlib.suppress(Exception):
            await stop_consumer(consumer)


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
