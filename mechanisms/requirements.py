"""Fixed personalised privacy requirements (w_i, E_i) and their grouping into levels.

Users that share a requirement share a budget ledger (docs/design.md, privacy decision 2): the
ledger of a level is a function of public inputs only, so it is kept once per level, not once
per user.
"""

from __future__ import annotations

from collections.abc import Sequence
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
