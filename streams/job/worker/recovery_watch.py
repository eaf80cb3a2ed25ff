"""Watching the recovery of a worker's tables: :class:`RecoveryWatch` reads a changelog partition
again when its recovery stalls because records fetched during a rebalance were dropped."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import faust

log = logging.getLogger("pwevent.job")

RECOVERY_STALL_S = 5.0  # a table recovery that applied nothing for this long is looked at


class RecoveryWatch:
    """Checks, on a timer of the app, that each table recovery still receives its records."""

    def __init__(self, app: faust.App) -> None:
        self.app = app
        self.stalled: dict[Any, tuple[int, float]] = {}

    async def check(self) -> None:
        """Resume a table recovery that no longer receives its changelog's records.

        A batch fetched while a rebalance stops the flow is dropped, and its partitions are
        rewound to their committed offsets (Faust's rule, which :mod:`streams.job.worker.ingest`
        keeps). A changelog partition has no committed offset, so when such a batch holds the
        records of a changelog partition the worker has just been given, they are lost with it: the
        consumer stands past them and the table's recovery waits for them for ever (measured on
        the embedded broker in about 1 of 15 hand-overs after a worker left the group). When a
        partition's recovery has applied nothing for ``RECOVERY_STALL_S`` seconds while the
        consumer stands past what it applied, it is read again from there; records applied
        twice leave the table as it was, since they come again in order."""
        recovery = self.app.tables.recovery
        if not recovery.in_recovery:
            self.stalled.clear()
            return
        now = time.monotonic()
        for tp in list(recovery.active_tps):
            applied = recovery.active_offsets.get(tp)
            highwater = recovery.active_highwaters.get(tp)
            if applied is None or highwater is None or applied >= highwater:
                self.stalled.pop(tp, None)
                continue
            seen = self.stalled.get(tp)
            if seen is None or seen[0] != applied:
                self.stalled[tp] = (applied, now)
                continue
            if now - seen[1] < RECOVERY_STALL_S:
                continue
            try:
                position = await asyncio.wait_for(self.app.consumer.position(tp), 2.0)
                if position is None or position <= applied + 1:
                    continue
                log.warning("recovery of %s[%d] stalled at offset %d (highwater %d) with the "
                            "consumer at %d: records fetched during the rebalance were dropped; "
                            "reading them again", tp.topic, tp.partition, applied, highwater,
                            position)
                await self.app.consumer.seek(tp, applied + 1)
            except Exception as exc:  # noqa: BLE001 - a rebalance may take the partition away
                log.info("recovery of %s[%d] not resumed: %r", tp.topic, tp.partition, exc)
            self.stalled[tp] = (applied, now)

