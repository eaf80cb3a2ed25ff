"""The audit's checks of the releases (:func:`check_releases`): one per slot, consistent with its
decision and the last publication, and carrying no exact counts (no field outside
:data:`RELEASE_FIELDS` and :data:`OPTIONAL_RELEASE_FIELDS`, and an ``estimate`` that is the
post-processing of the released fields, recomputed)."""

from __future__ import annotations

from typing import Any, Final

from mechanisms.defaults import BRANCHES, DEFAULT, choose_for_levels
from mechanisms.run.named_levels import parse_level_key
from streams.audit.report import AuditReport, is_num

__all__ = ["OPTIONAL_RELEASE_FIELDS", "RELEASE_FIELDS", "check_releases"]

#: Fields a release may carry; any other field is an exact-count leak.
RELEASE_FIELDS: Final = frozenset({"stream", "slot", "start", "end", "mechanism", "published",
                                   "nullified", "histogram", "threshold", "users"})
#: Fields of format version 2 on: public values (configuration, requirements, the slot, the
#: publish decisions), none of them data-dependent.
OPTIONAL_RELEASE_FIELDS: Final = frozenset({"schema_version", "cells", "noise", "approximates",
                                            "estimate"})


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


def default_branch(good: dict[int, dict[str, Any]], released: dict[Any, list[Any]],
                   first: int, d: int) -> str | None:
    """The mechanism a stream run with the default configuration must release every slot by:
    the branch its first slot's public sizes per level (its decision's ``users``) choose over
    ``d`` cells, or without that decision the first release's, when the default runs it."""
    dec = good.get(first)
    if dec is not None and d:
        try:
            levels = {parse_level_key(k): int(n) for k, n in dec["users"].items()}
        except (TypeError, ValueError):
            return None
        return choose_for_levels(levels, d).mechanism
    docs = released.get(first) or [None]
    named = docs[0].get("mechanism") if type(docs[0]) is dict else None
    return named if named in BRANCHES else None


class EstimateCheck:
    """Recomputes each release's ``estimate`` from the released fields of the stream's
    releases so far, in slot order (:class:`~mechanisms.postprocess.Postprocessor`): one that
    differs may carry what the job saw, not what it released."""

    def __init__(self, d: int) -> None:
        self.d = d
        self.method: str | None = None
        self.filter: Any = None

    def problem(self, rel: dict) -> str | None:
        """What is wrong with ``rel``'s estimate (``None``: nothing), advancing the filter."""
        from mechanisms.postprocess import METHODS, Postprocessor

        est = rel.get("estimate")
        if est is None:
            return None if self.method is None else "no estimate, earlier releases have one"
        if type(est) is not dict or est.get("method") not in METHODS[1:] or not self.d:
            return "estimate is not a known post-processing"
        if self.method is None:
            self.method, self.filter = est["method"], Postprocessor(est["method"], self.d)
        elif est["method"] != self.method:
            return f"estimate by {est['method']!r}, earlier ones by {self.method!r}"
        noise = rel.get("noise")
        scale = noise.get("scale") if type(noise) is dict else None
        try:
            want = self.filter.step(rel["histogram"], bool(rel["published"]), scale, rel["users"])
        except (TypeError, ValueError) as exc:
            return f"estimate cannot be recomputed: {exc}"
        if est.get("histogram") != want:
            return "estimate differs from the post-processing of the released fields"
        return None


def _differ(a: dict, b: dict) -> list[str]:
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def check_releases(report: AuditReport, released: dict[Any, list[Any]],
                   good: dict[int, dict[str, Any]], first: int, last: int, d: int) -> None:
    """One release per slot, consistent with its decision and the last publication."""
    previous: list | None = None
    estimates = EstimateCheck(d)
    mechanism = report.mechanism
    if mechanism == DEFAULT:
        mechanism = default_branch(good, released, first, d)
        report.notes.append(f"default configuration: slot {first}'s public sizes choose "
                            f"{mechanism or 'nothing the audit can tell'}")
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
        problems = _release_problems(rel, slot, report.stream, mechanism, d)
        dec = good.get(slot)
        if report.mechanism == DEFAULT and dec is not None and mechanism is not None and \
                dec.get("mechanism") != mechanism:
            problems.append(f"its decision names mechanism {dec.get('mechanism')!r}, the "
                            f"default chose {mechanism!r}")
        if not problems and dec is not None:
            for name in ("published", "nullified"):
                if rel[name] != dec[name]:
                    problems.append(f"{name} is {rel[name]}, the decision says {dec[name]}")
            if rel["users"] != sum(dec["users"].values()):
                problems.append(f"users = {rel['users']!r}, the decision counts "
                                f"{sum(dec['users'].values())}")
        estimate_problem = (estimates.problem(rel) if type(rel) is dict
                            and not RELEASE_FIELDS - rel.keys() else None)
        if estimate_problem is not None:
            report.add("exact_count_field", slot, estimate_problem)
        if problems or type(rel) is not dict:
            report.add("release_mismatch", slot, "; ".join(problems))
            continue
        if rel["published"]:
            previous = rel["histogram"]
        elif rel["histogram"] != (previous or [0] * len(rel["histogram"])):
            report.add("release_mismatch", slot, "not published, but its histogram differs from "
                       + ("the last publication" if previous else "all zeros"))
