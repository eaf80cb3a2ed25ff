"""A stream's event time when its reports come from source topics: the minimum over every source
partition (docs/design.md, "Event time").

The source stage (:mod:`streams.job.source.rekey`) re-keys events from every source partition
onto every partition of ``reports``, so a partition of ``reports`` cannot take its own largest
event time as the stream's: that follows the fastest source partition, and whatever a slower one
still holds for an earlier slot would arrive ``late``. Instead, after each batch of a source
partition, the stage writes one **progress record** to every partition of ``reports``, behind
the batch's reports: the largest event time that source partition has reached so far. A
partition of ``reports`` keeps the latest progress of every source partition
(:class:`SourceProgress`, part of its checkpoint) and its watermark is the smallest of them,
less the allowed lateness. A slot therefore closes only once every source partition, wherever it
is read, has been read past its end (plus the lateness).

A source partition stops holding time back when it is **idle**: read to its end offset (the
stage was handed every record below it) and without new records for ``--idle-close-ms``; the
stage that holds it then writes a progress record marked idle. An empty partition is idle from
the start. When every source partition is idle, the slots up to the one of the largest event time
seen close. An idle partition that gets records again holds time back again from its next
progress on (its records older than the watermark by then are ``late``). A partition added to a
source topic while the job runs holds time back from when a worker's consumer sees it in the
broker's metadata (refreshed every few seconds) until its first progress
(:meth:`SourceProgress.grow`).

Progress records are keyless and signed like watermark records (HMAC-SHA256 with the deployment
secret over the stream, the ``reports`` partition, the source position and the time), so whoever
may write ``reports`` can neither close a slot nor hold one open with them.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field

import orjson

from streams.records.field_formats import Reason
from streams.records.field_parsing import RecordError

__all__ = ["PROGRESS_PREFIX", "Progress", "SourceProgress", "progress_of", "progress_record"]

PROGRESS_PREFIX = b'{"progress":'


@dataclass(frozen=True)
class Progress:
    """What one progress record says: source ``topic`` (its index) and ``partition`` reached
    event time ``ms`` (-1: no event yet), and whether it is ``idle``."""

    topic: int
    partition: int
    ms: int
    idle: bool


def _mac(secret: bytes, stream: str, reports_partition: int, p: Progress) -> str:
    message = b"\0".join((b"pwevent-progress", stream.encode(), str(reports_partition).encode(),
                          str(p.topic).encode(), str(p.partition).encode(), str(p.ms).encode(),
                          b"idle" if p.idle else b"busy"))
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def progress_record(p: Progress, secret: bytes, stream: str, reports_partition: int) -> bytes:
    """The value of a progress record for one partition of ``reports`` (module doc)."""
    return orjson.dumps({"progress": p.ms, "source": [p.topic, p.partition], "idle": p.idle,
                         "mac": _mac(secret, stream, reports_partition, p)})


def progress_of(value: bytes, secret: bytes, stream: str, reports_partition: int
                ) -> Progress | None:
    """The progress a keyless record of ``reports`` carries, ``None`` for any other record;
    raises :class:`RecordError` (``unauthenticated_control``) for a record shaped like a
    progress record whose signature does not verify."""
    if not value.startswith(PROGRESS_PREFIX):
        return None
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    refused = RecordError(Reason.UNAUTHENTICATED_CONTROL,
                          "a progress record needs the signature of the deployment secret")
    if type(doc) is not dict or len(doc) != 4:
        raise refused
    ms, source, idle, mac = doc.get("progress"), doc.get("source"), doc.get("idle"), doc.get("mac")
    if not (type(ms) is int and type(idle) is bool and type(mac) is str and type(source) is list
            and len(source) == 2 and all(type(x) is int for x in source)):
        raise refused
    p = Progress(source[0], source[1], ms, idle)
    if not hmac.compare_digest(mac, _mac(secret, stream, reports_partition, p)):
        raise refused
    return p


@dataclass
class SourceProgress:
    """The latest progress of every source partition, as one partition of ``reports`` has read
    it; ``partitions[i]`` is the partition count of source topic ``i``."""

    partitions: Sequence[int]
    reached: dict[tuple[int, int], int] = field(default_factory=dict)
    idle: set[tuple[int, int]] = field(default_factory=set)

    def grow(self, partitions: Sequence[int]) -> None:
        """Source topics gained partitions: each new one holds the stream's event time back
        until its progress says where it is (a topic's partitions never shrink)."""
        self.partitions = [max(a, b) for a, b in zip(self.partitions, partitions, strict=True)]

    def expected(self) -> list[tuple[int, int]]:
        """Every source partition (topic index, partition)."""
        return [(t, p) for t, n in enumerate(self.partitions) for p in range(n)]

    def take(self, p: Progress) -> None:
        """Note a progress record (a partition's time never goes back)."""
        where = (p.topic, p.partition)
        if p.ms > self.reached.get(where, -1):
            self.reached[where] = p.ms
        if p.idle:
            self.idle.add(where)
        else:
            self.idle.discard(where)

    def event_time(self) -> int | None:
        """The time every source partition that is not idle has reached (the smallest), or,
        when all are idle, the largest any has reached; ``None`` while a busy partition has
        not said where it is (or nothing was seen at all)."""
        busy = [w for w in self.expected() if w not in self.idle]
        if busy:
            times = [self.reached.get(w, -1) for w in busy]
            low = min(times)
            return None if low < 0 else low
        seen = [t for t in self.reached.values() if t >= 0]
        return max(seen) if seen else None

    def holding_back(self) -> tuple[tuple[int, int], int] | None:
        """The busy source partition the stream waits for and how far (ms of event time) it is
        behind the most advanced one; ``None`` when none is behind."""
        busy = [w for w in self.expected() if w not in self.idle]
        if not busy or not self.reached:
            return None
        top = max(self.reached.values())
        slowest = min(busy, key=lambda w: self.reached.get(w, -1))
        behind = top - self.reached.get(slowest, -1)
        return (slowest, behind) if behind > 0 else None

    def state(self) -> dict:
        """A JSON-able form (part of a partition's checkpoint)."""
        return {"reached": [[t, p, ms] for (t, p), ms in sorted(self.reached.items())],
                "idle": sorted([t, p] for t, p in self.idle)}

    def load(self, doc: dict | None) -> None:
        """Reinstate :meth:`state` (``None``: nothing seen yet)."""
        doc = doc or {}
        self.reached = {(int(t), int(p)): int(ms) for t, p, ms in doc.get("reached", [])}
        self.idle = {(int(t), int(p)) for t, p in doc.get("idle", [])}
