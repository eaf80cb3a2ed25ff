"""Personalised privacy requirements: fixed ones (w_i, E_i) with their grouping into levels,
and dynamic declarations (wB, EB, wF, EF) by slot.

Users that share a requirement share a budget ledger (docs/design.md, privacy decision 2): the
ledger of a level is a function of public inputs only, so it is kept once per level, not once
per user.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


def _name(users: Sequence[str], index: int) -> str:
    return repr(str(users[index]))


def validate_windows(users: Sequence[str], w: np.ndarray, field: str = "w") -> np.ndarray:
    """Return ``w`` as int64 after checking every entry is an integer >= 1."""
    w = np.asarray(w)
    if w.dtype.kind == "f":
        bad = ~np.isfinite(w) | (w != np.floor(np.where(np.isfinite(w), w, 0)))
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"user {_name(users, i)}: field {field}={float(w[i])!r} is not an integer"
            )
    elif w.dtype.kind not in "iu":
        raise ValueError(f"field {field} must be integers, got dtype {w.dtype}")
    w64 = w.astype(np.int64)
    bad = w64 < 1
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"user {_name(users, i)}: field {field}={w64[i]} must be >= 1")
    return w64


def validate_budgets(users: Sequence[str], E: np.ndarray, field: str = "E") -> np.ndarray:
    """Return ``E`` as float64 after checking every entry is finite and > 0."""
    try:
        E64 = np.asarray(E, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"field {field} must be numbers: {exc}") from None
    bad = ~np.isfinite(E64) | (E64 <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"user {_name(users, i)}: field {field}={float(E64[i])!r} must be finite and > 0"
        )
    return E64


@dataclass(frozen=True)
class FixedRequirements:
    """Each user's fixed requirement: window ``w[i]`` slots and budget ``E[i]``."""

    users: tuple[str, ...]
    w: np.ndarray
    E: np.ndarray

    @classmethod
    def from_arrays(
        cls, users: Sequence[str], w: Sequence[int] | np.ndarray, E: Sequence[float] | np.ndarray
    ) -> FixedRequirements:
        """Validate and build; raises ``ValueError`` naming the offending user and field."""
        users_t = tuple(str(u) for u in users)
        w_arr, E_arr = np.asarray(w), np.asarray(E)
        if w_arr.shape != (len(users_t),) or E_arr.shape != (len(users_t),):
            raise ValueError(
                f"users, w and E must have one entry per user: got {len(users_t)} users, "
                f"w of shape {w_arr.shape}, E of shape {E_arr.shape}"
            )
        seen: set[str] = set()
        for u in users_t:
            if u in seen:
                raise ValueError(f"user {u!r}: duplicate user")
            seen.add(u)
        return cls(users_t, validate_windows(users_t, w_arr), validate_budgets(users_t, E_arr))

    @property
    def n(self) -> int:
        """Number of users."""
        return len(self.users)

    def strictest(self) -> tuple[int, float]:
        """The homogeneous requirement that satisfies everyone: (max w_i, min E_i)."""
        return int(self.w.max()), float(self.E.min())

    def homogeneous(self) -> FixedRequirements:
        """Every user given the strictest requirement (the baselines' setting)."""
        w, E = self.strictest()
        return FixedRequirements(
            self.users, np.full(self.n, w, dtype=np.int64), np.full(self.n, E, dtype=np.float64)
        )


#: the fields of a dynamic declaration, in order
DECLARATION_FIELDS = ("wB", "EB", "wF", "EF")


def validate_declarations(
    users: Sequence[str], wB: object, EB: object, wF: object, EF: object
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Check one declaration per user; raises ``ValueError`` naming user and field."""
    arrays = [np.asarray(x) for x in (wB, EB, wF, EF)]
    for field, arr in zip(DECLARATION_FIELDS, arrays, strict=True):
        if arr.shape != (len(users),):
            raise ValueError(f"field {field}: expected {len(users)} values, got {arr.shape}")
    return (
        validate_windows(users, arrays[0], "wB"),
        validate_budgets(users, arrays[1], "EB"),
        validate_windows(users, arrays[2], "wF"),
        validate_budgets(users, arrays[3], "EF"),
    )


@dataclass(frozen=True)
class DynamicRequirements:
    """Declarations sorted by slot: at ``slot[k]`` user ``user[k]`` declares (wB, EB, wF, EF).

    ``users`` lists every user in order of first declaration; a user's first declaration is the
    slot it appears at.
    """

    slot: np.ndarray
    user: tuple[str, ...]
    wB: np.ndarray
    EB: np.ndarray
    wF: np.ndarray
    EF: np.ndarray

    @classmethod
    def from_rows(cls, rows: Iterable[Sequence[object]]) -> DynamicRequirements:
        """Build from (slot, user, wB, EB, wF, EF) rows (slots from 1)."""
        rows = [tuple(r) for r in rows]
        for k, r in enumerate(rows):
            if len(r) != 6:
                raise ValueError(f"row {k + 1}: expected (slot, user, wB, EB, wF, EF), got {r!r}")
        users = [str(r[1]) for r in rows]
        slots = np.asarray([r[0] for r in rows] or np.zeros(0, dtype=np.int64))
        slots = validate_windows(users, slots, "slot")
        wB, EB, wF, EF = validate_declarations(users, *([r[c] for r in rows] for c in range(2, 6)))
        seen: set[tuple[int, str]] = set()
        for s, u in zip(slots.tolist(), users, strict=True):
            if (s, u) in seen:
                raise ValueError(f"user {u!r}: two declarations at slot {s}")
            seen.add((s, u))
        order = np.argsort(slots, kind="stable")
        return cls(
            slots[order],
            tuple(users[i] for i in order),
            wB[order],
            EB[order],
            wF[order],
            EF[order],
        )

    @property
    def users(self) -> tuple[str, ...]:
        """Distinct users in order of first declaration."""
        return tuple(dict.fromkeys(self.user))

    @property
    def max_window(self) -> int:
        """Largest window any declaration uses (1 when there is none)."""
        return int(max(self.wB.max(initial=1), self.wF.max(initial=1)))

    def at(self, slot: int) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The declarations made at ``slot``: (users, wB, EB, wF, EF)."""
        lo, hi = np.searchsorted(self.slot, [slot, slot + 1])
        part = slice(int(lo), int(hi))
        return list(self.user[part]), self.wB[part], self.EB[part], self.wF[part], self.EF[part]


def user_classes(*requirements: FixedRequirements) -> np.ndarray:
    """Label each user by its requirements over all ``requirements`` (same users, same order):
    users of one class have the same (w, E) in every one of them, so a mechanism that groups
    users by their requirement puts a whole class in one group.

    >>> a = FixedRequirements(("x", "y", "z"), np.array([2, 2, 3]), np.array([1.0, 1.0, 1.0]))
    >>> b = FixedRequirements(("x", "y", "z"), np.array([2, 4, 3]), np.array([0.5, 0.5, 0.5]))
    >>> user_classes(a, b).tolist(), user_classes(a).tolist()
    ([0, 1, 2], [0, 0, 1])
    """
    if not requirements:
        raise ValueError("no requirements given")
    n = requirements[0].n
    if any(r.n != n for r in requirements):
        raise ValueError("requirements over different numbers of users")
    columns = [c for r in requirements for c in (r.w.astype(np.float64), r.E)]
    _, labels = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
    return labels.reshape(-1).astype(np.int64)


def class_levels(classes: np.ndarray, level_of_user: np.ndarray) -> np.ndarray:
    """The level of each class of users (labels 0..C-1, -1 for a label without users);
    ``ValueError`` if a class's users are in different levels."""
    classes = np.asarray(classes, dtype=np.int64)
    level_of_user = np.asarray(level_of_user, dtype=np.int64)
    if classes.shape != level_of_user.shape:
        raise ValueError("one class per user expected")
    out = np.full(int(classes.max(initial=-1)) + 1, -1, dtype=np.int64)
    out[classes] = level_of_user
    if not np.array_equal(out[classes], level_of_user):
        raise ValueError("a class of users spans several levels")
    return out
