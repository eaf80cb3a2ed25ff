"""Operating a worker (streams/job/operations/observe.py, worker_metrics.py, json_logs.py):
/metrics, /healthz and /readyz of a live worker against the embedded broker, readiness through a
broker outage, the JSON log format, and the counts and budgets the metrics are made of, on the
job's own classes."""

from __future__ import annotations

import io
import logging
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import numpy as np
import orjson
import pytest
from jobkit import (
    RestartableBroker,
    close_through,
    config,
    dynamic_requirements,
    produce,
    register,
    report,
    requirement_records,
    setup_topics,
    slot_reports,
    start_worker,
    stop_worker,
    wait_for_slots,
)
from prometheus_client.parser import text_string_to_metric_families

from local_kafka.embedded import EmbeddedBroker, free_port
from mechanisms.ledgers.fixed import (
    AbsorptionLedger,
    DistributionLedger,
    SampleLedger,
    UniformLedger,
)
from streams.job.operations.json_logs import JsonFormatter, json_logging_config
from streams.job.operations.worker_metrics import (
    SlotCloseTimes,
    WorkerMetrics,
    accepted_since,
    window_spend,
)
from streams.job.pipeline import InProcessJob

USERS = [f"u{i}" for i in range(20)]
LEVELS = {"4:0.5": (4, 0.5), "7:1.0": (7, 1.0)}  # the first ten users, the other ten
W = [4] * 10 + [7] * 10
E = [0.5] * 10 + [1.0] * 10

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


# -- helpers ---------------------------------------------------------------------------------


def get(url: str) -> tuple[int | None, str]:
    """Status and body of a GET (``None``: no answer)."""
    try:
        with urllib.request.urlopen(url, timeout=3) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError as exc:
        return None, repr(exc)


def scrape(port: int) -> Samples:
    """Every sample of the worker's /metrics, by name and labels."""
    status, body = get(f"http://127.0.0.1:{port}/metrics")
    assert status == 200, body
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def wait_until(what: Callable[[], object], timeout: float, step: float = 0.3) -> object:
    """Poll ``what`` until it returns something true; its last answer."""
    deadline = time.monotonic() + timeout
    got = what()
    while not got and time.monotonic() < deadline:
        time.sleep(step)
        got = what()
    return got


def wait_ready(port: int, worker: subprocess.Popen, timeout: float) -> tuple[int | None, str]:
    def ready() -> tuple[int | None, str] | None:
        assert worker.poll() is None, "the worker exited"
        got = get(f"http://127.0.0.1:{port}/readyz")
        return got if got[0] == 200 else None

    return wait_until(ready, timeout) or get(f"http://127.0.0.1:{port}/readyz")  # type: ignore[return-value]


# -- a live worker ---------------------------------------------------------------------------


def test_metrics_follow_reports_dead_letters_and_releases(tmp_path: Path) -> None:
    cfg = config("observe", mechanism="pbd")
    port = free_port()
    log = tmp_path / "worker.log"
    with EmbeddedBroker() as broker:
        topics = setup_topics(broker.bootstrap, cfg)
        worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", log,
                              "--metrics-port", str(port), "--metrics-host", "127.0.0.1",
                              "--log-format", "json")
        try:
            assert wait_ready(port, worker, 60) == (200, "ready\n"), log.read_text()[-3000:]
            assert get(f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")
            first = scrape(port)
            assert value(first, "pwevent_reports_total", outcome="accepted") == 0
            assert value(first, "pwevent_slots_released_total") == 0

            bad_requirement = (b"u-bad", orjson.dumps({"user": "u-bad", "w": 0, "E": 1.0}))
            register(broker.bootstrap, topics, cfg,
                     requirement_records(USERS, W, E) + [bad_requirement], worker)
            # no slot closes before this: every release latency lies between it and the scrape
            before_closes = time.time()
            for t in range(3):
                produce(broker.bootstrap, topics.reports, cfg.partitions,
                        slot_reports(USERS, t, cfg.d))
            # keyed by a user, on its partition, but no JSON
            produce(broker.bootstrap, topics.reports, cfg.partitions, [(b"u3", b"not json")])
            close_through(broker.bootstrap, topics, cfg, 3 * cfg.slot_ms)
            docs = wait_for_slots(broker.bootstrap, topics, {0, 1, 2}, 60, worker)
            assert {d["slot"] for d in docs} == {0, 1, 2}, log.read_text()[-3000:]
            mid = wait_until(lambda: (s := scrape(port)) and value(
                s, "pwevent_slots_released_total") == 3 and s, 10)
            assert mid, "slots_released_total did not reach 3"
            since_closes = time.time() - before_closes

            assert value(mid, "pwevent_requirements_total") == len(USERS)
            assert value(mid, "pwevent_dead_letters_total", reason="invalid_requirement") == 1
            assert value(mid, "pwevent_reports_total", outcome="invalid_requirement") is None
            assert value(mid, "pwevent_reports_total", outcome="accepted") == 3 * len(USERS)
            assert value(mid, "pwevent_reports_total", outcome="malformed_json") == 1
            assert value(mid, "pwevent_dead_letters_total", reason="malformed_json") == 1
            assert value(mid, "pwevent_dead_letters_failed_total") == 0
            assert value(mid, "pwevent_last_released_slot") == 2
            assert value(mid, "pwevent_slot_release_seconds_count") == 3
            # from each slot's close (the watermark passing its end) to its release
            took = value(mid, "pwevent_slot_release_seconds_sum")
            assert took is not None and 0 <= took <= 3 * since_closes, (took, since_closes)
            assert value(mid, "pwevent_slot_release_seconds_bucket", le="+Inf") == 3
            assert value(mid, "pwevent_ledger_levels") == len(LEVELS)
            for level, (w, budget) in LEVELS.items():
                spent = value(mid, "pwevent_budget_spent", level=level)
                left = value(mid, "pwevent_budget_left", level=level)
                assert spent is not None and left is not None, level
                # at least the dissimilarity share E / 2w of each of the 3 released slots
                assert spent >= 3 * budget / (2 * w) - 1e-9 and spent <= budget + 1e-9
                assert spent + left == pytest.approx(budget)
            # every report and watermark is read: nothing left behind on either partition
            lag = wait_until(lambda: (s := scrape(port)) and all(value(
                s, "pwevent_consumer_lag_records", topic=topics.reports, partition=str(p)) == 0
                for p in range(cfg.partitions)), 10)
            assert lag, "consumer lag did not reach 0"

            produce(broker.bootstrap, topics.reports, cfg.partitions,
                    slot_reports(USERS, 3, cfg.d) + [report("u5", 3 * cfg.slot_ms + 10, 1)])
            close_through(broker.bootstrap, topics, cfg, 4 * cfg.slot_ms)
            wait_for_slots(broker.bootstrap, topics, {3}, 60, worker)
            after = wait_until(lambda: (s := scrape(port)) and value(
                s, "pwevent_slots_released_total") == 4 and s, 10)
            assert after, "slots_released_total did not reach 4"
            assert value(after, "pwevent_reports_total", outcome="accepted") == 4 * len(USERS)
            assert value(after, "pwevent_reports_total", outcome="duplicate_in_slot") == 1
            assert value(after, "pwevent_last_released_slot") == 3
            assert value(after, "pwevent_slot_release_seconds_count") == 4
            assert value(after, "pwevent_rewinds_total") == 0
        finally:
            stop_worker(worker)

    # --log-format json: every line one JSON object; one structured line per released slot
    lines = [orjson.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert lines and all({"time", "level", "logger", "message"} <= set(d) for d in lines)
    assert any(d["logger"].startswith("faust") for d in lines)
    slots = [d for d in lines if d["logger"] == "pwevent.coordinator" and "slot" in d]
    assert sorted(d["slot"] for d in slots) == [0, 1, 2, 3]
    assert all(d["accepted"] == len(USERS) and isinstance(d["published"], bool)
               and isinstance(d["nullified"], bool) for d in slots)
    assert sum(d["rejected"] for d in slots) == 2  # the record without JSON, the duplicate


def test_readyz_fails_while_the_broker_is_down_and_recovers(tmp_path: Path) -> None:
    cfg = config("outage")
    port = free_port()
    log = tmp_path / "worker.log"
    broker = RestartableBroker(tmp_path / "broker")
    broker.start()
    worker = None
    try:
        setup_topics(broker.bootstrap, cfg)
        worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", log,
                              "--metrics-port", str(port))
        assert wait_ready(port, worker, 60)[0] == 200, log.read_text()[-3000:]
        readyz = f"http://127.0.0.1:{port}/readyz"

        broker.stop()
        down = wait_until(lambda: (got := get(readyz))[0] == 503 and got, 20)
        assert down, f"/readyz still {get(readyz)} with the broker down"
        assert "broker" in down[1] and "not reachable" in down[1]
        assert get(f"http://127.0.0.1:{port}/healthz") == (200, "ok\n")  # alive all the same

        broker.start()
        up = wait_ready(port, worker, 40)
        assert up == (200, "ready\n"), (up, log.read_text()[-3000:])
    finally:
        if worker is not None:
            stop_worker(worker)
        broker.stop()


# -- the JSON log format ---------------------------------------------------------------------


def test_json_log_lines() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("pwevent.test-observe")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        logger.info("slot %d released\nsecond line", 7, extra={
            "slot": 7, "published": np.bool_(True), "accepted": np.int64(20), "where": Path("x")})
        try:
            raise ValueError("boom")
        except ValueError:
            logger.exception("failed")
        logger.debug("not written")
    finally:
        logger.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2  # a message with a newline, and a traceback, stay on one line each
    first, second = (orjson.loads(line) for line in lines)
    assert first["message"] == "slot 7 released\nsecond line"
    assert (first["level"], first["logger"]) == ("INFO", "pwevent.test-observe")
    assert first["time"].endswith("Z")
    assert abs(datetime.fromisoformat(first["time"]).timestamp() - time.time()) < 60
    assert (first["slot"], first["published"], first["accepted"], first["where"]) == \
        (7, True, 20, "x")
    assert not {"args", "msg", "levelno", "exc_info"} & set(first)
    assert second["level"] == "ERROR" and "ValueError: boom" in second["exc"]

    conf = json_logging_config("warning")
    assert conf["root"]["level"] == logging.WARNING
    assert conf["formatters"]["json"]["()"] is JsonFormatter


# -- what the metrics are made of ------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["pbd", "dpbd"])
def test_accepted_reports_are_counted_per_batch_across_slot_closes(mechanism: str) -> None:
    """:func:`accepted_since` around each batch, as the job counts, adds up to the reports the
    partitions took, though slots close (and, under dpbd, are planned) inside batches."""
    cfg = config("unit", mechanism=mechanism, lateness_ms=0)
    users = [f"u{i}" for i in range(30)]
    job = InProcessJob(cfg)
    job.register(dynamic_requirements(users) if cfg.dynamic
                 else requirement_records(users, [3] * 30, [1.0] * 30))
    counted = sent = 0
    for t in range(6):
        # this slot's reports close the previous slot (no lateness); a duplicate, a bad record
        records = slot_reports(users, t, cfg.d) + [report(users[t], t * cfg.slot_ms + 999, 0),
                                                   (b"u1", b"{")]
        sent += len(users)
        batches: dict[int, list] = {}
        for key, raw in records:
            p = job._partition(key)
            batches.setdefault(p, []).append((key, raw, p, job.offsets[p]))
            job.offsets[p] += 1
        for p, batch in sorted(batches.items()):
            acc = job.accumulators[p]
            before = acc.accepted.total()
            messages, dead = acc.process(batch)
            counted += accepted_since(before, acc.accepted.total(), messages)
            job.dead.extend(dead)
            job._deliver(messages)
    assert counted == sent
    assert sorted({d.reason for d in job.dead}) == ["duplicate_in_slot", "malformed_json"]


@pytest.mark.parametrize("mechanism", ["pbd", "dpbd"])
@pytest.mark.parametrize("old_messages", [False, True])
def test_release_latency_counts_from_the_last_partition_closing_the_slot(
        mechanism: str, old_messages: bool) -> None:
    """pwevent_slot_release_seconds: from the latest time a partition's watermark passed the
    slot's end (each partition's clock, in its closure) to the release, through the job's own
    classes with injected clocks; a closure without the time (an older version's) counts from
    its receipt by the coordinator's worker."""
    cfg = config("latency", mechanism=mechanism)
    users = [f"u{i}" for i in range(30)]
    job = InProcessJob(cfg)
    job.register(dynamic_requirements(users) if cfg.dynamic
                 else requirement_records(users, [3] * 30, [1.0] * 30))
    now = [0]
    for acc in job.accumulators:
        acc.clock_ms = lambda: now[0]
    job.feed(slot_reports(users, 0, cfg.d))  # slot 0 stays open
    closed = []
    for p, acc in enumerate(job.accumulators):
        now[0] = 1_000_000 + 3_000 * p  # partition p's watermark passes the end of slot 0
        closed += acc.advance_messages(cfg.slot_ms)
    assert [m["closed_at_ms"] for m in closed if "closed_through" in m] == [1_000_000, 1_003_000]
    if old_messages:
        for m in closed:
            m.pop("closed_at_ms", None)

    # the coordinator's worker, as its runner does: note each message, release, observe
    closes, metrics = SlotCloseTimes(), WorkerMetrics("r")
    received, released = 1_009_000, 1_009_500
    receive = job.coordinator.receive

    def runner_receive(message: dict) -> list:
        closes.take(message, received)
        out = receive(message)
        metrics.release_took(out, closes, released, received)
        return out

    job.coordinator.receive = runner_receive  # type: ignore[method-assign]
    job._deliver(closed)
    assert [orjson.loads(r)["slot"] for r in job.releases] == [0]
    sample = metrics.registry.get_sample_value
    assert sample("pwevent_slot_release_seconds_count") == 1
    expected = (released - received) if old_messages else (released - 1_003_000)
    assert sample("pwevent_slot_release_seconds_sum") == pytest.approx(expected / 1000)


def test_slot_close_times_take_the_first_closure_covering_each_slot() -> None:
    closes = SlotCloseTimes()
    closes.take({"partition": 0, "closed_through": 2, "closed_at_ms": 100}, 900)
    closes.take({"partition": 0, "closed_through": 2, "closed_at_ms": 500}, 900)  # a repeat
    closes.take({"partition": 0, "closed_through": 5, "closed_at_ms": 300}, 900)
    closes.take({"partition": 1, "closed_through": 3}, 700)  # no time: its receipt
    closes.take({"partition": 1, "plan": 1, "counts": {}}, 800)  # closes nothing
    assert [closes.closed_at(s) for s in (0, 2, 3, 4, 6)] == [700, 700, 700, 300, None]
    closes.forget(3)
    assert closes.closures == {0: [(5, 300)], 1: [(3, 700)]}
    assert closes.closed_at(4) == 300
    metrics = WorkerMetrics("r")
    # a clock behind the partition's: no negative latency
    metrics.release_took([(4, b"{}", b"{}"), (7, None, b"{}")], closes, 250, 900)
    assert metrics.registry.get_sample_value("pwevent_slot_release_seconds_count") == 1
    assert metrics.registry.get_sample_value("pwevent_slot_release_seconds_sum") == 0


def _window_charges(charges: list[np.ndarray], w: np.ndarray) -> np.ndarray:
    """Per level, the charges of its last ``w`` slots."""
    out = np.zeros(w.shape[0])
    for age, charge in enumerate(reversed(charges), start=1):
        out += np.where(age <= w, charge, 0.0)
    return out


@pytest.mark.parametrize("ledger_type", [DistributionLedger, UniformLedger, SampleLedger,
                                         AbsorptionLedger])
def test_window_spend_is_what_the_last_w_slots_charged(ledger_type: type) -> None:
    rng = np.random.default_rng(7)
    w, budget = np.array([1, 3, 5, 8]), np.array([0.5, 1.0, 2.0, 1.5])
    ledger = ledger_type(w, budget)
    charges: list[np.ndarray] = []
    for t in range(30):
        if t == 10:  # a level added later: its row starts empty
            ledger.add_level(4, 1.0)
            w, budget = np.append(w, 4), np.append(budget, 1.0)
            charges = [np.append(c, 0.0) for c in charges]
        publish = ledger_type is UniformLedger or bool(rng.random() < 0.6)
        charge = ledger.commit(publish)
        charges.append(charge.eps1 + charge.eps2)
        spent = window_spend(ledger)
        truth = _window_charges(charges, w)
        assert spent is not None and np.all(spent <= budget + 1e-9)
        # the dissimilarity share is counted at every slot of the window, including those before
        # a level existed (the ledger does not keep since when): the level added late may show
        # more than it was charged
        known = slice(None) if t < 10 else slice(0, -1)
        assert np.allclose(spent[known], truth[known]), (t, spent, truth)
    if ledger_type is AbsorptionLedger:  # several publications inside level 3's last window
        share = budget[3] / (2 * w[3])
        assert sum(bool(c[3] > share + 1e-12) for c in charges[-8:]) >= 2


def test_absorption_state_saved_before_its_history_loads_with_the_same_decisions() -> None:
    """A checkpoint written before the absorption ledger kept its charges restores; only the
    window spend starts from zero, never the decisions."""
    ledger = AbsorptionLedger(np.array([2, 4]), np.array([1.0, 2.0]))
    for publish in (True, False, True, True, False):
        ledger.commit(publish)
    old = {k: v for k, v in ledger.state().items() if k != "recent"}
    restored = AbsorptionLedger(np.array([2, 4]), np.array([1.0, 2.0]))
    restored.load_state(old)
    for publish in (False, True, True, False, True, False):
        want, got = ledger.plan(), restored.plan()
        assert (want.nullified, want.eps2.tolist()) == (got.nullified, got.eps2.tolist())
        ledger.commit(publish)
        restored.commit(publish)
    assert np.array_equal(window_spend(restored), window_spend(ledger))  # a window later
