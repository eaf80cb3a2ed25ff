"""A worker's Prometheus metrics: :class:`WorkerMetrics` holds its registry (names in
docs/operations.md, "Operating a worker"), which the job's runners update where they count records,
once per batch (never once per record); :func:`accepted_since` and :func:`window_spend` compute what
they count, :class:`SlotCloseTimes` when each slot closed.
:class:`~streams.job.operations.observe.Observer` serves the registry."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from mechanisms.ledgers.fixed import (
    AbsorptionLedger,
    BudgetLedger,
    DistributionLedger,
    SampleLedger,
    UniformLedger,
)
from streams.records.field_formats import Reason

#: seconds from the watermark passing a slot's end (in its last partition) to the slot's release
RELEASE_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                          60.0)
ACCEPTED: Final = "accepted"
#: The outcome of a report that lost its (user, slot) to one coming first (source positions).
SUPERSEDED: Final = "superseded"


def accepted_since(open_before: int, open_now: int, messages: Iterable[Mapping]) -> int:
    """Reports a partition accumulator counted while it took one batch, from its open slots'
    ``accepted`` totals before and after, plus the counts of the slots that closed meanwhile
    (partial messages; under ``dpbd``/``dpba``, plans): O(slots), whatever the batch's size.
    Under ``dpbd``/``dpba`` a report withdrawn with its user's removal is not counted."""
    closed = 0
    for msg in messages:
        if "plan" in msg:
            closed += int(msg.get("accepted", 0))
        else:
            closed += sum(int(part["accepted"]) for part in msg.get("slots", {}).values())
    return max(open_now + closed - open_before, 0)


def window_spend(ledger: BudgetLedger) -> np.ndarray | None:
    """Per ledger row, the budget charged over the row's current window (its last ``w``
    released slots), or ``None`` for a ledger this does not know.

    Exact for ``pbd``/``bd`` and ``pba``/``ba`` (their ledgers keep each slot's publication
    charge), ``uniform`` and ``sample``, counting the dissimilarity charge at every released
    slot of the window (the ledger does not record since when a level exists)."""
    w, E = ledger.w.astype(np.float64), ledger.E
    released = np.minimum(ledger.w, ledger.slot - 1).astype(np.float64)
    share = E / (2.0 * w)
    if isinstance(ledger, DistributionLedger | AbsorptionLedger):
        recent = ledger.recent
        in_window = np.arange(recent.shape[1])[None, :] < ledger.w[:, None]
        return released * share + np.where(in_window, recent, 0.0).sum(axis=1)
    if isinstance(ledger, UniformLedger):
        return released * E / w
    if isinstance(ledger, SampleLedger):
        published = (ledger.last > 0) & (ledger.last >= ledger.slot - ledger.w)
        return np.where(published, E, 0.0)
    return None


class SlotCloseTimes:
    """When the partitions' watermarks passed the end of each slot, for the release latency.

    Each closure (a partial or a closure message) says that its partition closed every slot up
    to ``closed_through`` at ``closed_at_ms`` (the partition worker's clock, epoch ms); a message
    without it (written before it existed) counts from its receipt. A slot is closed when the
    last partition's watermark passes its end: :meth:`closed_at` is the latest, over the
    partitions, of the first closure covering the slot. Closures received before this worker
    took the coordinator over are not known: a partition without a known closure covering the
    slot is left out.
    """

    def __init__(self) -> None:
        #: per partition, its closures in order: ``(closed_through, closed_at_ms)``
        self.closures: dict[int, list[tuple[int, int]]] = {}

    def take(self, message: Mapping[str, Any], received_ms: int) -> None:
        """Note a partition's message (one that closes nothing, or a repeat, changes nothing)."""
        if "closed_through" not in message:
            return
        p, through = int(message["partition"]), int(message["closed_through"])
        at = message.get("closed_at_ms")
        mine = self.closures.setdefault(p, [])
        if mine and through <= mine[-1][0]:
            return
        mine.append((through, at if type(at) is int else received_ms))

    def closed_at(self, slot: int) -> int | None:
        """When the last partition's watermark passed the end of ``slot`` (epoch ms); ``None``
        when no closure covering it is known."""
        times = [next((at for through, at in mine if through >= slot), None)
                 for mine in self.closures.values()]
        return max((t for t in times if t is not None), default=None)

    def forget(self, slot: int) -> None:
        """Drop what only slots up to ``slot`` (released) needed; each partition's last closure
        stays, to tell repeats."""
        for mine in self.closures.values():
            while len(mine) > 1 and mine[0][0] <= slot:
                mine.pop(0)


class WorkerMetrics:
    """The worker's metrics registry (names in docs/operations.md, "Operating a worker")."""

    def __init__(self, reports_topic: str) -> None:
        # no ``*_created`` series beside every counter (a process-wide switch of the client;
        # a worker's process has no other registry)
        disable_created_metrics()
        self.reports_topic = reports_topic
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.reports = Counter("pwevent_reports", "Records of the reports topic taken, by "
                               "outcome: accepted, or the reason of their dead letter",
                               ["outcome"], registry=r)
        self.requirements = Counter("pwevent_requirements", "Requirement records applied "
                                    "(registrations and removals)", registry=r)
        self.dead_letters = Counter("pwevent_dead_letters", "Dead letters, by reason",
                                    ["reason"], registry=r)
        self.dead_letters_failed = Counter("pwevent_dead_letters_failed", "Dead letters the "
                                           "broker refused (logged)", registry=r)
        self.rewinds = Counter("pwevent_rewinds", "Batches not taken because they skipped "
                               "records; the partition was read again", registry=r)
        self.slots_released = Counter("pwevent_slots_released", "Slots this worker's "
                                      "coordinator released (emitted to the releases topic)",
                                      registry=r)
        self.last_released_slot = Gauge("pwevent_last_released_slot", "The last slot this "
                                        "worker's coordinator released", registry=r)
        self.slot_release_seconds = Histogram(
            "pwevent_slot_release_seconds", "Seconds from the watermark passing a slot's end "
            "(in the last of the partitions to close it) to the slot's release",
            buckets=RELEASE_BUCKETS, registry=r)
        self.consumer_lag = Gauge("pwevent_consumer_lag_records", "Records behind the log end "
                                  "(highwater minus position), per assigned reports partition",
                                  ["topic", "partition"], registry=r)
        self.ledger_levels = Gauge("pwevent_ledger_levels", "Requirement levels in the "
                                   "ledger of this worker's coordinator (0 without one)",
                                   registry=r)
        self.budget_spent = Gauge("pwevent_budget_spent", "Budget a level's current window "
                                  "has spent (fixed mechanisms, coordinator's ledger)",
                                  ["level"], registry=r)
        self.budget_left = Gauge("pwevent_budget_left", "A level's budget E minus what its "
                                 "current window has spent", ["level"], registry=r)
        self.source_problems = Counter("pwevent_source_mapping_problems", "Problems of a "
                                       "source mapping, once per source topic and problem "
                                       "(logged as errors)", ["problem"], registry=r)
        self.isolated = Counter("pwevent_isolated_records", "Records whose processing raised "
                                "inside a batch: taken out of it by bisection and "
                                "dead-lettered as unprocessable (logged once each)",
                                ["topic"], registry=r)
        self.superseded_events = Counter("pwevent_source_events_superseded", "Source events "
                                         "not forwarded: a report of the same user and slot "
                                         "that comes first was forwarded already", registry=r)
        self.history_skipped = Counter("pwevent_source_history_not_read", "Records a new "
                                       "live stream did not read from a source topic: retained "
                                       "before its start, they could only be late", ["topic"],
                                       registry=r)
        self.open_slot_wait = Gauge("pwevent_open_slot_wait_seconds", "Live: how long past "
                                    "its end the oldest slot this worker's partitions hold open "
                                    "is (its release is that late)", registry=r)
        self.holding_back = Gauge("pwevent_source_holding_back_ms", "The source partition the "
                                  "stream's event time waits for, and by how many ms of event "
                                  "time it is behind the most advanced one",
                                  ["topic", "partition"], registry=r)
        # every series exists from the start, so that rate() sees the first increment
        self.reports.labels(ACCEPTED)
        self.reports.labels(SUPERSEDED)
        for reason in Reason:
            self.dead_letters.labels(reason.value)
            if reason is not Reason.INVALID_REQUIREMENT:
                self.reports.labels(reason.value)

    # -- counting, once per batch ------------------------------------------------------------

    def took_reports(self, accepted: int, superseded: int = 0) -> None:
        """A batch of reports was taken, ``accepted`` of them counted (see :func:`accepted_since`;
        ``superseded`` lost their (user, slot) to a report coming first in (event time, source
        position); the others are dead letters, counted by :meth:`dead`, or control records)."""
        if accepted:
            self.reports.labels(ACCEPTED).inc(accepted)
        if superseded:
            self.reports.labels(SUPERSEDED).inc(superseded)

    def took_requirements(self, applied: int) -> None:
        """``applied`` requirement records were applied."""
        if applied:
            self.requirements.inc(applied)

    def dead(self, letters: Sequence[Any]) -> None:
        """Dead letters (``topic`` and ``reason`` of each) are being sent."""
        if not letters:
            return
        for (topic, reason), n in Tally((d.topic, d.reason) for d in letters).items():
            self.dead_letters.labels(reason).inc(n)
            if reason == Reason.UNPROCESSABLE:  # taken out of its batch (streams.job.isolation)
                self.isolated.labels(topic).inc(n)
            if topic == self.reports_topic:
                self.reports.labels(reason).inc(n)

    def superseded(self, n: int) -> None:
        """``n`` source events could no longer win their (user, slot): not forwarded."""
        self.superseded_events.inc(n)

    def history_not_read(self, topic: str, n: int) -> None:
        """``n`` records retained on source ``topic`` before a new live stream's start were
        not read (:mod:`streams.job.source.history_start`)."""
        self.history_skipped.labels(topic).inc(n)

    def source_problem(self, problem: str) -> None:
        """A source mapping looks wrong (:class:`streams.job.source.mapping.MappingWatch`)."""
        self.source_problems.labels(problem).inc()

    def dead_letter_failed(self) -> None:
        """The broker refused a dead letter."""
        self.dead_letters_failed.inc()

    def rewound(self) -> None:
        """A batch was not taken; its partition is read again."""
        self.rewinds.inc()

    def released(self, emitted: Sequence[tuple[int, bytes | None, bytes]]) -> None:
        """The coordinator emitted ``(slot, release, decision)`` records (``release`` ``None``:
        a stream's start record, not a slot)."""
        slots = [slot for slot, release, _ in emitted if release is not None]
        if slots:
            self.slots_released.inc(len(slots))
            self.last_released_slot.set(max(slots))

    def release_took(self, emitted: Sequence[tuple[int, bytes | None, bytes]],
                     closes: SlotCloseTimes, released_ms: int, received_ms: int) -> None:
        """The slots in ``emitted`` were released at ``released_ms`` (epoch ms): observe the
        time since each closed (``closes``; the receipt of the batch that released it,
        ``received_ms``, when no closure of the slot is known). Workers' clocks that disagree
        cannot make a latency negative: it is 0 at least."""
        for slot, release, _ in emitted:
            if release is not None:
                closed = closes.closed_at(slot)
                start = received_ms if closed is None else closed
                self.slot_release_seconds.observe(max(released_ms - start, 0) / 1000)
                closes.forget(slot)

    # -- gauges --------------------------------------------------------------------------------

    def set_event_time(self, wait_s: float, holding: tuple[str, int, int] | None) -> None:
        """The oldest open slot's wait past its end, and the source partition (topic, partition,
        ms behind) holding the stream's event time back, if any."""
        self.open_slot_wait.set(max(wait_s, 0.0))
        self.holding_back.clear()
        if holding is not None:
            self.holding_back.labels(holding[0], str(holding[1])).set(holding[2])

    def set_lag(self, lags: Mapping[int, int]) -> None:
        """Lag per assigned reports partition (partitions not given are no longer assigned)."""
        self.consumer_lag.clear()
        for p, lag in sorted(lags.items()):
            self.consumer_lag.labels(self.reports_topic, str(p)).set(lag)

    def set_coordinator(self, coordinator: Any) -> None:
        """The ledger gauges from this worker's coordinator (``None``: it runs elsewhere)."""
        self.budget_spent.clear()
        self.budget_left.clear()
        # the level ledger of a coordinator keeping it (CoordinatorLedgerRelease)
        engine = getattr(getattr(coordinator, "placement", None), "engine", None)
        if engine is None:  # no coordinator here, or the ledgers are in the partitions
            self.ledger_levels.set(0)
            return
        rows: dict[str, int] = engine.row_of
        self.ledger_levels.set(len(rows))
        spent = window_spend(engine.ledger)
        if spent is None:
            return
        for level, row in rows.items():
            self.budget_spent.labels(level).set(float(spent[row]))
            self.budget_left.labels(level).set(float(engine.ledger.E[row] - spent[row]))

    def render(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)
