"""The privacy of the two-round protocols (mechanisms/local/rounds.py; mtsp,
mechanisms/local/tree.py), as properties: whatever
decisions a client is given, honest or forged, its reports spend at most E in any w consecutive
slots; and the collector's own decisions always fit a user who answers every round, so no honest
client refuses one."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms.local import CounterWords, LedgerRefusal, ReportConfig, Reporter
from mechanisms.local.collector import SlotEstimate
from mechanisms.local.ledger import SLACK
from mechanisms.local.rounds import Decision, RoundPlanner
from mechanisms.local.tree_planner import TreePlanner, TreeReports

STEP = st.tuples(st.sampled_from([0.0, 0.05, 0.125, 0.25, 0.5, 1.0, 2.0]),  # round 2's eps
                 st.sampled_from(["asked", "none", "other"]),  # what next says
                 st.booleans(),  # whether the client saw the previous decision
                 st.booleans())  # whether the user has a value


def windows_within(spends: dict[int, float], w: int, E: float) -> bool:  # noqa: N803
    """Whether every w consecutive slots spend at most E (with the ledger's rounding slack)."""
    if not spends:
        return True
    last = max(spends)
    return all(sum(e for s, e in spends.items() if t - w < s <= t) <= E * SLACK
               for t in range(min(spends), last + 1))


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["lbd", "lba", "mtsp"]), st.integers(1, 5),
       st.sampled_from([0.5, 1.0, 2.0]), st.lists(STEP, min_size=1, max_size=30))
def test_no_decision_makes_a_client_overspend(protocol: str, w: int, E: float,  # noqa: N803
                                              steps: list) -> None:
    reporter = Reporter(ReportConfig(protocol, "u", d=3, w=w, E=E, lpu_key="k"),
                        CounterWords("p"), "t")
    spends: dict[int, float] = {}
    previous: Decision | None = None
    for slot, (eps2, nxt, seen, has_value) in enumerate(steps):
        value = 1 if has_value else None
        decision = Decision("s", protocol, slot, eps2,
                            {"asked": E / (2 * w), "none": 0.0, "other": E / w}[nxt],
                            starts=(0, 1, 3) if protocol == "mtsp" and eps2 > 0 else ())
        for round_ in (1, 2):
            try:
                data = (reporter.report(slot, value, previous if seen else None) if round_ == 1
                        else reporter.answer(decision, value))
            except (LedgerRefusal, ValueError):
                continue
            if data is not None:
                doc = json.loads(data)
                spends[doc["slot"]] = spends.get(doc["slot"], 0.0) + doc["eps"]
        previous = decision
    assert windows_within(spends, w, E)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(["lbd", "lba"]), st.integers(1, 8), st.sampled_from([0.5, 1.0, 4.0]),
       st.integers(0, 2**31), st.integers(5, 60))
def test_the_collectors_decisions_fit_a_user_who_answers_every_round(
        protocol: str, w: int, E: float, seed: int, slots: int) -> None:  # noqa: N803
    rng = np.random.default_rng(seed)
    planner = RoundPlanner(protocol, w, E, d=4, start=0)
    spends: dict[int, float] = {}
    published = 0
    for slot in range(slots):
        asked = planner.asked
        # a round-1 estimate far from the last release now and then, so that rounds 2 run
        frequency = rng.dirichlet(np.ones(4)) * (3.0 if rng.random() < 0.5 else 1.0)
        n = int(rng.integers(0, 500)) if asked > 0 else 0
        estimate = SlotEstimate(n, frequency, np.full(4, 1e-3), ())
        outcome = planner.decide(estimate)
        spends[slot] = asked + outcome.eps
        if outcome.eps > 0:
            published += 1
            planner.publish(slot, estimate)
        assert outcome.next in (0.0, E / (2 * w))
    assert windows_within(spends, w, E)
    assert planner.everyone.spent(2 * slots) <= E * SLACK


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.sampled_from([0.5, 1.0, 4.0]), st.integers(0, 2**31),
       st.integers(5, 60))
def test_the_tree_planners_decisions_fit_a_user_who_answers_every_round(
        w: int, E: float, seed: int, slots: int) -> None:  # noqa: N803
    """mtsp: whatever round 1 holds, the decisions ask E/(2w) every slot and publications
    within E/2 over any w slots, so every window of a full participant spends at most E."""
    rng = np.random.default_rng(seed)
    planner = TreePlanner(w, E, d=6, start=0)
    h = planner.h
    spends: dict[int, float] = {}
    publications: dict[int, float] = {}
    for slot in range(slots):
        groups = rng.integers(0, 200, size=h) * (rng.random(h) < 0.9)
        ones = np.zeros(2 ** (h + 1) - 1, dtype=np.int64)
        for level, (_, first, real) in enumerate(planner.levels):
            ones[first : first + real] = rng.integers(0, groups[level] + 1, size=real)
        outcome = planner.decide(TreeReports(groups, ones))
        assert outcome.next == E / (2 * w)
        assert bool(outcome.starts) == (outcome.eps > 0)
        spends[slot] = E / (2 * w) + outcome.eps
        publications[slot] = outcome.eps
        if outcome.eps > 0:
            n = int(groups.sum())
            planner.publish(slot, n, rng.integers(0, n + 1, size=len(outcome.starts)))
    assert windows_within(spends, w, E)
    assert windows_within(publications, w, E / 2)
