"""Population division on devices (lpd, lpa; mechanisms/local/population.py): the users a round
asks come from their public positions, no user reports twice in any w slots whatever the
decisions say, the planner's publication intervals of any w slots are disjoint, a report from a
user the round did not ask is refused, and the estimates hold the truth within their bars."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ldp_collector_kit import (
    LPU_KEY,
    ORIGIN_MS,
    ROUNDS_START,
    SLOT_MS,
    drifting_cells,
    rounds_in_process,
)

from mechanisms.local import CounterWords, LedgerRefusal, ReportConfig, Reporter
from mechanisms.local.collector import SlotEstimate
from mechanisms.local.population import (
    HALF,
    PopulationPlanner,
    Positions,
    in_interval,
    phase,
    position,
)
from mechanisms.local.rounds import Decision
from streams.ldp_collector import LdpCollector

START = ROUNDS_START


@pytest.mark.parametrize("protocol", ["lpd", "lpa"])
def test_each_user_once_a_window_and_the_estimates_within_their_bars(protocol: str) -> None:
    users, slots, d, w, E = 3000, 12, 4, 3, 2.0
    cells = drifting_cells(users, slots, d, seed=11)
    decisions, releases, first, second = rounds_in_process(protocol, cells, d, w, E)
    assert [r["slot"] for r in releases] == list(range(START, START + slots))
    at = np.array([position(LPU_KEY, f"u{i}") for i in range(users)])
    lower = at < HALF
    slots_of: dict[str, list[int]] = {}
    for t in range(slots):
        asked = t == 0 or decisions[t - 1]["next"] > 0
        # round 1 asks exactly the lower-half users of the slot's phase
        expect = {f"u{i}" for i in np.flatnonzero(lower & (at * w // HALF == t % w)).tolist()}
        assert {s.user for s in first[t]} == (expect if asked else set())
        # round 2 exactly the upper-half users in the decision's interval
        named = {f"u{i}" for i in range(users)
                 if in_interval(int(at[i]), decisions[t]["from"], decisions[t]["size"])}
        assert {s.user for s in second[t]} == named
        for s in first[t] + second[t]:
            slots_of.setdefault(s.user, []).append(s.slot)
    assert all(np.diff(v).min(initial=w) >= w for v in slots_of.values())
    published = [r for r in releases if r["published"]]
    assert 3 <= len(published) < slots
    for t, release in enumerate(releases):
        if not release["published"]:
            continue
        truth = np.bincount([s.cell for s in second[t]], minlength=d + 1) / len(second[t])
        n = release["reporters"]
        estimate = np.array([*release["counts"], release["no_value"]])
        std = np.array([*release["std"], release["no_value_std"]])
        assert n == len(first[t]) and (np.abs(estimate - n * truth) <= 4 * std).all()


def test_lpa_nullifies_what_its_publications_absorbed() -> None:
    cells = drifting_cells(3000, 12, 4, seed=11)
    decisions, _, first, _ = rounds_in_process("lpa", cells, 4, 3, 2.0)
    nullified = [t for t in range(1, 12) if decisions[t - 1]["next"] == 0]
    assert nullified and all(first[t] == [] for t in nullified)


def estimates(draw: st.DrawFn, d: int) -> SlotEstimate:
    """A round-1 estimate: frequencies, variances and reporters of any size."""
    n = draw(st.integers(0, 10_000))
    f = np.array(draw(st.lists(st.floats(-0.5, 1.5), min_size=d, max_size=d)))
    return SlotEstimate(n, f, np.full(d, 1e-3), ())


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(["lpd", "lpa"]), st.integers(1, 6), st.data())
def test_the_intervals_of_any_w_slots_are_disjoint(protocol: str, w: int,
                                                   data: st.DataObject) -> None:
    planner = PopulationPlanner(protocol, w, 1.0, 3, 0)
    intervals = []
    for _ in range(data.draw(st.integers(1, 25))):
        asked = planner.asked
        outcome = planner.decide(data.draw(st.composite(estimates)(3)))
        intervals.append((outcome.lo, outcome.size))
        assert (outcome.size > 0) == (outcome.eps > 0) and outcome.next in (0.0, 1.0)
        assert asked > 0 or outcome.eps == 0  # a slot without round 1 never publishes
        if outcome.eps:
            planner.publish(planner.slot - 1, SlotEstimate(1, np.ones(3) / 3, np.ones(3), ()))
    for end in range(len(intervals)):
        window = [iv for iv in intervals[max(0, end - w + 1):end + 1] if iv[1]]
        assert sum(size for _, size in window) <= HALF
        for (lo_a, size_a), (lo_b, _) in zip(window, window[1:], strict=False):
            assert lo_b == (lo_a + size_a) % HALF  # one after the other from the cursor


STEP = st.tuples(st.integers(1, 2),  # the round
                 st.sampled_from([0.0, 0.5, 1.0]),  # the decision's eps
                 st.sampled_from([0.0, 0.5, 1.0]),  # its next
                 # its interval, in eighths of the half (hypothesis's small integers would
                 # name almost nobody)
                 st.integers(0, 7).map(lambda k: k * HALF // 8),
                 st.sampled_from([0, 1, HALF // 8, HALF // 2, HALF]),
                 st.booleans())  # whether the user has a value


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["lpd", "lpa"]), st.integers(1, 5),
       st.sampled_from(["u2", "u4", "u7", "u11"]),  # upper-half users and a lower-half one
       st.lists(STEP, min_size=1, max_size=30))
def test_no_decision_makes_a_population_client_overspend(protocol: str, w: int, user: str,
                                                         steps: list) -> None:
    E = 1.0  # noqa: N806 - the papers' name
    reporter = Reporter(ReportConfig(protocol, user, d=3, w=w, E=E, lpu_key=LPU_KEY),
                        CounterWords("p"), "t")
    spends: dict[int, float] = {}
    for slot, (round_, eps, nxt, lo, size, has_value) in enumerate(steps):
        if (size > 0) != (eps > 0):
            size = 0 if eps == 0 else max(size, 1)
        decision = Decision("s", protocol, max(slot - 2 + round_, 0), eps, nxt, lo, size)
        try:
            made = (reporter.report(slot, 1 if has_value else None,
                                    decision if slot > 0 else None) if round_ == 1
                    else reporter.answer(decision, 1 if has_value else None))
        except (LedgerRefusal, ValueError):
            continue
        if made is not None:
            doc = json.loads(made)
            assert doc["eps"] == E
            spends[doc["slot"]] = spends.get(doc["slot"], 0.0) + doc["eps"]
    for t in spends:
        assert sum(e for s, e in spends.items() if t - w < s <= t) <= E


def test_a_user_the_round_did_not_ask_is_refused() -> None:
    d, w, E = 3, 3, 1.0
    collector = LdpCollector("lpd", d, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=START,
                             E=E, w=w, lpu_key=LPU_KEY)
    users = [f"u{i}" for i in range(40)]
    phases = {u: phase(position(LPU_KEY, u), w) for u in users}
    ours = next(u for u in users if phases[u] == 0)  # asked at START
    other = next(u for u in users if phases[u] == 1)  # asked at START + 1
    upper = next(u for u in users if phases[u] is None)

    def client(user: str) -> Reporter:
        return Reporter(ReportConfig("lpd", user, d=d, w=w, E=E, start=START, lpu_key=LPU_KEY),
                        CounterWords(user), "t")

    stamp = ORIGIN_MS + START * SLOT_MS
    assert collector.offer(ours.encode(), client(ours).report(START, 1), stamp) is None
    # a client that pretends its phase is now: its own reporter would not send it
    forged = client(other).report(START + 1, 1, Decision("s", "lpd", START, 0, E))
    assert forged is not None
    wrong_slot = forged.replace(f'"slot":{START + 1}'.encode(), f'"slot":{START}'.encode())
    assert collector.offer(other.encode(), wrong_slot, stamp) == ("unasked_round", wrong_slot)
    assert client(upper).report(START, 1) is None  # a publication user has no phase
    with pytest.raises(ValueError, match="lpu_key"):
        LdpCollector("lpa", d, origin_ms=0, slot_ms=1, start=0, E=E, w=w)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=90), st.lists(st.text(min_size=1, max_size=40),
                                                 min_size=1, max_size=5))
def test_the_collectors_position_hasher_is_the_hmac(key: str, users: list[str]) -> None:
    """The collector's precomputed HMAC states give every user the position the clients compute
    (keys longer than SHA-256's 64-byte block included)."""
    try:
        key.encode("utf-8")
        for user in users:
            user.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no client takes it
        return
    hasher = Positions(key)
    assert [hasher(u) for u in users] == [position(key, u) for u in users]
