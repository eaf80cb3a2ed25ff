"""Dry runs of a ledger under a forced publish/approximate schedule (``pwevent plan``)."""

from __future__ import annotations

from collections.abc import Iterator

from mechanisms.requirements import FixedRequirements
from mechanisms.run.fixed import ledger_for


def parse_schedule(bits: str) -> list[bool]:
    """``"1"`` publish, ``"0"`` approximate, one character per slot."""
    bits = bits.strip()
    bad = [i for i, b in enumerate(bits) if b not in "01"]
    if bad:
        raise ValueError(f"schedule position {bad[0] + 1}: {bits[bad[0]]!r} is not 0 or 1")
    if not bits:
        raise ValueError("schedule is empty")
    return [b == "1" for b in bits]


def plan_fixed(name: str, requirements: FixedRequirements, schedule: str) -> Iterator[dict]:
    """Per slot: ``{"slot", "nullified", "published", "eps1": {user: x}, "eps2": {user: x}}``,
    and under the adaptive ledger (pbad) ``"rule": {user: "distribution" | "absorption"}``, the
    rule that set the user's publication budget.

    A nullified slot ignores its bit. Non-adaptive mechanisms (uniform, sample) publish at
    every slot they do not nullify, whatever the bit.
    """
    decisions = parse_schedule(schedule)
    ledger, level_of_user = ledger_for(name, requirements)
    users = requirements.users
    rules = getattr(ledger, "rules", None)
    for want in decisions:
        plan = ledger.plan()
        by_level = None if rules is None else rules()
        rule = None if by_level is None else [by_level[level] for level in level_of_user]
        charge = ledger.commit(want if plan.adaptive else True)
        eps1 = charge.eps1[level_of_user].tolist()
        eps2 = charge.eps2[level_of_user].tolist()
        record = {
            "slot": charge.slot,
            "nullified": charge.nullified,
            "published": charge.published,
            "eps1": dict(zip(users, eps1, strict=True)),
            "eps2": dict(zip(users, eps2, strict=True)),
        }
        if rule is not None:
            record["rule"] = dict(zip(users, rule, strict=True))
        yield record
