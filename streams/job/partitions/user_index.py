"""User ids to dense indices 0..n-1, in numpy arrays: no Python string or dict entry per user.

The ids are one byte blob with offsets (index ``i`` is ``blob[offsets[i]:offsets[i + 1]]``,
UTF-8); an open-addressing hash table (linear probing, at most half full) holds user indices
by a 64-bit hash of the id, and each user's hash is kept beside it. Lookups and insertions
take a batch of keys at once: the keys are hashed with numpy (grouped by length, eight bytes a
column), the probe runs a round at a time over the keys still unresolved, and a hash match is
confirmed by comparing the stored bytes, so colliding ids resolve. For ids of 7 bytes a
registry takes about 48 bytes a user with it, against 139 with a dict and a list of strings
(docs/performance.md).

:attr:`UserIndex.index_of` and :attr:`UserIndex.users` are read-only views that behave like
the dict and the list they replace (for the code and tests that look up one user).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

_EMPTY = -1
_MUL = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


@dataclass
class Keys:
    """A batch of encoded keys: their bytes joined, where each starts, their lengths."""

    joined: np.ndarray  # uint8
    starts: np.ndarray  # int64
    lengths: np.ndarray  # int64

    @classmethod
    def of(cls, keys: Sequence[bytes]) -> Keys:
        lengths = np.fromiter(map(len, keys), dtype=np.int64, count=len(keys))
        return cls.packed(np.frombuffer(b"".join(keys), dtype=np.uint8), lengths)

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    @classmethod
    def concat(cls, parts: Sequence[Keys]) -> Keys:
        """Packed batches (each key right after the one before) one after the other."""
        if not parts:
            return cls.packed(np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.int64))
        return cls.packed(np.concatenate([k.joined for k in parts]),
                          np.concatenate([k.lengths for k in parts]))

    @classmethod
    def packed(cls, joined: np.ndarray, lengths: np.ndarray) -> Keys:
        """Keys stored one after the other in ``joined``."""
        lengths = np.asarray(lengths, dtype=np.int64)
        starts = np.zeros(lengths.size, dtype=np.int64)
        if lengths.size > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        return cls(np.asarray(joined, dtype=np.uint8), starts, lengths)

    def take(self, pos: np.ndarray) -> Keys:
        """Keys ``pos``, packed one after the other."""
        pos = np.asarray(pos, dtype=np.int64)
        lengths = self.lengths[pos]
        out = Keys.packed(np.zeros(0, dtype=np.uint8), lengths)
        # byte j of the result comes from joined[starts[pos[k]] + j - out.starts[k]]
        owner = np.repeat(np.arange(pos.size), lengths)
        src = np.arange(int(lengths.sum())) - out.starts[owner] + self.starts[pos][owner]
        out.joined = self.joined[src]
        return out

    def encoded(self) -> list[bytes]:
        """Every key, as bytes."""
        raw = self.joined.tobytes()
        ends = (self.starts + self.lengths).tolist()
        return [raw[a:b] for a, b in zip(self.starts.tolist(), ends, strict=True)]

    def rows(self, pos: np.ndarray, length: int) -> np.ndarray:
        """The bytes of keys ``pos`` (all of ``length`` bytes), one key a row."""
        return self.joined[self.starts[pos][:, None] + np.arange(length)]


def _mix(h: np.ndarray) -> np.ndarray:
    h ^= h >> np.uint64(30)
    h *= _MIX1
    h ^= h >> np.uint64(27)
    h *= _MIX2
    h ^= h >> np.uint64(31)
    return h


def hash_keys(keys: Keys) -> np.ndarray:
    """A 64-bit hash of every key (uint64): keys of one length hashed together, eight bytes at
    a time (within one process only; never stored)."""
    n = len(keys)
    out = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for length in np.unique(keys.lengths).tolist():
            pos = np.flatnonzero(keys.lengths == length)
            width = -(-length // 8) * 8
            rows = np.zeros((pos.size, max(width, 8)), dtype=np.uint8)
            rows[:, :length] = keys.rows(pos, length)
            words = rows.view("<u8")
            h = np.full(pos.size, np.uint64(length) * _MUL, dtype=np.uint64)
            for c in range(words.shape[1]):
                h = _mix(h ^ words[:, c])
            out[pos] = h
    return out


Hasher = Callable[[Keys], np.ndarray]


def _grown(arr: np.ndarray, size: int) -> np.ndarray:
    if size <= arr.shape[0]:
        return arr
    out = np.zeros(max(size, 2 * arr.shape[0]), dtype=arr.dtype)
    out[: arr.shape[0]] = arr
    return out


class UserIndex:
    """User ids and their indices (order of insertion), looked up and added a batch at a time.

    ``hasher`` maps a :class:`Keys` batch to uint64 hashes (:func:`hash_keys` by default, looked
    up when the index is made; tests put a colliding one there); ``capacity`` is the table's
    initial size (rounded up to a power of two).
    """

    def __init__(self, hasher: Hasher | None = None, capacity: int = 16) -> None:
        self._hasher = hasher or hash_keys
        self._clear(capacity)
        self.index_of = IndexOf(self)
        self.users = UserIds(self)

    def _clear(self, capacity: int) -> None:
        self._n = 0
        self._blob = np.zeros(64, dtype=np.uint8)
        self._offsets = np.zeros(17, dtype=np.int64)
        self._hashes = np.zeros(16, dtype=np.uint64)
        size = 1 << (max(capacity, 2) - 1).bit_length()
        self._table = np.full(size, _EMPTY, dtype=np.int32)

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        """The bytes its arrays hold (allocated, with their room to grow)."""
        return (self._blob.nbytes + self._offsets.nbytes + self._hashes.nbytes
                + self._table.nbytes)

    def id_bytes(self, i: int) -> bytes:
        return self._blob[self._offsets[i]: self._offsets[i + 1]].tobytes()

    def ids(self, indices: np.ndarray | None = None) -> Keys:
        """The ids of ``indices`` (all by default), as a :class:`Keys` batch."""
        n = self._n
        if indices is None:
            return Keys(self._blob[: self._offsets[n]].copy(), self._offsets[:n].copy(),
                        np.diff(self._offsets[: n + 1]))
        idx = np.asarray(indices, dtype=np.int64)
        stored = Keys(self._blob, self._offsets[:n], np.diff(self._offsets[: n + 1]))
        return stored.take(idx)

    def lookup(self, keys: Keys | Sequence[bytes]) -> np.ndarray:
        """The index of every key (int64), -1 for an unknown one."""
        batch = keys if isinstance(keys, Keys) else Keys.of(keys)
        return self._find(batch, self._hasher(batch))

    def lookup_str(self, users: Iterable[str]) -> np.ndarray:
        """:meth:`lookup` of user ids given as text."""
        return self.lookup(list(map(str.encode, users)))

    def _find(self, keys: Keys, h: np.ndarray) -> np.ndarray:
        out = np.full(len(keys), -1, dtype=np.int64)
        mask = np.uint64(self._table.shape[0] - 1)
        pending = np.arange(len(keys))
        slot = (h & mask).astype(np.int64)
        while pending.size:
            occ = self._table[slot].astype(np.int64)
            busy = occ != _EMPTY
            pending, slot, occ = pending[busy], slot[busy], occ[busy]
            same = np.flatnonzero(self._hashes[occ] == h[pending])
            if same.size:
                eq = self._equal(keys, pending[same], occ[same])
                out[pending[same[eq]]] = occ[same[eq]]
                done = np.zeros(pending.size, dtype=bool)
                done[same[eq]] = True
                pending, slot = pending[~done], slot[~done]
            slot = (slot + 1) & int(mask)
        return out

    def _equal(self, keys: Keys, pos: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Whether key ``pos[k]`` is the stored id ``idx[k]``, for every k."""
        lengths = keys.lengths[pos]
        eq = lengths == self._offsets[idx + 1] - self._offsets[idx]
        for length in np.unique(lengths[eq]).tolist():
            k = np.flatnonzero(eq & (lengths == length))
            stored = self._blob[self._offsets[idx[k]][:, None] + np.arange(length)]
            eq[k] = (stored == keys.rows(pos[k], length)).all(axis=1)
        return eq

    def add(self, keys: Keys | Sequence[bytes]) -> np.ndarray:
        """Add keys that are not in the index and are distinct; their new indices, in order."""
        batch = keys if isinstance(keys, Keys) else Keys.of(keys)
        k = len(batch)
        start, end = self._n, self._n + k
        if end >= np.iinfo(np.int32).max:
            raise OverflowError("a partition's registry holds fewer than 2**31 users")
        h = self._hasher(batch)
        used = int(self._offsets[start])
        self._blob = _grown(self._blob, used + batch.joined.size)
        self._blob[used: used + batch.joined.size] = batch.joined
        self._offsets = _grown(self._offsets, end + 1)
        self._offsets[start + 1: end + 1] = used + np.cumsum(batch.lengths)
        self._hashes = _grown(self._hashes, end)
        self._hashes[start:end] = h
        self._n = end
        new = np.arange(start, end, dtype=np.int64)
        if 2 * end > self._table.shape[0]:
            size = self._table.shape[0]
            while 2 * end > size:
                size *= 2
            self._table = np.full(size, _EMPTY, dtype=self._table.dtype)
            self._place(np.arange(end, dtype=np.int64))
        else:
            self._place(new)
        return new

    def _place(self, idx: np.ndarray) -> None:
        """Put users ``idx`` in the table (linear probing, a round at a time)."""
        mask = self._table.shape[0] - 1
        slot = (self._hashes[idx] & np.uint64(mask)).astype(np.int64)
        while idx.size:
            free = np.flatnonzero(self._table[slot] == _EMPTY)
            taken, first = np.unique(slot[free], return_index=True)
            self._table[taken] = idx[free[first]]
            placed = np.zeros(idx.size, dtype=bool)
            placed[free[first]] = True
            idx, slot = idx[~placed], (slot[~placed] + 1) & mask

    def load(self, keys: Keys) -> np.ndarray:
        """Replace the contents with ``keys`` (distinct), indexed 0..n-1 in order."""
        self._clear(2 * len(keys))
        return self.add(keys)


class IndexOf(Mapping[str, int]):
    """User id -> index, a read-only mapping over a :class:`UserIndex`."""

    def __init__(self, index: UserIndex) -> None:
        self._index = index

    def __getitem__(self, user: str) -> int:
        i = int(self._index.lookup([user.encode()])[0]) if isinstance(user, str) else -1
        if i < 0:
            raise KeyError(user)
        return i

    def __iter__(self) -> Iterator[str]:
        return iter(self._index.users)

    def __len__(self) -> int:
        return len(self._index)

    def get(self, user: str, default: int | None = None) -> int | None:  # type: ignore[override]
        i = int(self._index.lookup([user.encode()])[0]) if isinstance(user, str) else -1
        return default if i < 0 else i

    def to_dict(self) -> dict[str, int]:
        """Every user and its index."""
        return dict(zip(self._index.users.tolist(), range(len(self._index)), strict=True))

    def items(self):  # type: ignore[override]
        return self.to_dict().items()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self.to_dict() == dict(other.items())
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"IndexOf({self.to_dict()!r})"


class UserIds(Sequence[str]):
    """Index -> user id, a read-only sequence over a :class:`UserIndex`."""

    def __init__(self, index: UserIndex) -> None:
        self._index = index

    def __getitem__(self, i):  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self._index)
        if not -n <= i < n:
            raise IndexError(i)
        return self._index.id_bytes(int(i) % n).decode()

    def __len__(self) -> int:
        return len(self._index)

    def __iter__(self) -> Iterator[str]:
        return iter(self.tolist())

    def tolist(self) -> list[str]:
        """Every id, in index order."""
        return [k.decode() for k in self._index.ids().encoded()]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, UserIds | list | tuple):
            return self.tolist() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"UserIds({self.tolist()!r})"
