"""Whether a user had a value is as private as the value (docs/ldp-reports.md, "Who reports
when"): a client sends the same reports, at the same slots, budgets and ledger, whatever values
it holds, only the randomised payload differs; so the collector's ``reporters`` and every record's
presence say nothing of who had one. Properties over every protocol, decisions included."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms.local import CounterWords, LedgerRefusal, ReportConfig, Reporter
from mechanisms.local.rounds import Decision
from streams.ldp_collector import LdpCollector

D = 3
#: A slot's value: a cell, or None (no value).
VALUE = st.one_of(st.none(), st.integers(0, D - 1))


def outline(data: bytes | None) -> dict | None:
    """A report without its randomised payload: everything the payload does not decide."""
    if data is None:
        return None
    doc = json.loads(data)
    doc.pop("bits", None)
    doc.pop("cell", None)
    return doc


def run(protocol: str, w: int, E: float, values: list, decisions: list) -> list:  # noqa: N803
    """What one client sends, round by round, holding ``values``: each report's outline, or
    the refusal's code."""
    reporter = Reporter(ReportConfig(protocol, "u", d=D, w=w, E=E, lpu_key="k"),
                        CounterWords("presence"), "t")
    out: list = []
    previous: Decision | None = None
    for slot, value in enumerate(values):
        calls = [lambda v=value, p=previous, s=slot: reporter.report(s, v, p)]
        if protocol in ("lbd", "lba", "mtsp"):
            eps, nxt = decisions[slot % len(decisions)]
            starts = (0, 2) if protocol == "mtsp" and eps > 0 else ()
            decision = Decision("s", protocol, slot, eps, nxt, starts=starts)
            calls.append(lambda v=value, dd=decision: reporter.answer(dd, v))
            previous = decision
        for call in calls:
            try:
                out.append(outline(call()))
            except LedgerRefusal as refusal:
                out.append(refusal.code)
    out.append(reporter.ledger.dump())
    return out


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(["lbu", "lsp", "lpu", "plbu", "lbd", "lba", "mtsp"]), st.integers(1, 4),
       st.sampled_from([0.5, 1.0, 8.0]), st.data())
def test_a_clients_reports_do_not_depend_on_whether_it_has_a_value(
        protocol: str, w: int, E: float, data: st.DataObject) -> None:  # noqa: N803
    slots = data.draw(st.integers(1, 12))
    one = data.draw(st.lists(VALUE, min_size=slots, max_size=slots))
    other = data.draw(st.lists(VALUE, min_size=slots, max_size=slots))
    decisions = data.draw(st.lists(st.tuples(st.sampled_from([0.0, E / (4 * w), E / 2]),
                                             st.sampled_from([0.0, E / (2 * w)])),
                                   min_size=1, max_size=4))
    assert run(protocol, w, E, one, decisions) == run(protocol, w, E, other, decisions)


def test_the_collector_counts_every_enrolled_user_whatever_it_held() -> None:
    """Two slots of the same users, one where all hold a value and one where none does: the
    same reporters, and the estimates tell the two apart only through the randomised cells."""
    collector = LdpCollector("lbu", D, origin_ms=0, slot_ms=1000, start=0, E=8.0, w=1)
    users = [f"u{i}" for i in range(400)]
    for user in users:
        reporter = Reporter(ReportConfig("lbu", user, d=D, w=1, E=8.0), CounterWords(user), "t")
        assert collector.offer(user.encode(), reporter.report(0, 1), 10) is None
        assert collector.offer(user.encode(), reporter.report(1, None), 1010) is None
    full, empty = collector.close_until(2000)
    assert full["reporters"] == empty["reporters"] == len(users)
    # each estimate within 4 of its standard deviations of the truth: 400 users in cell 1 in
    # the first slot, 400 without a value in the second (the words are seeded: no flakiness)
    for release, truth in ((full, [0, 400, 0, 0]), (empty, [0, 0, 0, 400])):
        estimate = [*release["counts"], release["no_value"]]
        std = [*release["std"], release["no_value_std"]]
        assert all(abs(e - t) <= 4 * s for e, t, s in zip(estimate, truth, std, strict=True))
    assert full["no_value"] < 100 < empty["no_value"]
