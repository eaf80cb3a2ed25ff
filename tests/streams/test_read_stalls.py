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


def test_read_again_seeks_only_the_stalled_partitions_back() -> None:
    """:meth:`ReadStalls.read_again` asks the consumer each partition's position and seeks
    those that stood still past their reader's offset back to it; a partition whose position
    the consumer cannot give (a rebalance took it) is left."""
    import asyncio

    from faust.types import TP

    a, b, gone = TP("t", 0), TP("t", 1), TP("t", 2)

    class Consumer:
        def __init__(self) -> None:
            self.positions = {a: 9, b: 5}
            self.seeks: list[tuple[TP, int]] = []

        async def position(self, tp: TP) -> int:
            if tp not in self.positions:
                raise KeyError(tp)
            return self.positions[tp]

        async def seek(self, tp: TP, offset: int) -> None:
            self.seeks.append((tp, offset))
            self.positions[tp] = offset

    async def run() -> None:
        consumer, stalls = Consumer(), ReadStalls(after_s=0.0)
        expected = {a: 5, b: 5, gone: 3}
        assert await stalls.read_again(consumer, expected) == []  # first look
        assert await stalls.read_again(consumer, expected) == [(a, 9, 5)]
        assert consumer.seeks == [(a, 5)]
        assert await stalls.read_again(consumer, expected) == []  # at its offset now

    async def markers_only() -> None:  # the offsets between hold nothing to read again
        consumer, stalls = Consumer(), ReadStalls(after_s=0.0)
        told: list = []

        async def dropped(tp: TP, offset: int, position: int) -> bool:
            told.append((tp, offset, position))
            return False

        assert await stalls.read_again(consumer, {a: 5}, dropped) == []
        assert await stalls.read_again(consumer, {a: 5}, dropped) == []
        assert told == [(a, 5, 9)] and consumer.seeks == []

    asyncio.run(run())
    asyncio.run(markers_only())
