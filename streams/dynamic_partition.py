"""One partition's side of the job under a dynamic mechanism (DPBD, DPBA).

A dynamic ledger depends on each user's own declarations, so it cannot be kept per requirement
level at the coordinator as the fixed mechanisms are: every partition keeps the ledger of its
users (docs/design.md, data flow) and the slots run as a conversation with the coordinator:

1. a partition closing slots tells the coordinator how far it closed (``closed_through``) and its
   first slot with a report (``first``);
2. once every partition has spoken, the coordinator announces the stream's first slot
   (``{"stream", "start"}`` on the decisions topic): every ledger starts there, so that every
   registered user is charged from the same slot on (decision 2);
3. a partition whose ledger is at a closed slot plans it: it applies the declarations accepted
   since its last plan, and sends the slot's report counts per budget level ``"<c1>:<c2>"``
   (grid codes of eps1 and eps2), the users per level, whether its users nullify the slot
   (DPBA) and how many backward budgets were projected;
4. with every partition's plan in, the coordinator releases the slot and records its decision;
   each partition commits the decision to its ledger and plans its next closed slot.

A declaration takes effect at the first slot the partition plans after accepting it. The users
counted at a slot (and so its levels and counts) are those registered when it is planned: a
removal withdraws the user's reports of slots not yet planned. A removal (a tombstone) suspends
the user's ledger (:meth:`DynamicLedger.suspend`: charged nothing, nullifying nothing, its used
windows kept) from the first slot after every slot that can hold one of its accepted reports:
the slot of the largest event time accepted so far, which is the watermark plus the allowed
lateness when the partition first plans after the removal. State is
checkpointed *before* the messages it implies are sent, and those messages are kept in the
checkpoint and sent again after a restart (the coordinator drops repeats), so a plan that
reached the coordinator is never replaced by a different one.

A snapshot holds the ledger as it was at its last compaction (:meth:`DynamicLedger.to_bytes`,
redone every ``JOURNAL_SLOTS`` slots) and a journal of what happened to it since (declarations
and decisions): restoring replays the journal, which is deterministic, so a checkpoint after
every slot costs a small document, not the whole ledger.
"""

from __future__ import annotations

import base64
import logging
import zlib

import numpy as np
import orjson

from mechanisms.dynamic import dynamic_ledger
from mechanisms.ledgers.dynamic import DynamicLedger
from streams.admission import admit_requirement
from streams.config import JobConfig
from streams.partition import PartitionAccumulator
from streams.records import (
    DynamicRequirement,
    Reason,
    RecordError,
    RequirementRemoval,
)

log = logging.getLogger("pwevent.partition")
GRID_BITS = 3  # budgets rounded down to 4 significant bits, as in DynamicMechanism
JOURNAL_SLOTS = 64  # slots between two full snapshots of a partition's ledger
DECLARED_CHUNK = 5_000  # users per declaration record: far below Kafka's record size limit
SNAPSHOT_MAGIC = b"PWDL"
Declaration = tuple[int, float, int, float]  # wB, EB, wF, EF
SUSPENDED: Declaration = (0, 0.0, 0, 0.0)  # in ``applied``: the ledger suspended the user


def declaration_key(note: dict) -> str:
    """The decisions-topic key of a declaration record: ``<stream>/declared/<slot>/<p>/<k>``."""
    return f"{note['stream']}/declared/{note['declared']}/{note['partition']}/{note['chunk']}"


def level_name(code1: int, code2: int) -> str:
    """The name of the budget level with grid codes ``code1`` (eps1) and ``code2`` (eps2)."""
    return f"{code1}:{code2}"


def parse_level_name(name: str) -> tuple[int, int]:
    """Inverse of :func:`level_name`; ``ValueError`` when malformed."""
    a, sep, b = name.partition(":")
    if not sep:
        raise ValueError(f"budget level {name!r} is not <code1>:<code2>")
    return int(a), int(b)


class DynamicRegistry:
    """Registered users of one partition and their latest dynamic declarations.

    A user's index is its order of first acceptance (and its index in the partition's ledger).
    A new or changed declaration waits in ``pending`` until the partition plans its next slot.
    A removal (tombstone) unregisters the user: its reports are rejected, it leaves the
    per-level user counts, and it waits in ``removed`` until the partition schedules the
    suspension of its ledger, which keeps its history, so that a later declaration cannot
    overspend windows the user already used.
    """

    def __init__(self, mechanism: str, max_window: int, partition: int = 0,
                 config: JobConfig | None = None) -> None:
        self.mechanism, self.max_window = mechanism, int(max_window)
        self.partition = partition
        self.config = config or JobConfig(mechanism=mechanism, max_window=max_window)
        self.index_of: dict[str, int] = {}
        self.users: list[str] = []
        self.latest: list[Declaration] = []
        self._active = np.zeros(0, dtype=bool)
        self.pending: dict[int, Declaration] = {}
        self.removed: set[int] = set()

    @property
    def level_of_index(self) -> np.ndarray:
        """Per user index: 0 while registered, -1 after a removal."""
        return np.where(self._active[: len(self.users)], 0, -1)

    def active_mask(self, n: int) -> np.ndarray:
        """Whether each of the first ``n`` users is registered now."""
        out = np.zeros(n, dtype=bool)
        m = min(n, len(self.users))
        out[:m] = self._active[:m]
        return out

    def _set_active(self, i: int, active: bool) -> None:
        if i >= self._active.shape[0]:
            grown = np.zeros(max(16, 2 * self._active.shape[0], i + 1), dtype=bool)
            grown[: self._active.shape[0]] = self._active
            self._active = grown
        self._active[i] = active

    def apply(self, key: bytes | None, value: bytes | None) -> tuple[str | None, str, str]:
        """One requirements record: (user, "", "") if accepted, else (user, reason, detail)."""
        try:
            req = admit_requirement(key, value, self.partition, self.config)
        except RecordError as exc:
            return None, exc.reason.value, exc.detail
        i = self.index_of.get(req.user)
        if isinstance(req, RequirementRemoval):
            if i is not None:
                self._set_active(i, False)
                self.removed.add(i)
            return req.user, "", ""
        if not isinstance(req, DynamicRequirement):  # a fixed requirement
            return (req.user, Reason.INVALID_REQUIREMENT.value,
                    f"this job runs {self.mechanism}, which takes dynamic requirements; "
                    "declare {user, wB, EB, wF, EF}")
        decl = (req.wB, req.EB, req.wF, req.EF)
        if i is None:
            i = self.index_of[req.user] = len(self.users)
            self.users.append(req.user)
            self.latest.append(decl)
        self.latest[i] = decl
        self.pending[i] = decl
        self._set_active(i, True)
        return req.user, "", ""

    def export(self, user: str) -> bytes:
        """What the ``users`` table keeps of a user: index, latest declaration, whether active."""
        i = self.index_of[user]
        wB, EB, wF, EF = self.latest[i]
        return f"{i}|{wB}|{EB!r}|{wF}|{EF!r}|{int(self._active[i])}".encode()

    def load(self, entries: list[tuple[str, bytes]]) -> None:
        """Rebuild from exported ``(user, entry)`` pairs; every declaration is pending until
        :meth:`sync_pending` compares them with what the ledger applied."""
        parsed = []
        for user, entry in entries:
            i, wB, EB, wF, EF, active = entry.decode().split("|")
            parsed.append((int(i), user, (int(wB), float(EB), int(wF), float(EF)), active == "1"))
        parsed.sort()
        size = (parsed[-1][0] + 1) if parsed else 0
        self.users = [""] * size
        self.latest = [(1, 1.0, 1, 1.0)] * size
        self._active = np.zeros(max(16, size), dtype=bool)
        self.index_of = {}
        for i, user, decl, active in parsed:
            self.index_of[user] = i
            self.users[i] = user
            self.latest[i] = decl
            self._active[i] = active
        self.pending = {i: d for i, d in enumerate(self.latest)}

    def sync_pending(self, applied: list[Declaration]) -> None:
        """Keep pending only the declarations that differ from what the ledger applied (a
        removed user whose ledger is suspended stays so)."""
        self.pending = {
            i: d for i, d in enumerate(self.latest)
            if i >= len(applied) or (applied[i] != d and (
                applied[i] != SUSPENDED or bool(self._active[i])))
        }


class DynamicAccumulator(PartitionAccumulator):
    """Slotting, the users' ledger and the slot conversation of one partition (module doc)."""

    registry: DynamicRegistry

    def __init__(self, partition: int, config: JobConfig, registry: DynamicRegistry) -> None:
        super().__init__(partition, config, registry)  # type: ignore[arg-type]
        self.ledger: DynamicLedger = dynamic_ledger(config.mechanism, config.max_window,
                                                    GRID_BITS)
        self.base: int | None = None  # the stream's first slot: the ledger's slot 1
        self.awaiting: int | None = None  # planned slot whose decision is due
        self.applied: list[Declaration] = []  # per ledger user, the declaration in force
        self.cells: dict[int, np.ndarray] = {}  # slot -> cell per user index (-1: none)
        self.outbox: dict[str, dict] = {}  # the last closure and the plan awaiting a decision
        self.ledger_base = self.ledger.to_bytes()  # the ledger at the last compaction
        # since then: ["declare", idx, wB, EB, wF, EF], ["suspend", idx], [published]
        self.journal: list[list] = []
        self.suspend_at: dict[int, int] = {}  # removed user -> slot its suspension waits for

    # -- reports ---------------------------------------------------------------------------

    def _count(self, slots: np.ndarray, users: np.ndarray, levels: np.ndarray,
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
            self.accepted[slot] += int(mask.sum())

    @property
    def next_slot(self) -> int | None:
        """The slot the ledger plans next (``None`` before the stream's start is known)."""
        return None if self.base is None else self.base + self.ledger.slot - 1

    # -- the conversation ------------------------------------------------------------------

    def _close(self) -> dict | None:
        """The closure message when the watermark closed more slots."""
        last = self._newly_closed()
        if last is None:
            return None
        msg = {"partition": self.partition, "closed_through": last,
               "first": self.slotter.first_slot, "rejected": self.rejected}
        self.closed_through = last
        self.rejected = 0
        for s in [s for s in self.seen if s <= last]:
            del self.seen[s]
        self.outbox["closed"] = msg
        return msg

    def _closed_messages(self) -> list[dict]:
        msg = self._close()
        return ([] if msg is None else [msg]) + self._plans()

    def advance_messages(self, watermark: int) -> list[dict]:
        if self.slotter.watermark is not None and watermark <= self.slotter.watermark:
            return []
        self.slotter.restore(watermark, {}, self.slotter.first_slot)
        return self._closed_messages()

    def on_start(self, slot: int) -> list[dict]:
        """The coordinator announced the stream's first slot: start the ledger there."""
        if self.base is not None:
            return []
        self.base = int(slot)
        early = min(self.cells, default=self.base)
        if early < self.base:
            # cannot happen: the start is the earliest slot any partition has a report in
            raise RuntimeError(f"partition {self.partition} holds reports of slot {early}, "
                               f"before the stream's start {self.base}")
        return self._plans()

    def on_decision(self, slot: int, published: bool) -> list[dict]:
        """Commit the coordinator's decision for the planned slot; plan the next one."""
        if self.base is None or self.awaiting != slot:
            return []  # a decision this partition committed already, or one of another run
        self.ledger.commit_columns(bool(published))
        self.journal.append([bool(published)])
        self.awaiting = None
        self.outbox.pop("plan", None)
        self.outbox.pop("declared", None)
        return self._plans()

    def on_control(self, doc: dict) -> list[dict]:
        """Act on one record of the decisions topic (a start or a decision)."""
        if "start" in doc:
            return self.on_start(int(doc["start"]))
        return self.on_decision(int(doc["slot"]), bool(doc["published"]))

    def resend(self) -> list[dict]:
        """The messages to send again after a restart (the coordinator drops repeats)."""
        out = [self.outbox["closed"]] if "closed" in self.outbox else []
        if "plan" in self.outbox:
            out += [*self.outbox.get("declared", []), self.outbox["plan"]]
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
        """Schedule the suspension of users removed since the last plan, and suspend those whose
        slot has come (``slot`` is the slot being planned); a user declaring again is not
        suspended (its declaration resumes a suspended ledger)."""
        reg = self.registry
        if reg.removed:
            wm = self.slotter.watermark
            # every accepted report lies at or before the largest event time accepted, which is
            # the watermark plus the allowed lateness (None: no report accepted yet)
            after = slot if wm is None else int(
                self.config.clock.slot_of(wm + self.config.lateness_ms)) + 1
            for i in reg.removed:
                self.suspend_at[i] = max(after, self.suspend_at.get(i, after))
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
        if s is None or self.awaiting is not None or self.closed_through is None:
            return None
        if s > self.closed_through:
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
        d = self.d
        mine = row[active]
        rep = mine >= 0
        counts = np.bincount(level[rep] * d + mine[rep], minlength=pairs.size * d)
        counts = counts.reshape(pairs.size, d)
        names = [level_name(int(p) >> 16, int(p) & 0xFFFF) for p in pairs.tolist()]
        msg = {
            "partition": self.partition,
            "plan": s,
            "counts": {k: counts[j].tolist() for j, k in enumerate(names) if counts[j].any()},
            "users": {k: int(sizes[j]) for j, k in enumerate(names)},
            "accepted": int(np.count_nonzero(rep)),
            "nullified": bool(plan.nullified),
            "projected": {k: int(projected[j]) for j, k in enumerate(names) if projected[j]},
        }
        withdrawn = int(self.accepted.pop(s, 0)) - msg["accepted"]
        if withdrawn:
            log.info("partition %d, slot %d: %d reports withdrawn with their users' removal",
                     self.partition, s, withdrawn)
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
        return [{"stream": self.config.stream, "declared": slot, "partition": self.partition,
                 "chunk": k, "chunks": len(chunks), "users": dict(chunk)}
                for k, chunk in enumerate(chunks)]

    # -- checkpoints -----------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state: a compressed document, then the ledger's base snapshot."""
        commits = sum(1 for entry in self.journal if len(entry) == 1)
        if commits >= JOURNAL_SLOTS:  # compact: the ledger as it is now becomes the base
            self.ledger_base = self.ledger.to_bytes()
            self.journal = []
        doc = zlib.compress(orjson.dumps(self._state()), 3)
        return SNAPSHOT_MAGIC + len(doc).to_bytes(8, "big") + doc + self.ledger_base

    def restore(self, data: bytes) -> None:
        """Reinstate a :meth:`snapshot`."""
        if data[:4] != SNAPSHOT_MAGIC:
            raise ValueError("not a checkpoint of a dynamic mechanism's partition")
        size = int.from_bytes(data[4:12], "big")
        self.ledger_base = data[12 + size:]
        self._load(orjson.loads(zlib.decompress(data[12:12 + size])))

    def _state(self) -> dict:
        doc = super()._state()
        doc["dynamic"] = {
            "journal": self.journal,
            "base": self.base,
            "awaiting": self.awaiting,
            "applied": [list(d) for d in self.applied],
            "cells": {str(s): _pack_cells(c) for s, c in self.cells.items()},
            "outbox": self.outbox,
            "suspend_at": {str(i): at for i, at in self.suspend_at.items()},
        }
        return doc

    def _load(self, doc: dict) -> None:
        super()._load(doc)
        dyn = doc["dynamic"]
        self.ledger = DynamicLedger.from_bytes(self.ledger_base)
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
