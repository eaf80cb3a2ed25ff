"""The worker's tables, whose changelog writes can be awaited one by one.

A write to a Faust table goes to the table's changelog through the producer's buffer: the
buffer's own task takes it out and hands it to the Kafka client later. ``Producer.flush()`` does
not wait for such a write: it returns as soon as the buffer is empty, which it is while its task
still holds the write on its way to the client, or when no write left the buffer for 0.1 s. A
handler that flushed, then let its input be acknowledged and committed, could thus lose the
state it wrote to a SIGKILL right after the commit: the registrations of a ``requirements``
batch, a partition's checkpoint, the coordinator's record of a release.

:class:`TrackedTable` keeps the future of every changelog record it sent until the broker has
acknowledged it, and :func:`changelog_written` waits for them: what a handler wrote is durable
when it returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import faust
from faust.types import FutureMessage

__all__ = ["TrackedTable", "changelog_written"]


class TrackedTable(faust.Table):
    """A ``faust.Table`` that remembers the changelog records it sent until each is
    acknowledged (:meth:`written`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._unacknowledged: set[FutureMessage] = set()

    def send_changelog(self, *args: Any, **kwargs: Any) -> FutureMessage:
        fut = super().send_changelog(*args, **kwargs)
        self._unacknowledged.add(fut)
        fut.add_done_callback(self._unacknowledged.discard)
        return fut

    async def written(self) -> None:
        """Wait until the broker acknowledged every changelog record sent so far (raises what
        a refused one raised)."""
        while self._unacknowledged:
            await asyncio.gather(*list(self._unacknowledged))


async def changelog_written(*tables: Mapping[bytes, bytes]) -> None:
    """Wait until what was written to ``tables`` is acknowledged by the broker: each table's
    ``written()`` (a :class:`TrackedTable`'s, or a stand-in's in tests without Kafka); a plain
    mapping has nothing to wait for."""
    for table in tables:
        written = getattr(table, "written", None)
        if written is not None:
            await written()
