"""Where the budget ledger lives, seen from the coordinator: the strategy of its slot release.

The :class:`~streams.job.coordination.coordinator.Coordinator` checks and orders the partitions'
messages, keeps the release log and emits; its placement takes the messages' contents, says when
the stream starts and when a slot is ready, and releases it through the mechanism:

- :class:`CoordinatorLedgerRelease` (fixed requirements, partitions under
  :class:`~streams.job.partitions.placement.CoordinatorLedger`): the ledger per requirement level
  is here, a :class:`~mechanisms.run.named_levels.LevelEngine`. Slot t is released once every
  partition has closed it, from the sum of the partials' counts and the users per level each
  partition had when it closed t. The stream starts at the earliest slot any partition counted a
  report in.
- :class:`PartitionLedgerRelease` (dynamic requirements, partitions under
  :class:`~streams.job.partitions.ledger.PartitionLedger`): the ledgers are in the partitions. The
  stream starts once every partition has closed past its first slot with a report; slot t is
  released when every partition has sent its plan of t: the
  :class:`~mechanisms.run.mechanism.Mechanism` (the release rule over a
  :class:`~mechanisms.run.mechanism.PlannedLedger`) runs on the sum of the plans' counts per budget
  level, with the levels' budgets read from their names; the slot is nullified when any partition's
  users nullify it (DPBA).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from mechanisms.defaults import BRANCHES, DEFAULT, DefaultChoice, choose_for_levels
from mechanisms.ledgers.plan import SlotPlan
from mechanisms.release.rule import release_rule
from mechanisms.run.mechanism import Mechanism, PlannedLedger
from mechanisms.run.named_levels import LevelEngine, parse_level_key
from streams.job.config import JobConfig
from streams.job.slot_protocol import (
    Closure,
    Decision,
    Partial,
    Plan,
    level_budgets,
    parse_level_name,
)


@dataclass(frozen=True)
class SlotOutcome:
    """One released slot, for the release record and the decisions topic."""

    published: bool
    nullified: bool
    histogram: np.ndarray
    threshold: float
    users: int  # registered users counted
    noise_std: np.ndarray | None  # per cell, the noise added when published
    accepted: int  # reports counted (for the operator's log only)
    decision: Decision


class ReleasePlacement:
    """What the coordinator leaves to the placement of the ledger (module doc)."""

    def __init__(self, config: JobConfig) -> None:
        self.config = config

    @property
    def mechanism_name(self) -> str | None:
        """The mechanism the releases come from (``None``: not chosen yet)."""
        return self.config.mechanism

    def postprocess_method(self) -> str | None:
        """The post-processing of the releases (``None``: not chosen yet): ``--postprocess``,
        or under ``auto`` none for a named mechanism."""
        return "none" if self.config.postprocess == "auto" else self.config.postprocess

    def take_closure(self, p: int, message: Partial | Closure, known: int | None,
                     next_slot: int | None) -> None:
        """Take partition ``p``'s new closure (``known``: how far it had closed before)."""
        raise NotImplementedError

    def take_plan(self, p: int, message: Plan, next_slot: int | None) -> bool:
        """Take partition ``p``'s plan; ``False`` when it is a repeat."""
        raise ValueError("this job's partitions send partials, not plans")

    def first_slot(self, closed: dict[int, int]) -> int | None:
        """The stream's first slot once it is known (``closed``: how far each partition
        closed), else ``None``."""
        raise NotImplementedError

    def ready(self, slot: int, closed: dict[int, int]) -> bool:
        """Whether ``slot`` (the next one to release) can be released."""
        raise NotImplementedError

    def frontier(self, closed: dict[int, int], next_slot: int | None) -> int | None:
        """The slot before which the coordinator may forget, or ``None``: not now."""
        raise NotImplementedError

    def forget(self, next_slot: int | None) -> None:
        """Drop what no slot from ``next_slot`` on needs."""

    def release(self, slot: int, rng: np.random.Generator) -> SlotOutcome:
        """Release ``slot`` through the mechanism."""
        raise NotImplementedError

    def replay(self, slot: int, decision: Decision, histogram: list) -> None:
        """Take a slot already released (its decision and, when published, its histogram)."""
        raise NotImplementedError

    def state(self) -> dict:
        """The placement's part of the coordinator's state document."""
        raise NotImplementedError

    def load(self, doc: dict) -> None:
        """Reinstate :meth:`state` from the coordinator's state document."""
        raise NotImplementedError


class CoordinatorLedgerRelease(ReleasePlacement):
    """The ledger per requirement level, here: partials in, :class:`LevelEngine` steps out."""

    def __init__(self, config: JobConfig, mechanism: str | None = None) -> None:
        super().__init__(config)
        self.engine: LevelEngine | None = None if mechanism is None else LevelEngine(
            mechanism, config.d, config.noise, config.sensitivity)
        self.pending: dict[int, dict] = {}
        self.users: dict[int, dict[int, dict[str, int]]] = {}

    def take_closure(self, p: int, message: Partial | Closure, known: int | None,
                     next_slot: int | None) -> None:
        for slot_text, part in message["slots"].items():
            slot = int(slot_text)
            if known is not None and slot <= known:
                continue
            if next_slot is not None and slot < next_slot:
                continue  # already released (a partition re-sent after a restart)
            bucket = self.pending.setdefault(slot, {"counts": {}, "accepted": 0})
            for key, row in part["counts"].items():
                prev = bucket["counts"].get(key)
                arr = np.asarray(row, dtype=np.int64)
                bucket["counts"][key] = arr if prev is None else prev + arr
            bucket["accepted"] += int(part["accepted"])
        self.users.setdefault(p, {})[int(message["closed_through"])] = dict(
            message["users"])

    def first_slot(self, closed: dict[int, int]) -> int | None:
        if len(closed) < self.config.partitions or not self.pending:
            return None
        return min(self.pending)

    def ready(self, slot: int, closed: dict[int, int]) -> bool:
        return len(closed) == self.config.partitions and slot <= min(closed.values())

    def frontier(self, closed: dict[int, int], next_slot: int | None) -> int | None:
        if next_slot is None or len(closed) < self.config.partitions:
            return None
        return min(closed.values())

    def forget(self, next_slot: int | None) -> None:
        for by_close in self.users.values():
            stale = sorted(c for c in by_close if c < (next_slot or 0))
            for c in stale[:-1] if len(stale) > 1 else []:
                del by_close[c]

    def _users_at(self, slot: int) -> dict[str, int]:
        """Registered users per level at a slot: each partition's count when it closed it."""
        total: Counter[str] = Counter()
        for by_close in self.users.values():
            closes = [c for c in by_close if c >= slot]
            if closes:
                total.update(by_close[min(closes)])
        return dict(total)

    def public_sizes(self, slot: int) -> dict[str, int]:
        """The users per level the mechanism sees at a slot: the registered users, except at a
        level default requirements register devices at, which counts its public prior
        (:attr:`JobConfig.default_levels`, docs/design.md, "Default requirements") from the
        stream's first slot, whoever has appeared."""
        sizes = self._users_at(slot)
        if self.config.default_levels:
            sizes.update(self.config.default_levels)
            sizes = dict(sorted(sizes.items()))  # not in the order levels were first seen
        return sizes

    def release(self, slot: int, rng: np.random.Generator) -> SlotOutcome:
        part = self.pending.pop(slot, {"counts": {}, "accepted": 0})
        sizes = self.public_sizes(slot)
        rel = self.level_engine(sizes).step(sizes, part["counts"], rng)
        decision: Decision = {
            "stream": self.config.stream,
            "slot": slot,
            "published": rel.published,
            "nullified": rel.nullified,
            "eps1": rel.eps1,
            "eps2": rel.eps2,
            "users": sizes,
        }
        if self.config.mechanism == DEFAULT:
            decision["mechanism"] = str(self.mechanism_name)
        return SlotOutcome(rel.published, rel.nullified, rel.histogram, rel.threshold,
                           int(sum(sizes.values())), rel.noise_std, part["accepted"], decision)

    def level_engine(self, sizes: dict[str, int]) -> LevelEngine:
        """The ledger per level, releasing a slot whose public sizes are ``sizes``."""
        assert self.engine is not None
        return self.engine

    def replay(self, slot: int, decision: Decision, histogram: list) -> None:
        """Advance the level ledger through a slot already released."""
        self.pending.pop(slot, None)
        self.level_engine(decision["users"]).replay(
            decision["users"], bool(decision["published"]), np.asarray(histogram))

    def state(self) -> dict:
        return {
            "engine": None if self.engine is None else self.engine.state(),
            "pending": {str(s): {"counts": {k: v.tolist() for k, v in b["counts"].items()},
                                 "accepted": b["accepted"]} for s, b in self.pending.items()},
            "users": {str(p): {str(c): u for c, u in by.items()} for p, by in self.users.items()},
        }

    def load(self, doc: dict) -> None:
        if doc.get("dynamic"):
            raise ValueError("the saved coordinator state is of a dynamic mechanism")
        if doc["engine"] is not None:
            self.level_engine_named(doc["engine"]["name"]).load_state(doc["engine"])
        self.pending = {int(s): {"counts": {k: np.asarray(v, dtype=np.int64)
                                            for k, v in b["counts"].items()},
                                 "accepted": int(b["accepted"])}
                        for s, b in doc["pending"].items()}
        self.users = {int(p): {int(c): dict(u) for c, u in by.items()}
                      for p, by in doc["users"].items()}

    def level_engine_named(self, name: str) -> LevelEngine:
        """The engine a saved state of mechanism ``name`` is loaded into."""
        if self.engine is None or self.engine.name != name:
            raise ValueError(f"the saved coordinator state is of {name!r}, this job runs "
                             f"{self.config.mechanism!r}")
        return self.engine


class DefaultLevelRelease(CoordinatorLedgerRelease):
    """The default configuration (:mod:`mechanisms.defaults`) on the coordinator's ledger.

    Its branch, a mechanism and its post-processing, is chosen once, when the stream's first
    slot is released, from that slot's public sizes per level and the domain size: the
    registered users of declared levels and the priors of default ones, what the first
    decision publishes (docs/design.md, "The default configuration"). It never changes after,
    and a coordinator rebuilt from the topics reads it back from the first slot it replays
    (its decision's ``mechanism``, else the release's).
    """

    def __init__(self, config: JobConfig) -> None:
        super().__init__(config)
        self.choice: DefaultChoice | None = None

    @property
    def mechanism_name(self) -> str | None:
        return None if self.choice is None else self.choice.mechanism

    def postprocess_method(self) -> str | None:
        if self.config.postprocess != "auto":
            return self.config.postprocess
        return None if self.choice is None else self.choice.postprocess

    def take(self, choice: DefaultChoice) -> LevelEngine:
        """Run ``choice`` from now on."""
        self.choice = choice
        self.engine = LevelEngine(choice.mechanism, self.config.d, self.config.noise,
                                  self.config.sensitivity)
        return self.engine

    def level_engine(self, sizes: dict[str, int]) -> LevelEngine:
        if self.engine is None:
            levels = {parse_level_key(k): n for k, n in sizes.items()}
            return self.take(choose_for_levels(levels, self.config.d))
        return self.engine

    def replay(self, slot: int, decision: Decision, histogram: list) -> None:
        recorded = decision.get("mechanism")
        if self.engine is None and recorded is not None:
            if recorded not in BRANCHES:
                raise ValueError(f"slot {slot} was released by {recorded!r}, which the default "
                                 f"does not run")
            self.take(recorded_choice(str(recorded)))
        super().replay(slot, decision, histogram)

    def level_engine_named(self, name: str) -> LevelEngine:
        if self.engine is None:
            if name not in BRANCHES:
                raise ValueError(f"the saved coordinator state is of {name!r}, which the "
                                 "default does not run")
            self.take(recorded_choice(name))
        return super().level_engine_named(name)


class PartitionLedgerRelease(ReleasePlacement):
    """The ledgers in the partitions: closures and plans in, the release rule's decision out."""

    def __init__(self, config: JobConfig) -> None:
        super().__init__(config)
        self.d = config.d
        self.ledger = PlannedLedger()
        rule = release_rule(config.mechanism, self.d, config.noise, config.sensitivity)
        self.mechanism = Mechanism(self.ledger, rule)
        self.first: dict[int, int | None] = {}
        self.plans: dict[int, dict[int, dict]] = {}

    def take_closure(self, p: int, message: Partial | Closure, known: int | None,
                     next_slot: int | None) -> None:
        first = message["first"]
        self.first[p] = None if first is None else int(first)

    def take_plan(self, p: int, message: Plan, next_slot: int | None) -> bool:
        slot = int(message["plan"])
        if next_slot is None or slot < next_slot or p in self.plans.get(slot, {}):
            return False
        for name in message["users"]:
            parse_level_name(name)
        self.plans.setdefault(slot, {})[p] = {
            "counts": dict(message["counts"]),
            "users": {k: int(v) for k, v in message["users"].items()},
            "accepted": int(message["accepted"]),
            "nullified": bool(message["nullified"]),
            "projected": {k: int(v) for k, v in dict(message["projected"]).items()},
        }
        return True

    def first_slot(self, closed: dict[int, int]) -> int | None:
        """Once every partition closed past the earliest first slot: none of them can still
        accept a report before it."""
        if len(closed) < self.config.partitions:
            return None
        firsts = [f for f in self.first.values() if f is not None]
        if not firsts or min(closed.values()) < min(firsts):
            return None
        return min(firsts)

    def ready(self, slot: int, closed: dict[int, int]) -> bool:
        return len(self.plans.get(slot, {})) == self.config.partitions

    def frontier(self, closed: dict[int, int], next_slot: int | None) -> int | None:
        return next_slot if next_slot is not None else 0

    def release(self, slot: int, rng: np.random.Generator) -> SlotOutcome:
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
        eps1, eps2 = level_budgets(keys)
        zero = np.zeros(self.d, dtype=np.int64)
        matrix = np.array([counts.get(k, zero) for k in keys], dtype=np.int64)
        matrix = matrix.reshape(len(keys), self.d)
        size_vec = np.array([sizes[k] for k in keys], dtype=np.int64)
        plan = SlotPlan(slot, eps1, eps2, nullified=nullified,
                        projected=int(sum(projected.values())))
        self.ledger.hand_in(plan)
        decided, charge = self.mechanism.release(matrix, size_vec, rng)
        published = charge.published
        decision: Decision = {
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
        return SlotOutcome(published, nullified, decided.histogram, decided.threshold,
                           int(size_vec.sum()),
                           self.mechanism.rule.noise_std(decided.threshold) if published
                           else None,
                           accepted, decision)

    def replay(self, slot: int, decision: Decision, histogram: list) -> None:
        """Take a slot already released: the partitions commit it from the decisions topic."""
        self.plans.pop(slot, None)
        if decision["published"]:
            self.mechanism.load_last(histogram)

    def state(self) -> dict:
        return {
            "dynamic": True,
            "last": self.mechanism.last.tolist(),
            "first": {str(p): f for p, f in self.first.items()},
            "plans": {str(s): {str(p): m for p, m in by.items()} for s, by in self.plans.items()},
        }

    def load(self, doc: dict) -> None:
        if not doc.get("dynamic"):
            raise ValueError("the saved coordinator state is not of a dynamic mechanism")
        self.mechanism.load_last(doc["last"])
        self.first = {int(p): f for p, f in doc["first"].items()}
        self.plans = {int(s): {int(p): m for p, m in by.items()}
                      for s, by in doc["plans"].items()}


def recorded_choice(mechanism: str) -> DefaultChoice:
    """The default's branch read back from a record or a saved state (its ratio not kept)."""
    return DefaultChoice(mechanism, BRANCHES[mechanism], float("nan"))


def release_placement(config: JobConfig) -> ReleasePlacement:
    """The coordinator's side of the placement ``config``'s mechanism needs."""
    if config.dynamic:
        return PartitionLedgerRelease(config)
    if config.mechanism == DEFAULT:
        return DefaultLevelRelease(config)
    return CoordinatorLedgerRelease(config, config.mechanism)
