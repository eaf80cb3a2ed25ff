"""Default requirements: what a user who declared nothing is registered with at its first
mapped report (``--default-requirement``).

A spec is ``w=W,E=E[,n=N]``, optionally behind a rule on a field of the source record,
``PATH=VALUE:SPEC`` (``consent.tier=full:w=10,E=2``). The flag may be given several times; the
first spec whose rule matches a record wins, and a spec without a rule matches every record. A
record that no spec matches registers nobody: its report counts only if its user declared a
requirement.

Registration by a default depends on the protected stream (a device registers at its first
event), so the job treats every default rule's level as a *latent population*
(docs/design.md, "Default requirements"): the level exists from the stream's first slot and the
mechanism sees its size as the rule's public prior ``n`` (:data:`DEFAULT_PRIOR` when not given),
never the count of devices seen. The records a default writes carry ``"registered": "default"``
so that the audit can tell them apart. Dynamic mechanisms (dpbd, dpba) keep a ledger per user
whose budgets depend on its registration slot, which their decisions would publish: they take
declared requirements only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from mechanisms.run.named_levels import level_key
from streams.job.config import JobConfig
from streams.job.partitions.admission import check_bounds
from streams.job.source.mapping import parse_path
from streams.records.field_parsing import RecordError
from streams.records.requirement_parsing import (
    DynamicRequirement,
    FixedRequirement,
    parse_requirement,
)

__all__ = ["DEFAULT_PRIOR", "DEFAULT_MARK", "DefaultRule", "DefaultRequirements",
           "default_levels"]

_FIXED, _DYNAMIC = ("w", "E"), ("wB", "EB", "wF", "EF")
#: the devices a rule without ``n=`` stands for, as the mechanism sees its level's size
DEFAULT_PRIOR = 1000
#: the field and value a default's requirement record carries (the audit reads it)
DEFAULT_MARK = ("registered", "default")


@dataclass(frozen=True)
class DefaultRule:
    """One spec: the requirement's fields, and the rule's path and value (``None``: always)."""

    fields: dict[str, Any]
    path: tuple[str, ...] | None = None
    equals: str | None = None
    prior: int = DEFAULT_PRIOR

    def requirement(self, user: str) -> bytes:
        """The requirement record's value for ``user`` (marked as written by a default)."""
        return orjson.dumps({"user": user, **self.fields, DEFAULT_MARK[0]: DEFAULT_MARK[1]})

    @property
    def level(self) -> str:
        """The level key of the rule's requirement."""
        return level_key(self.fields["w"], self.fields["E"])


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
    if config.dynamic:
        raise ValueError(f"default requirement {spec!r}: the {config.mechanism} mechanism keeps "
                         "a ledger per user whose budgets would publish when a device first "
                         "appeared; declare dynamic requirements on the requirements topic, or "
                         "run a fixed-requirement mechanism")
    fields: dict[str, Any] = {}
    prior = DEFAULT_PRIOR
    for part in body.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if sep and name == "n" and "n" not in fields:
            fields["n"] = prior = _prior(spec, value.strip())
            continue
        if not sep or name not in _FIXED + _DYNAMIC or name in fields:
            raise ValueError(f"default requirement {spec!r}: expected w=W,E=E[,n=N]")
        fields[name] = _number(name, value.strip())
    fields.pop("n", None)
    want = _FIXED
    if set(fields) != set(want):
        raise ValueError(f"default requirement {spec!r}: the {config.mechanism} mechanism takes "
                         f"{','.join(f'{n}=..' for n in want)}")
    try:
        req = parse_requirement(orjson.dumps({"user": "default", **fields}), b"default")
        assert isinstance(req, FixedRequirement | DynamicRequirement)
        check_bounds(req, config)
    except RecordError as exc:
        raise ValueError(f"default requirement {spec!r}: {exc.detail}") from None
    return DefaultRule({n: fields[n] for n in want}, path, equals, prior)


def _prior(spec: str, text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 10**12:
        raise ValueError(f"default requirement {spec!r}: n (the devices the rule stands for, "
                         f"public) must be an integer in [1, 10^12], not {text!r}")
    return n


def default_levels(specs: Sequence[str], config: JobConfig) -> tuple[tuple[str, int], ...]:
    """Each level a default rule registers devices at, with the size the mechanism sees for
    it: the rules' priors summed per level (levels in key order)."""
    sizes: dict[str, int] = {}
    for rule in DefaultRequirements(specs, config).rules:
        sizes[rule.level] = sizes.get(rule.level, 0) + rule.prior
    return tuple(sorted(sizes.items()))


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
