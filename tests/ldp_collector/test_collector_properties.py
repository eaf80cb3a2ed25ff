"""Properties over arrival orders: no user is counted twice in a slot, every record is counted or
dead-lettered, and when each user's reports arrive in slot order (as one Kafka partition keeps
them) the releases do not depend on how users interleave."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from ldp_collector_kit import ORIGIN_MS, SLOT_MS, Sent, client_reports

from mechanisms.local import parse_report
from streams.ldp_collector import REASONS, LdpCollector

START, SLOTS, D, USERS = 3, 4, 8, 12
REQUIREMENTS = [[(4, 1.0), (2, 1.0), (1, 1.0), (1, 2.0)][i % 4] for i in range(USERS)]
_rng = np.random.default_rng(5)
CELLS = np.where(_rng.random((USERS, SLOTS)) < 0.2, -1, _rng.integers(0, D, (USERS, SLOTS)))
FIRST = client_reports("plbu", CELLS, d=D, start=START, requirements=REQUIREMENTS)
# the same users again, other words and values: a second report for their slots
SECOND = client_reports("plbu", np.where(CELLS < 0, -1, (CELLS + 3) % D), d=D, start=START,
                        requirements=REQUIREMENTS, seed="again")
SETTINGS = settings(max_examples=40, deadline=None)


def run(sent: list[Sent]) -> tuple[list[bool], list[str], list[dict]]:
    """Offer every record in order: whether each was counted, the dead letters' reasons, then
    every slot's release."""
    collector = LdpCollector("plbu", D, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=START)
    outcome = [collector.offer(*s.record) for s in sent]
    releases = [collector.close(s) for s in range(START, START + SLOTS)]
    return [o is None for o in outcome], [o.reason for o in outcome if o is not None], releases


EXPECTED = run(FIRST)[2]


def test_the_stream_mixes_oracles_and_second_reports() -> None:
    assert {parse_report(s.value).oracle for s in FIRST} == {"oue", "grr"}
    assert [(s.user, s.slot) for s in FIRST] == [(s.user, s.slot) for s in SECOND]
    assert any(r["reporters"] > 0 for r in EXPECTED)


@SETTINGS
@given(st.randoms(use_true_random=False), st.integers(0, len(SECOND)))
def test_no_user_counted_twice_whatever_the_order(shuffle: random.Random, extra: int) -> None:
    sent = FIRST + SECOND[:extra] + FIRST[: extra // 2]  # resent, and made again
    shuffle.shuffle(sent)
    counted, reasons, releases = run(sent)
    assert len(counted) == len(sent) and set(reasons) <= set(REASONS)
    kept = [(s.user, s.slot) for s, c in zip(sent, counted, strict=True) if c]
    assert len(kept) == len(set(kept))
    for release in releases:
        senders = {s.user for s in sent if s.slot == release["slot"]}
        assert release["reporters"] == sum(slot == release["slot"] for _, slot in kept)
        assert release["reporters"] <= len(senders)


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_interleaving_users_changes_nothing(shuffle: random.Random) -> None:
    order = list(FIRST)
    shuffle.shuffle(order)
    by_user: dict[str, list[Sent]] = {}
    for s in sorted(FIRST, key=lambda s: s.slot):
        by_user.setdefault(s.user, []).append(s)
    interleaved = [by_user[s.user].pop(0) for s in order]  # each user's own order kept
    counted, reasons, releases = run(interleaved)
    assert all(counted) and reasons == []
    assert releases == EXPECTED
    for release in releases:
        assert release["reporters"] == sum(s.slot == release["slot"] for s in FIRST)


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_the_first_report_of_a_slot_is_the_one_kept(shuffle: random.Random) -> None:
    """With a second report for every (user, slot) arriving anywhere after the first, the
    releases are those of the first reports alone."""
    pairs = list(zip(FIRST, SECOND, strict=True))
    assert all((a.user, a.slot) == (b.user, b.slot) for a, b in pairs)
    sent = list(FIRST)
    for a, b in pairs:
        sent.insert(shuffle.randint(sent.index(a) + 1, len(sent)), b)
    counted, reasons, releases = run(sent)
    assert sum(counted) == len(FIRST) and set(reasons) <= {"duplicate_in_slot", "not_after_last"}
    assert releases == EXPECTED

