"""The coordinator of a Faust worker: step 3 of the path of one report (docs/design.md).

:class:`CoordinatorRunner` takes the batches of ``slot-partials`` that the batched ingest
(:mod:`streams.job.worker.ingest`) hands it, each record once and in offset order, gives each
message to the :class:`~streams.job.coordination.coordinator.Coordinator`, records the
coordinator's state in the ``coordinator`` table before it emits what the coordinator released to
``releases`` and ``decisions``, and rebuilds the coordinator from that table and those topics when
this worker takes the coordinator over, emitting again what its state recorded and the topics lost
(:func:`emitted_records` says what it emits, :func:`stream_records` what it reads back). It
holds no logic of its own about slots or budgets.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, MutableMapping

import faust
import orjson

from streams.job.batch_handling import ContinuityGuard, RawRecord, Rewind
from streams.job.config import JobConfig
from streams.job.coordination.coordinator import Coordinator, Emitted
from streams.job.operations.worker_metrics import SlotCloseTimes, WorkerMetrics
from streams.job.partitions.accumulator import wall_clock_ms
from streams.job.roles import make_coordinator
from streams.job.slot_protocol import decode
from streams.job.worker.tables import changelog_written
from streams.kafka.topics import Topics

log = logging.getLogger("pwevent.job")

COORDINATOR_KEY = "state"


class CoordinatorRunner:
    """The job's coordinator when this worker holds the ``slot-partials`` partition (there is
    one): restored from the ``coordinator`` table when first used, forgotten when another worker
    takes it over (which may release slots meanwhile). ``clock_ms`` (epoch ms) times the
    releases for the release-latency metric."""

    def __init__(self, app: faust.App, config: JobConfig, broker: str, topics: Topics,
                 state: MutableMapping[bytes, bytes], counters: Counter[str],
                 metrics: WorkerMetrics, clock_ms: Callable[[], int] = wall_clock_ms) -> None:
        self.app, self.config, self.broker, self.topics = app, config, broker, topics
        self.state = state
        self.counters, self.metrics = counters, metrics
        # when each slot closed, for pwevent_slot_release_seconds (the metric alone reads it)
        self.clock_ms = clock_ms
        self.closes = SlotCloseTimes()
        # the coordinator takes slot-partials as raw batches with their offsets, like the
        # reports: a record the consumer skipped is noticed and read again (ContinuityGuard)
        self.continuity = ContinuityGuard(topics.slot_partials)
        self.coordinator: Coordinator | None = None

    def forget(self) -> None:
        """Forget the coordinator, which another worker takes over: if it comes back, it is
        restored from the ``coordinator`` table."""
        self.coordinator = None
        self.closes = SlotCloseTimes()

    async def _coordinator(self) -> Coordinator:
        if self.coordinator is None:
            coord = make_coordinator(self.config)
            saved = self.state.get(COORDINATOR_KEY.encode())
            if saved:
                coord.restore(saved)
                log.info("coordinator resumes: next slot %s", coord.next_slot)
            await self._reconcile(coord)
            self.coordinator = coord
        return self.coordinator

    async def _reconcile(self, coord: Coordinator) -> None:
        """Take from the decisions and releases topics what the coordinator's state lacks, and
        put back on them what they lack.

        A coordinator without state whose stream already started (its state lost with the
        broker's last writes, or wiped) learns the nonce and every released slot; one whose
        state is older than the topics (the ``coordinator`` changelog lost writes that the
        releases topic kept, or local state was reset) takes the slots released after it. A
        state that recorded more than the topics hold (the broker lost its last writes, the
        state kept them) emits the missing records again, byte for byte. Either way no slot is
        ever released again, least of all with another value."""
        start, decisions, releases = await stream_records(
            self.broker, self.topics, self.config.stream, unstarted=coord.start is not None)
        if start is None and coord.start is None:
            return
        lost = coord.lost(start, decisions, releases)
        fresh = coord.start is None
        if fresh:
            count = coord.recover(start, decisions, releases)
        else:
            count = coord.adopt(decisions, releases)
        if count or fresh:
            self.state[COORDINATOR_KEY.encode()] = coord.snapshot()
            await changelog_written(self.state)
        if fresh:
            log.warning("coordinator state was missing for stream %s, which started at slot "
                        "%s: recovered its nonce and %d released slots from the decisions and "
                        "releases topics", self.config.stream, start["start"], count)
        elif count:
            log.warning("coordinator state of stream %s was behind the releases topic: took "
                        "%d released slots from it, next slot %s", self.config.stream, count,
                        coord.next_slot)
        if lost:
            log.warning("the topics of stream %s lack %d records that the coordinator state "
                        "recorded (the broker lost its last writes): emitting them again",
                        self.config.stream, len(lost))
            await self._emit(coord, lost)
            self.state[COORDINATOR_KEY.encode()] = coord.snapshot()

    async def on_partials(self, records: list[RawRecord]) -> Rewind | None:
        """Release each slot once all partitions closed it; record before emitting. Takes the
        partitions' messages in offset order, each once: a batch that skips records the
        coordinator has not taken is not taken, and the topic is read again from there."""
        received = self.clock_ms()  # the close time of a closure that does not say it
        coord = await self._coordinator()
        if coord.input_offset is not None:
            rewind = self.continuity.check(0, coord.input_offset, records)
            if rewind is not None:
                self.counters["rewinds"] += 1
                self.metrics.rewound()
                return rewind
        await self._emit(coord, coord.unemitted())
        for _key, value, _p, offset in records:
            if coord.input_offset is not None and offset < coord.input_offset:
                continue  # taken before a restart or a rewind
            coord.input_offset = offset + 1
            try:
                message = decode(value)
                self.closes.take(message, received)
                new = coord.receive(message)
            except Exception as exc:  # noqa: BLE001 - no record may stop the releases
                log.error("bad partial message skipped: %r", exc)
                self.counters["bad_partials"] += 1
                new = []
            self.state[COORDINATOR_KEY.encode()] = coord.snapshot()
            await changelog_written(self.state)  # recorded before anything is emitted
            if new:
                await self._emit(coord, new)
                self.metrics.release_took(new, self.closes, self.clock_ms(), received)
                self.state[COORDINATOR_KEY.encode()] = coord.snapshot()
        return None

    async def _emit(self, coord: Coordinator, releases: list[Emitted]) -> None:
        if not releases:
            return
        futures = []
        for topic, key, value, timestamp in emitted_records(self.config, self.topics, releases):
            # Faust takes seconds and truncates seconds * 1000 to ms: half a millisecond more
            # gives exactly ``timestamp``
            seconds = None if timestamp is None else (timestamp + 0.5) / 1000
            futures.append(await self.app.producer.send(topic, key, value, 0, seconds, None))
        await asyncio.gather(*futures)
        coord.mark_emitted(releases[-1][0])
        self.counters["releases"] += sum(r[1] is not None for r in releases)
        self.metrics.released(releases)


def emitted_records(config: JobConfig, topics: Topics,
                    emitted: list[Emitted]) -> list[tuple[str, bytes, bytes, int | None]]:
    """``(topic, key, value, timestamp in ms)`` of the records the coordinator emits for
    ``emitted``, in order: a start record (``None`` release) to ``decisions``; a slot's release,
    stamped with the slot's end in event time (``None``: before the epoch, the broker's time),
    to ``releases``, then its decision to ``decisions``; keys ``<stream>/start``,
    ``<stream>/<slot>``."""
    out: list[tuple[str, bytes, bytes, int | None]] = []
    for slot, release, decision in emitted:
        if release is None:  # the start record: on the decisions topic only
            out.append((topics.decisions, f"{config.stream}/start".encode(), decision, None))
            continue
        key = f"{config.stream}/{slot}".encode()
        end = config.clock.end(slot)
        out.append((topics.releases, key, release, end if end >= 0 else None))
        out.append((topics.decisions, key, decision, None))
    return out


async def stream_records(broker: str, topics: Topics, stream: str, unstarted: bool = True,
                         ) -> tuple[dict | None, dict[int, bytes], dict[int, bytes]]:
    """The start record of ``stream`` on ``decisions`` (``None``: none there), and its
    decisions and releases by slot (the first record of each slot, as analysts saw it); without
    ``unstarted``, a stream without a start record returns at once (nothing else read)."""
    from streams.kafka.offsets import read_topic

    prefix = f"{stream}/".encode()
    decisions = await read_topic(broker, topics.decisions, limit=120)
    start = next((orjson.loads(v) for k, v in decisions if k == prefix + b"start"), None)
    if start is None and not unstarted:
        return None, {}, {}
    releases = await read_topic(broker, topics.releases, limit=120)

    def by_slot(records: list[tuple[bytes | None, bytes]]) -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        for key, value in records:
            rest = key[len(prefix):] if key and key.startswith(prefix) else b""
            if rest.isdigit():
                out.setdefault(int(rest), value)
        return out

    return start, by_slot(decisions), by_slot(releases)
