"""Where a new live stream begins to read its source topics (docs/sources.md, "Retained
history").

Live (``--event-time live``), a report before the stream's start is ``late``: the start is a
worker's clock when a partition of ``reports`` first takes records, less ``--max-clock-skew-ms``
(or the lateness, when larger; docs/job.md, "Slots by event time"). A new stream's consumer
group has no offset on the source topics yet, so it would read every record they retain, days
of telemetry, only to write each one that wins its (device, slot) to ``dead-letters`` as
``late``, and release nothing until it had read them all.

Before the worker joins its group, :func:`begin_after_history` therefore commits, for every
source partition the group has no offset on, the first offset whose Kafka timestamp is at or
after :func:`history_cutoff_ms`: the clock less twice that bound and a minute. A record the
broker took before the cutoff was made, by a device whose clock ran at most the bound ahead,
before ``cutoff + bound``, which is a bound before any worker's start: it could only be
``late``. Every record from the cutoff on is read and judged by its event time, as before. A
partition the group has an offset on (a restart, a rebalance, a data directory started anew)
is left where the group stands, so the backlog of a restart is read in full. The records not
read are counted per partition and logged; ``--event-time history`` replays them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from streams.kafka.consumer_stop import stop_consumer
from streams.kafka.settings import consumer_options

log = logging.getLogger(__name__)

#: Beyond twice the clock bound, what a worker's clock may differ from another's that starts with
#: it (workers started together each find no offset and commit their own).
MARGIN_MS: Final = 60_000


def history_cutoff_ms(now_ms: int, max_skew_ms: int, lateness_ms: int) -> int:
    """The Kafka timestamp before which a source record could only be ``late`` in a stream
    starting now: ``now`` less twice the larger of the clock bound and the lateness, less
    :data:`MARGIN_MS`."""
    return now_ms - 2 * max(max_skew_ms, lateness_ms) - MARGIN_MS


@dataclass(frozen=True)
class HistoryStart:
    """A source partition a new stream reads from ``start`` on: the ``start - first`` records
    before it (offsets, transaction markers included) were taken by the broker before the
    cutoff."""

    topic: str
    partition: int
    first: int
    start: int

    @property
    def skipped(self) -> int:
        """Offsets not read."""
        return self.start - self.first


async def begin_after_history(bootstrap: str, group: str, partitions: Mapping[str, int],
                              cutoff_ms: int) -> list[HistoryStart]:
    """Commit, for ``group``, the first offset at or after ``cutoff_ms`` of every partition of
    the source topics (``partitions``: topic -> partition count) that the group has no offset
    on and whose retained records begin before it; return those partitions. A partition with
    nothing at or after the cutoff starts at its end. Raises :class:`KafkaError` when the
    broker refuses the commit (another worker of the group is running: it reads them)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, **consumer_options())
    try:
        await consumer.start()
        every = [TopicPartition(t, p) for t, count in partitions.items() for p in range(count)]
        fresh = [tp for tp in every if await consumer.committed(tp) is None]
        if not fresh:
            return []
        first = await consumer.beginning_offsets(fresh)
        ends = await consumer.end_offsets(fresh)
        found = await consumer.offsets_for_times(dict.fromkeys(fresh, cutoff_ms))
        starts = [HistoryStart(tp.topic, tp.partition, first[tp],
                               min(found[tp].offset, ends[tp]) if found[tp] else ends[tp])
                  for tp in fresh]
        starts = [s for s in starts if s.start > s.first]
        if starts:
            consumer.assign([TopicPartition(s.topic, s.partition) for s in starts])
            await consumer.commit({TopicPartition(s.topic, s.partition): s.start
                                   for s in starts})
        return starts
    finally:
        await stop_consumer(consumer)


def describe(starts: Sequence[HistoryStart], cutoff_ms: int) -> list[str]:
    """One line per source topic: how many retained records a new stream does not read."""
    lines = []
    for topic in sorted({s.topic for s in starts}):
        mine = [s for s in starts if s.topic == topic]
        total = sum(s.skipped for s in mine)
        parts = ", ".join(f"{s.partition}: {s.first}-{s.start - 1}" for s in mine)
        since = datetime.fromtimestamp(cutoff_ms / 1000, UTC).isoformat(
            timespec="seconds").replace("+00:00", "Z")
        lines.append(f"a new live stream reads source topic {topic} from the records the broker "
                     f"took at {since} or later: the {total} older records (offsets {parts}) "
                     f"precede the stream's start and could only be late; --event-time history "
                     f"replays them")
    return lines


def start_after_history(bootstrap: str, group: str, partitions: Mapping[str, int],
                        cutoff_ms: int) -> list[HistoryStart]:
    """:func:`begin_after_history` from synchronous code; a refused commit is logged and
    nothing is skipped (the group's running workers read the topics)."""
    try:
        return asyncio.run(begin_after_history(bootstrap, group, partitions, cutoff_ms))
    except KafkaError as exc:
        log.warning("source topics read from the group's offsets: the retained history could "
                    "not be skipped (%r)", exc)
        return []
