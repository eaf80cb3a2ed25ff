"""Personalised w-event differential privacy mechanisms: pure numpy, no I/O.

Each mechanism is a per-level budget ledger (:mod:`mechanisms.ledgers`) plus a global release
rule (:mod:`mechanisms.release`) run on aggregates with the Sampling Mechanism; one run of it is
in :mod:`mechanisms.run`, many runs stepped together in :mod:`mechanisms.batch`, and
:func:`mechanisms.build.build` makes any mechanism of :mod:`mechanisms.registry`.
"""

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

__all__ = [
    "FIXED_MECHANISMS",
    "BudgetLedger",
    "Charge",
    "FixedRequirements",
    "FixedMechanism",
    "Release",
    "ReleaseRule",
    "SlotPlan",
    "build",
    "draw_noise",
    "inclusion_probabilities",
    "ledger_for",
    "noise_variance",
    "optimal_budget",
    "sample_counts",
    "sample_users",
]
