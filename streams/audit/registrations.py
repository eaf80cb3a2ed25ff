"""Which users the requirements topic validly registered, by the job's admission rules
(:func:`registrations`)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from mechanisms.run.named_levels import level_key
from streams.audit.report import Record, is_num
from streams.kafka.producer import key_partition
from streams.records.field_parsing import RecordError
from streams.records.requirement_parsing import (
    DynamicRequirement,
    FixedRequirement,
    RequirementRemoval,
    parse_requirement,
)

__all__ = ["Registrations", "registrations"]


@dataclass
class Registrations:
    """Users validly registered according to the requirements topic (ever, not per slot)."""

    levels: dict[str, set[str]] = field(default_factory=dict)  # fixed: level -> users
    users: set[str] = field(default_factory=set)
    #: fixed: level -> users whose registration a default requirement wrote (the record's
    #: ``"registered": "default"``): registered at their first event, a function of the stream
    defaulted: dict[str, set[str]] = field(default_factory=dict)
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
            key = level_key(req.w, req.E)
            out.users.add(req.user)
            out.levels.setdefault(key, set()).add(req.user)
            if type(rec.value) is dict and rec.value.get("registered") == "default":
                out.defaulted.setdefault(key, set()).add(req.user)
            else:
                out.defaulted.get(key, set()).discard(req.user)
    out.defaulted = {k: v for k, v in out.defaulted.items() if v}
    return out


def _num(x: object, default: float) -> float:
    return float(x) if is_num(x) else default  # type: ignore[arg-type]
