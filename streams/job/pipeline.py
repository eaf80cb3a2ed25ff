"""The job's data path in one process: the same partition and coordinator code, no Kafka.

``pwevent replay --in-process`` runs a stream through this, and the tests compare it with the
Kafka job: for the same secret and input both release the same bytes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import orjson

from streams.job.batch_handling import RawRecord
from streams.job.config import JobConfig
from streams.job.partitions.accumulator import DeadLetter
from streams.job.roles import make_accumulator, make_coordinator, make_registry
from streams.job.slot_protocol import control, encode, kind
from streams.kafka.producer import key_partition


class InProcessJob:
    """Partitions records by key as Kafka would and runs them through the job's classes."""

    def __init__(self, config: JobConfig) -> None:
        self.config = config
        self.registries = [make_registry(config, p) for p in range(config.partitions)]
        self.accumulators = [make_accumulator(p, config, self.registries[p])
                             for p in range(config.partitions)]
        self.coordinator = make_coordinator(config)
        self.offsets = [0] * config.partitions
        self.dead: list[DeadLetter] = []
        self.releases: list[bytes] = []
        self.declarations: list[bytes] = []  # dynamic mechanisms: on the decisions topic
        self.decisions: list[bytes] = []  # the decisions topic's records, start and slots

    def _partition(self, key: bytes | None) -> int:
        return 0 if key is None else key_partition(key, self.config.partitions)

    def register(self, records: Iterable[tuple[bytes, bytes | None]]) -> None:
        """Apply requirements records ``(key, value)``, a batch per partition (partitions
        are independent, and a partition's records keep their order); dead letters come in
        the records' order."""
        batches: list[list[tuple[int, bytes, bytes | None]]] = [[] for _ in self.registries]
        for n, (key, value) in enumerate(records):
            batches[self._partition(key)].append((n, key, value))
        dead: list[tuple[int, DeadLetter]] = []
        for p, batch in enumerate(batches):
            if not batch:
                continue
            outcome = self.registries[p].apply_batch([r[1] for r in batch], [r[2] for r in batch])
            for i, (reason, detail) in outcome.rejected.items():
                n, key, value = batch[i]
                dead.append((n, DeadLetter("requirements", p, -1, key, value, reason, detail)))
        self.dead.extend(d for _, d in sorted(dead, key=lambda x: x[0]))

    def feed(self, records: Iterable[tuple[bytes | None, bytes]]) -> None:
        """Run report records ``(key, value)`` through their partitions, in order."""
        batches: list[list[RawRecord]] = [[] for _ in range(self.config.partitions)]
        for key, value in records:
            p = self._partition(key)
            batches[p].append((key, value, p, self.offsets[p]))
            self.offsets[p] += 1
        for p, batch in enumerate(batches):
            if batch:
                partials, dead = self.accumulators[p].process(batch)
                self.dead.extend(dead)
                self._deliver(partials)

    def finish(self, watermark: int | None = None) -> None:
        """Move every partition's watermark to ``watermark``; by default, close every slot up to
        the one of the largest event time seen (the job's idle close)."""
        marks = [a.idle_watermark() for a in self.accumulators]
        target = watermark
        if target is None:
            target = max((m for m in marks if m is not None), default=None)
        if target is None:
            return
        for acc in self.accumulators:
            self._deliver(acc.advance_messages(target))

    def _deliver(self, partials: list[dict]) -> None:
        """Partials to the coordinator; its records on the decisions topic back to every
        partition (which, under the partitions' ledgers, answer), until all is said."""
        queue = deque(partials)
        while queue:
            msg = queue.popleft()
            if kind(msg) == "declared":  # a declaration record: to the decisions topic
                self.declarations.append(encode(msg))
                continue
            for _slot, release, decision in self.coordinator.receive(msg):
                self.decisions.append(decision)
                if release is not None:
                    self.releases.append(release)
                doc = control(orjson.loads(decision), self.config.stream)
                for acc in self.accumulators if doc is not None else []:
                    queue.extend(acc.on_control(doc))
