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
  no exact counts (only the fields in :data:`streams.audit.release_checks.RELEASE_FIELDS`).

The checks are in :mod:`streams.audit.registrations`, :mod:`streams.audit.charge_checks`,
:mod:`streams.audit.dynamic` and :mod:`streams.audit.release_checks`; what the audit reads and
reports in :mod:`streams.audit.report`.

Limitation: the requirements topic is compacted, so a declaration that compaction already removed
cannot be seen; the audit then judges the user by its surviving records.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from mechanisms.run.dynamic import DYNAMIC_MECHANISMS
from streams.audit.charge_checks import check_charges
from streams.audit.dynamic import check_users
from streams.audit.population import check_population, population_priors
from streams.audit.registrations import registrations
from streams.audit.release_checks import check_releases
from streams.audit.report import AuditReport, Record, is_num

__all__ = ["audit"]

MAX_SLOTS: Final = 10_000_000


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


def _decision_error(doc: Any, slot: int, stream: str) -> str | None:
    """Why a decision record is malformed, or None."""
    if type(doc) is not dict:
        return "not a JSON object"
    if doc.get("stream") != stream or doc.get("slot") != slot:
        return f"stream/slot {doc.get('stream')!r}/{doc.get('slot')!r} differ from its key"
    if type(doc.get("published")) is not bool or type(doc.get("nullified")) is not bool:
        return "published and nullified must be booleans"
    for name in ("eps1", "eps2", "users", "projected"):
        part = doc.get(name, {} if name == "projected" else None)  # projected: dynamic only
        if type(part) is not dict:
            return f"{name} must be an object"
        kind = (int,) if name in ("users", "projected") else (int, float)
        if not all(type(v) in kind and is_num(v) and v >= 0 for v in part.values()):
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
    priors = population_priors(config)
    check_charges(report, good, first, last, regs, dynamic, frozenset(priors))
    report.population = check_population(report, good, regs, config)
    if dynamic:
        check_users(report, decisions, good, first, last, stream, config)
    check_releases(report, released, good, first, last, _int(config.get("d"), 0))
    return report


def _int(x: object, default: int) -> int:
    return x if type(x) is int else default

