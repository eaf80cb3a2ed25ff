"""Personalised w-event differential privacy mechanisms: pure numpy, no I/O.

Each mechanism is a per-level budget ledger (:mod:`mechanisms.ledgers.fixed`) plus a global release
rule (:mod:`mechanisms.release`) run on aggregates with the Sampling Mechanism.
"""

from mechanisms.central import (
    FIXED_MECHANISMS,
    FixedMechanism,
    Release,
    create_mechanism,
    ledger_for,
)
from mechanisms.ledgers.fixed import BudgetLedger
from mechanisms.ledgers.plan import Charge, SlotPlan
from mechanisms.noise import draw_noise, noise_variance
from mechanisms.obs import optimal_budget
from mechanisms.release import ReleaseRule
from mechanisms.requirements import FixedRequirements
from mechanisms.sampling import inclusion_probabilities, sample_counts, sample_users

__all__ = [
    "FIXED_MECHANISMS",
    "BudgetLedger",
    "Charge",
    "FixedRequirements",
    "FixedMechanism",
    "Release",
    "ReleaseRule",
    "SlotPlan",
    "create_mechanism",
    "draw_noise",
    "inclusion_probabilities",
    "ledger_for",
    "noise_variance",
    "optimal_budget",
    "sample_counts",
    "sample_users",
]
