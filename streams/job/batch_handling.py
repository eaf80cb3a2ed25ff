"""A batch handler's side of the batched ingest (:mod:`streams.job.worker.ingest`): the records it
receives (:data:`RawRecord`), what it may answer (:data:`BatchHandler`, :class:`Rewind`), and
:class:`ContinuityGuard`, which tells a handler when a batch skipped records and must be
answered with a rewind. Nothing here touches Faust."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Sequence

__all__ = ["BatchHandler", "ContinuityGuard", "RawRecord", "Rewind"]

logger = logging.getLogger(__name__)

#: One raw record: ``(key, value, partition, offset)``.
RawRecord = tuple[bytes | None, bytes | None, int, int]


@dataclasses.dataclass(frozen=True)
class Rewind:
    """A handler's answer when records it needs were not delivered (the consumer stands past
    them): the partition is read again from ``offset``, and nothing from there on is
    acknowledged."""

    offset: int


#: Receives the records of one fetched batch; all of them come from one partition, in offset order.
#: It may return an offset: records from that offset on are then left unacknowledged (not
#: committed), so that after a restart they are delivered again; a :class:`Rewind`, to have them
#: delivered again now; ``None`` acknowledges the batch.
BatchHandler = Callable[[list[RawRecord]], Awaitable[int | Rewind | None]]


class ContinuityGuard:
    """Checks that each partition's records continue where the handler's state left off.

    A partition's state knows the next offset it expects; Kafka offsets of a topic written
    without transactions are consecutive. A batch whose first new record lies beyond that
    offset means records were fetched but never delivered (a batch dropped while a rebalance
    stopped the flow, a consumer position carried over from before a hand-over): counting on
    would lose them. :meth:`check` then answers :class:`Rewind`, once per expected offset; if
    the same gap comes back, the records are gone from the broker (retention, or transaction
    markers), and the batch is taken, with the gap logged and counted.
    """

    def __init__(self, topic: str = "") -> None:
        self.topic = topic
        self.rewound: dict[int, int] = {}
        self.rewinds = 0
        self.skipped = 0

    def check(self, partition: int, expected: int, records: Sequence[RawRecord]) -> Rewind | None:
        """``None`` when ``records`` continue at ``expected`` (or hold nothing new), else a
        :class:`Rewind` to ``expected`` the first time this gap is seen."""
        first = next((r[3] for r in records if r[3] >= expected), None)
        if first is None:
            return None
        if first == expected:
            self.rewound.pop(partition, None)
            return None
        if self.rewound.get(partition) == expected:
            del self.rewound[partition]
            self.skipped += first - expected
            logger.error("%s[%d]: offsets %d to %d are no longer on the broker; going on from %d",
                         self.topic, partition, expected, first - 1, first)
            return None
        self.rewound[partition] = expected
        self.rewinds += 1
        logger.warning("%s[%d]: offset %d was delivered where %d was expected; reading again "
                       "from %d", self.topic, partition, first, expected, expected)
        return Rewind(expected)
