"""The source stage forwards, per (user, slot), exactly the reports a report-by-report check
would: :class:`~streams.job.source.winners.Forwarded` (numpy over a batch) against a plain
model of the rule, over generated batches, re-reads, forgotten partitions and closed slots."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.job.slot_clock import SlotClock
from streams.job.source import winners
from streams.job.source.mapping import MappedBatch
from streams.job.source.winners import Forwarded

SLOT_MS = 10


class Model:
    """The rule report by report: forward a report when it comes before everything forwarded
    for its (user, slot); a later report of the batch that beats it takes its place."""

    def __init__(self) -> None:
        self.best: dict[tuple[str, int], tuple[int, int, int, int]] = {}

    def can_win(self, users: list[str], times: list[int], ti: int, p: int,
                offsets: list[int]) -> list[int]:
        kept: dict[tuple[str, int], int] = {}
        for j, (user, t, off) in enumerate(zip(users, times, offsets, strict=True)):
            key, pos = (user, t // SLOT_MS), (t, ti, p, off)
            if key in self.best and self.best[key] <= pos:
                continue
            self.best[key] = pos
            kept[key] = j
        return sorted(kept.values())

    def forget_before(self, slot: int) -> None:
        self.best = {k: v for k, v in self.best.items() if k[1] >= slot}

    def forget(self, ti: int, p: int) -> None:
        self.best = {k: v for k, v in self.best.items() if (v[1], v[2]) != (ti, p)}


def _batch(users: list[str], times: list[int]) -> MappedBatch:
    n = len(users)
    return MappedBatch(np.arange(n, dtype=np.int64), list(users),
                       np.asarray(times, dtype=np.int64), [f"v{j}" for j in range(n)],
                       np.zeros(n, dtype=np.int64), [], {}, [(j,) for j in range(n)])


STEP = st.one_of(
    st.tuples(st.just("batch"), st.integers(0, 1), st.integers(0, 2),
              st.lists(st.tuples(st.integers(0, 7), st.integers(0, 59)), max_size=30)),
    st.tuples(st.just("forget"), st.integers(0, 1), st.integers(0, 2)),
    st.tuples(st.just("close"), st.integers(0, 6)),
)


@settings(max_examples=300, deadline=None)
@given(steps=st.lists(STEP, max_size=25), spare=st.sampled_from([0, 3, 1 << 16]))
def test_the_batch_check_forwards_what_the_report_by_report_rule_forwards(steps, spare):
    old = winners._SPARE
    winners._SPARE = spare  # small: the code table is rebuilt as slots close
    try:
        fast, model = Forwarded(SlotClock(length=SLOT_MS, origin=0)), Model()
        next_offset: dict[tuple[int, int], int] = {}
        for step in steps:
            if step[0] == "batch":
                _kind, ti, p, rows = step
                # a partition's offsets grow; a re-read after forget starts below them again
                start = next_offset.get((ti, p), 0)
                offsets = [start + j for j in range(len(rows))]
                next_offset[(ti, p)] = start + len(rows)
                users, times = [f"u{u}" for u, _t in rows], [t for _u, t in rows]
                want = model.can_win(users, times, ti, p, offsets)
                got, dropped = fast.can_win(_batch(users, times), ti, p, offsets)
                assert got.index.tolist() == want
                assert got.users == [users[j] for j in want]
                assert got.times.tolist() == [times[j] for j in want]
                assert got.values == [f"v{j}" for j in want]
                assert got.extras == [(j,) for j in want]
                assert dropped == len(rows) - len(want)
            elif step[0] == "forget":
                _kind, ti, p = step
                fast.forget(ti, p)
                model.forget(ti, p)
                next_offset[(ti, p)] = max(0, next_offset.get((ti, p), 0) - 5)
            else:
                fast.forget_before(step[1])
                model.forget_before(step[1])
            for (user, slot), pos in model.best.items():
                assert fast.position(user, slot) == pos
            live = {(u, s) for u in fast.codes for s in fast.slots
                    if fast.position(u, s) is not None}
            assert live == set(model.best)
    finally:
        winners._SPARE = old


def test_a_repeated_report_is_not_forwarded_again():
    fast = Forwarded(SlotClock(length=SLOT_MS, origin=0))
    batch = _batch(["a", "b", "a"], [5, 5, 3])
    got, dropped = fast.can_win(batch, 0, 1, [10, 11, 12])
    assert (got.users, got.times.tolist(), dropped) == (["b", "a"], [5, 3], 1)
    again, dropped = fast.can_win(batch, 0, 1, [10, 11, 12])
    assert (again.users, dropped) == ([], 3)
    # the same user and slot from another partition, earlier in event time, can still win
    other, dropped = fast.can_win(_batch(["a", "a"], [2, 1]), 0, 0, [0, 1])
    assert (other.users, other.times.tolist(), dropped) == (["a"], [1], 1)
