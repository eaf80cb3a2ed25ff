"""The coordinator of a Faust worker: step 3 of the path of one report (docs/design.md).

:class:`CoordinatorRunner` takes the batches of ``slot-partials`` that the batched ingest
(:mod:`streams.job.ingest`) hands it, each record once and in offset order, gives each message to
the :class:`~streams.job.coordinator.Coordinator`, records the coordinator's state in the
``coordinator`` table before it emits what the coordinator released to ``releases`` and
``decisions``, and rebuilds the coordinator from that table and those topics when this worker
takes the coordinator over. It holds no logic of its own about slots or budgets.
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
from streams.job.coordinator import Coordinator
from streams.job.partition import wall_clock_ms
from streams.job.roles import make_coordinator
from streams.job.slot_protocol import decode
from streams.job.worker_metrics import SlotCloseTimes, WorkerMetrics
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
        """Take from the decisions and releases topics what the coordinator's state lacks.

        A coordinator without state whose stream already started (its state lost with the
        broker's last writes, or wiped) learns the nonce and every released slot; one whose
        state is older than the topics (the ``coordinator`` changelog lost writes that the
        releases topic kept, or local state was reset) takes the slots released after it.
        Either way no slot is ever released again, least of all with another value."""
        from streams.kafka.offsets import read_topic

        prefix = f"{self.config.stream}/".encode()
        decisions = await read_topic(self.broker, self.topics.decisions, idle=0.5, limit=120)
        start = next((orjson.loads(v) for k, v in decisions if k == prefix + b"start"), None)
        if start is None:
            return
        releases = await read_topic(self.broker, self.topics.releases, idle=0.5, limit=120)

        def by_slot(records: list[tuple[bytes | None, bytes]]) -> dict[int, bytes]:
            out: dict[int, bytes] = {}
            for key, value in records:
                rest = key[len(prefix):] if key and key.startswith(prefix) else b""
                if rest.isdigit():
                    out.setdefault(int(rest), value)  # the first, as analysts saw it
            return out

        fresh = coord.start is None
        if fresh:
            count = coord.recover(start, by_slot(decisions), by_slot(releases))
        else:
            count = coord.adopt(by_slot(decisions), by_slot(releases))
        if not count and not fresh:
            return
        self.state[COORDINATOR_KEY.encode()] = coord.snapshot()
        if fresh:
            log.warning("coordinator state was missing for stream %s, which started at slot "
                        "%s: recovered its nonce and %d released slots from the decisions and "
                        "releases topics", self.config.stream, start["start"], count)
        else:
            log.warning("coordinator state of stream %s was behind the releases topic: took "
                        "%d released slots from it, next slot %s", self.config.stream, count,
                        coord.next_slot)

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
            await self.app.producer.flush()
            if new:
                await self._emit(coord, new)
                self.metrics.release_took(new, self.closes, self.clock_ms(), received)
                self.state[COORDINATOR_KEY.encode()] = coord.snapshot()
        return None

    async def _emit(self, coord: Coordinator,
                    releases: list[tuple[int, bytes | None, bytes]]) -> None:
        if not releases:
            return
        futures = []
        for slot, release, decision in releases:
            if release is None:  # a dynamic mechanism's start: on the decisions topic only
                key = f"{self.config.stream}/start".encode()
                futures.append(await self.app.producer.send(self.topics.decisions, key,
                                                            decision, 0, None, None))
                continue
            key = f"{self.config.stream}/{slot}".encode()
            # the record's timestamp is the slot's end in event time; Faust takes seconds and
            # truncates seconds * 1000 to ms, so half a millisecond more gives exactly ``end``
            end = self.config.clock.end(slot)
            timestamp = (end + 0.5) / 1000 if end >= 0 else None
            futures.append(await self.app.producer.send(self.topics.releases, key, release, 0,
                                                        timestamp, None))
            futures.append(await self.app.producer.send(self.topics.decisions, key, decision, 0,
                                                        None, None))
        await asyncio.gather(*futures)
        coord.mark_emitted(releases[-1][0])
        self.counters["releases"] += sum(r[1] is not None for r in releases)
        self.metrics.released(releases)
