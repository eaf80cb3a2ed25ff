"""Each partition's registered users: one registry per kind of requirement, one interface.

A :class:`Registry` holds fixed requirements ``(w, E)`` and the users' requirement levels; a
:class:`DynamicRegistry` holds dynamic declarations ``(wB, EB, wF, EF)``, waiting to be applied
to the partition's ledger. The partition worker sees either through
:class:`~streams.job.partitions.registry_columns.UserRegistry` (with what both share):
users get a stable small index (their order of first registration), so per-slot work uses numpy
arrays indexed by user, and ``level_of_index`` tells who is registered now.

A registry is columns, not an object per user: the ids and their indices are a
:class:`~streams.job.partitions.user_index.UserIndex` (one byte blob and a hash table in numpy
arrays, looked up a batch of keys at a time with :meth:`Registry.lookup`; ``index_of`` and
``users`` are its mapping and sequence views), and everything else is a numpy array indexed by
user (docs/performance.md gives the bytes per user). Requirement records are applied
a batch at a time (:meth:`Registry.apply_batch`): admitted with
:func:`~streams.job.partitions.admission.admit_requirements`, then applied with numpy over the
batch, with the outcome of applying them one by one, in order. :meth:`Registry.dump` and
:meth:`Registry.load_blocks` are its bulk form in the ``users`` table
(:mod:`streams.job.partitions.registry_store`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import numpy as np

from mechanisms.run.named_levels import level_key
from streams.job.config import JobConfig
from streams.job.partitions.admission import (
    DYNAMIC,
    FIXED,
    REMOVAL,
    admit_requirements,
)
from streams.job.partitions.registry_columns import (
    NO_POSITION,
    BatchOutcome,
    UserIds,
    block_ids,
    group_by_user,
    grown,
    last_entries,
    last_of,
    new_indices,
)
from streams.job.partitions.registry_store import decode_block, encode_block
from streams.job.partitions.user_index import Keys, UserIndex
from streams.records.field_formats import Reason

Declaration = tuple[int, float, int, float]  # wB, EB, wF, EF
SUSPENDED: Declaration = (0, 0.0, 0, 0.0)  # in a ledger's ``applied``: the user is suspended


class Registry(UserIds):
    """Registered users of one partition and their requirement levels.

    Users get a stable small index (their order of first registration), so per-slot work uses
    numpy arrays indexed by user. Fixed requirements cannot change: a user re-declaring a
    different requirement (even after a removal) is rejected, since a fresh ledger could
    overspend the user's earlier windows.
    """

    def __init__(self, config: JobConfig | None = None, partition: int = 0) -> None:
        self.config = config or JobConfig()
        self.partition = partition
        self._ids = UserIndex()
        self.level_names: list[str] = []
        self._level_index: dict[str, int] = {}
        self._levels = np.full(16, -1, dtype=np.int32)  # per user index: level, -1 removed
        self._declared = np.full(16, -1, dtype=np.int32)  # per user index: level declared
        self.sizes: Counter[str] = Counter()

    @property
    def level_of_index(self) -> np.ndarray:
        """Level index per user index (-1: not registered now)."""
        return self._levels[: len(self._ids)]

    def level_of(self, user: str) -> str | None:
        """The level key of a registered user."""
        i = self.index_of.get(user)
        if i is None or self._levels[i] < 0:
            return None
        return self.level_names[int(self._levels[i])]

    def _level(self, key: str) -> int:
        k = self._level_index.get(key)
        if k is None:
            k = self._level_index[key] = len(self.level_names)
            self.level_names.append(key)
        return k

    def apply(self, key: bytes | None, value: bytes | None) -> tuple[str | None, str, str]:
        """Apply one requirements record: (user, "", "") if accepted, else (user, reason, detail).

        A removal (tombstone) is accepted with the user unregistered; ``user`` is ``None`` when
        the record names no readable user.
        """
        return self.apply_batch([key], [value]).outcome(0)

    def apply_batch(self, keys: Sequence[bytes | None],
                    values: Sequence[bytes | None]) -> BatchOutcome:
        """Apply requirement records in order, with the outcome :meth:`apply` gives them one by
        one: a user's first accepted declaration fixes its level (a new user's index follows
        the order of first declarations), a later different one is rejected, a removal
        unregisters the user and a declaration of its fixed level registers it again."""
        adm = admit_requirements(keys, values, self.partition, self.config)
        out = BatchOutcome(adm.users, {i: (e.reason.value, e.detail)
                                       for i, e in adm.errors.items()})
        for i in np.flatnonzero(adm.kind == DYNAMIC).tolist():
            out.rejected[i] = (Reason.INVALID_REQUIREMENT.value,
                               "this job runs a fixed-requirement mechanism; declare {user, w, E}")
        ops = group_by_user(adm, (FIXED, REMOVAL), self._ids)
        if ops is None:
            return out
        count, base = len(ops.names), len(self.level_names)
        # each declaration's level: a known level's index, or base + j for new name j
        level = np.full(ops.pos.size, -1, dtype=np.int64)
        decl = np.flatnonzero(ops.is_decl)
        fresh_names: list[str] = []
        if decl.size:
            at = ops.pos[decl]
            pairs, inverse = np.unique(np.stack([adm.w[at], adm.E[at].view(np.int64)], axis=1),
                                       axis=0, return_inverse=True)
            budgets = np.ascontiguousarray(pairs[:, 1]).view(np.float64).tolist()
            ids = []
            for w, e in zip(pairs[:, 0].tolist(), budgets, strict=True):
                name = level_key(w, e)
                k = self._level_index.get(name)
                if k is None:
                    k = base + len(fresh_names)
                    fresh_names.append(name)
                ids.append(k)
            level[decl] = np.asarray(ids, dtype=np.int64)[inverse.reshape(-1)]
        first = np.full(count, -1, dtype=np.int64)
        has_decl = ops.first_decl != NO_POSITION
        first[has_decl] = level[ops.first_decl[has_decl]]
        known = ops.existing >= 0
        declared = np.where(known, self._declared[np.maximum(ops.existing, 0)], first)
        reject = ops.is_decl & (level != declared[ops.uid])
        names = self.level_names + fresh_names
        for r in np.flatnonzero(reject).tolist():
            user = ops.names[int(ops.uid[r])]
            old = names[int(declared[ops.uid[r]])]
            out.rejected[int(ops.pos[r])] = (
                Reason.INVALID_REQUIREMENT.value,
                f"user {user!r} already declared (w, E) = {old}; fixed requirements cannot change")
        index, fresh = new_indices(ops, len(self._ids))
        # new levels take their indices in the order of the first registrations
        remap = np.arange(base + len(fresh_names), dtype=np.int64)
        for k in dict.fromkeys(declared[fresh].tolist()):
            if k >= base:
                remap[k] = self._level(fresh_names[k - base])
        size = len(self._ids) + fresh.size
        self._levels = grown(self._levels, size, -1)
        self._declared = grown(self._declared, size, -1)
        self._declared[index[fresh]] = remap[declared[fresh]]
        last = last_of(ops.uid, np.flatnonzero(~reject), count)
        hit = (index >= 0) & (last >= 0)
        idx = index[hit]
        before = self._levels[idx].copy()
        after = np.where(ops.is_decl[last[hit]], self._declared[idx], -1).astype(np.int32)
        self._levels[idx] = after
        self._count(before, -1)
        self._count(after, 1)
        self._add(ops, fresh)
        out.touched = idx
        return out

    def _count(self, levels: np.ndarray, sign: int) -> None:
        """Add ``sign`` to the users of each level in ``levels`` (-1: none)."""
        per = np.bincount(levels[levels >= 0], minlength=len(self.level_names))
        for k in np.flatnonzero(per).tolist():
            self.sizes[self.level_names[k]] += sign * int(per[k])

    def users_per_level(self) -> dict[str, int]:
        """Registered users per level key (levels with nobody left out)."""
        return {k: n for k, n in sorted(self.sizes.items()) if n > 0}

    def export(self, user: str) -> bytes:
        """One user's entry in the earlier form of the ``users`` table: index, declared level,
        whether active."""
        i = self.index_of[user]
        active = int(self._levels[i] >= 0)
        return f"{i}|{self.level_names[self._declared[i]]}|{active}".encode()

    def load(self, entries: list[tuple[str, bytes]]) -> None:
        """Rebuild from exported ``(user, entry)`` pairs, keeping every user's index."""
        parsed = []
        for user, entry in entries:
            i, key, active = entry.decode().split("|")
            parsed.append((int(i), user, key, active == "1"))
        parsed.sort()
        size = (parsed[-1][0] + 1) if parsed else 0
        users = [""] * size
        self._declared = np.full(max(16, size), -1, dtype=np.int32)
        self._levels = np.full(max(16, size), -1, dtype=np.int32)
        for i, user, key, active in parsed:
            k = self._level(key)
            users[i] = user
            self._declared[i] = k
            if active:
                self._levels[i] = k
                self.sizes[key] += 1
        self._load_entries(users)

    def dump(self, indices: np.ndarray | None = None) -> bytes:
        """The bulk form of the users ``indices`` (all by default): ids, declared levels and
        whether active, with the level names (:mod:`streams.job.partitions.registry_store`)."""
        n = len(self._ids)
        idx = np.arange(n, dtype=np.int64) if indices is None else np.unique(indices)
        return encode_block({"kind": "fixed", "levels": self.level_names}, {
            **self._id_columns(None if indices is None else idx), "index": idx.astype(np.int64),
            "declared": self._declared[idx].astype(np.int32),
            "active": (self._levels[idx] >= 0).astype(np.uint8)})

    def load_blocks(self, blocks: list[bytes]) -> None:
        """Rebuild from :meth:`dump` blocks, a snapshot then segments: each user's last entry."""
        self._ids, self.sizes = UserIndex(), Counter()
        self.level_names, self._level_index = [], {}
        self._levels = np.full(16, -1, dtype=np.int32)
        self._declared = np.full(16, -1, dtype=np.int32)
        index, declared, active, users = [], [], [], []
        for block in blocks:
            head, cols = decode_block(block)
            if head["kind"] != "fixed":
                raise ValueError(f"a {head['kind']} registry block in a fixed registry")
            levels = np.array([self._level(k) for k in head["levels"]] + [-1], dtype=np.int32)
            index.append(cols["index"])
            declared.append(levels[cols["declared"]])
            active.append(cols["active"])
            users.append(block_ids(head, cols))
        if not users or not sum(map(len, users)):
            return
        all_index = np.concatenate(index)
        keep = last_entries(all_index)
        n = keep.size
        self._load_ids(users, keep)
        self._declared = np.full(max(16, n), -1, dtype=np.int32)
        self._levels = np.full(max(16, n), -1, dtype=np.int32)
        self._declared[:n] = np.concatenate(declared)[keep]
        self._levels[:n] = np.where(np.concatenate(active)[keep] == 1, self._declared[:n], -1)
        self._count(self._levels[:n], 1)


class DynamicRegistry(UserIds):
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
        self._reset()

    def _reset(self, size: int = 16) -> None:
        self._ids = UserIndex()
        self._wB = np.ones(size, dtype=np.int32)  # per user index: the latest declaration
        self._EB = np.ones(size, dtype=np.float64)
        self._wF = np.ones(size, dtype=np.int32)
        self._EF = np.ones(size, dtype=np.float64)
        self._active = np.zeros(size, dtype=bool)
        self._pending = np.zeros(size, dtype=bool)  # declared since the last plan
        self.removed: set[int] = set()

    @property
    def level_of_index(self) -> np.ndarray:
        """Per user index: 0 while registered, -1 after a removal."""
        return np.where(self._active[: len(self._ids)], 0, -1)

    @property
    def latest(self) -> list[Declaration]:
        """Per user index, its latest declaration."""
        n = len(self._ids)
        return list(zip(self._wB[:n].tolist(), self._EB[:n].tolist(), self._wF[:n].tolist(),
                        self._EF[:n].tolist(), strict=True))

    @property
    def pending(self) -> dict[int, Declaration]:
        """The declarations accepted since the last plan, by user index."""
        idx = np.flatnonzero(self._pending[: len(self._ids)])
        return dict(zip(idx.tolist(), zip(self._wB[idx].tolist(), self._EB[idx].tolist(),
                                          self._wF[idx].tolist(), self._EF[idx].tolist(),
                                          strict=True), strict=True))

    @pending.setter
    def pending(self, declared: dict[int, Declaration]) -> None:
        self._pending[:] = False
        for i, (wB, EB, wF, EF) in declared.items():
            self._wB[i], self._EB[i], self._wF[i], self._EF[i] = wB, EB, wF, EF
            self._pending[i] = True

    def active_mask(self, n: int) -> np.ndarray:
        """Whether each of the first ``n`` users is registered now."""
        out = np.zeros(n, dtype=bool)
        m = min(n, len(self._ids))
        out[:m] = self._active[:m]
        return out

    def _grow(self, size: int) -> None:
        self._wB, self._wF = grown(self._wB, size, 1), grown(self._wF, size, 1)
        self._EB, self._EF = grown(self._EB, size, 1.0), grown(self._EF, size, 1.0)
        self._active = grown(self._active, size, False)
        self._pending = grown(self._pending, size, False)

    def apply(self, key: bytes | None, value: bytes | None) -> tuple[str | None, str, str]:
        """One requirements record: (user, "", "") if accepted, else (user, reason, detail)."""
        return self.apply_batch([key], [value]).outcome(0)

    def apply_batch(self, keys: Sequence[bytes | None],
                    values: Sequence[bytes | None]) -> BatchOutcome:
        """Apply requirement records in order, with the outcome :meth:`apply` gives them one by
        one: a user's last declaration is its latest and pending one, a new user's index
        follows the order of first declarations, a removal of a user with an index
        unregisters it and puts it in ``removed``, and the last record of a user decides
        whether it is registered."""
        adm = admit_requirements(keys, values, self.partition, self.config)
        out = BatchOutcome(adm.users, {i: (e.reason.value, e.detail)
                                       for i, e in adm.errors.items()})
        for i in np.flatnonzero(adm.kind == FIXED).tolist():
            out.rejected[i] = (Reason.INVALID_REQUIREMENT.value,
                               f"this job runs {self.mechanism}, which takes dynamic "
                               "requirements; declare {user, wB, EB, wF, EF}")
        ops = group_by_user(adm, (DYNAMIC, REMOVAL), self._ids)
        if ops is None:
            return out
        count = len(ops.names)
        index, fresh = new_indices(ops, len(self._ids))
        self._grow(len(self._ids) + fresh.size)
        records = np.arange(ops.pos.size)
        # a removal counts where the user has an index by then: before, or declared earlier
        removal = np.flatnonzero(~ops.is_decl & ((ops.existing[ops.uid] >= 0)
                                                 | (ops.first_decl[ops.uid] < records)))
        self.removed.update(index[ops.uid[removal]].tolist())
        last_decl = last_of(ops.uid, np.flatnonzero(ops.is_decl), count)
        declared = np.flatnonzero(last_decl >= 0)
        idx, at = index[declared], ops.pos[last_decl[declared]]
        self._wB[idx], self._EB[idx] = adm.wB[at], adm.EB[at]
        self._wF[idx], self._EF[idx] = adm.wF[at], adm.EF[at]
        self._pending[idx] = True
        last = last_of(ops.uid, records, count)
        hit = index >= 0
        self._active[index[hit]] = ops.is_decl[last[hit]]
        self._add(ops, fresh)
        out.touched = index[hit]
        return out

    def export(self, user: str) -> bytes:
        """One user's entry in the earlier form of the ``users`` table: index, latest
        declaration, whether active."""
        i = self.index_of[user]
        wB, EB, wF, EF = (int(self._wB[i]), float(self._EB[i]), int(self._wF[i]),
                          float(self._EF[i]))
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
        self._reset(max(16, size))
        users = [""] * size
        for i, user, (wB, EB, wF, EF), active in parsed:
            users[i] = user
            self._wB[i], self._EB[i], self._wF[i], self._EF[i] = wB, EB, wF, EF
            self._active[i] = active
        self._load_entries(users)
        self._pending[:size] = True

    def dump(self, indices: np.ndarray | None = None) -> bytes:
        """The bulk form of the users ``indices`` (all by default): ids, latest declarations
        and whether active (:mod:`streams.job.partitions.registry_store`)."""
        n = len(self._ids)
        idx = np.arange(n, dtype=np.int64) if indices is None else np.unique(indices)
        return encode_block({"kind": "dynamic"}, {
            **self._id_columns(None if indices is None else idx), "index": idx.astype(np.int64),
            "wB": self._wB[idx], "EB": self._EB[idx], "wF": self._wF[idx], "EF": self._EF[idx],
            "active": self._active[idx].astype(np.uint8)})

    def load_blocks(self, blocks: list[bytes]) -> None:
        """Rebuild from :meth:`dump` blocks, a snapshot then segments (each user's last entry);
        every declaration is pending until :meth:`sync_pending`."""
        cols: dict[str, list[np.ndarray]] = {}
        users: list[Keys] = []
        for block in blocks:
            head, got = decode_block(block)
            if head["kind"] != "dynamic":
                raise ValueError(f"a {head['kind']} registry block in a dynamic registry")
            for name, col in got.items():
                cols.setdefault(name, []).append(col)
            users.append(block_ids(head, got))
        self._reset()
        if not sum(map(len, users)):
            return
        keep = last_entries(np.concatenate(cols["index"]))
        n = keep.size
        self._reset(max(16, n))
        self._load_ids(users, keep)
        for name, arr in (("wB", self._wB), ("EB", self._EB), ("wF", self._wF),
                          ("EF", self._EF)):
            arr[:n] = np.concatenate(cols[name])[keep]
        self._active[:n] = np.concatenate(cols["active"])[keep] == 1
        self._pending[:n] = True

    def sync_pending(self, applied: list[Declaration]) -> None:
        """Keep pending only the declarations that differ from what the ledger applied (a
        removed user whose ledger is suspended stays so)."""
        n, m = len(self._ids), min(len(applied), len(self._ids))
        self._pending[:n] = True
        if not m:
            return
        done = np.asarray(applied[:m], dtype=np.float64).reshape(m, 4)
        latest = np.stack([self._wB[:m], self._EB[:m], self._wF[:m], self._EF[:m]], axis=1)
        same = (done == latest).all(axis=1)
        suspended = (done == np.asarray(SUSPENDED, dtype=np.float64)).all(axis=1)
        self._pending[:m] = ~same & (~suspended | self._active[:m])
