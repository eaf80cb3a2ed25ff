"""Whether a stream's published fields depend on who showed up when (:func:`check_population`).

A default requirement registers a device at its first event, so under default requirements the
population is a function of the protected stream. The job then treats each default rule's level
as a latent population (docs/design.md, "Default requirements"): the level is charged from the
stream's first slot and the mechanism sees its size as the rule's public prior, which the start
record lists under ``config.default_levels``. This check says, field by field, what the
analyst's topics (releases, decisions) depend on, and refuses a stream whose decisions count
devices registered by defaults (``registration_leak``).
"""

from __future__ import annotations

from typing import Any

from streams.audit.registrations import Registrations
from streams.audit.report import AuditReport

__all__ = ["check_population", "population_priors"]

_NOISY = "noisy: through the mechanism, charged in every user's ledger"
_PUBLIC = "public: the declared requirements and the configuration"
_PRIOR = "public: each default level counts its public prior from the first slot"


def population_priors(config: dict[str, Any]) -> dict[str, int]:
    """The default levels' public sizes from the start record's config (none: ``{}``)."""
    raw = config.get("default_levels")
    if type(raw) is not dict:
        return {}
    return {k: v for k, v in raw.items() if type(k) is str and type(v) is int and v >= 1}


def check_population(report: AuditReport, good: dict[int, dict[str, Any]], regs: Registrations,
                     config: dict[str, Any]) -> dict[str, Any]:
    """Check the decisions' levels and users against data-driven registration; returns the
    report's ``population`` section: how users registered and what each published field
    depends on."""
    priors = population_priors(config)
    defaulted = sum(len(u) for u in regs.defaulted.values())
    fields = {"releases.histogram": _NOISY, "releases.published": _NOISY}
    if not priors and not defaulted:
        for name in ("releases.users", "decisions.users", "decisions.eps1", "decisions.eps2",
                     "releases.threshold", "releases.noise"):
            fields[name] = _PUBLIC
        return {"registration": "declared", "defaulted_users": 0, "fields": fields}
    leaks: dict[str, list[str]] = {"users": [], "levels": []}
    for key in sorted(set(regs.defaulted) - set(priors)):
        slots = [s for s, doc in sorted(good.items()) if doc["users"].get(key)]
        where = slots[0] if slots else min(good, default=0)
        report.add("registration_leak", where,
                   f"level {key} holds {len(regs.defaulted[key])} users registered by a default "
                   "requirement, but the start record gives it no public size: its users, the "
                   "threshold and the sampling count devices as they first appear")
        leaks["users"].append(key)
    for key, prior in sorted(priors.items()):
        wrong = [s for s, doc in sorted(good.items()) if doc["users"].get(key) != prior]
        missing = [s for s, doc in sorted(good.items())
                   if key not in doc["eps1"] or key not in doc["eps2"]]
        if wrong:
            report.add("registration_leak", wrong[0],
                       f"decisions count {good[wrong[0]]['users'].get(key, 0)} users at default "
                       f"level {key}, not its public size {prior} ({len(wrong)} slots)")
            leaks["users"].append(key)
        if missing:
            report.add("registration_leak", missing[0],
                       f"default level {key} is not charged at {len(missing)} slots: its first "
                       "charge would show when its first device appeared")
            leaks["levels"].append(key)
    users = (f"LEAKS: counts devices registered by defaults at {', '.join(leaks['users'])}"
             if leaks["users"] else _PRIOR + ", plus declared users")
    levels = (f"LEAKS: levels {', '.join(leaks['levels'])} appear with their first device"
              if leaks["levels"] else _PRIOR)
    fields.update({"releases.users": users, "decisions.users": users,
                   "decisions.eps1": levels, "decisions.eps2": levels,
                   "releases.threshold": users if leaks["users"] else levels,
                   "releases.noise": users if leaks["users"] else levels})
    return {"registration": "data-driven (default requirements)",
            "defaulted_users": defaulted, "default_levels": priors, "fields": fields}
