"""Partitions whose records were fetched and never handed over.

A batch the consumer fetched while its partition was paused, or while a rebalance stopped the
flow, is dropped; the consumer's position is then past records its reader never had, and the
partition reads nothing more. :class:`ReadStalls` notices a partition whose consumer stands past
the offset its reader expects next while that offset has not moved for :data:`READ_STALL_S`
seconds; the worker then reads it again from there (records read twice are not counted twice:
a partition of ``reports`` skips what its state has taken, the source stage forwards again only
what can still win).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any

__all__ = ["READ_STALL_S", "ReadStalls"]

log = logging.getLogger("pwevent.job")

#: Seconds a partition may stand still with the consumer past the offset its reader expects next,
#: before it is read again from there.
READ_STALL_S = 10.0


class ReadStalls:
    """The offset each partition's reader expected next, and since when (module doc)."""

    def __init__(self, after_s: float = READ_STALL_S) -> None:
        self.after_s = after_s
        self.seen: dict[Hashable, tuple[int, float]] = {}

    def clear(self) -> None:
        """Forget every partition (the flow stopped: nothing is expected to arrive)."""
        self.seen.clear()

    def stalled(self, key: Hashable, expected: int, position: int | None, now: float) -> bool:
        """Whether the partition ``key`` must be read again from ``expected``: the consumer's
        ``position`` is past it and ``expected`` has not moved for :attr:`after_s` seconds up
        to ``now`` (monotonic). A ``True`` starts the wait again."""
        seen = self.seen.get(key)
        if position is None or position <= expected or seen is None or seen[0] != expected:
            self.seen[key] = (expected, now)
            return False
        if now - seen[1] < self.after_s:
            return False
        self.seen[key] = (expected, now)
        return True

    async def read_again(self, consumer: Any, expected: Mapping[Any, int],
                         dropped: Callable[[Any, int, int], Awaitable[bool]] | None = None,
                         ) -> list[tuple[Any, int, int]]:
        """Seek each partition of ``expected`` (a topic partition to the offset its reader
        expects next) that :meth:`stalled` says must be read again back to that offset;
        returns those partitions with the consumer's position before the seek and the offset.
        A partition whose position cannot be had (a rebalance took it) is left, and so is one
        for which ``dropped(tp, offset, position)`` says the offsets between hold nothing to
        read (transaction markers, records of aborted transactions)."""
        now = time.monotonic()
        done = []
        for tp, offset in sorted(expected.items()):
            try:
                position = await asyncio.wait_for(consumer.position(tp), 2.0)
            except Exception as exc:  # noqa: BLE001 - a rebalance may take the partition away
                log.info("position of %s[%d] unknown: %r", tp.topic, tp.partition, exc)
                continue
            if self.stalled(tp, offset, position, now) and (
                    dropped is None or await dropped(tp, offset, position)):
                await consumer.seek(tp, offset)
                done.append((tp, position, offset))
        return done
