"""Where the budget ledger lives, seen from a partition: the strategy of its worker.

A :class:`~streams.job.partitions.accumulator.PartitionAccumulator` does what every partition does
(admission, slotting, one report per user and slot, watermarks, checkpoints) and leaves to its
placement what depends on where the users' budget ledger lives:

- :class:`CoordinatorLedger` (fixed requirements): users with the same ``(w, E)`` share a
  ledger row, so the coordinator keeps the ledger per requirement level. The partition counts
  reports per (slot, level, cell) and, whenever slots close, sends a
  :class:`~streams.job.slot_protocol.Partial` with the counts and its registered users per level.
  Its messages are a function of the records, so it sends them before it checkpoints.
- :class:`PartitionLedger` (dynamic requirements, DPBD, DPBA): a user's ledger depends on its
  own declarations, so the partition keeps the ledger of its users and each slot is a
  conversation with the coordinator (docs/design.md, the slot protocol): the partition sends a
  :class:`~streams.job.slot_protocol.Closure` when slots close, the coordinator announces the first
  slot, the partition plans each closed slot (:class:`~streams.job.slot_protocol.Plan`: counts per
  budget level ``"<c1>:<c2>"``, users per level, nullified, projected), the coordinator decides
  and the partition commits the decision and plans the next slot. It lives in
  :mod:`streams.job.partitions.ledger`.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

import numpy as np

from streams.job.partitions.registries import Registry
from streams.job.partitions.registry_columns import UserRegistry
from streams.job.partitions.slotting import Slotter
from streams.job.slot_protocol import Closure, Control, Declared, Partial, Plan


class PartitionState(Protocol):
    """What a placement reads of the partition accumulator it works for
    (:class:`streams.job.partitions.accumulator.PartitionAccumulator`)."""

    partition: int
    d: int
    accepted: Counter[int]
    rejected: int
    closed_through: int | None
    slotter: Slotter


class Placement:
    """What a partition's worker leaves to the placement of the ledger (module doc). The
    accumulator binds itself to its placement when it is made."""

    registry: UserRegistry
    #: the messages are kept in the checkpoint and sent again after a restart: checkpoint
    #: first, then send (otherwise re-reading the records reproduces them: send, checkpoint)
    checkpoint_first = False
    #: the partition reads the coordinator's control messages (start and decisions)
    converses = False

    def bind(self, acc: PartitionState) -> None:
        """Work for ``acc``, whose state (slotting, counters) this strategy reads."""
        self.acc = acc

    def count(self, slots: np.ndarray, users: np.ndarray, levels: np.ndarray,
              cells: np.ndarray) -> None:
        """Take accepted reports: per report its slot, user index, level index and cell."""
        raise NotImplementedError

    def uncount(self, slots: np.ndarray, users: np.ndarray, levels: np.ndarray,
                cells: np.ndarray) -> None:
        """Take back reports counted before, which later ones replace
        (:mod:`streams.job.partitions.ordering`); a placement that keeps one cell per user and slot
        overwrites it at :meth:`count` and has nothing to do here."""

    def closure(self, last: int, closed_at_ms: int) -> Partial | Closure:
        """The message telling the coordinator that every slot up to ``last`` closed, at
        ``closed_at_ms`` on the worker's clock (before the accumulator resets its rejected
        count)."""
        raise NotImplementedError

    def due(self) -> list[Plan | Declared]:
        """Messages due now besides a closure (a plan, with its declaration records)."""
        return []

    def on_control(self, doc: Control) -> list[Plan | Declared]:
        """Act on one control message of the coordinator; returns the messages it implies."""
        return []

    def resend(self) -> list[Closure | Plan | Declared]:
        """The messages to send again after a restart."""
        return []

    def resume(self, start: Control | None, decisions: dict[int, bool]) -> list:
        """What a resumed partition must send: its last messages again and what the control
        messages read so far (``start``, ``decisions``: published per slot) imply."""
        return []

    def state(self) -> dict:
        """The placement's part of the accumulator's checkpoint document."""
        raise NotImplementedError

    def load(self, doc: dict) -> None:
        """Reinstate :meth:`state` from the checkpoint document (the accumulator's part is
        loaded already)."""
        raise NotImplementedError

    def pack(self, doc: bytes) -> bytes:
        """The checkpoint of the compressed document."""
        return doc

    def unpack(self, data: bytes) -> bytes:
        """The compressed document of a :meth:`pack` checkpoint."""
        return data


class CoordinatorLedger(Placement):
    """The ledger lives on the coordinator: count reports per (slot, level, cell) and send
    them, with the users per level, in a :class:`Partial` when slots close."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        self.counts: dict[int, dict[str, np.ndarray]] = {}

    def count(self, slots: np.ndarray, users: np.ndarray, levels: np.ndarray,
              cells: np.ndarray) -> None:
        names = self.registry.level_names
        d = self.acc.d
        for slot in np.unique(slots).tolist():
            mask = slots == slot
            per = np.bincount(levels[mask] * d + cells[mask], minlength=len(names) * d)
            per = per.reshape(len(names), d)
            bucket = self.counts.setdefault(slot, {})
            for k in np.flatnonzero(per.any(axis=1)).tolist():
                name = names[k]
                prev = bucket.get(name)
                bucket[name] = per[k].copy() if prev is None else prev + per[k]

    def uncount(self, slots: np.ndarray, users: np.ndarray, levels: np.ndarray,
                cells: np.ndarray) -> None:
        names = self.registry.level_names
        d = self.acc.d
        for slot in np.unique(slots).tolist():
            mask = slots == slot
            per = np.bincount(levels[mask] * d + cells[mask], minlength=len(names) * d)
            bucket = self.counts[slot]
            for k in np.flatnonzero(per.reshape(len(names), d).any(axis=1)).tolist():
                bucket[names[k]] = bucket[names[k]] - per[k * d:(k + 1) * d]

    def closure(self, last: int, closed_at_ms: int) -> Partial:
        acc = self.acc
        slots = sorted(s for s in self.counts if s <= last)
        message: Partial = {
            "partition": acc.partition,
            "closed_through": last,
            "closed_at_ms": closed_at_ms,
            "slots": {
                str(s): {
                    "counts": {k: v.tolist() for k, v in sorted(self.counts[s].items())},
                    "accepted": acc.accepted[s],
                }
                for s in slots
            },
            "users": self.registry.users_per_level(),
            "rejected": acc.rejected,
        }
        for s in slots:
            del self.counts[s]
            del acc.accepted[s]
        return message

    def state(self) -> dict:
        return {"counts": {str(s): {k: v.tolist() for k, v in c.items()}
                           for s, c in self.counts.items()}}

    def load(self, doc: dict) -> None:
        self.counts = {int(s): {k: np.asarray(v, dtype=np.int64) for k, v in c.items()}
                       for s, c in doc["counts"].items()}
