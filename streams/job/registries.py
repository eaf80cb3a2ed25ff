"""Each partition's registered users: one registry per kind of requirement, one interface.

A :class:`Registry` holds fixed requirements ``(w, E)`` and the users' requirement levels; a
:class:`DynamicRegistry` holds dynamic declarations ``(wB, EB, wF, EF)``, waiting to be applied
to the partition's ledger. The partition worker sees either through :class:`UserRegistry`:
users get a stable small index (their order of first registration), so per-slot work uses numpy
arrays indexed by user, and ``level_of_index`` tells who is registered now.
"""

from __future__ import annotations

from collections import Counter
from typing import Protocol

import numpy as np

from mechanisms.engine import level_key
from streams.job.admission import admit_requirement
from streams.job.config import JobConfig
from streams.records.field_formats import Reason
from streams.records.field_parsing import RecordError
from streams.records.requirement_parsing import (
    DynamicRequirement,
    FixedRequirement,
    RequirementRemoval,
)

Declaration = tuple[int, float, int, float]  # wB, EB, wF, EF
SUSPENDED: Declaration = (0, 0.0, 0, 0.0)  # in a ledger's ``applied``: the user is suspended


def _admitted(key: bytes | None, value: bytes | None, partition: int, config: JobConfig
              ) -> FixedRequirement | DynamicRequirement | RequirementRemoval | RecordError:
    """The requirement record admitted, or why not."""
    try:
        return admit_requirement(key, value, partition, config)
    except RecordError as exc:
        return exc


class UserRegistry(Protocol):
    """What the partition worker and the job use of a registry."""

    index_of: dict[str, int]
    users: list[str]

    @property
    def level_of_index(self) -> np.ndarray:
        """Per user index: its level index (>= 0) while registered, -1 otherwise."""
        ...

    def apply(self, key: bytes | None, value: bytes | None) -> tuple[str | None, str, str]:
        """One requirements record: (user, "", "") if accepted, else (user, reason, detail)."""
        ...

    def export(self, user: str) -> bytes:
        """What the ``users`` table keeps of a user."""
        ...

    def load(self, entries: list[tuple[str, bytes]]) -> None:
        """Rebuild from exported ``(user, entry)`` pairs."""
        ...


class Registry:
    """Registered users of one partition and their requirement levels.

    Users get a stable small index (their order of first registration), so per-slot work uses
    numpy arrays indexed by user. Fixed requirements cannot change: a user re-declaring a
    different requirement (even after a removal) is rejected, since a fresh ledger could
    overspend the user's earlier windows.
    """

    def __init__(self, config: JobConfig | None = None, partition: int = 0) -> None:
        self.config = config or JobConfig()
        self.partition = partition
        self.index_of: dict[str, int] = {}
        self.users: list[str] = []
        self.level_names: list[str] = []
        self._level_index: dict[str, int] = {}
        self._levels = np.zeros(0, dtype=np.int64)  # per user index: level index, -1 removed
        self._declared: list[int] = []  # per user index: level index ever declared
        self.sizes: Counter[str] = Counter()

    @property
    def level_of_index(self) -> np.ndarray:
        """Level index per user index (-1: not registered now)."""
        return self._levels[: len(self.users)]

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
        req = _admitted(key, value, self.partition, self.config)
        if isinstance(req, RecordError):
            return None, req.reason.value, req.detail
        i = self.index_of.get(req.user)
        if isinstance(req, RequirementRemoval):
            if i is not None and self._levels[i] >= 0:
                self.sizes[self.level_names[int(self._levels[i])]] -= 1
                self._levels[i] = -1
            return req.user, "", ""
        if not isinstance(req, FixedRequirement):
            return (req.user, Reason.INVALID_REQUIREMENT.value,
                    "this job runs a fixed-requirement mechanism; declare {user, w, E}")
        new = level_key(req.w, req.E)
        if i is not None:
            old = self.level_names[self._declared[i]]
            if old != new:
                return (req.user, Reason.INVALID_REQUIREMENT.value,
                        f"user {req.user!r} already declared (w, E) = {old}; fixed "
                        "requirements cannot change")
            if self._levels[i] < 0:
                self._levels[i] = self._declared[i]
                self.sizes[new] += 1
            return req.user, "", ""
        k = self._level(new)
        i = self.index_of[req.user] = len(self.users)
        self.users.append(req.user)
        self._declared.append(k)
        if i >= self._levels.shape[0]:
            grown = np.full(max(16, 2 * self._levels.shape[0]), -1, dtype=np.int64)
            grown[: self._levels.shape[0]] = self._levels
            self._levels = grown
        self._levels[i] = k
        self.sizes[new] += 1
        return req.user, "", ""

    def users_per_level(self) -> dict[str, int]:
        """Registered users per level key (levels with nobody left out)."""
        return {k: n for k, n in sorted(self.sizes.items()) if n > 0}

    def export(self, user: str) -> bytes:
        """What the ``users`` table keeps of a user: index, declared level, whether active."""
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
        self.users = [""] * size
        self._declared = [0] * size
        self._levels = np.full(max(16, size), -1, dtype=np.int64)
        for i, user, key, active in parsed:
            k = self._level(key)
            self.index_of[user] = i
            self.users[i] = user
            self._declared[i] = k
            if active:
                self._levels[i] = k
                self.sizes[key] += 1


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
        req = _admitted(key, value, self.partition, self.config)
        if isinstance(req, RecordError):
            return None, req.reason.value, req.detail
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
