"""The audit's checks of the releases (:func:`check_releases`): one per slot, consistent with its
decision and the last publication, and carrying no exact counts (no field outside
:data:`RELEASE_FIELDS` and :data:`OPTIONAL_RELEASE_FIELDS`)."""

from __future__ import annotations

from typing import Any, Final

from streams.audit.report import AuditReport, is_num

__all__ = ["OPTIONAL_RELEASE_FIELDS", "RELEASE_FIELDS", "check_releases"]

#: Fields a release may carry; any other field is an exact-count leak.
RELEASE_FIELDS: Final = frozenset({"stream", "slot", "start", "end", "mechanism", "published",
                                   "nullified", "histogram", "threshold", "users"})
#: Fields of format version 2 on: public values (configuration, requirements, the slot, the
#: publish decisions), none of them data-dependent.
OPTIONAL_RELEASE_FIELDS: Final = frozenset({"schema_version", "cells", "noise", "approximates"})


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
    if type(hist) is not list or not all(is_num(x) for x in hist):
        out.append("histogram is not a list of numbers")
    elif d and len(hist) != d:
        out.append(f"histogram has {len(hist)} cells, the stream has {d}")
    return out


def _differ(a: dict, b: dict) -> list[str]:
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def check_releases(report: AuditReport, released: dict[Any, list[Any]],
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
