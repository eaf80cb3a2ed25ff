"""Where a new live stream begins to read its source topics (docs/sources.md, "Retained
history").

Live (``--event-time live``), a report before the stream's start is ``late``: the start is a
worker's clock when a partition of ``reports`` first takes records, less ``--max-clock-skew-ms``
(or the lateness, when larger; docs/job.md, "Slots by event time"). A new stream's consumer
group has no offset on the source topics yet, so it would read every record they retain, days
of telemetry, only to write each one that wins its (device, slot) to ``dead-letters`` as
``late``, and release nothing until it had read them all.

Before the worker joins its group, :func:`begin_after_history` therefore commits, on every
partition of each source topic the group has no offset on at all, the first offset whose Kafka
timestamp is at or
after :func:`history_cutoff_ms`: the clock less twice that bound and a minute. A record the
broker took before the cutoff has an event time before ``cutoff + bound``, a bound and a minute
before this worker's clock and so before any worker's start, unless it was written more than
the bound ahead of the broker's clock (which a live stream running then would have found
``future``): it could only be ``late``. Every record from the cutoff on is read and judged by
its event time, as before. Every partition of such a topic gets its offset, the empty ones
too, before any record is read, so from then on the topic is the group's: a restart, a
rebalance or a data directory started anew reads from the group's offsets, and the backlog of a
restart is read in full; so is a partition added to the topic later, from its first record. The
records not read are counted per topic and logged; ``--event-time history`` replays them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import CommitFailedError, KafkaError

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
    """Commit, for ``group``, on every partition of each source topic (``partitions``: topic ->
    partition count) on which the group has no offset at all, the first offset at or after
    ``cutoff_ms`` (a partition with nothing from then on: its end); return those partitions.
    Raises :class:`KafkaError` when the broker refuses the commit (another worker of the group
    is running: it reads them)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group,
                                enable_auto_commit=False, **consumer_options())
    try:
        await consumer.start()
        fresh: list[TopicPartition] = []
        for topic, count in partitions.items():
            tps = [TopicPartition(topic, p) for p in range(count)]
            if all([await consumer.committed(tp) is None for tp in tps]):
                fresh += tps
        if not fresh:
            return []
        first = await consumer.beginning_offsets(fresh)
        ends = await consumer.end_offsets(fresh)
        found = await consumer.offsets_for_times(dict.fromkeys(fresh, cutoff_ms))
        starts = [HistoryStart(tp.topic, tp.partition, first[tp],
                               min(found[tp].offset, ends[tp]) if found[tp] else ends[tp])
                  for tp in fresh]
        consumer.assign(fresh)
        await consumer.commit({TopicPartition(s.topic, s.partition): s.start for s in starts})
        return starts
    finally:
        await stop_consumer(consumer)


def describe(starts: Sequence[HistoryStart], cutoff_ms: int) -> list[str]:
    """One line per source topic: how many retained records a new stream does not read."""
    lines = []
    for topic in sorted({s.topic for s in starts if s.skipped}):
        mine = [s for s in starts if s.topic == topic and s.skipped]
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
    except CommitFailedError:
        log.info("group %s has members already: the source topics are read from its offsets",
                 group)
    except KafkaError as exc:
        log.warning("the source topics are read from the group's offsets: their retained "
                    "history could not be skipped (%s)", type(exc).__name__)
    return []
