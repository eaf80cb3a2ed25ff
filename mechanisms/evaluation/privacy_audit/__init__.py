"""Empirical privacy audit: a statistical distinguisher that lower-bounds a mechanism's privacy
loss from its outputs on neighbouring inputs (in the spirit of DP-Sniper, StatDP, Google's
stochastic differential privacy tester and DP-Auditorium).

Method. A small public population (users with requirements (w_i, E_i) on two or three levels, d
cells, a few slots) is run through a mechanism of the job on two neighbouring inputs D0 and D1
that differ only in the reports of one target user u, whose requirement (w_u, E_u) is the
strictest:

- ``slot``: u's report at one slot removed (``neighbouring="replace"``: moved to another cell);
- ``window``: u's reports removed over a whole window of w_u consecutive slots;
- ``first_event``: u's first report moved from slot t to slot t + k (k < w_u), the registration
  time of a device registered by its first event.

Every input is run ``trials`` times, each trial an independent run with its own seeded
generator, on the batched path of the release rule (:meth:`mechanisms.release.rule.ReleaseRule.
decide_runs` over (runs, levels, d) arrays). A ledger's state, the levels and their sizes are
functions of public data only (the requirements, the registrations and the past publish
decisions), so the runs are grouped by their publish history and each group's ledger is stepped
once, by the product's own ledger; the rule then decides every run at once. Everything an
analyst reads is observed: per slot the released histogram, the published and nullified flags,
the threshold, the registered users, and each level's budgets and users.

Test. Each input's trials are split in two halves. On the first half, candidate events S are
scored: thresholds on scalar statistics of the releases (the released counts projected on the
difference between D0 and D1, summed over the differing slots and slot by slot), the exact
value of the discrete part of the output (published and nullified flags, thresholds, users,
level budgets), and the two combined; both directions (P0(S)/P1(S) and P1(S)/P0(S)) are scored
and the ``events`` best are kept. On the second half, for each kept event, a one-sided
Clopper-Pearson lower bound of the numerator's probability and upper bound of the
denominator's are computed, each at level alpha / (2 * events) (Bonferroni), and

    eps_lb = max(0, max over kept events of ln(P_num_lower / P_den_upper)).

Guarantee. With probability at least 1 - alpha (95% by default) over the trials, eps_lb is at
most the mechanism's true privacy loss for that pair of inputs: an eps_lb above the target's
E_u proves a violation of its requirement (at that confidence). The converse does not hold: an
eps_lb at or below E_u does not prove the mechanism private, only that these events on these
inputs found no violation.

Planted defects (``plant=``) show the audit's power: ``noise_halved`` (the rule runs on twice
the budgets, so its noise has half the scale), ``charge_dropped`` (the ledger does not record
one slot's charge), ``threshold_off_by_one`` (the Sampling Mechanism's inclusion probabilities
computed against the next level's budget) and ``realised_users`` (under default requirements, a
device counts as registered only from its first event: the level sizes and the users an analyst
reads are the realised counts). They wrap the product's ledgers and subclass its rule; nothing of
the product is changed.
"""
from __future__ import annotations

from mechanisms.evaluation.audit_names import (
    AUDITED,
    MODES,
    NEIGHBOURING,
    PAIRS,
    PLANTS,
)
from mechanisms.evaluation.privacy_audit.audit import (
    PairResult,
    Setting,
    audit,
    audit_pair,
    format_table,
    settings_for,
)
from mechanisms.evaluation.privacy_audit.bounds import clopper_pearson, regularized_beta
from mechanisms.evaluation.privacy_audit.defects import next_level_budgets
from mechanisms.evaluation.privacy_audit.distinguisher import distinguish
from mechanisms.evaluation.privacy_audit.inputs import default_population, neighbour_pair
from mechanisms.evaluation.privacy_audit.runs import TrialStreams, postprocessed, run_input

__all__ = [
    "AUDITED", "MODES", "NEIGHBOURING", "PAIRS", "PLANTS", "PairResult", "Setting",
    "TrialStreams", "audit", "audit_pair", "clopper_pearson", "default_population",
    "distinguish", "format_table", "neighbour_pair", "next_level_budgets", "postprocessed",
    "regularized_beta", "run_input", "settings_for",
]
