"""Default requirements: what a user who declared nothing is registered with at its first
mapped report (``--default-requirement``).

A spec is ``w=W,E=E`` (fixed mechanisms) or ``wB=..,EB=..,wF=..,EF=..`` (dpbd, dpba), optionally
behind a rule on a field of the source record, ``PATH=VALUE:SPEC`` (``consent.tier=full:w=10,E=2``).
The flag may be given several times; the first spec whose rule matches a record wins, and a spec
without a rule matches every record. A record that no spec matches registers nobody: its report
counts only if its user declared a requirement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from streams.job.config import JobConfig
from streams.job.partitions.admission import check_bounds
from streams.job.source.mapping import parse_path
from streams.records.field_parsing import RecordError
from streams.records.requirement_parsing import (
    DynamicRequirement,
    FixedRequirement,
    parse_requirement,
)

__all__ = ["DefaultRule", "DefaultRequirements"]

_FIXED, _DYNAMIC = ("w", "E"), ("wB", "EB", "wF", "EF")


@dataclass(frozen=True)
class DefaultRule:
    """One spec: the requirement's fields, and the rule's path and value (``None``: always)."""

    fields: dict[str, Any]
    path: tuple[str, ...] | None = None
    equals: str | None = None

    def requirement(self, user: str) -> bytes:
        """The requirement record's value for ``user``."""
        return orjson.dumps({"user": user, **self.fields})


def _number(name: str, text: str) -> int | float:
    try:
        return int(text) if name.startswith("w") else float(text)
    except ValueError:
        raise ValueError(f"{name} must be {'an integer' if name.startswith('w') else 'a number'}"
                         f", not {text!r}") from None


def parse_rule(spec: str, config: JobConfig) -> DefaultRule:
    """One ``[PATH=VALUE:]SPEC``, checked against the job's mechanism and requirement bounds;
    raises ``ValueError`` with a clear message."""
    path = equals = None
    body = spec
    if ":" in spec:
        cond, body = spec.split(":", 1)
        if "=" not in cond:
            raise ValueError(f"default requirement {spec!r}: a rule is PATH=VALUE before ':'")
        where, equals = cond.split("=", 1)
        path = parse_path(where.strip())
        equals = equals.strip()
    fields: dict[str, Any] = {}
    for part in body.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in _FIXED + _DYNAMIC or name in fields:
            raise ValueError(f"default requirement {spec!r}: expected w=W,E=E or "
                             "wB=..,EB=..,wF=..,EF=..")
        fields[name] = _number(name, value.strip())
    want = _DYNAMIC if config.dynamic else _FIXED
    if set(fields) != set(want):
        raise ValueError(f"default requirement {spec!r}: the {config.mechanism} mechanism takes "
                         f"{','.join(f'{n}=..' for n in want)}")
    try:
        req = parse_requirement(orjson.dumps({"user": "default", **fields}), b"default")
        assert isinstance(req, FixedRequirement | DynamicRequirement)
        check_bounds(req, config)
    except RecordError as exc:
        raise ValueError(f"default requirement {spec!r}: {exc.detail}") from None
    return DefaultRule({n: fields[n] for n in want}, path, equals)


class DefaultRequirements:
    """The ordered specs of ``--default-requirement`` (module doc)."""

    def __init__(self, specs: Sequence[str], config: JobConfig) -> None:
        self.rules = [parse_rule(s, config) for s in specs]
        self.paths: tuple[tuple[str, ...], ...] = tuple(
            r.path for r in self.rules if r.path is not None)

    def __bool__(self) -> bool:
        return bool(self.rules)

    def choose(self, extras: tuple[Any, ...]) -> DefaultRule | None:
        """The first rule that matches a record whose rule fields hold ``extras`` (in the order
        of :attr:`paths`)."""
        ruled = iter(range(len(self.paths)))
        for rule in self.rules:
            if rule.path is None:
                return rule
            k = next(ruled)
            got = extras[k] if k < len(extras) else None
            if got is not None and (got if isinstance(got, str) else orjson.dumps(got).decode()
                                    ) == rule.equals:
                return rule
        return None
