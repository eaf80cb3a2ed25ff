"""Re-derive a job's privacy accounting from its topics alone and check it (``pwevent audit``).

The audit reads the ``requirements``, ``decisions`` and ``releases`` topics (or JSON-lines dumps of
them) and never the job's state. It checks:

* registrations: which users were validly registered at which level, by the job's admission rules
  (keyed by the user, on the key's partition, parseable, budgets and windows within the start
  record's bounds, a fixed requirement never changed); no decision may count more users at a level
  than were ever validly registered there, nor more users in total than distinct valid users;
* budgets (fixed mechanisms): every user of a level is charged what the level is charged, so for
  every level ``(w, E)`` and every window of ``w`` consecutive slots the charges ``eps1 + eps2``
  must sum to at most ``E`` (relative tolerance 1e-9). A window is counted once per user of the
  level at the slot where it ends ("windows checked");
* budgets (dynamic mechanisms, dpbd and dpba): the partitions publish which declarations took
  effect at which slot (declaration records on the decisions topic); every user's ledger is
  rebuilt from them and checked against the decisions, and every user's backward and forward
  window is checked (:mod:`streams.audit.dynamic`). Every level's per-slot charge is also
  checked against the largest backward budget ``EB`` of any valid requirement, and the
  decisions' user totals against the distinct valid users;
* ``eps2`` is zero on nullified and on approximated slots;
* one decision and one release per slot, from the stream's start to the last slot seen; an
  identical re-emission (after a restart) is fine;
* releases agree with their decisions, repeat the last publication when not published, and carry
  no exact counts (only the fields in :data:`RELEASE_FIELDS`).

Limitation: the requirements topic is compacted, so a declaration that compaction already removed
cannot be seen; the audit then judges the user by its surviving records.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import numpy as np
import orjson

from mechanisms.dynamic import DYNAMIC_MECHANISMS
from mechanisms.engine import level_key, parse_level_key
from streams.audit.dynamic import check_users
from streams.kafka.producer import key_partition
from streams.records.parsing import (
    DynamicRequirement,
    FixedRequirement,
    RecordError,
    RequirementRemoval,
    parse_requirement,
)

__all__ = ["RELEASE_FIELDS", "AuditReport", "Record", "Violation", "audit", "registrations"]

#: Fields a release may carry; any other field is an exact-count leak.
RELEASE_FIELDS: Final = frozenset({"stream", "slot", "start", "end", "mechanism", "published",
                                   "nullified", "histogram", "threshold", "users"})
#: Fields of format version 2 on: public values (configuration, requirements, the slot, the
#: publish decisions), none of them data-dependent.
OPTIONAL_RELEASE_FIELDS: Final = frozenset({"schema_version", "cells", "noise", "approximates"})
TOLERANCE: Final = 1e-9
MAX_SLOTS: Final = 10_000_000


@dataclass(frozen=True, slots=True)
class Record:
    """One topic record as dumped: JSON value decoded, ``None`` for a tombstone."""

    partition: int
    offset: int
    key: str | None
    value: Any


@dataclass(frozen=True, slots=True)
class Violation:
    """One failed check at a slot."""

    kind: str
    slot: int
    detail: str


@dataclass
class AuditReport:
    """What the audit checked and what it found."""

    stream: str
    mechanism: str | None
    slots_audited: int = 0
    windows_checked: int = 0
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, kind: str, slot: int, detail: str) -> None:
        """Record a violation."""
        self.violations.append(Violation(kind, int(slot), detail))

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` document."""
        return {"stream": self.stream, "mechanism": self.mechanism,
                "slots_audited": self.slots_audited, "windows_checked": self.windows_checked,
                "violations": [asdict(v) for v in self.sorted_violations()]}

    def sorted_violations(self) -> list[Violation]:
        """Violations by slot (stable within a slot)."""
        return sorted(self.violations, key=lambda v: v.slot)


@dataclass
class Registrations:
    """Users validly registered according to the requirements topic (ever, not per slot)."""

    levels: dict[str, set[str]] = field(default_factory=dict)  # fixed: level -> users
    users: set[str] = field(default_factory=set)
    max_eb: float = 0.0  # dynamic: the largest valid backward budget
    rejected: Counter[str] = field(default_factory=Counter)


def registrations(records: Iterable[Record], partitions: int, config: dict[str, Any],
                  dynamic: bool) -> Registrations:
    """Apply the job's admission rules to the requirements records, in (partition, offset)
    order; ``config`` is the start record's config (missing bounds are not enforced)."""
    lo, hi = _num(config.get("min_epsilon"), 0.0), _num(config.get("max_epsilon"), math.inf)
    max_w = _num(config.get("max_window"), math.inf)
    out = Registrations()
    declared: dict[str, str] = {}
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        if rec.key is None:
            out.rejected["missing_key"] += 1
            continue
        key = rec.key.encode()
        if rec.partition != key_partition(key, partitions):
            out.rejected["wrong_partition"] += 1
            continue
        try:
            req = parse_requirement(None if rec.value is None else orjson.dumps(rec.value), key)
        except RecordError as exc:
            out.rejected[exc.reason.value] += 1
            continue
        if isinstance(req, RequirementRemoval):
            continue
        if isinstance(req, FixedRequirement):
            windows, budgets = (req.w,), (req.E,)
        else:
            windows, budgets = (req.wB, req.wF), (req.EB, req.EF)
        if dynamic != isinstance(req, DynamicRequirement):
            out.rejected["wrong_requirement_kind"] += 1
        elif max(windows) > max_w or not all(lo <= e <= hi for e in budgets):
            out.rejected["out_of_bounds"] += 1
        elif isinstance(req, DynamicRequirement):
            out.users.add(req.user)
            out.max_eb = max(out.max_eb, req.EB)
        elif declared.setdefault(req.user, level_key(req.w, req.E)) != level_key(req.w, req.E):
            out.rejected["changed_requirement"] += 1
        else:
            out.users.add(req.user)
            out.levels.setdefault(level_key(req.w, req.E), set()).add(req.user)
    return out


def _slot_key(key: str | None, stream: str) -> int | str | None:
    """``<stream>/<slot>`` -> slot, ``<stream>/start`` -> "start", anything else -> None."""
    prefix = f"{stream}/"
    if key is None or not key.startswith(prefix):
        return None
    rest = key[len(prefix):]
    if rest == "start":
        return rest
    try:
        return int(rest)
    except ValueError:
        return None


def _is_num(x: object) -> bool:
    return type(x) in (int, float) and math.isfinite(x)


def _num(x: object, default: float) -> float:
    return float(x) if _is_num(x) else default  # type: ignore[arg-type]


def _decision_error(doc: Any, slot: int, stream: str) -> str | None:
    """Why a decision record is malformed, or None."""
    if type(doc) is not dict:
        return "not a JSON object"
    if doc.get("stream") != stream or doc.get("slot") != slot:
        return f"stream/slot {doc.get('stream')!r}/{doc.get('slot')!r} differ from its key"
    if type(doc.get("published")) is not bool or type(doc.get("nullified")) is not bool:
        return "published and nullified must be booleans"
    for name in ("eps1", "eps2", "users"):
        part = doc.get(name)
        if type(part) is not dict:
            return f"{name} must be an object"
        kind = (int,) if name == "users" else (int, float)
        if not all(type(v) in kind and _is_num(v) and v >= 0 for v in part.values()):
            return f"{name} holds a negative or non-numeric value"
    return None


def _by_slot(records: Iterable[Record], stream: str) -> tuple[dict[Any, list[Any]], int]:
    """Values per slot key (distinct values, in offset order); and how many records were read."""
    out: dict[Any, list[Any]] = {}
    n = 0
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        slot = _slot_key(rec.key, stream)
        if slot is None:
            continue
        n += 1
        values = out.setdefault(slot, [])
        if rec.value not in values:
            values.append(rec.value)
    return out, n


def audit(requirements: Iterable[Record], decisions: Iterable[Record],
          releases: Iterable[Record], *, stream: str,
          partitions: int | None = None) -> AuditReport:
    """Audit one stream from its topics' records (see the module docstring); ``ValueError``
    when the slots seen span more than :data:`MAX_SLOTS`."""
    decisions = list(decisions)
    decided, n_dec = _by_slot(decisions, stream)
    released, n_rel = _by_slot(releases, stream)
    report = AuditReport(stream, None)
    start_docs = decided.pop("start", [])
    start_doc = start_docs[0] if start_docs and type(start_docs[0]) is dict else {}
    config = start_doc.get("config") if type(start_doc.get("config")) is dict else {}
    first_rel = next((v[0] for v in released.values() if type(v[0]) is dict), {})
    mechanism = config.get("mechanism") or first_rel.get("mechanism")
    report.mechanism = mechanism if isinstance(mechanism, str) else None
    dynamic = report.mechanism in DYNAMIC_MECHANISMS
    parts = partitions or max(1, _int(config.get("partitions"), 1))
    regs = registrations(requirements, parts, config, dynamic)
    rejected = ", ".join(f"{k}: {n}" for k, n in sorted(regs.rejected.items())) or "none"
    report.notes += [
        f"requirements ({parts} partitions): {len(regs.users)} valid users"
        + ("" if dynamic else f" at {len(regs.levels)} levels") + f"; rejected: {rejected}",
        f"decisions: {n_dec} records, releases: {n_rel} records",
        *([] if start_doc else ["no start record: slots counted from the first decision, "
                                "requirement bounds not enforced"]),
        *(["dynamic mechanism: every user's ledger is rebuilt from the declaration records "
           "and checked against the decisions and its windows; each level's charge per slot is "
           f"also checked against the largest valid EB ({regs.max_eb:g})"] if dynamic else [])]
    if len(start_docs) > 1:
        report.add("duplicate_decision", _int(start_doc.get("start"), 0),
                   f"{len(start_docs)} different start records")
    slots = [s for s in (*decided, *released) if isinstance(s, int)]
    if not slots:
        return report
    first = min(slots)
    if type(start_doc.get("start")) is int:
        first = min(first, start_doc["start"])
    last = max(slots)
    if last - first >= MAX_SLOTS:
        raise ValueError(f"slots {first}..{last} span more than {MAX_SLOTS} slots")
    report.slots_audited = last - first + 1
    good: dict[int, dict[str, Any]] = {}
    for slot in range(first, last + 1):
        docs = decided.get(slot, [])
        if not docs:
            report.add("missing_decision", slot, "no decision for this slot")
            continue
        if len(docs) > 1:
            report.add("duplicate_decision", slot, f"{len(docs)} different decisions")
        error = _decision_error(docs[0], slot, stream)
        if error:
            report.add("missing_decision", slot, f"malformed decision: {error}")
        else:
            good[slot] = docs[0]
    _check_charges(report, good, first, last, regs, dynamic)
    if dynamic:
        check_users(report, decisions, good, first, last, stream, config)
    _check_releases(report, released, good, first, last, _int(config.get("d"), 0))
    return report


def _int(x: object, default: int) -> int:
    return x if type(x) is int else default


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


def _check_charges(report: AuditReport, good: dict[int, dict[str, Any]], first: int, last: int,
                   regs: Registrations, dynamic: bool) -> None:
    """Charges and user counts of the decisions, as (levels, slots) matrices."""
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
    unregistered = (users > 0) & (valid == 0)[:, None]
    excess = (users > valid[:, None]) & ~unregistered
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
    _check_total(report, np.where(flagged, 0, total), len(regs.users), first)


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


def _release_problems(rel: Any, slot: int, stream: str, mechanism: str | None,
                      d: int) -> list[str]:
    """What is wrong with a release on its own (shape, stream, mechanism, histogram length)."""
    if type(rel) is not dict:
        return ["not a JSON object"]
    missing = sorted(RELEASE_FIELDS - rel.keys())
    if missing:
        return [f"lacks {', '.join(missing)}"]
    out = []
    if rel["stream"] != stream or rel["slot"] != slot:
        out.append(f"stream/slot {rel['stream']!r}/{rel['slot']!r} differ from its key")
    if mechanism is not None and rel["mechanism"] != mechanism:
        out.append(f"mechanism {rel['mechanism']!r}, the stream runs {mechanism!r}")
    hist = rel["histogram"]
    if type(hist) is not list or not all(_is_num(x) for x in hist):
        out.append("histogram is not a list of numbers")
    elif d and len(hist) != d:
        out.append(f"histogram has {len(hist)} cells, the stream has {d}")
    return out


def _differ(a: dict, b: dict) -> list[str]:
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def _check_releases(report: AuditReport, released: dict[Any, list[Any]],
                    good: dict[int, dict[str, Any]], first: int, last: int, d: int) -> None:
    """One release per slot, consistent with its decision and the last publication."""
    previous: list | None = None
    for slot in range(first, last + 1):
        docs = released.get(slot, [])
        if not docs:
            report.add("missing_release", slot, "no release for this slot")
            continue
        rel = docs[0]
        if len(docs) > 1:
            report.add("duplicate_release", slot, f"{len(docs)} different releases"
                       + (f" (they differ in {', '.join(_differ(rel, docs[1]))})"
                          if type(rel) is dict and type(docs[1]) is dict else ""))
        leaked = {k for doc in docs if type(doc) is dict for k in doc} - RELEASE_FIELDS
        if leaked - OPTIONAL_RELEASE_FIELDS:
            report.add("exact_count_field", slot,
                       f"release carries {', '.join(sorted(leaked - OPTIONAL_RELEASE_FIELDS))}")
        problems = _release_problems(rel, slot, report.stream, report.mechanism, d)
        dec = good.get(slot)
        if not problems and dec is not None:
            for name in ("published", "nullified"):
                if rel[name] != dec[name]:
                    problems.append(f"{name} is {rel[name]}, the decision says {dec[name]}")
            if rel["users"] != sum(dec["users"].values()):
                problems.append(f"users = {rel['users']!r}, the decision counts "
                                f"{sum(dec['users'].values())}")
        if problems or type(rel) is not dict:
            report.add("release_mismatch", slot, "; ".join(problems))
            continue
        if rel["published"]:
            previous = rel["histogram"]
        elif rel["histogram"] != (previous or [0] * len(rel["histogram"])):
            report.add("release_mismatch", slot, "not published, but its histogram differs from "
                       + ("the last publication" if previous else "all zeros"))
