"""Personalised w-event differential privacy mechanisms: pure numpy, no I/O.

Each mechanism is a per-level budget ledger (:mod:`mechanisms.ledgers`) plus a global release
rule (:mod:`mechanisms.release`) run on aggregates with the Sampling Mechanism; one run of it is
in :mod:`mechanisms.run`, many runs stepped together in :mod:`mechanisms.batch`, and
:func:`mechanisms.build.build` makes any mechanism of :mod:`mechanisms.registry`.

Its names are imported on first use, so that importing one module of the package (the registry,
the requirements) does not import every mechanism.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = [
    "FIXED_MECHANISMS", "BudgetLedger", "Charge", "FixedMechanism", "FixedRequirements",
    "Release", "ReleaseRule", "SlotPlan", "build", "draw_noise", "inclusion_probabilities",
    "ledger_for", "noise_variance", "optimal_budget", "sample_counts", "sample_users",
]

_WHERE = {
    "build": "mechanisms.build",
    "BudgetLedger": "mechanisms.ledgers.fixed",
    "Charge": "mechanisms.ledgers.plan",
    "SlotPlan": "mechanisms.ledgers.plan",
    "draw_noise": "mechanisms.noise.calibrated",
    "noise_variance": "mechanisms.noise.calibrated",
    "optimal_budget": "mechanisms.release.obs",
    "ReleaseRule": "mechanisms.release.rule",
    "inclusion_probabilities": "mechanisms.release.sampling",
    "sample_counts": "mechanisms.release.sampling",
    "sample_users": "mechanisms.release.sampling",
    "FixedRequirements": "mechanisms.requirements",
    "FIXED_MECHANISMS": "mechanisms.run.fixed",
    "FixedMechanism": "mechanisms.run.fixed",
    "ledger_for": "mechanisms.run.fixed",
    "Release": "mechanisms.run.mechanism",
}


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use."""
    if name not in _WHERE:
        raise AttributeError(f"module 'mechanisms' has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value
    return value

if TYPE_CHECKING:
    from mechanisms.build import build
    from mechanisms.ledgers.fixed import BudgetLedger
    from mechanisms.ledgers.plan import Charge, SlotPlan
    from mechanisms.noise.calibrated import draw_noise, noise_variance
    from mechanisms.release.obs import optimal_budget
    from mechanisms.release.rule import ReleaseRule
    from mechanisms.release.sampling import inclusion_probabilities, sample_counts, sample_users
    from mechanisms.requirements import FixedRequirements
    from mechanisms.run.fixed import FIXED_MECHANISMS, FixedMechanism, ledger_for
    from mechanisms.run.mechanism import Release
