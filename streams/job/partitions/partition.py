"""One partition of ``reports`` (and of ``requirements``, assigned alike) as a worker holds it.

A :class:`Partition` is built when its partition is assigned, once the tables are recovered
(:meth:`Partition.restored`: the registry from the ``users`` table, the accumulator from its
checkpoint), and dropped when another worker takes the partition over. It holds what the
partition keeps between batches: its registry, its accumulator, the lock its handlers take
turns on, the offset its last checkpoint covers and whether it has resumed. Each batch or
control message goes through one method (:meth:`Partition.take_reports`, :meth:`Partition.hear`,
:meth:`Partition.resume`), which admits, slots and counts it and answers what the worker must
send and store (:class:`Said`): the messages to the coordinator, the dead letters and the
checkpoint. It sends nothing and needs no Kafka: the worker's runner
(:mod:`streams.job.worker.partition_runner`) sends what it says and stores its checkpoint.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from streams.job.batch_handling import RawRecord
from streams.job.partitions.accumulator import DeadLetter, PartitionAccumulator
from streams.job.partitions.checkpoint_store import read_chunked
from streams.job.partitions.key_hashing import key_partitions
from streams.job.partitions.registry_columns import UserRegistry
from streams.job.partitions.registry_store import (
    append_segment,
    key_partition_of,
    read_blocks,
    wants_snapshot,
    write_snapshot,
)
from streams.job.slot_protocol import Control

log = logging.getLogger("pwevent.job")


@dataclass
class Said:
    """What a partition answers a batch or a control message: what to send, in order, and the
    checkpoint to store (``None``: nothing to store), before the messages when
    ``checkpoint_first`` (a placement that sends its messages again from the checkpoint), after
    them otherwise. ``opened`` and ``counted`` are the open slots' accepted reports before and
    after a batch, ``closed`` the batch's own messages (what the metrics count from), and
    ``keyed`` whether the batch held a record with a key (activity, not only control records)."""

    messages: list[dict] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    checkpoint: bytes | None = None
    checkpoint_first: bool = False
    offset: int = 0
    opened: int = 0
    counted: int = 0
    closed: list[dict] = field(default_factory=list)
    superseded: int = 0
    keyed: bool = False


def load_registry(registry: UserRegistry, users: Mapping[bytes, bytes], partition: int,
                  partitions: int) -> bool:
    """Rebuild ``registry`` from the ``users`` table: from its bulk form
    (:mod:`streams.job.partitions.registry_store`; returns ``True``), or, for a partition stored
    before that form, from its users' entries (``False``: written as a snapshot at its next
    registration)."""
    blocks = read_blocks(users, partition)
    if blocks is not None:
        registry.load_blocks(blocks)
        return True
    entries = [(key, value) for key, value in list(users.items())
               if key_partition_of(key) is None and value]
    mine = key_partitions([key for key, _ in entries], partitions) == partition
    registry.load([(key.decode(), value)
                   for (key, value), own in zip(entries, mine.tolist(), strict=True) if own])
    return False


class Partition:
    """One partition's state on a worker (module doc): ``number``, its registry and
    accumulator, ``lock`` (shared by every generation of the partition on this worker),
    ``acked`` (the offset its last checkpoint covers) and ``resumed``."""

    def __init__(self, number: int, registry: UserRegistry, accumulator: PartitionAccumulator,
                 users: MutableMapping[bytes, bytes], lock: asyncio.Lock,
                 stored: bool = False) -> None:
        self.number, self.registry, self.accumulator = number, registry, accumulator
        self.users, self.lock, self.stored = users, lock, stored
        self.acked = accumulator.next_offset
        #: it has sent what it owes the coordinator since it was built (:meth:`resume`; the
        #: runner sets it, and ``acked``, once what the partition said is sent and stored)
        self.resumed = False

    @classmethod
    def restored(cls, number: int, registry: UserRegistry, accumulator: PartitionAccumulator,
                 users: MutableMapping[bytes, bytes], checkpoints: Mapping[bytes, bytes],
                 lock: asyncio.Lock, partitions: int) -> Partition:
        """The partition as the tables hold it: ``registry`` (empty) rebuilt from ``users``,
        then ``accumulator`` (over it) from its last checkpoint, when there is one."""
        stored = load_registry(registry, users, number, partitions)
        saved = read_chunked(checkpoints, number)
        if saved:
            accumulator.restore(saved)
            log.info("partition %d resumes at offset %d (closed through slot %s)",
                     number, accumulator.next_offset, accumulator.closed_through)
        return cls(number, registry, accumulator, users, lock, stored)

    @property
    def next_offset(self) -> int:
        """The offset of ``reports`` the partition takes next."""
        return self.accumulator.next_offset

    # -- requirements ----------------------------------------------------------------------

    def register(self, records: Sequence[RawRecord], topic: str) -> list[DeadLetter]:
        """Apply a batch of requirement records (inside a handler of the partition: what it
        changed is written to the ``users`` table); returns the rejected ones."""
        outcome = self.registry.apply_batch([r[0] for r in records], [r[1] for r in records])
        dead = [DeadLetter(topic, records[i][2], records[i][3], records[i][0], records[i][1],
                           reason, detail)
                for i, (reason, detail) in sorted(outcome.rejected.items())]
        if outcome.touched.size or not self.stored:
            self.store_registry(outcome.touched)
        return dead

    def store_registry(self, touched: np.ndarray) -> None:
        """Write what a batch changed of the registry to the ``users`` table: a segment of the
        users ``touched``, or the whole registry when it has no snapshot yet or its segments
        outgrew it."""
        reg = self.registry
        if not self.stored:
            write_snapshot(self.users, self.number, reg.dump())
            self.stored = True
            return
        manifest = append_segment(self.users, self.number, reg.dump(touched))
        if wants_snapshot(manifest):
            write_snapshot(self.users, self.number, reg.dump())

    # -- reports and control messages ------------------------------------------------------

    def take_reports(self, records: Sequence[RawRecord], topic: str, start: Control | None,
             decisions: dict[int, bool]) -> Said:
        """A batch of reports in offset order: admitted, slotted and counted; says, after what
        the partition owes since it was built (:meth:`resume`), the messages of the slots that
        closed, the dead letters, and a checkpoint when it said something or recorded the
        stream's start."""
        acc = self.accumulator
        said = Said(messages=self.owed(start, decisions), opened=acc.accepted.total(),
                    superseded=-acc.superseded)
        said.closed, said.dead = acc.process(records, topic)
        said.counted, said.superseded = acc.accepted.total(), said.superseded + acc.superseded
        said.messages += said.closed
        said.keyed = any(r[0] is not None for r in records)
        said.checkpoint_first = self.accumulator.placement.checkpoint_first
        if self.accumulator.start_unsaved or said.messages:
            said.checkpoint, said.offset = self.accumulator.snapshot(), self.next_offset
        return said

    def hear(self, doc: Control, start: Control | None, decisions: dict[int, bool]) -> Said:
        """One control message of the coordinator (a start or a decision), after what the
        partition owes since it was built."""
        said = Said(messages=self.owed(start, decisions))
        said.messages += self.accumulator.on_control(doc)
        return self.checkpointed(said, False)

    def resume(self, start: Control | None, decisions: dict[int, bool]) -> Said:
        """What the partition owes since it was built: its last messages again and what the
        control messages read so far (``start``, ``decisions``: published per slot) imply."""
        return self.checkpointed(Said(messages=self.owed(start, decisions)), False)

    def owed(self, start: Control | None, decisions: dict[int, bool]) -> list[dict]:
        """Until it has resumed, what the partition must send again (empty afterwards). A
        resume interrupted before its messages went out is done again: it sends them again
        (the coordinator drops repeats)."""
        return [] if self.resumed else self.accumulator.resume(start, decisions)

    def checkpointed(self, said: Said, due: bool) -> Said:
        """``said`` with the partition's checkpoint when it says something, or ``due``."""
        acc = self.accumulator
        said.checkpoint_first = acc.placement.checkpoint_first
        if due or said.messages:
            said.checkpoint, said.offset = acc.snapshot(), acc.next_offset
        return said
