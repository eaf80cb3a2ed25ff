"""The coordinator of a job under a dynamic mechanism (DPBD, DPBA).

It speaks the slot conversation of :mod:`streams.dynamic_partition`: it learns how far every
partition closed, announces the stream's first slot once no partition can still accept a report
before it, and releases slot t when every partition has sent its plan of t: OBS, sampling, noise
and the publish test run on the sum of the partitions' counts per budget level, with the levels'
budgets read from their grid codes; the slot is nullified when any partition's users nullify it
(DPBA). Randomness, recording before emitting, and never recomputing a released slot are as in
:class:`streams.coordinator.Coordinator`.
"""

from __future__ import annotations

import zlib
from collections import Counter

import numpy as np
import orjson

from mechanisms.ledgers.dynamic import UNIT, grid_table
from mechanisms.ledgers.plan import SlotPlan
from mechanisms.registry import histogram_dtype
from mechanisms.release import ReleaseRule
from streams.config import JobConfig
from streams.coordinator import Emitted, ReleaseLog, log
from streams.dynamic_partition import GRID_BITS, parse_level_name


class DynamicCoordinator(ReleaseLog):
    """Runs the release rule once per slot on the partitions' plans (module doc)."""

    def __init__(self, config: JobConfig) -> None:
        super().__init__(config)
        self.d = config.d
        self.rule = ReleaseRule(self.d, config.noise, "obs", config.sensitivity)
        self.table = grid_table(GRID_BITS)
        self.last = np.zeros(self.d, dtype=histogram_dtype(config.noise))
        self.closed: dict[int, int] = {}
        self.first: dict[int, int | None] = {}
        self.plans: dict[int, dict[int, dict]] = {}
        self.rejected: Counter[int] = Counter()
        self.next_slot: int | None = None

    # -- receiving -------------------------------------------------------------------------

    def receive(self, message: dict) -> list[Emitted]:
        """Take one message of a partition; returns the new records to emit."""
        p = int(message["partition"])
        if not 0 <= p < self.config.partitions:
            raise ValueError(f"message from partition {p}, but the job has "
                             f"{self.config.partitions}")
        if "plan" in message:
            self._take_plan(p, message)
        else:
            through = int(message["closed_through"])
            known = self.closed.get(p)
            if known is not None and through <= known:
                self.duplicates += 1
                return []
            first = message["first"]
            self.closed[p] = through
            self.first[p] = None if first is None else int(first)
            self.rejected[through] += int(message.get("rejected", 0))
        out: list[Emitted] = []
        if self.start is None:
            self._maybe_start(out)
        while self.next_slot is not None and \
                len(self.plans.get(self.next_slot, {})) == self.config.partitions:
            out.append(self._release(self.next_slot))
            self.next_slot += 1
        self._forget()
        return out

    def replay_slot(self, slot: int, decision: dict, release: dict) -> None:
        """Take a slot already released: the partitions commit it from the decisions topic."""
        self.plans.pop(slot, None)
        if decision["published"]:
            self.last = np.asarray(release["histogram"], dtype=self.last.dtype)
        self.next_slot = slot + 1

    def _take_plan(self, p: int, message: dict) -> None:
        slot = int(message["plan"])
        if self.next_slot is None or slot < self.next_slot or p in self.plans.get(slot, {}):
            self.duplicates += 1
            return
        for name in message["users"]:
            parse_level_name(name)
        self.plans.setdefault(slot, {})[p] = {
            "counts": dict(message["counts"]),
            "users": {k: int(v) for k, v in message["users"].items()},
            "accepted": int(message["accepted"]),
            "nullified": bool(message["nullified"]),
            "projected": {k: int(v) for k, v in dict(message["projected"]).items()},
        }

    def _maybe_start(self, out: list[Emitted]) -> None:
        """Announce the first slot once every partition closed past it: none of them can still
        accept a report before it."""
        if len(self.closed) < self.config.partitions:
            return
        firsts = [f for f in self.first.values() if f is not None]
        if not firsts:
            return
        start = min(firsts)
        if min(self.closed.values()) < start:
            return
        self.next_slot = start
        out.append(self.begin(start))

    def _release(self, slot: int) -> Emitted:
        parts = self.plans.pop(slot)
        sizes: Counter[str] = Counter()
        counts: dict[str, np.ndarray] = {}
        accepted = 0
        projected: Counter[str] = Counter()
        nullified = False
        for part in parts.values():
            sizes.update(part["users"])
            for key, row in part["counts"].items():
                arr = np.asarray(row, dtype=np.int64)
                counts[key] = arr if key not in counts else counts[key] + arr
            accepted += part["accepted"]
            projected.update(part["projected"])
            nullified |= part["nullified"]
        keys = sorted((k for k, n in sizes.items() if n > 0), key=parse_level_name)
        codes = np.array([parse_level_name(k) for k in keys], dtype=np.int64).reshape(-1, 2)
        eps1 = self.table[codes[:, 0]] * UNIT
        eps2 = self.table[codes[:, 1]] * UNIT
        zero = np.zeros(self.d, dtype=np.int64)
        matrix = np.array([counts.get(k, zero) for k in keys], dtype=np.int64)
        matrix = matrix.reshape(len(keys), self.d)
        size_vec = np.array([sizes[k] for k in keys], dtype=np.int64)
        plan = SlotPlan(slot, eps1, eps2, nullified=nullified,
                        projected=int(sum(projected.values())))
        decision = self.rule.decide(plan, matrix, size_vec, self.last, self.slot_rng(slot))
        published = bool(decision.published) and not nullified
        if published:
            self.last = decision.histogram
        log.info("slot %d released (published %s, nullified %s): %d reports accepted, %d "
                 "records rejected", slot, published, nullified, accepted,
                 sum(n for close, n in self.rejected.items() if close == slot))
        release = self.release(slot, published, nullified, decision.histogram.tolist(),
                               decision.threshold, int(size_vec.sum()),
                               self.rule.noise_std(decision.threshold) if published else None)
        record = {
            "stream": self.config.stream,
            "slot": slot,
            "published": published,
            "nullified": nullified,
            "eps1": {k: float(e) for k, e in zip(keys, eps1.tolist(), strict=True)},
            "eps2": {k: float(e) if published else 0.0
                     for k, e in zip(keys, eps2.tolist(), strict=True)},
            "users": {k: int(sizes[k]) for k in keys},
            "projected": {k: int(projected[k]) for k in keys if projected[k]},
        }
        return self.record(slot, release, record)

    def _forget(self) -> None:
        frontier = self.next_slot if self.next_slot is not None else 0
        self.forget(frontier)
        for slot in [s for s in self.rejected if s < frontier]:
            del self.rejected[slot]

    # -- state -----------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The whole state, compressed."""
        doc = {
            "dynamic": True,
            "last": self.last.tolist(),
            "closed": {str(p): c for p, c in self.closed.items()},
            "first": {str(p): f for p, f in self.first.items()},
            "plans": {str(s): {str(p): m for p, m in by.items()} for s, by in self.plans.items()},
            "rejected": {str(s): n for s, n in self.rejected.items()},
            "next_slot": self.next_slot,
            **self.log_state(),
        }
        return zlib.compress(orjson.dumps(doc), 3)

    def restore(self, data: bytes) -> None:
        """Reinstate a :meth:`snapshot`."""
        doc = orjson.loads(zlib.decompress(data))
        if not doc.get("dynamic"):
            raise ValueError("the saved coordinator state is not of a dynamic mechanism")
        self.last = np.asarray(doc["last"], dtype=self.last.dtype)
        self.closed = {int(p): int(c) for p, c in doc["closed"].items()}
        self.first = {int(p): f for p, f in doc["first"].items()}
        self.plans = {int(s): {int(p): m for p, m in by.items()}
                      for s, by in doc["plans"].items()}
        self.rejected = Counter({int(s): int(n) for s, n in doc["rejected"].items()})
        self.next_slot = doc["next_slot"]
        self.load_log(doc)
