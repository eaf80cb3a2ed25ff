"""The adaptive ledger (pbad): its plan against a per-level reference, its privacy whatever rule
sets a slot's budget, and its state and batches."""

import numpy as np
import pytest
from hypothesis import given, settings

from mechanisms import FixedRequirements, ledger_for
from mechanisms.batch.fixed import BatchedFixed
from mechanisms.build import build
from mechanisms.ledgers.adaptive import AdaptiveLedger
from mechanisms.ledgers.fixed import AbsorptionLedger, DistributionLedger

from support import fixed_schedules, window_sums


def reference_plan(w: int, E: float, past: list[float], since: int) -> float:
    """What the module doc says a level of (w, E) plans, from its past eps2 (oldest first) and
    the slots since the run's last publication (the slot number before any)."""
    remaining = max(E / 2 - sum(past[max(len(past) - (w - 1), 0):] if w > 1 else []), 0.0)
    absorbed = E / (2 * w) * min(since, w)
    return min(max(remaining / 2, absorbed), remaining)


def cases():
    return fixed_schedules(8, 60, 200)


@settings(max_examples=150, deadline=None)
@given(cases())
def test_plan_follows_the_reference_and_no_window_exceeds_its_budget(case):
    reqs, bits = case
    ledger, level_of_user = ledger_for("pbad", reqs)
    past: list[list[float]] = [[] for _ in range(reqs.n)]
    last, charged = 0, []
    for slot, want in enumerate(bits, start=1):
        plan = ledger.plan()
        since = slot - last if last else slot
        for i in range(reqs.n):
            expected = reference_plan(int(reqs.w[i]), float(reqs.E[i]), past[i], since)
            assert plan.eps2[level_of_user[i]] == pytest.approx(expected, rel=1e-12, abs=1e-15)
        charge = ledger.commit(want)
        assert not charge.nullified and charge.published == want
        eps2 = charge.eps2[level_of_user]
        for i in range(reqs.n):
            past[i].append(float(eps2[i]))
        last = slot if want else last
        charged.append(charge.eps1[level_of_user] + eps2)
    assert (window_sums(np.array(charged), reqs.w) <= reqs.E * (1 + 1e-9)).all()


@settings(max_examples=100, deadline=None)
@given(cases())
def test_never_less_than_distribution_nor_absorption_within_the_window(case):
    """At every slot, with the same history: at least distribution's plan, and at least
    absorption's budget wherever the window still holds it."""
    reqs, bits = case
    adaptive, levels = ledger_for("pbad", reqs)
    distribution = DistributionLedger(adaptive.w, adaptive.E)
    absorption = AbsorptionLedger(adaptive.w, adaptive.E)
    for want in bits:
        eps2 = adaptive.plan().eps2
        remaining = 2 * distribution.plan().eps2
        assert (eps2 >= distribution.plan().eps2).all() and (eps2 <= remaining + 1e-15).all()
        shares = adaptive.eps1[0] * np.minimum(
            adaptive.slot - (adaptive.last_published or 0), adaptive.w)
        assert (eps2 >= np.minimum(shares, remaining) - 1e-15).all()
        charge = adaptive.commit(want)
        # the reference ledgers see the same history of charges
        distribution._push(charge.eps2[None])
        distribution.slot += 1
        absorption.slot += 1


def test_the_cap_is_what_keeps_it_private():
    """w = 4, E = 1: a publication at slot 1 (E/4), two quiet slots, then three absorbed
    shares (0.375) would charge 0.625 > E/2 over slots 1-4; the window leaves 0.25."""
    ledger = AdaptiveLedger(np.array([4]), np.array([1.0]))
    assert ledger.commit(True).eps2.tolist() == [0.25]
    ledger.commit(False)
    ledger.commit(False)
    remaining, distributed, absorbed = ledger._budgets()
    assert absorbed.tolist() == [[0.375]] and remaining.tolist() == [[0.25]]
    assert ledger.plan().eps2.tolist() == [0.25] and ledger.rules() == ["absorption"]
    assert ledger.commit(True).eps2.tolist() == [0.25]
    # slot 5: slots 2-4 spent 0.25, so 0.25 is left; one share (0.125) is less than half of it
    assert ledger.plan().eps2.tolist() == [0.125] and ledger.rules() == ["distribution"]


def test_state_round_trip_continues_identically():
    reqs = FixedRequirements.from_arrays(["a", "b", "c"], [3, 7, 12], [0.5, 1.0, 2.0])
    rng = np.random.default_rng(4)
    bits = rng.random(60) < 0.4
    whole, _ = ledger_for("pbad", reqs)
    part, _ = ledger_for("pbad", reqs)
    for want in bits[:25]:
        whole.commit(bool(want))
        part.commit(bool(want))
    restored, _ = ledger_for("pbad", reqs)
    restored.load_state(part.state())
    assert restored.last_published == part.last_published
    for want in bits[25:]:
        np.testing.assert_array_equal(restored.plan().eps2, whole.plan().eps2)
        a, b = restored.commit(bool(want)), whole.commit(bool(want))
        np.testing.assert_array_equal(a.eps2, b.eps2)


def test_runs_batched_release_what_each_releases_alone():
    reqs = [FixedRequirements.from_arrays(["a", "b", "c"], [4, 9, 30], [E, 1.0, 2.0])
            for E in (0.3, 0.8, 1.5)]
    rng = np.random.default_rng(2)
    cells = rng.integers(-1, 3, size=(80, 3))
    alone = [build("pbad", r, 3, np.random.default_rng(s))
             for s, r in enumerate(reqs)]
    batch = BatchedFixed([build("pbad", r, 3, np.random.default_rng(s))
                          for s, r in enumerate(reqs)])
    for slot in cells:
        together = batch.step(np.stack([slot] * len(reqs)))
        for b, mech in enumerate(alone):
            one = mech.step(slot)
            assert together.published[b] == one.published
            np.testing.assert_array_equal(together.histogram[b], one.histogram)
    assert sum(m.ledger.slot for m in alone) == len(reqs) * (len(cells) + 1)
