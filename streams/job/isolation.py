"""Taking the records whose processing raises out of a batch, so one record never stops a worker.

The decoders of input records never raise on bad input by design: they reject it with a reason
(:mod:`streams.records.json_limits` bounds what they decode). Should a record still make a batch's
processing raise (a case nobody foresaw), retrying the batch would raise again, after every
restart, and stop the job for good. :func:`isolated` runs a *pure* step (decoding, mapping: no
state changes) over a batch; when it raises, it bisects the batch to find the records on which
the step raises alone, logs each once with its topic, partition and offset, and runs the step
on the others. The caller dead-letters the isolated records as ``unprocessable`` and goes on,
so the batch is acknowledged past them and a restarted worker never meets them again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import TypeVar

from streams.records.field_formats import Reason
from streams.records.field_parsing import Rejection

__all__ = ["isolated"]

log = logging.getLogger("pwevent.job")

T = TypeVar("T")
R = TypeVar("R")


def _failing(items: Sequence[T], positions: list[int], step: Callable[[list[T]], object],
             found: dict[int, Exception]) -> None:
    """Add to ``found`` the positions among ``positions`` on which ``step`` raises alone."""
    try:
        step([items[i] for i in positions])
        return
    except Exception as exc:  # noqa: BLE001 - any failure is what is looked for
        if len(positions) == 1:
            found[positions[0]] = exc
            return
    half = len(positions) // 2
    _failing(items, positions[:half], step, found)
    _failing(items, positions[half:], step, found)


def isolated(items: Sequence[T], step: Callable[[list[T]], R],
             where: Callable[[int], tuple[str, int, int]]
             ) -> tuple[list[int], R, list[Rejection]]:
    """Run ``step`` on ``items``; when it raises, on the items it does not raise on.

    Returns the positions the result covers (all of them, in order, unless some were taken
    out), ``step``'s result on those items (its own indices refer to that list), and an
    ``unprocessable`` rejection per item taken out. ``where(i)`` names item ``i`` as (topic,
    partition, offset) for the log. Raises when ``step`` fails on the batch although no item
    fails alone (a fault of the step, not of the input)."""
    try:
        return list(range(len(items))), step(list(items)), []
    except Exception:  # noqa: BLE001 - looked into below
        pass
    found: dict[int, Exception] = {}
    _failing(items, list(range(len(items))), step, found)
    keep = [i for i in range(len(items)) if i not in found]
    result = step([items[i] for i in keep])
    rejected = []
    for i, exc in sorted(found.items()):
        topic, partition, offset = where(i)
        detail = f"processing it raised {type(exc).__name__}: {exc}"[:200]
        log.error("%s[%d] offset %d: %s; the record goes to dead-letters as unprocessable",
                  topic, partition, offset, detail)
        rejected.append(Rejection(i, Reason.UNPROCESSABLE, detail))
    return keep, result, rejected
