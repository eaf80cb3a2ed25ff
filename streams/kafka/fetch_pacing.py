"""Pacing of fetches that a broker answers early and empty.

A Kafka broker holds a fetch that finds no new records for up to the request's ``max_wait_time``
(long polling), so an idle consumer costs next to nothing. A broker that answers such a fetch at
once (the embedded broker does) makes every idle consumer send fetches back to back: thousands
a second and most of a core per consumer, which slows everything else on the machine.

:func:`install` makes every aiokafka client of the process wait, after an error-free fetch
answer that carried no records and came back sooner than the request's wait, for the rest of
that wait but at most the client's current pace, before the answer is handed on. The pace starts
at :data:`PACE_S`, doubles with each further early empty answer from the same broker up to
:data:`MAX_PACE_S`, and falls back to :data:`PACE_S` at the first answer with records. A broker
that long-polls never triggers it (its empty answers come after the full wait); on one that does
not, a consumer that just went idle fetches about 1/PACE_S times a second, one idle for longer
about 1/MAX_PACE_S times, and a record produced while it waits is fetched at most the pace
later. ``tests/streams/test_fetch_pacing.py`` checks both on the embedded broker.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

from aiokafka.client import AIOKafkaClient

#: Longest extra wait after the first early empty fetch answer, in seconds.
PACE_S: Final = 0.02
#: Longest extra wait after a run of early empty answers, in seconds (docs/performance.md,
#: "Idle consumers on the embedded broker").
MAX_PACE_S: Final = 0.16
#: The Kafka protocol's API key of Fetch.
_FETCH: Final = 1


def _max_wait_s(request: Any) -> float | None:
    """The fetch's ``max_wait_time`` in seconds, or None for a request that is no fetch."""
    if getattr(request, "API_KEY", None) != _FETCH:
        return None
    wait = getattr(request, "_max_wait_ms", None)  # the request builder of aiokafka >= 0.12
    if wait is None:
        wait = getattr(request, "max_wait_time", None)  # a plain FetchRequest struct
    return None if wait is None else wait / 1000


def empty_answer(response: Any) -> bool:
    """Whether a fetch answer has no records and no error for any partition it names."""
    for _topic, partitions in getattr(response, "topics", ()):
        for _partition, error_code, _highwater, *part_data in partitions:
            if error_code != 0 or (part_data and part_data[-1]):
                return False
    return True


def install() -> None:
    """Pace early empty fetch answers in every aiokafka client of the process (idempotent)."""
    if getattr(AIOKafkaClient.send, "_paces_fetches", False):
        return
    original = AIOKafkaClient.send

    async def send(self: AIOKafkaClient, node_id: Any, request: Any, **kw: Any) -> Any:
        wait = _max_wait_s(request)
        started = time.monotonic()
        response = await original(self, node_id, request, **kw)
        if wait is None:
            return response
        paces: dict[Any, float] = self.__dict__.setdefault("_pwevent_paces", {})
        if not empty_answer(response):
            paces.pop(node_id, None)
            return response
        pace = paces.get(node_id, PACE_S)
        rest = min(wait - (time.monotonic() - started), pace)
        if rest > 0:
            paces[node_id] = min(pace * 2.0, MAX_PACE_S)
            await asyncio.sleep(rest)
        return response

    send._paces_fetches = True  # type: ignore[attr-defined]
    send.unpaced = original  # type: ignore[attr-defined]  # for benchmarks/bench_idle.py
    send.__doc__ = original.__doc__
    AIOKafkaClient.send = send  # type: ignore[method-assign]
