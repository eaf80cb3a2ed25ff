"""Slotting, watermark, late/future classification and first-wins deduplication."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.job.partitions.slotting import DUPLICATE, FUTURE, LATE, OK, SlotClock, Slotter

T0 = 1_700_000_000_000
MIN = 60_000


def users(*names: str) -> np.ndarray:
    out = np.empty(len(names), dtype=object)
    out[:] = list(names)
    return out


def reference(
    clock: SlotClock,
    lateness: int,
    horizon: int,
    rows: list[tuple[str, int]],
    watermark: int | None = None,
) -> tuple[list[int], int | None]:
    """Plain one-report-at-a-time statement of the rules."""
    seen: set[tuple[str, int]] = set()
    out = []
    for user, t in rows:
        slot = (t - clock.origin) // clock.length
        end = clock.origin + (slot + 1) * clock.length
        if watermark is not None and t > watermark + horizon:
            out.append(FUTURE)
            continue
        if watermark is not None and watermark >= end:
            out.append(LATE)
            continue
        watermark = t - lateness if watermark is None else max(watermark, t - lateness)
        if (user, slot) in seen:
            out.append(DUPLICATE)
        else:
            seen.add((user, slot))
            out.append(OK)
    return out, watermark


def test_slot_arithmetic() -> None:
    clock = SlotClock(MIN, T0)
    assert clock.slot_of(np.array([T0, T0 + MIN - 1, T0 + MIN, T0 - 1])).tolist() == [0, 0, 1, -1]
    assert clock.start(2) == T0 + 2 * MIN and clock.end(2) == T0 + 3 * MIN
    assert clock.last_closed(T0 + 3 * MIN) == 2
    assert clock.last_closed(T0 + 3 * MIN - 1) == 1
    with pytest.raises(ValueError):
        SlotClock(0)


def test_watermark_closes_slots_and_late_reports() -> None:
    s = Slotter(SlotClock(MIN, T0), allowed_lateness=10_000, horizon=10 * MIN)
    a = s.assign(users("a", "b"), np.array([T0 + 5_000, T0 + 30_000]))
    assert a.status.tolist() == [OK, OK]
    assert a.watermark == T0 + 20_000 and a.closed == []
    # watermark reaches the end of slot 0 only once max time - lateness >= T0 + MIN
    a = s.assign(users("c"), np.array([T0 + MIN + 9_999]))
    assert a.closed == [] and not s.is_closed(0)
    a = s.assign(users("d", "e"), np.array([T0 + MIN + 10_000, T0 + 59_000]))
    assert a.status.tolist() == [OK, LATE]
    assert a.closed == [0] and s.is_closed(0)
    assert a.slots.tolist() == [1, 0]
    assert s.open_slots() == [1]


def test_within_a_batch_a_slot_can_close_before_a_later_report() -> None:
    s = Slotter(SlotClock(MIN, T0), allowed_lateness=0, horizon=10 * MIN)
    a = s.assign(users("a", "b", "c"), np.array([T0 + 10, T0 + MIN + 1, T0 + 20]))
    assert a.status.tolist() == [OK, OK, LATE]
    assert a.closed == [0]


def test_future_reports_do_not_move_the_watermark() -> None:
    s = Slotter(SlotClock(MIN, T0), allowed_lateness=0, horizon=5 * MIN)
    s.assign(users("a"), np.array([T0]))
    a = s.assign(users("x", "b"), np.array([T0 + 365 * 24 * 60 * MIN, T0 + 1_000]))
    assert a.status.tolist() == [FUTURE, OK]
    assert s.watermark == T0 + 1_000
    # within the horizon is fine, and it advances the watermark
    a = s.assign(users("c"), np.array([T0 + 5 * MIN]))
    assert a.status.tolist() == [OK] and a.closed == [0, 1, 2, 3, 4]


def test_first_report_wins_across_batches() -> None:
    s = Slotter(SlotClock(MIN, T0), allowed_lateness=MIN, horizon=10 * MIN)
    a = s.assign(users("a", "a", "b"), np.array([T0 + 1, T0 + 2, T0 + MIN + 5]))
    assert a.status.tolist() == [OK, DUPLICATE, OK]
    a = s.assign(users("a", "b", "a"), np.array([T0 + MIN + 1, T0 + MIN + 2, T0 + 3]))
    assert a.status.tolist() == [OK, DUPLICATE, DUPLICATE]
    assert s.seen(0) == {"a"} and s.seen(1) == {"a", "b"}


def test_initial_watermark_and_restore() -> None:
    s = Slotter(SlotClock(MIN, T0), horizon=MIN, initial_watermark=T0 + 2 * MIN)
    a = s.assign(users("a", "b", "c"), np.array([T0, T0 + 2 * MIN + 5, T0 + 9 * MIN]))
    assert a.status.tolist() == [LATE, OK, FUTURE]
    other = Slotter(SlotClock(MIN, T0), horizon=MIN)
    other.restore(s.watermark, {2: s.seen(2)}, s.first_slot)
    b = other.assign(users("b"), np.array([T0 + 2 * MIN + 9]))
    assert b.status.tolist() == [DUPLICATE]


def test_empty_batch() -> None:
    s = Slotter(SlotClock(MIN, T0))
    a = s.assign(users(), np.array([], dtype=np.int64))
    assert a.status.size == 0 and a.watermark is None and a.closed == []


rows_strategy = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 40)), min_size=1, max_size=60
)


@settings(max_examples=150, deadline=None)
@given(
    rows=rows_strategy,
    cuts=st.lists(st.integers(0, 60), max_size=6),
    lateness=st.integers(0, 6),
    horizon=st.integers(0, 12),
    initial=st.one_of(st.none(), st.integers(-5, 20)),
)
def test_property_batches_equal_one_by_one(
    rows: list[tuple[str, int]],
    cuts: list[int],
    lateness: int,
    horizon: int,
    initial: int | None,
) -> None:
    clock = SlotClock(5, 0)
    expected, final_wm = reference(clock, lateness, horizon, rows, initial)
    slotter = Slotter(clock, allowed_lateness=lateness, horizon=horizon, initial_watermark=initial)
    got: list[int] = []
    closed: list[int] = []
    bounds = sorted({0, len(rows), *[c for c in cuts if c < len(rows)]})
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        part = rows[lo:hi]
        a = slotter.assign(users(*[u for u, _ in part]), np.array([t for _, t in part]))
        got.extend(a.status.tolist())
        closed.extend(a.closed)
    assert got == expected
    assert slotter.watermark == final_wm
    # each slot closes once, in order, and exactly the slots the watermark passed
    assert closed == sorted(set(closed))
    if final_wm is not None and slotter.first_slot is not None:
        assert closed == list(range(slotter.first_slot, clock.last_closed(final_wm) + 1))
