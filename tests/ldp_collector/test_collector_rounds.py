"""Two rounds a slot (lbd, lba; mechanisms/local/rounds.py): the collector's decisions and
releases equal the evaluation's from the same perturbed bits, a round nobody asked is refused,
and on a topic of several partitions a report that waits for its decision gives the same outcome
however the partitions are interleaved."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ldp_collector_kit import (
    ORIGIN_MS,
    ROUNDS_START,
    SLOT_MS,
    Replay,
    drifting_cells,
    every_cell,
    live_topic,
    oue_split,
    padded,
    rounds_in_process,
)

from mechanisms.baselines.ldp_ids import LdpIds
from mechanisms.local import CounterWords
from mechanisms.local.rounds import Decision
from streams.job.partitions.key_hashing import key_partitions
from streams.ldp_client import LdpClient, ReportConfig
from streams.ldp_collector import LdpCollector
from streams.ldp_collector.stream_time import PartitionedCollector

START = ROUNDS_START
SECRET = b"rounds-secret"
STREAM = "s"


def decision_of(out: dict, protocol: str) -> Decision:
    return Decision(STREAM, protocol, out["decision"], out["eps"], out["next"])


@pytest.mark.parametrize("protocol", ["lbd", "lba"])
def test_decisions_and_releases_are_the_evaluations_from_the_same_bits(protocol: str) -> None:
    users, slots, d, w, E = 400, 12, 4, 3, 4.0
    cells = drifting_cells(users, slots, d, seed=7)
    decisions, releases, first, second = rounds_in_process(protocol, cells, d, w, E)
    assert [r["slot"] for r in releases] == list(range(START, START + slots))
    published = [r["published"] for r in releases]
    assert 2 <= sum(published) < slots  # the test publishes at the jumps, not everywhere
    draws = []
    for t in range(slots):
        d1 = decisions[t - 1]["next"] if t else E / (2 * w)
        if d1 > 0:
            own, others = oue_split(first[t], d + 1)
            draws += [(0.5, own), (1.0 / (np.exp(d1) + 1.0), others)]
        else:
            assert first[t] == []  # a nullified slot asks nobody
        if decisions[t]["eps"] > 0:
            own, others = oue_split(second[t], d + 1)
            draws += [(0.5, own), (1.0 / (np.exp(decisions[t]["eps"]) + 1.0), others)]
        else:
            assert second[t] == []
    replay = Replay(draws)
    evaluation = LdpIds(protocol, w, E, users, d + 1, replay)  # type: ignore[arg-type]
    for t, release in enumerate(releases):
        out = evaluation.step(padded(cells[:, t], d))
        assert out.published == release["published"]
        assert out.eps2 == decisions[t]["eps"]
        assert out.eps1 == (decisions[t - 1]["next"] if t else E / (2 * w))
        if out.eps1 > 0:  # the evaluation's active users are the round's reporters
            assert release["reporters"] == users  # with a value or without
            np.testing.assert_allclose(every_cell(release), out.histogram, rtol=0, atol=1e-6)
        else:  # nullified: the last estimate again, times the last asked round's reporters
            assert release["estimated_at"] == releases[t - 1]["estimated_at"]
    assert replay.draws == []  # every round drew the clients' bits, in the same order


def test_lba_nullifies_the_slots_a_publication_absorbed() -> None:
    cells = drifting_cells(400, 12, 4, seed=3)
    decisions, releases, first, _ = rounds_in_process("lba", cells, 4, 3, 4.0)
    nullified = [t for t in range(1, 12) if decisions[t - 1]["next"] == 0]
    assert nullified and all(first[t] == [] for t in nullified)
    assert all(decisions[t]["eps"] == 0 for t in nullified)


def test_a_round_nobody_asked_is_refused() -> None:
    d, w, E = 3, 2, 1.0
    collector = LdpCollector("lbd", d, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=START,
                             E=E, w=w)
    client = LdpClient(ReportConfig("lbd", "u0", d=d, w=w, E=E, start=START),
                       words=CounterWords("refusals"))
    other = LdpClient(ReportConfig("lbd", "u1", d=d, w=w, E=E, start=START),
                      words=CounterWords("refusals/1"))
    stamp = ORIGIN_MS + START * SLOT_MS
    early = client.answer(Decision(STREAM, "lbd", START, 0.25, 0.25), 1)
    assert collector.offer(b"u0", early, stamp) == ("unasked_round", early)  # not decided yet
    assert collector.offer(b"u1", other.report(START, 2), stamp) is None
    (decided,) = collector.close_until(stamp + SLOT_MS)
    assert decided == {"decision": START, "eps": 0.0, "next": 0.25}  # no publication round
    forged = other.answer(Decision(STREAM, "lbd", START, 0.125, 0.25), 2)
    assert collector.offer(b"u1", forged, stamp + SLOT_MS).reason == "unasked_round"
    again = other.report(START + 1, 2, decision_of(decided, "lbd"))
    assert collector.offer(b"u1", again, stamp + SLOT_MS) is None
    assert collector.offer(b"u1", again, stamp + SLOT_MS).reason == "duplicate_in_slot"


def replay(parts: list[list[tuple]], protocol: str, d: int, w: int, E: float,  # noqa: N803
           order: list[tuple[int, int]]) -> tuple[list, list, list]:
    """Read the partitions in chunks in ``order`` ((partition, size), then the rest): the
    decisions, releases and refusals."""
    inner = LdpCollector(protocol, d, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=START, E=E,
                         w=w)
    stream = PartitionedCollector(inner, len(parts), SECRET, STREAM)
    at = [0] * len(parts)
    decisions, releases, refused = [], [], []
    for p, size in [*order, *[(p, len(parts[p])) for p in range(len(parts))]]:
        chunk = parts[p][at[p]:at[p] + size]
        at[p] += len(chunk)
        refused += [(p, r) for r in stream.take(p, chunk)]
        out = stream.advance()
        decisions += out.decisions
        releases += out.releases
        refused += [(w.partition, w.refused) for w in out.refused]
    return decisions, releases, sorted(refused, key=lambda x: (x[1].offset, x[1].reason))


@settings(max_examples=12, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(1, 40)), max_size=30))
def test_waiting_reports_give_one_outcome_however_partitions_interleave(order: list) -> None:
    parts, written = TOPIC
    decisions, releases, refused = replay(parts, "lbd", 4, 3, 4.0, order)
    expected = replay(parts, "lbd", 4, 3, 4.0, [])
    assert [v for _, v in decisions] == written  # the live decisions, rebuilt
    assert (decisions, releases) == expected[:2]
    assert sorted((r.offset, r.reason) for _, r in refused) == sorted(
        (r.offset, r.reason) for _, r in expected[2])


def _topic() -> tuple[list[list[tuple]], list[bytes]]:
    cells = drifting_cells(60, 8, 4, seed=11)
    return live_topic("lbd", cells, 4, 3, 4.0, partitions=3, secret=SECRET, stream=STREAM)


TOPIC = _topic()


def test_a_report_that_cannot_have_seen_its_decision_is_refused_not_waited_for() -> None:
    parts, _ = TOPIC
    client = LdpClient(ReportConfig("lbd", "zed", d=4, w=3, E=4.0, start=START),
                       words=CounterWords("zed"))
    home = int(key_partitions([b"zed"], 3)[0])
    premature = client.answer(Decision(STREAM, "lbd", START + 1, 0.5, 2 / 3), 1)
    # placed before its partition's watermark of slot START + 1's end: no client could have
    # seen that decision yet, so it must not hold the partition (which would hold the stream)
    at = next(i for i, r in enumerate(parts[home]) if r[0] is None and i > 0 and
              sum(1 for x in parts[home][:i] if x[0] is None) == 1)
    changed = [list(p) for p in parts]
    changed[home].insert(at, (b"zed", premature, -1))
    changed[home] = [(k, v, i) for i, (k, v, _) in enumerate(changed[home])]
    decisions, releases, refused = replay(changed, "lbd", 4, 3, 4.0, [])
    assert [(r.offset, r.reason) for _, r in refused] == [(at, "unasked_round")]
    # every slot closed as without it: 8 decisions, 7 releases (the last slot's publication
    # round would close at the next slot's end, which the topic has not reached)
    assert (decisions, releases) == replay(parts, "lbd", 4, 3, 4.0, [])[:2]
    assert len(decisions) == 8 and len(releases) == 7
