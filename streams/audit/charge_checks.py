"""The audit's checks of what the decisions charged: per level and window against the budget
``E`` (fixed mechanisms), per slot against the largest valid backward budget ``EB`` (dynamic
mechanisms), user counts against the valid registrations, and ``eps2`` on slots that did not
publish (:func:`check_charges`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mechanisms.run.named_levels import parse_level_key
from streams.audit.registrations import Registrations
from streams.audit.report import TOLERANCE, AuditReport

__all__ = ["check_charges"]



def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """``(first, last)`` indices of each run of True in a 1-D mask."""
    edges = np.flatnonzero(np.diff(np.concatenate(([0], mask.astype(np.int8), [0]))))
    return list(zip(edges[::2].tolist(), (edges[1::2] - 1).tolist(), strict=True))


def _span(first: int, a: int, b: int) -> str:
    return f"slot {first + a}" if a == b else f"slots {first + a}..{first + b}"


def _window_sums(charges: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``sums[l, t]``: charges of level ``l`` over the ``w[l]`` slots ending at ``t`` (clipped
    at the first slot), from cumulative sums in extended precision."""
    cs = np.zeros((charges.shape[0], charges.shape[1] + 1), dtype=np.longdouble)
    np.cumsum(charges, axis=1, dtype=np.longdouble, out=cs[:, 1:])
    ends = np.arange(1, charges.shape[1] + 1)
    starts = np.maximum(ends[None, :] - w[:, None], 0)
    return (cs[:, 1:] - np.take_along_axis(cs, starts, axis=1)).astype(np.float64)


def check_charges(report: AuditReport, good: dict[int, dict[str, Any]], first: int, last: int,
                  regs: Registrations, dynamic: bool, priors: frozenset[str] = frozenset()
                  ) -> None:
    """Charges and user counts of the decisions, as (levels, slots) matrices. ``priors``: the
    default levels, whose users are a public prior, not a count (checked by
    :mod:`streams.audit.population`)."""
    levels = sorted({k for doc in good.values() for part in ("eps1", "eps2", "users")
                     for k in doc[part]})
    row = {k: i for i, k in enumerate(levels)}
    shape = (len(levels), last - first + 1)
    eps1, eps2 = np.zeros(shape), np.zeros(shape)
    users = np.zeros(shape, dtype=np.int64)
    charged = np.zeros((2, *shape), dtype=bool)
    published, nullified = np.zeros(shape[1], dtype=bool), np.zeros(shape[1], dtype=bool)
    for slot, doc in good.items():
        t = slot - first
        published[t], nullified[t] = doc["published"], doc["nullified"]
        for i, (part, matrix) in enumerate((("eps1", eps1), ("eps2", eps2))):
            for k, e in doc[part].items():
                matrix[row[k], t], charged[i, row[k], t] = e, True
        for k, n in doc["users"].items():
            users[row[k], t] = n
    paid = eps2.max(axis=0, initial=0.0) > 0
    for kind, mask in (("nullified_charged", nullified & paid),
                       ("approximated_charged", ~published & ~nullified & paid)):
        for t in np.flatnonzero(mask).tolist():
            names = [levels[i] for i in np.flatnonzero(eps2[:, t] > 0).tolist()]
            report.add(kind, first + t, f"eps2 > 0 at levels {', '.join(names)}")
    total = users.sum(axis=0)
    if dynamic:
        _check_dynamic(report, levels, eps1 + eps2, charged.any(axis=0), total, regs, first)
        return
    parsed = [_parse_level(k) for k in levels]
    valid = np.array([len(regs.levels.get(k, ())) if p else 0 for k, p in zip(
        levels, parsed, strict=True)], dtype=np.int64)
    counted = np.array([k not in priors for k in levels], dtype=bool)[:, None]
    unregistered = (users > 0) & (valid == 0)[:, None] & counted
    excess = (users > valid[:, None]) & ~unregistered & counted
    uncharged = (users > 0) & ~charged.all(axis=0)
    ok = [i for i, p in enumerate(parsed) if p is not None]
    w = np.array([parsed[i][0] for i in ok], dtype=np.int64)
    E = np.array([parsed[i][1] for i in ok])
    sums = _window_sums((eps1 + eps2)[ok], w) if ok else np.zeros((0, shape[1]))
    over = sums > E[:, None] * (1 + TOLERANCE)
    report.windows_checked = int(users[ok].sum())
    for i, k in enumerate(levels):
        for a, b in _runs(unregistered[i]):
            report.add("unregistered_level", first + a, f"level {k} counts users at "
                       f"{_span(first, a, b)} but no valid requirement maps to it")
        for a, b in _runs(excess[i]):
            report.add("double_registration", first + a, f"level {k} counts up to "
                       f"{users[i, a:b + 1].max()} users at {_span(first, a, b)}, but only "
                       f"{valid[i]} distinct users were validly registered at it")
        for a, b in _runs(uncharged[i]):
            report.add("uncharged_level", first + a,
                       f"level {k} has users but no eps1/eps2 entry at {_span(first, a, b)}")
    for j, i in enumerate(ok):
        for a, b in _runs(over[j]):
            report.add("overspend", first + a, f"level {levels[i]}: the windows of {w[j]} "
                       f"slots ending at {_span(first, a, b)} spend up to "
                       f"{sums[j, a:b + 1].max():.12g} > E = {E[j]:g} "
                       f"(up to {users[i, a:b + 1].max()} users)")
    flagged = (excess | unregistered).any(axis=0)
    declared = len(regs.users) - sum(len(regs.levels.get(k, ())) for k in priors)
    _check_total(report, np.where(flagged, 0, (users * counted).sum(axis=0)), declared, first)


def _parse_level(key: str) -> tuple[int, float] | None:
    try:
        w, E = parse_level_key(key)
    except ValueError:
        return None
    return (w, E) if w >= 1 and math.isfinite(E) and E > 0 else None


def _check_total(report: AuditReport, total: np.ndarray, valid: int, first: int) -> None:
    """Users counted in all at a slot against the distinct valid users."""
    kind = "unregistered_level" if valid == 0 else "double_registration"
    for a, b in _runs(total > valid):
        report.add(kind, first + a, f"decisions count up to {total[a:b + 1].max()} users in "
                   f"all at {_span(first, a, b)}, but only {valid} distinct users were validly "
                   "registered")


def _check_dynamic(report: AuditReport, levels: list[str], charges: np.ndarray,
                   charged: np.ndarray, total: np.ndarray, regs: Registrations,
                   first: int) -> None:
    """Per-slot charges against the largest valid EB; user totals against the valid users."""
    over = charged & (charges > regs.max_eb * (1 + TOLERANCE)) & bool(regs.users)
    for i, k in enumerate(levels):
        for a, b in _runs(over[i]):
            report.add("overspend", first + a, f"level {k} charges up to "
                       f"{charges[i, a:b + 1].max():.12g} per slot at {_span(first, a, b)}, "
                       f"more than the largest valid EB = {regs.max_eb:g}")
    _check_total(report, total, len(regs.users), first)

