"""The consumer contract of the releases topic: the fields and their schema, the noise scale
against what the mechanism draws, error bars that hold at their stated rate, deduplication by
key, the typed client, and on the embedded broker the Kafka timestamps and ``pwevent
releases`` (reading the topic, and following it while slots arrive)."""

from __future__ import annotations

import asyncio
import math
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import jsonschema
import numpy as np
import orjson
import pytest
from brokers import BROKER_KINDS, running
from forked_workers import run_command
from jobkit import (
    close_through,
    config,
    produce,
    register,
    requirement_records,
    setup_topics,
    slot_reports,
    start_worker,
    stop_worker,
    wait_for_slots,
)

from mechanisms.ledgers.plan import SlotPlan
from mechanisms.noise.calibrated import noise_std
from mechanisms.noise.discrete_laplace import rational_scale
from mechanisms.release.rule import ReleaseRule
from streams.job.config import JobConfig
from streams.job.coordination.coordinator import cell_labels
from streams.job.pipeline import InProcessJob
from streams.records.domains import BinDomain, CategoryDomain, CellDomain, GridDomain
from streams.records.formats import load_schema
from streams.records.output_formats import CELLS_INLINE_MAX, RELEASE_VERSION
from streams.releases.client import (
    KNOWN_VERSION,
    Noise,
    ReleaseFormatWarning,
    decode_releases,
    error_bars,
    half_widths,
    iter_releases,
    parse_release,
)

ROOT = Path(__file__).resolve().parents[2]
USERS = [f"u{i}" for i in range(24)]
RELEASES = jsonschema.Draft202012Validator(load_schema("releases"))
DECISIONS = jsonschema.Draft202012Validator(load_schema("decisions"))


def cfg(**kw) -> JobConfig:
    base = dict(stream="s", mechanism="pbd", domain={"kind": "cells", "size": 3}, slot_ms=1000,
                partitions=2, secret="k", nonce="c0ffee", event_time="history")
    base.update(kw)
    return JobConfig(**base)


def requirements(config: JobConfig, users: list[str]) -> list[tuple[bytes, bytes]]:
    """Every user at one requirement (so no user is ever sampled out)."""
    if config.dynamic:
        return [(u.encode(), orjson.dumps({"user": u, "wB": 4, "EB": 1.0, "wF": 4, "EF": 1.0}))
                for u in users]
    return requirement_records(users, [4] * len(users), [1.0] * len(users))


def run(config: JobConfig, batches: list, users: list[str] = USERS) -> InProcessJob:
    job = InProcessJob(config)
    job.register(requirements(config, users))
    for batch in batches:
        job.feed(batch)
    job.finish(len(batches) * config.slot_ms)
    return job


# -- the fields ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["pbd", "pba", "pbad", "bd", "uniform", "dpbd", "dpba"])
@pytest.mark.parametrize("noise", ["discrete", "laplace"])
def test_release_fields_are_present_and_valid(mechanism: str, noise: str) -> None:
    domain = {"kind": "labels", "labels": ["red", "green", "blue"]}
    config = cfg(mechanism=mechanism, noise=noise, domain=domain)
    batches = [[(u.encode(), orjson.dumps({"user": u, "time": t * 1000 + i,
                                          "value": domain["labels"][(i * 5 + t) % 3]}))
                for i, u in enumerate(USERS)] for t in range(8)]
    job = run(config, batches)
    docs = [orjson.loads(r) for r in job.releases]
    assert [d["slot"] for d in docs] == list(range(8))
    rule = ReleaseRule(3, noise, sensitivity=config.sensitivity)
    last = None
    for doc in docs:
        RELEASES.validate(doc)
        assert doc["schema_version"] == RELEASE_VERSION == KNOWN_VERSION == 2
        assert doc["cells"] == ["red", "green", "blue"]
        if doc["published"]:
            assert doc["approximates"] is None
            assert doc["noise"] == {
                "distribution": {"discrete": "discrete_laplace", "laplace": "laplace"}[noise],
                "scale": rule.noise_std(doc["threshold"]).tolist()}
            last = doc["slot"]
        else:  # repeats the last publication, which it names
            assert doc["noise"] is None and doc["approximates"] == last
            if last is not None:
                assert doc["histogram"] == docs[last]["histogram"]
            else:
                assert doc["histogram"] == [0, 0, 0]
    assert any(d["published"] for d in docs)
    DECISIONS.validate(orjson.loads(job.coordinator.start_record()))


def test_approximates_survives_a_restart_from_a_snapshot() -> None:
    """The coordinator keeps the last published slot in its state: a restored coordinator
    names the same publication as one that never stopped."""
    config = cfg(mechanism="pba")
    batches = [slot_reports(USERS, t, 3) for t in range(10)]
    whole = run(config, batches)
    job = InProcessJob(config)
    job.register(requirements(config, USERS))
    for batch in batches[:5]:
        job.feed(batch)
    job.finish(5000)
    restored = type(job.coordinator)(config)
    restored.restore(job.coordinator.snapshot())
    job.coordinator = restored
    for batch in batches[5:]:
        job.feed(batch)
    job.finish(10_000)
    assert job.releases == whole.releases
    assert any(not orjson.loads(r)["published"] for r in whole.releases[5:])


def test_cell_labels_of_every_domain() -> None:
    assert cell_labels(CellDomain(3)) == ["0", "1", "2"]
    assert cell_labels(BinDomain(0.0, 10.0, 4)) == ["[0, 2.5)", "[2.5, 5)", "[5, 7.5)",
                                                     "[7.5, 10]"]
    assert cell_labels(GridDomain(0.0, 2.0, 10.0, 11.0, 2, 2)) == [
        "lon [0, 1) lat [10, 10.5)", "lon [1, 2] lat [10, 10.5)",
        "lon [0, 1) lat [10.5, 11]", "lon [1, 2] lat [10.5, 11]"]
    grid = GridDomain(0.0, 2.0, 10.0, 11.0, 2, 2)
    # the label of a point's cell contains the point
    assert cell_labels(grid)[grid.cell([1.5, 10.7])] == "lon [1, 2] lat [10.5, 11]"
    assert cell_labels(CategoryDomain(("x", "y"))) == ["x", "y"]
    labels = cell_labels(BinDomain(0.0, 1.0, 1000))
    assert len(set(labels)) == 1000


def test_a_large_domain_refers_to_its_labels_in_the_start_record() -> None:
    size = CELLS_INLINE_MAX + 1
    config = cfg(mechanism="uniform", domain={"kind": "cells", "size": size})
    job = run(config, [[(u.encode(), orjson.dumps({"user": u, "time": i, "value": i}))
                        for i, u in enumerate(USERS)]])
    doc = orjson.loads(job.releases[0])
    RELEASES.validate(doc)
    assert doc["cells"] == {"ref": "s/start", "size": size}
    assert len(doc["noise"]["scale"]) == len(doc["histogram"]) == size
    start = orjson.loads(job.coordinator.start_record())
    DECISIONS.validate(start)
    assert start["config"]["cells"] == [str(i) for i in range(size)]
    rel = parse_release(job.releases[0])
    assert rel.cells is None and rel.cells_ref == "s/start" and rel.lower is not None
    # small domains carry their labels inline and leave the start record as it was
    small = cfg(mechanism="uniform")
    assert orjson.loads(run(small, []).coordinator.start_record())["config"] == small.public()


# -- the noise scale ----------------------------------------------------------------------------


@pytest.mark.parametrize("noise", ["discrete", "laplace"])
@pytest.mark.parametrize("sensitivity", [1, 2])
def test_the_noise_scale_is_the_std_of_what_the_rule_draws(noise: str, sensitivity: int) -> None:
    """Two levels whose budgets reach the threshold (nobody sampled out, adaptive test off): the
    published histogram minus the counts is the noise alone; its standard deviation over 24,000
    seeded draws is the scale (relative standard error about 1%, the tolerance 6%)."""
    d, runs = 60, 400
    rule = ReleaseRule(d, noise, sensitivity=sensitivity)
    plan = SlotPlan(1, np.zeros(2), np.array([0.5, 0.5]), False, False)
    counts = np.arange(2 * d, dtype=np.int64).reshape(2, d)
    sizes = np.array([150, 150])
    rng = np.random.default_rng(11)
    residuals = []
    for _ in range(runs):
        decision = rule.decide(plan, counts, sizes, np.zeros(d), rng)
        assert decision.published
        residuals.append(decision.histogram - counts.sum(axis=0))
    theta = decision.threshold
    assert theta == pytest.approx(0.5 / sensitivity)
    scale = rule.noise_std(theta)
    assert scale.shape == (d,) and np.all(scale == scale[0])
    # the formulas: Laplace(1/theta), or the discrete Laplace at the sampler's rational theta
    if noise == "laplace":
        assert scale[0] == pytest.approx(math.sqrt(2) / theta, rel=1e-12)
    else:
        t, s = rational_scale(theta)
        a = math.exp(-s / t)
        assert scale[0] == pytest.approx(math.sqrt(2 * a) / (1 - a), rel=1e-12)
    empirical = float(np.std(np.concatenate(residuals)))
    assert empirical == pytest.approx(scale[0], rel=0.06)
    assert noise_std(theta, noise) == scale[0]


# -- error bars ---------------------------------------------------------------------------------


def _pmf_tail(scale: float, k: int) -> float:
    """P(|X| > k) of the discrete Laplace of standard deviation ``scale``, by summing its
    probability mass function."""
    v = scale * scale
    a = v / (v + 1 + math.sqrt(2 * v + 1))
    support = np.arange(-20_000, 20_001)
    pmf = (1 - a) / (1 + a) * a ** np.abs(support)
    return float(pmf[np.abs(support) > k].sum())


@pytest.mark.parametrize("eps", [0.05, 0.3, 1.0, 3.0])
@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.95, 0.99])
def test_half_widths_are_exact_quantiles(eps: float, confidence: float) -> None:
    scale = noise_std(eps, "discrete")
    k = int(half_widths("discrete_laplace", [scale], confidence)[0])
    assert _pmf_tail(scale, k) <= 1 - confidence + 1e-12
    assert k == 0 or _pmf_tail(scale, k - 1) > 1 - confidence
    lap = noise_std(eps, "laplace")
    q = float(half_widths("laplace", [lap], confidence)[0])
    assert math.exp(-q / (lap / math.sqrt(2))) == pytest.approx(1 - confidence, rel=1e-9)


def test_error_bars_are_the_histogram_plus_and_minus_the_half_width() -> None:
    lower, upper = error_bars([5, -2], Noise("discrete_laplace", (2.0, 0.0)), 0.9)
    assert all(type(x) is int for x in lower + upper)
    assert upper[1] == lower[1] == -2 and upper[0] - 5 == 5 - lower[0] > 0
    lower, upper = error_bars([1.5], Noise("laplace", (math.sqrt(2),)), 0.95)
    assert upper[0] - 1.5 == pytest.approx(math.log(20))
    with pytest.raises(ValueError):
        half_widths("gaussian", [1.0], 0.9)
    with pytest.raises(ValueError):
        error_bars([1], Noise("laplace", (1.0,)), 1.0)


@pytest.mark.parametrize("noise", ["discrete", "laplace"])
def test_error_bars_hold_the_true_count_at_the_stated_rate(noise: str) -> None:
    """uniform publishes every slot; every user has one requirement, so the count the noise is
    added to is the true count. Over 160 slots x 8 cells the share of cells whose 95% (and
    80%) interval holds the true count is within 4.5 standard errors of the exact rate, which
    for the discrete Laplace is at least the level. The slots' randomness is keyed by a fixed
    nonce: the outcome is the same on every run."""
    d, slots, users = 8, 160, [f"u{i}" for i in range(40)]
    config = cfg(mechanism="uniform", noise=noise, domain={"kind": "cells", "size": d},
                 partitions=1)
    rng = np.random.default_rng(5)
    cells = rng.integers(0, d, size=(slots, len(users)))
    truth = np.stack([np.bincount(row, minlength=d) for row in cells])
    batches = [[(u.encode(), orjson.dumps({"user": u, "time": t * 1000 + i, "value": int(c)}))
                for i, (u, c) in enumerate(zip(users, cells[t].tolist(), strict=True))]
               for t in range(slots)]
    job = run(config, batches, users)
    assert len(job.releases) == slots
    for confidence in (0.95, 0.8):
        rels = [parse_release(r, confidence=confidence) for r in job.releases]
        assert all(r.published for r in rels)
        lower = np.array([r.lower for r in rels])
        upper = np.array([r.upper for r in rels])
        covered = float(((lower <= truth) & (truth <= upper)).mean())
        scale = rels[0].noise.scale[0]  # one threshold for every slot
        q = half_widths(rels[0].noise.distribution, [scale], confidence)[0]
        if noise == "laplace":
            exact = confidence
        else:
            v = scale * scale
            a = v / (v + 1 + math.sqrt(2 * v + 1))
            exact = 1 - 2 * a ** (q + 1) / (1 + a)
            assert exact >= confidence
        se = math.sqrt(exact * (1 - exact) / truth.size)
        assert abs(covered - exact) < 4.5 * se, (covered, exact)
    # and the residuals' spread is the published scale
    residual = np.array([r.histogram for r in rels]) - truth
    assert float(residual.std()) == pytest.approx(scale, rel=0.1)


# -- deduplication and versions -----------------------------------------------------------------


def test_decoding_keeps_the_first_release_per_key_and_skips_what_it_cannot_read() -> None:
    job = run(cfg(mechanism="uniform"), [slot_reports(USERS, t, 3) for t in range(3)])
    r0, r1, r2 = job.releases
    newer = orjson.loads(r2)
    newer.update(schema_version=KNOWN_VERSION + 1, slot=7, more={"x": 1})
    unreadable = {"schema_version": KNOWN_VERSION + 1, "stream": "s", "slot": 8,
                  "counts": [1, 2, 3]}
    other = orjson.loads(r0)
    other["stream"] = "t"
    records = [
        (b"s/0", r0, 1000), (b"s/1", r1, 2000), (b"s/0", r0, 5000),  # a re-emission
        (b"t/0", orjson.dumps(other), 1000), (b"s/9", None, 1),  # another stream, a tombstone
        (b"s/7", orjson.dumps(newer), 8000), (b"s/8", orjson.dumps(unreadable), 9000),
        (b"s/1", r1.replace(b'"users":24', b'"users":25'), 2000),  # should never happen
        (b"s/2", r2, 3000),
    ]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = list(decode_releases(records, stream="s"))
    assert [(r.key, r.timestamp_ms) for r in got] == [("s/0", 1000), ("s/1", 2000),
                                                      ("s/7", 8000), ("s/2", 3000)]
    assert got[1].users == 24  # the first of s/1
    assert got[2].schema_version == KNOWN_VERSION + 1  # newer, but readable: read
    messages = [str(w.message) for w in caught]
    assert all(w.category is ReleaseFormatWarning for w in caught)
    assert len(messages) == 2
    assert "s/8 of schema version 3, newer than the 2 this client knows" in messages[0]
    assert "s/1 seen again with other content" in messages[1]
    assert [r.key for r in decode_releases(records[:4])] == ["s/0", "s/1", "t/0"]
    with pytest.warns(ReleaseFormatWarning, match="s/8"):
        assert [r.slot for r in decode_releases(records, stream="s", from_slot=2)] == [7, 2]
    # a version-1 record reads, without bars
    v1 = {k: v for k, v in orjson.loads(r0).items()
          if k not in ("schema_version", "cells", "noise", "approximates")}
    old = parse_release(orjson.dumps(v1))
    assert old.schema_version == 1 and old.noise is None and old.lower is None
    assert old.histogram == tuple(v1["histogram"])


# -- on the embedded broker ---------------------------------------------------------------------


async def _raw_releases(bootstrap: str, topic: str) -> list[tuple[bytes, bytes, int]]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        out = []
        while await consumer.position(tp) < end:
            for recs in (await consumer.getmany(timeout_ms=500)).values():
                out += [(r.key, r.value, r.timestamp) for r in recs]
        return out
    finally:
        await consumer.stop()


@pytest.mark.parametrize("kind", BROKER_KINDS)
def test_end_to_end_timestamps_and_the_releases_command(kind: str, tmp_path: Path) -> None:
    slots = 6
    with running(kind) as broker:
        cfg_ = config("contract", mechanism="pba", origin_ms=1_700_000_000_123)
        topics = setup_topics(broker.bootstrap, cfg_)
        worker = start_worker(broker.bootstrap, cfg_, tmp_path / "data",
                              tmp_path / "worker.log", "--origin-ms", str(cfg_.origin_ms))
        try:
            # one requirement, with a budget large enough that the first slot is published all
            # but surely (the live job's noise is not seeded), and never thinned (one level:
            # nobody is sampled away): the checks below need a release with bars
            register(broker.bootstrap, topics, cfg_, requirement_records(
                USERS, [3] * 24, [8.0] * 24), worker)
            for t in range(slots):
                batch = [(k, orjson.dumps({**orjson.loads(v),
                                           "time": orjson.loads(v)["time"] + cfg_.origin_ms}))
                         for k, v in slot_reports(USERS, t, cfg_.d)]
                produce(broker.bootstrap, topics.reports, cfg_.partitions, batch)
            close_through(broker.bootstrap, topics, cfg_, cfg_.origin_ms + slots * cfg_.slot_ms)
            docs = wait_for_slots(broker.bootstrap, topics, set(range(slots)), 60, worker)
        finally:
            stop_worker(worker)
        log = (tmp_path / "worker.log").read_text()
        assert sorted(d["slot"] for d in docs) == list(range(slots)), log[-3000:]

        raw = asyncio.run(_raw_releases(broker.bootstrap, topics.releases))
        assert len(raw) == slots
        for key, value, timestamp in raw:
            doc = orjson.loads(value)
            RELEASES.validate(doc)
            assert key == f"s/{doc['slot']}".encode()
            assert timestamp == doc["end"] == cfg_.origin_ms + (doc["slot"] + 1) * 1000
        # a re-emission (byte-identical, as after a restart) and another stream's release
        first_key, first_value, _ = raw[0]
        other = {**orjson.loads(first_value), "stream": "other"}
        produce(broker.bootstrap, topics.releases, 1,
                [(first_key, first_value), (b"other/0", orjson.dumps(other))])

        got = list(iter_releases(broker.bootstrap, topics.releases, stream="s"))
        assert [r.slot for r in got] == list(range(slots))
        assert all(r.timestamp_ms == r.end for r in got)
        assert {r.status for r in got} >= {"published"}
        assert len(list(iter_releases(broker.bootstrap, topics.releases))) == slots + 1

        cmd = ["releases", "--broker", broker.bootstrap, "--prefix", cfg_.prefix, "--stream",
               "s", "--json", "--confidence", "0.9"]
        done = run_command(cmd, timeout=60, cwd=ROOT, text=True)
        assert done.returncode == 0, done.stderr
        lines = [orjson.loads(line) for line in done.stdout.splitlines()]
        assert [x["slot"] for x in lines] == list(range(slots))  # the duplicate printed once
        by_slot = {d["slot"]: d for d in docs}
        for line in lines:
            release = by_slot[line["slot"]]
            assert line["key"] == f"s/{line['slot']}" and line["stream"] == "s"
            assert line["timestamp_ms"] == line["end"] == release["end"]
            assert line["histogram"] == release["histogram"]
            assert line["cells"] == ["0", "1", "2"] and line["confidence"] == 0.9
            assert line["status"] == ("published" if release["published"] else
                                      "nullified" if release["nullified"] else "approximated")
            if release["published"] and not release["noise"].get("thinned"):
                q = half_widths("discrete_laplace", release["noise"]["scale"], 0.9)
                assert line["lower"] == (np.array(release["histogram"]) - q).tolist()
                assert line["upper"] == (np.array(release["histogram"]) + q).tolist()
                assert line["noise"] == release["noise"]
            elif release["published"]:  # it sampled users away: no bars whose coverage holds
                assert line["lower"] is line["upper"] is None
                assert line["noise"] == release["noise"]
            else:
                assert line["lower"] is line["upper"] is line["noise"] is None
                assert line["approximates"] == release["approximates"]

        assert any(line["lower"] is not None for line in lines)  # some slots have bars

        table = run_command([*cmd[:-3], "--from-slot", "4", "--no-follow"], timeout=60,
                            cwd=ROOT, text=True)
        assert table.returncode == 0, table.stderr
        head, *rows = table.stdout.splitlines()
        assert re.split(r"\s{2,}", head.strip()) == ["slot", "start (UTC)", "status",
                                                     "histogram (±95%)"]
        assert head.index("status") == rows[0].index(rows[0].split()[2])  # aligned
        assert [int(row.split()[0]) for row in rows] == [4, 5]
        assert rows[0].split()[1] == "2023-11-14T22:13:24.123Z"  # origin + 4 s
        for row, slot in zip(rows, (4, 5), strict=True):
            assert ("±" in row) == (by_slot[slot]["published"]
                                    and not by_slot[slot]["noise"].get("thinned"))

        missing = run_command([*cmd[:3], "--prefix", "nope", "--timeout", "10"], timeout=60,
                              cwd=ROOT, text=True)
        assert missing.returncode == 2 and "no topic nope.releases" in missing.stderr


def _lines_when(path: Path, proc: subprocess.Popen, count: int, timeout: float) -> list[dict]:
    """The JSON lines ``proc`` wrote to ``path`` once there are ``count`` (or at the timeout)."""
    deadline = time.monotonic() + timeout
    lines: list[dict] = []
    while time.monotonic() < deadline and proc.poll() is None:
        lines = [orjson.loads(line) for line in path.read_text().splitlines() if line.strip()]
        if len(lines) >= count:
            break
        time.sleep(0.2)
    return lines


@pytest.mark.parametrize("kind", BROKER_KINDS)
def test_the_releases_command_follows_slots_as_they_arrive(kind: str, tmp_path: Path) -> None:
    """``pwevent releases --follow`` prints what is on the topic, then each release published
    after it started, until interrupted (exit status 0)."""
    config_ = cfg()
    job = run(config_, [slot_reports(USERS, t, config_.d) for t in range(6)])
    records = [(f"s/{orjson.loads(v)['slot']}".encode(), v) for v in job.releases]
    assert len(records) == 6
    with running(kind) as broker:
        topics = setup_topics(broker.bootstrap, config("follow"))
        produce(broker.bootstrap, topics.releases, 1, records[:3])
        out, err = tmp_path / "follow.out", tmp_path / "follow.err"
        proc = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "releases", "--broker", broker.bootstrap,
             "--prefix", "follow", "--stream", "s", "--json", "--follow", "--timeout", "30"],
            stdout=out.open("w"), stderr=err.open("w"), cwd=ROOT)
        try:
            first = _lines_when(out, proc, 3, 60)
            assert [x["slot"] for x in first] == [0, 1, 2], err.read_text()
            time.sleep(1.5)  # nothing new: it waits, and prints nothing more
            assert proc.poll() is None and len(_lines_when(out, proc, 3, 1)) == 3
            for record in records[3:]:  # slots arriving one by one, as the job releases them
                produce(broker.bootstrap, topics.releases, 1, [record])
                time.sleep(0.3)
            produce(broker.bootstrap, topics.releases, 1, [records[4]])  # emitted again
            lines = _lines_when(out, proc, 6, 60)
            assert [x["slot"] for x in lines] == list(range(6)), err.read_text()
            assert [x["histogram"] for x in lines] == [orjson.loads(v)["histogram"]
                                                       for _k, v in records]
            time.sleep(1.0)
            assert proc.poll() is None, err.read_text()  # still following
            assert len(_lines_when(out, proc, 7, 1)) == 6  # the repeat printed once
            proc.send_signal(signal.SIGINT)
            assert proc.wait(30) == 0, err.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert err.read_text() == ""
