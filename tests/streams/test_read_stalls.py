"""A partition whose consumer stands past what its reader was handed is read again only once
that offset has stood still for the whole wait (streams/job/worker/read_stalls.py)."""

from __future__ import annotations

from streams.job.worker.read_stalls import ReadStalls


def test_a_partition_is_read_again_only_after_standing_still_past_its_offset() -> None:
    stalls = ReadStalls(after_s=10.0)
    assert not stalls.stalled("p", 5, 9, now=0.0)  # first look: the wait starts
    assert not stalls.stalled("p", 5, 9, now=9.9)
    assert stalls.stalled("p", 5, 9, now=10.0)  # fetched 5-8, never handed over
    assert not stalls.stalled("p", 5, 9, now=15.0)  # the wait starts again after a read
    assert stalls.stalled("p", 5, 9, now=20.0)


def test_a_partition_that_moves_or_is_not_past_its_offset_is_left_alone() -> None:
    stalls = ReadStalls(after_s=10.0)
    assert not stalls.stalled("p", 5, 9, now=0.0)
    assert not stalls.stalled("p", 7, 9, now=11.0)  # records arrived: the wait starts again
    assert not stalls.stalled("p", 7, 9, now=20.0)
    assert stalls.stalled("p", 7, 9, now=21.0)
    for position in (None, 7, 3):  # unknown, at the offset, or behind it (read again)
        assert not stalls.stalled("q", 7, position, now=0.0)
        assert not stalls.stalled("q", 7, position, now=100.0)
    stalls.stalled("r", 1, 4, now=0.0)
    stalls.clear()  # the flow stopped: nothing was expected meanwhile
    assert not stalls.stalled("r", 1, 4, now=50.0)
