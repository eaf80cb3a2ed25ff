"""The placement of the budget ledger in the partitions (dynamic requirements, DPBD, DPBA).

:class:`PartitionLedger` keeps the ledger of a partition's users and plans each closed slot
with the coordinator (:mod:`streams.job.partitions.placement`, docs/design.md, the slot protocol).

A declaration takes effect at the first slot the partition plans after accepting it. The users
counted at a slot (and so its levels and counts) are those registered when it is planned: a
removal withdraws the user's reports of slots not yet planned. A removal suspends the user's
ledger (:meth:`DynamicLedger.suspend`: charged nothing, nullifying nothing, its used windows
kept) from the first slot after every slot that can hold one of its accepted reports: the slot
of the largest event time accepted so far, which is the watermark plus the allowed lateness when
the partition first plans after the removal. State is checkpointed *before* the messages it
implies are sent, and those messages are kept in the checkpoint and sent again after a restart
(the coordinator drops repeats), so a plan that reached the coordinator is never replaced by a
different one. A snapshot holds the ledger as it was at its last compaction
(:func:`mechanisms.ledgers.dynamic_snapshot.to_bytes`, redone every ``JOURNAL_SLOTS`` slots)
and a journal of what happened to it since (declarations and decisions): restoring replays the
journal, which is deterministic, so a checkpoint after every slot costs a small document, not
the whole ledger.
"""

from __future__ import annotations

import base64
import logging

import numpy as np

from mechanisms.ledgers import dynamic_snapshot
from mechanisms.ledgers.dynamic import DynamicLedger
from mechanisms.run.dynamic import dynamic_ledger
from streams.job.config import JobConfig
from streams.job.partitions.placement import Placement
from streams.job.partitions.registries import SUSPENDED, Declaration, DynamicRegistry
from streams.job.slot_protocol import (
    DECLARED_CHUNK,
    GRID_BITS,
    Closure,
    Control,
    Declared,
    Plan,
    level_name,
)

log = logging.getLogger("pwevent.partition")
JOURNAL_SLOTS = 64  # slots between two full snapshots of a partition's ledger
SNAPSHOT_MAGIC = b"PWDL"


class PartitionLedger(Placement):
    """The ledger lives in the partition: keep its users' ledger and plan each closed slot
    with the coordinator (module doc)."""

    checkpoint_first = True
    converses = True

    def __init__(self, config: JobConfig, registry: DynamicRegistry) -> None:
        self.config, self.registry = config, registry
        self.ledger: DynamicLedger = dynamic_ledger(config.mechanism, config.max_window,
                                                    GRID_BITS)
        self.base: int | None = None  # the stream's first slot: the ledger's slot 1
        self.awaiting: int | None = None  # planned slot whose decision is due
        self.applied: list[Declaration] = []  # per ledger user, the declaration in force
        self.cells: dict[int, np.ndarray] = {}  # slot -> cell per user index (-1: none)
        self.outbox: dict[str, dict] = {}  # the last closure and the plan awaiting a decision
        # the ledger at the last compaction
        self.ledger_base = dynamic_snapshot.to_bytes(self.ledger)
        # since then: ["declare", idx, wB, EB, wF, EF], ["suspend", idx], [published]
        self.journal: list[list] = []
        self.suspend_at: dict[int, int] = {}  # removed user -> slot its suspension waits for

    @property
    def next_slot(self) -> int | None:
        """The slot the ledger plans next (``None`` before the stream's start is known)."""
        return None if self.base is None else self.base + self.ledger.slot - 1

    # -- reports and closures --------------------------------------------------------------

    def count(self, slots: np.ndarray, users: np.ndarray, levels: np.ndarray,
              cells: np.ndarray) -> None:
        size = len(self.registry.users)
        for slot in np.unique(slots).tolist():
            mask = slots == slot
            arr = self.cells.get(slot)
            if arr is None or arr.shape[0] < size:
                grown = np.full(max(size, 1), -1, dtype=np.int32)
                if arr is not None:
                    grown[: arr.shape[0]] = arr
                arr = self.cells[slot] = grown
            arr[users[mask]] = cells[mask]

    def closure(self, last: int, closed_at_ms: int) -> Closure:
        acc = self.acc
        msg: Closure = {"partition": acc.partition, "closed_through": last,
                        "closed_at_ms": closed_at_ms, "first": acc.slotter.first_slot,
                        "rejected": acc.rejected}
        self.outbox["closed"] = dict(msg)
        return msg

    def due(self) -> list[Plan | Declared]:
        return self._plans()

    # -- the conversation ------------------------------------------------------------------

    def on_start(self, slot: int) -> list[Plan | Declared]:
        """The coordinator announced the stream's first slot: start the ledger there."""
        if self.base is not None:
            return []
        self.base = int(slot)
        early = min(self.cells, default=self.base)
        if early < self.base:
            # cannot happen: the start is the earliest slot any partition has a report in
            raise RuntimeError(f"partition {self.acc.partition} holds reports of slot {early}, "
                               f"before the stream's start {self.base}")
        return self._plans()

    def on_decision(self, slot: int, published: bool) -> list[Plan | Declared]:
        """Commit the coordinator's decision for the planned slot; plan the next one."""
        if self.base is None or self.awaiting != slot:
            return []  # a decision this partition committed already, or one of another run
        self.ledger.commit_columns(bool(published))
        self.journal.append([bool(published)])
        self.awaiting = None
        self.outbox.pop("plan", None)
        self.outbox.pop("declared", None)
        return self._plans()

    def on_control(self, doc: Control) -> list[Plan | Declared]:
        if "start" in doc:
            return self.on_start(int(doc["start"]))
        return self.on_decision(int(doc["slot"]), bool(doc["published"]))

    def resend(self) -> list:
        out = [self.outbox["closed"]] if "closed" in self.outbox else []
        if "plan" in self.outbox:
            out += [*self.outbox.get("declared", []), self.outbox["plan"]]
        return out

    def resume(self, start: Control | None, decisions: dict[int, bool]) -> list:
        out = self.resend()
        if start is not None:
            out += self.on_control(start)
        nxt = self.next_slot
        for slot in sorted(s for s in decisions if nxt is not None and s >= nxt):
            out += self.on_decision(slot, decisions[slot])
        return out

    def _apply_pending(self) -> dict[int, Declaration]:
        """Apply the declarations accepted since the last plan; returns them by user index."""
        reg = self.registry
        pending = {i: d for i, d in reg.pending.items()
                   if i >= len(self.applied) or self.applied[i] != d}
        reg.pending = {}
        if not pending:
            return {}
        idx = np.array(sorted(pending), dtype=np.int64)
        decl = [pending[i] for i in idx.tolist()]
        wB, EB, wF, EF = (np.array(col) for col in zip(*decl, strict=True))
        self.ledger.declare(idx, wB.astype(np.int64), EB.astype(np.float64),
                            wF.astype(np.int64), EF.astype(np.float64))
        self.journal.append(["declare", idx.tolist(), wB.tolist(), EB.tolist(), wF.tolist(),
                             EF.tolist()])
        self.applied.extend([decl[0]] * (int(idx.max()) + 1 - len(self.applied)))
        for i, d in zip(idx.tolist(), decl, strict=True):
            self.applied[i] = d
        return pending

    def _suspend_removed(self, slot: int) -> list[int]:
        """Suspend the users removed since the last plan from ``slot``, the slot being planned:
        from it on their reports are withdrawn (they count nowhere), so their ledgers are charged
        nothing either. The slot depends on the order of the removal and the plans alone, never
        on how far the partition has read ahead. A user declaring again is not suspended (its
        declaration resumes a suspended ledger); a suspension a checkpoint scheduled for a later
        slot waits for it."""
        reg = self.registry
        if reg.removed:
            for i in reg.removed:
                self.suspend_at[i] = max(slot, self.suspend_at.get(i, slot))
            reg.removed = set()
        if not self.suspend_at:
            return []
        active = reg.active_mask(self.ledger.n)
        due = []
        for i, at in list(self.suspend_at.items()):
            if i < active.shape[0] and active[i]:
                del self.suspend_at[i]
            elif at <= slot and i < self.ledger.n:
                due.append(i)
                del self.suspend_at[i]
        if due:
            idx = np.array(sorted(due), dtype=np.int64)
            self.ledger.suspend(idx)
            self.journal.append(["suspend", idx.tolist()])
            for i in idx.tolist():
                self.applied[i] = SUSPENDED
        return sorted(due)

    def _plans(self) -> list[dict]:
        msg = self._plan()
        return [] if msg is None else [*self.outbox["declared"], msg]

    def _plan(self) -> dict | None:
        """Plan the ledger's next slot when it is closed and no decision is due."""
        s = self.next_slot
        if s is None or self.awaiting is not None or self.acc.closed_through is None:
            return None
        if s > self.acc.closed_through:
            return None
        declared = self._apply_pending()
        suspended = self._suspend_removed(s)
        notes = self._declaration_records(s, declared, suspended)
        ledger = self.ledger
        n = ledger.n
        plan = ledger.plan_columns()
        group = ledger.group[:n]
        codes = (plan.stored1[group].astype(np.int64) << 16) | plan.stored2[group]
        row = np.full(n, -1, dtype=np.int64)
        cells = self.cells.pop(s, None)
        if cells is not None:
            m = min(n, cells.shape[0])
            row[:m] = cells[:m]
        # the users counted at the slot, their levels and the reports counted are those of the
        # users registered when the slot is planned: registrations alone decide them, never
        # whether a user reported. A removal withdraws the user's reports of slots not yet
        # planned (its ledger is still charged for them until its suspension).
        active = self.registry.active_mask(n)
        pairs, level = np.unique(codes[active], return_inverse=True)
        sizes = np.bincount(level, minlength=pairs.size)
        projected = np.bincount(level, weights=plan.projected[group][active],
                                minlength=pairs.size).astype(np.int64)
        d = self.acc.d
        mine = row[active]
        rep = mine >= 0
        counts = np.bincount(level[rep] * d + mine[rep], minlength=pairs.size * d)
        counts = counts.reshape(pairs.size, d)
        names = [level_name(int(p) >> 16, int(p) & 0xFFFF) for p in pairs.tolist()]
        msg = {
            "partition": self.acc.partition,
            "plan": s,
            "counts": {k: counts[j].tolist() for j, k in enumerate(names) if counts[j].any()},
            "users": {k: int(sizes[j]) for j, k in enumerate(names)},
            "accepted": int(np.count_nonzero(rep)),
            "nullified": bool(plan.nullified),
            "projected": {k: int(projected[j]) for j, k in enumerate(names) if projected[j]},
        }
        withdrawn = int(self.acc.accepted.pop(s, 0)) - msg["accepted"]
        if withdrawn:
            log.info("partition %d, slot %d: %d reports withdrawn with their users' removal",
                     self.acc.partition, s, withdrawn)
        self.awaiting = s
        self.outbox["plan"] = msg
        self.outbox["declared"] = notes
        return msg

    def _declaration_records(self, slot: int, declared: dict[int, Declaration],
                             suspended: list[int]) -> list[dict]:
        """The public record of which users' declarations (and suspensions) took effect at
        ``slot``, in chunks of ``DECLARED_CHUNK`` users, for auditors (decisions topic)."""
        users = self.registry.users
        entries = [(users[i], list(d)) for i, d in sorted(declared.items())]
        entries += [(users[i], None) for i in suspended]
        chunks = [entries[k:k + DECLARED_CHUNK]
                  for k in range(0, len(entries), DECLARED_CHUNK)]
        return [{"stream": self.config.stream, "declared": slot, "partition": self.acc.partition,
                 "chunk": k, "chunks": len(chunks), "users": dict(chunk)}
                for k, chunk in enumerate(chunks)]

    # -- checkpoints -----------------------------------------------------------------------

    def state(self) -> dict:
        commits = sum(1 for entry in self.journal if len(entry) == 1)
        if commits >= JOURNAL_SLOTS:  # compact: the ledger as it is now becomes the base
            self.ledger_base = dynamic_snapshot.to_bytes(self.ledger)
            self.journal = []
        return {"dynamic": {
            "journal": self.journal,
            "base": self.base,
            "awaiting": self.awaiting,
            "applied": [list(d) for d in self.applied],
            "cells": {str(s): _pack_cells(c) for s, c in self.cells.items()},
            "outbox": self.outbox,
            "suspend_at": {str(i): at for i, at in self.suspend_at.items()},
        }}

    def pack(self, doc: bytes) -> bytes:
        """The magic, the document's length, the document, then the ledger's base snapshot."""
        return SNAPSHOT_MAGIC + len(doc).to_bytes(8, "big") + doc + self.ledger_base

    def unpack(self, data: bytes) -> bytes:
        if data[:4] != SNAPSHOT_MAGIC:
            raise ValueError("not a checkpoint of a dynamic mechanism's partition")
        size = int.from_bytes(data[4:12], "big")
        self.ledger_base = data[12 + size:]
        return data[12:12 + size]

    def load(self, doc: dict) -> None:
        dyn = doc["dynamic"]
        self.ledger = dynamic_snapshot.from_bytes(self.ledger_base)
        self.journal = dyn["journal"]
        for entry in self.journal:  # replay: the ledger is a function of these
            if len(entry) == 1:
                self.ledger.commit_columns(bool(entry[0]))
            elif entry[0] == "suspend":
                self.ledger.suspend(np.array(entry[1], dtype=np.int64))
            else:
                _, idx, wB, EB, wF, EF = entry
                self.ledger.declare(np.array(idx, dtype=np.int64), np.array(wB, dtype=np.int64),
                                    np.array(EB, dtype=np.float64),
                                    np.array(wF, dtype=np.int64), np.array(EF, dtype=np.float64))
        self.base = dyn["base"]
        self.awaiting = dyn["awaiting"]
        self.applied = [(int(a), float(b), int(c), float(e)) for a, b, c, e in dyn["applied"]]
        self.cells = {int(s): _unpack_cells(c) for s, c in dyn["cells"].items()}
        self.outbox = dict(dyn["outbox"])
        self.suspend_at = {int(i): int(at) for i, at in dyn.get("suspend_at", {}).items()}
        self.registry.sync_pending(self.applied)
        # users removed after this checkpoint was taken: scheduled at the next plan
        inactive = np.flatnonzero(~self.registry.active_mask(len(self.registry.users)))
        self.registry.removed = {
            i for i in inactive.tolist()
            if (i >= len(self.applied) or self.applied[i] != SUSPENDED)
            and i not in self.suspend_at
        }


def _pack_cells(cells: np.ndarray) -> list:
    users = np.flatnonzero(cells >= 0)
    return [int(cells.shape[0]), base64.b64encode(users.astype(np.int32).tobytes()).decode(),
            base64.b64encode(cells[users].astype(np.int32).tobytes()).decode()]


def _unpack_cells(packed: list) -> np.ndarray:
    size, users, values = packed
    out = np.full(int(size), -1, dtype=np.int32)
    idx = np.frombuffer(base64.b64decode(users), dtype=np.int32)
    out[idx] = np.frombuffer(base64.b64decode(values), dtype=np.int32)
    return out
