"""What the registries share (:mod:`streams.job.partitions.registries`): the interface the
partition worker reads them through (:class:`UserRegistry`), their user ids
(:class:`UserIds`, a :class:`~streams.job.partitions.user_index.UserIndex`), what became of a
batch of requirement records (:class:`BatchOutcome`), and the numpy steps that apply a batch:
its accepted records grouped by user (:func:`group_by_user`), the indices of the users it
registers first, columns grown and each user's last entry of a bulk form."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from streams.job.partitions.admission import AdmittedBatch
from streams.job.partitions.user_index import Keys, UserIndex

NO_POSITION = np.iinfo(np.int64).max  # "no such position"


@dataclass
class BatchOutcome:
    """What became of a batch of requirement records: per record its user (``None`` when
    unreadable) and, for the rejected ones, ``(reason, detail)`` by position; ``touched`` holds
    the indices of the users whose entry the batch may have changed."""

    users: list[str | None]
    rejected: dict[int, tuple[str, str]] = field(default_factory=dict)
    touched: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))

    def outcome(self, i: int) -> tuple[str | None, str, str]:
        """Record ``i``: (user, "", "") if accepted, else (user, reason, detail)."""
        reason, detail = self.rejected.get(i, ("", ""))
        return self.users[i], reason, detail


@dataclass
class GroupedRecords:
    """The accepted kinds of records of a batch, grouped by user (positions in batch order)."""

    pos: np.ndarray  # batch positions of the records, in order
    uid: np.ndarray  # per record: the batch-local id of its user
    names: list[str]  # per local id: the user
    keys: list[bytes]  # per local id: the user, encoded
    existing: np.ndarray  # per local id: its index before the batch (-1: none)
    is_decl: np.ndarray  # per record: a declaration (else a removal)
    first_decl: np.ndarray  # per local id: the record number of its first declaration


def group_by_user(adm: AdmittedBatch, kinds: tuple[int, int],
                  ids: UserIndex) -> GroupedRecords | None:
    """The records of ``kinds`` (a declaration kind, then :data:`REMOVAL`) by user."""
    pos = np.flatnonzero(np.isin(adm.kind, kinds))
    if not pos.size:
        return None
    local: dict[str, int] = {}
    users = adm.users
    uid = np.fromiter((local.setdefault(users[i], len(local))  # type: ignore[arg-type]
                       for i in pos.tolist()), dtype=np.int64, count=pos.size)
    names = list(local)
    keys = list(map(str.encode, names))
    existing = ids.lookup(keys)
    is_decl = adm.kind[pos] == kinds[0]
    first_decl = np.full(len(names), NO_POSITION, dtype=np.int64)
    decl = np.flatnonzero(is_decl)
    np.minimum.at(first_decl, uid[decl], decl)
    return GroupedRecords(pos, uid, names, keys, existing, is_decl, first_decl)


def last_of(uid: np.ndarray, where: np.ndarray, count: int) -> np.ndarray:
    """Per local id, the last of the record numbers ``where`` that belongs to it (-1: none)."""
    last = np.full(count, -1, dtype=np.int64)
    np.maximum.at(last, uid[where], where)
    return last


def new_indices(ops: GroupedRecords, start: int) -> tuple[np.ndarray, np.ndarray]:
    """The index of every local user after the batch (-1: none) and the local ids of the
    users it registers first, in the order of their first declarations."""
    fresh = np.flatnonzero((ops.existing < 0) & (ops.first_decl != NO_POSITION))
    fresh = fresh[np.argsort(ops.first_decl[fresh], kind="stable")]
    index = ops.existing.copy()
    index[fresh] = start + np.arange(fresh.size)
    return index, fresh


def grown(arr: np.ndarray, size: int, fill: int | float | bool) -> np.ndarray:
    if size <= arr.shape[0]:
        return arr
    out = np.full(max(16, size, 2 * arr.shape[0]), fill, dtype=arr.dtype)
    out[: arr.shape[0]] = arr
    return out


def last_entries(index: np.ndarray) -> np.ndarray:
    """Positions of the last entry of every index, ordered by index; the indices must cover
    0..n-1 (a registry's entries, snapshot then segments)."""
    rev = index[::-1]
    uniq, first = np.unique(rev, return_index=True)
    if uniq.size and (uniq[0] != 0 or uniq[-1] != uniq.size - 1):
        raise RuntimeError("registry entries do not cover the user indices 0..n-1")
    return index.shape[0] - 1 - first


class UserRegistry(Protocol):
    """What the partition worker and the job use of a registry."""

    @property
    def index_of(self) -> Mapping[str, int]:
        """User id -> index (a read-only view)."""
        ...

    @property
    def users(self) -> Sequence[str]:
        """Index -> user id (a read-only view)."""
        ...

    def lookup(self, users: Sequence[str]) -> np.ndarray:
        """The index of each user (int64), -1 for one never registered."""
        ...

    @property
    def level_of_index(self) -> np.ndarray:
        """Per user index: its level index (>= 0) while registered, -1 otherwise."""
        ...

    def apply(self, key: bytes | None, value: bytes | None) -> tuple[str | None, str, str]:
        """One requirements record: (user, "", "") if accepted, else (user, reason, detail)."""
        ...

    def apply_batch(self, keys: Sequence[bytes | None],
                    values: Sequence[bytes | None]) -> BatchOutcome:
        """Requirement records in order, as :meth:`apply` one by one would."""
        ...

    def export(self, user: str) -> bytes:
        """What the ``users`` table kept of a user (one entry per user, the earlier form)."""
        ...

    def load(self, entries: list[tuple[str, bytes]]) -> None:
        """Rebuild from exported ``(user, entry)`` pairs."""
        ...

    def dump(self, indices: np.ndarray | None = None) -> bytes:
        """The bulk form of the users ``indices`` (all by default)."""
        ...

    def load_blocks(self, blocks: list[bytes]) -> None:
        """Rebuild from :meth:`dump` blocks, a snapshot then segments, in order."""
        ...


def block_ids(head: dict, cols: dict[str, np.ndarray]) -> Keys:
    """The user ids of a registry block: columns ``id_len`` and ``id_bytes``, or, in blocks
    written before them, the header's ``users``."""
    if "users" in head:
        return Keys.of([u.encode() for u in head["users"]])
    return Keys.packed(cols["id_bytes"], cols["id_len"])


class UserIds:
    """The user ids of a registry, in a :class:`UserIndex`."""

    _ids: UserIndex

    @property
    def index_of(self) -> Mapping[str, int]:
        """User id -> index (a read-only view)."""
        return self._ids.index_of

    @property
    def users(self) -> Sequence[str]:
        """Index -> user id (a read-only view)."""
        return self._ids.users

    def lookup(self, users: Sequence[str]) -> np.ndarray:
        """The index of each user (int64), -1 for one never registered."""
        return self._ids.lookup_str(users)

    def _add(self, ops: GroupedRecords, fresh: np.ndarray) -> None:
        self._ids.add([ops.keys[j] for j in fresh.tolist()])

    def _id_columns(self, idx: np.ndarray | None) -> dict[str, np.ndarray]:
        ids = self._ids.ids(idx)
        return {"id_len": ids.lengths.astype(np.int32), "id_bytes": ids.joined}

    def _load_ids(self, ids: list[Keys], keep: np.ndarray) -> None:
        self._ids.load(Keys.concat(ids).take(keep))

    def _load_entries(self, users: list[str]) -> None:
        self._ids.load(Keys.of([u.encode() for u in users]))
