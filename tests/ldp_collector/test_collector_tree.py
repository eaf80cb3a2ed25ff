"""MTSP-LDP on devices (mtsp; mechanisms/local/tree.py, tree_planner.py): the collector's
decisions and releases are the evaluation's from the same perturbed bits, each user reports at
its public level and answers over the decision's intervals, reports of another width are
refused, and the released intervals hold the true counts within their bars."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ldp_collector_kit import (
    LPU_KEY,
    ORIGIN_MS,
    ROUNDS_START,
    SLOT_MS,
    Replay,
    drifting_cells,
    every_cell,
    padded,
    rounds_in_process,
)

from mechanisms.baselines.mtsp_ldp import MtspLdp
from mechanisms.baselines.private_tree import group_sizes
from mechanisms.local import CounterWords, parse_report
from mechanisms.local.population import position
from mechanisms.local.rounds import Decision
from mechanisms.local.tree import level_cells, node_of, tree_height, tree_level, tree_levels
from streams.ldp_client import LdpClient, ReportConfig
from streams.ldp_collector import LdpCollector

D, W, E = 5, 3, 4.0
CELLS = D + 1
H = tree_height(CELLS)


def balanced_users(n: int) -> list[str]:
    """``n`` users whose public levels split them as the evaluation's near-equal groups do."""
    want = group_sizes(n, H).tolist()
    have = [0] * H
    users = []
    i = 0
    while len(users) < n:
        user = f"t{i}"
        level = tree_level(position(LPU_KEY, user), H)
        if have[level - 1] < want[level - 1]:
            have[level - 1] += 1
            users.append(user)
        i += 1
    return users


def level_draws(sent: list, t_cells: np.ndarray, users: list[str], q: float) -> list[tuple]:
    """The evaluation's M1 draws that give the devices' round 1: per level, the group's cells
    and the 1-bits of the users at their node and at the others."""
    at = {u: tree_level(position(LPU_KEY, u), H) for u in users}
    by_user = {s.user: s for s in sent}
    draws = []
    remaining = np.bincount(t_cells, minlength=2**H)
    for level in range(1, H + 1):
        members = [u for u in users if at[u] == level]
        cells = np.array([by_user[u].cell for u in members], dtype=np.int64)
        group = np.bincount(cells, minlength=2**H)
        remaining = remaining - group
        width = level_cells(CELLS, H, level)
        bits = np.array([parse_report(by_user[u].value).bits for u in members], dtype=bool)
        own = np.arange(width)[None, :] == np.array([node_of(c, H, level) for c in cells])[:, None]
        draws += [("group", len(members), group), (0.5, (bits & own).sum(axis=0)),
                  (q, (bits & ~own).sum(axis=0))]
    return draws


def interval_draws(answers: list, starts: tuple[int, ...], eps: float) -> list[tuple]:
    """The evaluation's M3 draws that give the devices' round 2."""
    k = len(starts)
    owner = np.searchsorted(starts, [s.cell for s in answers], side="right") - 1
    bits = np.array([parse_report(s.value).bits for s in answers], dtype=bool).reshape(-1, k)
    own = np.arange(k)[None, :] == owner[:, None]
    return [(0.5, (bits & own).sum(axis=0)),
            (1.0 / (np.exp(eps) + 1.0), (bits & ~own).sum(axis=0))]


def test_decisions_and_releases_are_the_evaluations_from_the_same_bits() -> None:
    users = balanced_users(480)
    slots = 12
    cells = drifting_cells(len(users), slots, D, seed=11)
    decisions, releases, first, second = rounds_in_process("mtsp", cells, D, W, E, users)
    published = [r["published"] for r in releases]
    assert 2 <= sum(published) < slots  # the test publishes, not everywhere
    q1 = 1.0 / (np.exp(E / (2.0 * W)) + 1.0)
    draws: list[tuple] = []
    for t in range(slots):
        draws += level_draws(first[t], padded(cells[:, t], D), users, q1)
        if decisions[t]["eps"] > 0:
            draws += interval_draws(second[t], tuple(decisions[t]["starts"]),
                                    decisions[t]["eps"])
        else:
            assert second[t] == [] and decisions[t]["starts"] == []
    replay = Replay(draws)
    evaluation = MtspLdp(W, E, len(users), CELLS, replay)  # type: ignore[arg-type]
    for t, release in enumerate(releases):
        out = evaluation.step(padded(cells[:, t], D))
        assert out.published == release["published"]
        assert out.eps2 == decisions[t]["eps"]
        assert release["reporters"] == len(users)  # with a value or without
        np.testing.assert_allclose(every_cell(release), out.histogram, rtol=0, atol=1e-6)
        if out.published:
            assert out.intervals == len(decisions[t]["starts"])
    assert replay.draws == []  # every round drew the clients' bits, in the same order


def test_each_user_reports_its_level_and_answers_the_intervals() -> None:
    users = [f"v{i}" for i in range(300)]
    cells = drifting_cells(len(users), 8, D, seed=5)
    decisions, releases, first, second = rounds_in_process("mtsp", cells, D, W, E, users)
    for t in range(8):
        assert len(first[t]) == len(users)  # M1 asks everybody every slot
        for s in first[t]:
            report = parse_report(s.value)
            level = tree_level(position(LPU_KEY, s.user), H)
            assert report.cells == level_cells(CELLS, H, level) and report.round == 1
            assert report.eps == E / (2 * W)
        starts = decisions[t]["starts"]
        for s in second[t]:
            report = parse_report(s.value)
            assert report.cells == len(starts) and report.eps == decisions[t]["eps"] <= E / 2
    # OBA keeps any w slots' publications within E/2
    spent = [d["eps"] for d in decisions]
    assert all(sum(spent[i : i + W]) <= E / 2 * (1 + 1e-9) for i in range(len(spent)))


@given(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=50), st.integers(1, 16))
def test_levels_of_a_batch_are_each_positions_level(at: list[int], h: int) -> None:
    assert tree_levels(np.array(at, dtype=np.uint64), h).tolist() == \
        [tree_level(a, h) for a in at]
    assert set(tree_levels(np.array([0, 2**32 - 1]), h).tolist()) == {1, h}


def test_a_report_of_another_width_is_refused() -> None:
    collector = LdpCollector("mtsp", D, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=ROUNDS_START,
                             E=E, w=W, lpu_key=LPU_KEY)
    user = next(f"x{i}" for i in range(100) if tree_level(position(LPU_KEY, f"x{i}"), H) == 1)
    right = LdpClient(ReportConfig("mtsp", user, d=D, w=W, E=E, start=ROUNDS_START,
                                   lpu_key=LPU_KEY), words=CounterWords("w"))
    other = next(f"k{j}" for j in range(100) if tree_level(position(f"k{j}", user), H) == H)
    wrong_key = LdpClient(ReportConfig("mtsp", user, d=D, w=W, E=E, start=ROUNDS_START,
                                       lpu_key=other), words=CounterWords("w"))
    stamp = ORIGIN_MS + ROUNDS_START * SLOT_MS + 5
    forged = wrong_key.report(ROUNDS_START, 2)
    assert parse_report(forged).cells != level_cells(CELLS, H, 1)  # another level
    dead = collector.offer_all([(user.encode(), forged, stamp)])
    assert [d.reason for d in dead] == ["unasked_round"]
    assert collector.offer_all([(user.encode(), right.report(ROUNDS_START, 2), stamp)]) == []


@pytest.mark.parametrize("seed", [1, 2])
def test_released_intervals_hold_the_true_counts_within_their_bars(seed: int) -> None:
    users = [f"c{i}" for i in range(1500)]
    cells = drifting_cells(len(users), 9, D, seed=seed)
    decisions, releases, _, second = rounds_in_process("mtsp", cells, D, W, E, users)
    checked = 0
    for t, release in enumerate(releases):
        if not release["published"]:
            continue
        intervals = release["intervals"]
        starts = intervals["starts"]
        truth = np.bincount(np.searchsorted(starts, [s.cell for s in second[t]], side="right")
                            - 1, minlength=len(starts))
        gap = np.abs(np.array(intervals["counts"]) - truth)
        assert np.all(gap <= 4 * np.array(intervals["std"]))
        owner = np.searchsorted(starts, np.arange(CELLS), side="right") - 1
        alone = (np.diff([*starts, CELLS]) == 1)[owner]  # a cell its interval's only one
        bars = [*release["std"], release["no_value_std"]]
        assert [b is not None for b in bars] == alone.tolist()
        checked += 1
    assert checked >= 1


def test_a_decision_past_the_cells_or_over_half_the_budget_is_refused() -> None:
    client = LdpClient(ReportConfig("mtsp", "z", d=D, w=W, E=E, start=0, lpu_key=LPU_KEY),
                       words=CounterWords("z"))
    assert client.report(0, 1) is not None
    with pytest.raises(ValueError, match="past"):
        client.answer(Decision("s", "mtsp", 0, 0.5, E / (2 * W), starts=(0, CELLS)), 1)
    with pytest.raises(ValueError, match="E/2"):
        client.answer(Decision("s", "mtsp", 0, E, E / (2 * W), starts=(0, 2)), 1)
    report = parse_report(client.answer(Decision("s", "mtsp", 0, 0.5, E / (2 * W),
                                                 starts=(0, 2, 4)), 3))
    assert report.cells == 3 and report.round == 2


def test_interval_bars_cover_the_true_counts_95_percent_of_the_time() -> None:
    """Over many seeded streams' first publications, drawn as the clients draw (uniform words
    against the integer thresholds), each interval's count +- 1.96 std holds the true count of
    the users answering it 95% of the time (within the sampling error of the runs)."""
    from mechanisms.local import HALF_WORD, oue_threshold
    from mechanisms.local.tree_planner import TreePlanner, TreeReports

    rng = np.random.default_rng(2026)
    users, runs, truth_p = 400, 600, np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
    inside = total = 0
    for _ in range(runs):
        planner = TreePlanner(W, E, CELLS, 0)
        cells = rng.choice(CELLS, size=users, p=truth_p)
        level = rng.integers(1, H + 1, size=users)
        groups = np.bincount(level - 1, minlength=H)
        ones = np.zeros(2 ** (H + 1) - 1, dtype=np.int64)
        q1 = oue_threshold(E / (2 * W))
        for lv in range(1, H + 1):
            width = level_cells(CELLS, H, lv)
            mine = cells[level == lv] >> (H - lv)
            words = rng.integers(0, 2**32, size=(mine.size, width), dtype=np.uint32)
            own = np.arange(width)[None, :] == mine[:, None]
            bits = np.where(own, words < HALF_WORD, words < np.uint32(q1))
            ones[(1 << lv) - 1 : (1 << lv) - 1 + width] = bits.sum(axis=0)
        outcome = planner.decide(TreeReports(groups, ones))
        if outcome.eps == 0:
            continue
        starts = outcome.starts
        owner = np.searchsorted(starts, cells, side="right") - 1
        k = len(starts)
        words = rng.integers(0, 2**32, size=(users, k), dtype=np.uint32)
        own = np.arange(k)[None, :] == owner[:, None]
        bits = np.where(own, words < HALF_WORD, words < np.uint32(oue_threshold(outcome.eps)))
        planner.publish(0, users, bits.sum(axis=0))
        got = planner.intervals
        assert got is not None
        true = np.bincount(owner, minlength=k)
        inside += int((np.abs(got.frequency * users - true)
                       <= 1.96 * users * np.sqrt(got.variance)).sum())
        total += k
    assert total >= 1000
    assert abs(inside / total - 0.95) <= 3 * np.sqrt(0.05 * 0.95 / total) + 0.005
