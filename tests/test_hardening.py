"""Privacy hardening of the job, without Kafka: what an analyst reads and what a producer can do.

Each test fails on the behaviour it guards against: exact counts in releases, one user counted
under two identities, extreme requirements, unsigned control records, noise repeated across
runs, and public counts that move with a removed user's report.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobkit import report, requirement_records, slot_reports

from mechanisms.ledgers import SlotPlan
from mechanisms.release import ReleaseRule
from streams.config import JobConfig
from streams.ingest import key_partition
from streams.partition import watermark_record
from streams.pipeline import InProcessJob

USERS = [f"u{i}" for i in range(24)]
RELEASE_FIELDS = {"stream", "slot", "start", "end", "mechanism", "published", "nullified",
                  "histogram", "threshold", "users"}


def cfg(**kw) -> JobConfig:
    base = dict(stream="s", mechanism="pbd", domain={"kind": "cells", "size": 3}, slot_ms=1000,
                partitions=3, secret="k", nonce="00", event_time="history")
    base.update(kw)
    return JobConfig(**base)


def run(config: JobConfig, requirements, batches, end_ms: int) -> InProcessJob:
    job = InProcessJob(config)
    job.register(requirements)
    for batch in batches:
        job.feed(batch)
    job.finish(end_ms)
    return job


def releases(job: InProcessJob) -> list[dict]:
    return [orjson.loads(r) for r in job.releases]


def reasons(job: InProcessJob) -> list[str]:
    return [d.reason for d in job.dead]


def test_releases_carry_nothing_exact_about_the_data() -> None:
    """Two streams that differ by one report give releases that differ at most in the noisy
    histogram: no field counts the reports accepted or rejected."""
    reqs = requirement_records(USERS, [4] * 24, [1.0] * 24)
    batches = [slot_reports(USERS, t, 3) for t in range(6)]
    fewer = [list(b) for b in batches]
    fewer[2] = fewer[2][1:] + [report("stranger", 2500, 0)]  # one report less, one rejected
    for name in ("pbd", "uniform", "dpbd"):
        config = cfg(mechanism=name)
        r = requirement_records(USERS, [4] * 24, [1.0] * 24) if name != "dpbd" else [
            (u.encode(), orjson.dumps({"user": u, "wB": 4, "EB": 1.0, "wF": 4, "EF": 1.0}))
            for u in USERS]
        a = releases(run(config, r, batches, 6000))
        b = releases(run(config, r, fewer, 6000))
        assert len(a) == len(b) == 6
        for x, y in zip(a, b, strict=True):
            assert set(x) == RELEASE_FIELDS
            x.pop("histogram"), y.pop("histogram")
            assert x == y, name
    assert reqs  # the fixed requirement records were built


def test_keyless_and_misplaced_records_are_dead_letters() -> None:
    """A user is its key on its key's partition: a keyless record or one on another partition
    would register or count the user a second time."""
    config = cfg()
    job = InProcessJob(config)
    job.register([(b"a", orjson.dumps({"user": "a", "w": 10, "E": 1.0}))])
    wrong = (key_partition(b"a", 3) + 1) % 3
    reg = job.registries[wrong]
    assert reg.apply(b"a", orjson.dumps({"user": "a", "w": 2, "E": 5.0}))[1] == "wrong_partition"
    assert reg.apply(None, orjson.dumps({"user": "a", "w": 2, "E": 5.0}))[1] == "missing_key"
    assert sum(r.sizes.total() for r in job.registries) == 1
    job.feed([(None, orjson.dumps({"user": "a", "time": 10, "value": 1})),
              report("a", 20, 2)])
    job.finish(1000)
    assert reasons(job) == ["missing_key"]
    _, dead = job.accumulators[wrong].process([(*report("a", 30, 0), wrong, 0)])
    assert [d.reason for d in dead] == ["wrong_partition"]
    doc = releases(job)[0]
    assert doc["users"] == 1


def test_a_tombstone_then_a_keyless_record_cannot_change_a_fixed_requirement() -> None:
    job = InProcessJob(cfg())
    job.register([(b"a", orjson.dumps({"user": "a", "w": 10, "E": 1.0})), (b"a", None),
                  (None, orjson.dumps({"user": "a", "w": 2, "E": 5.0}))])
    assert reasons(job) == ["missing_key"]
    assert all(not r.users_per_level() for r in job.registries)


def test_extreme_requirements_are_invalid_and_the_job_keeps_releasing() -> None:
    """E = 1e-20 once made the geometric sampler return zero noise under uniform; E = 1e-200
    broke OBS; w = 10**9 and w >= 2**63 stopped every release."""
    config = cfg(mechanism="uniform")
    bad = [("x1", 4, 1e-20), ("x2", 4, 1e-200), ("x3", 10**9, 1.0), ("x4", 2**63, 1.0),
           ("x5", 2**70, 1.0), ("x6", 4, 1e300), ("x7", 201, 1.0), ("x8", 4, 10.5)]
    reqs = requirement_records(USERS, [4] * 24, [1.0] * 24)
    reqs += [(u.encode(), json.dumps({"user": u, "w": w, "E": E}).encode()) for u, w, E in bad]
    batches = [slot_reports(USERS, t, 3) for t in range(5)]
    job = run(config, reqs, batches, 5000)
    # 2**70 is beyond a 64-bit integer: the JSON parser reads it as a float, not a window
    assert reasons(job) == ["invalid_requirement"] * 4 + ["bad_type"] + [
        "invalid_requirement"] * 3
    got = releases(job)
    assert [d["slot"] for d in got] == list(range(5)) and all(d["users"] == 24 for d in got)
    ok = run(cfg(mechanism="uniform", min_epsilon=1e-3, max_window=10**9),
             requirement_records(["y"], [10**9], [1e-3]), [], 0)
    assert reasons(ok) == []


def test_the_bounds_apply_to_dynamic_requirements() -> None:
    config = cfg(mechanism="dpbd")
    job = InProcessJob(config)
    job.register([(b"a", orjson.dumps({"user": "a", "wB": 4, "EB": 1e-20, "wF": 4, "EF": 1.0})),
                  (b"b", orjson.dumps({"user": "b", "wB": 4, "EB": 1.0, "wF": 10**9,
                                       "EF": 1.0}))])
    assert reasons(job) == ["invalid_requirement"] * 2


def test_only_signed_watermarks_move_time() -> None:
    """An unsigned ``{"watermark": N}`` once closed every slot up to N."""
    config = cfg()
    job = InProcessJob(config)
    job.register(requirement_records(USERS, [4] * 24, [1.0] * 24))
    acc = job.accumulators[0]
    forged = [(None, b'{"watermark": 100000000}', 0, 0),
              (None, watermark_record(100_000_000, b"other", "s", 0), 0, 1),
              (None, watermark_record(100_000_000, b"k", "s", 1), 0, 2)]  # another partition's
    partials, dead = acc.process(forged)
    assert partials == [] and [d.reason for d in dead] == ["unauthenticated_control"] * 3
    assert acc.slotter.watermark is None
    partials, dead = acc.process([(None, watermark_record(5000, b"k", "s", 0), 0, 3)])
    assert dead == [] and partials[0]["closed_through"] == 4


def test_live_event_time_is_bounded_by_the_clock() -> None:
    """In live operation neither a report nor a signed watermark may run ahead of the worker's
    clock by more than the allowed skew; replaying history says so and is not bounded."""
    now = 1_700_000_000_000
    config = cfg(max_skew_ms=60_000, event_time="live")
    job = InProcessJob(config)
    job.register(requirement_records(["u0"], [4], [1.0]))
    p = key_partition(b"u0", 3)
    acc = job.accumulators[p]
    acc.clock_ms = lambda: now
    far = now + 10 * 365 * 86_400_000
    _, dead = acc.process([(*report("u0", far, 1), p, 0),
                           (None, watermark_record(far, b"k", "s", p), p, 1)])
    assert [d.reason for d in dead] == ["future", "future"]
    assert acc.slotter.watermark is None
    _, dead = acc.process([(*report("u0", now + 30_000, 1), p, 2)])
    assert dead == []
    history = InProcessJob(cfg(event_time="history"))
    history.register(requirement_records(["u0"], [4], [1.0]))
    hist = history.accumulators[p]
    hist.clock_ms = lambda: now
    _, dead = hist.process([(*report("u0", far, 1), p, 0)])
    assert dead == []


def test_a_stale_first_report_cannot_set_a_live_stream_back() -> None:
    """A first report dated a day back (or at the epoch) once set the watermark, so every later
    report was 'future' (or the coordinator released millions of empty slots): live, a stream
    starts at the worker's clock when a partition first takes records, and earlier reports are
    late. The start is kept in the checkpoint; replaying history starts at the origin."""
    now, day = 1_700_000_000_000, 86_400_000
    job = InProcessJob(cfg(event_time="live", lateness_ms=5_000))
    job.register(requirement_records(["u0", "u1"], [4, 4], [1.0, 1.0]))
    p = key_partition(b"u0", 3)
    acc = job.accumulators[p]
    acc.clock_ms = lambda: now
    _, dead = acc.process([(*report("u0", now - day, 1), p, 0), (*report("u0", 0, 1), p, 1),
                           (*report("u0", now - 4_000, 1), p, 2)])
    assert [(d.offset, d.reason) for d in dead] == [(0, "late"), (1, "late")]
    assert acc.stream_start == now - 5_000 and acc.start_unsaved
    assert acc.slotter.watermark == now - 4_000 - 5_000
    saved = acc.snapshot()
    assert not acc.start_unsaved
    again = InProcessJob(cfg(event_time="live", lateness_ms=5_000))
    again.register(requirement_records(["u0", "u1"], [4, 4], [1.0, 1.0]))
    later = again.accumulators[p]
    later.restore(saved)
    later.clock_ms = lambda: now + day  # restarted a day later: the stream's start is kept
    _, dead = later.process([(*report("u0", now + 1_000, 2), p, 3)])
    assert dead == [] and later.stream_start == now - 5_000
    history = InProcessJob(cfg(event_time="history", origin_ms=now))
    history.register(requirement_records(["u0"], [4], [1.0]))
    _, dead = history.accumulators[p].process([(*report("u0", now - 1, 1), p, 0)])
    assert [d.reason for d in dead] == ["late"]


def test_a_gap_of_any_length_is_not_an_error() -> None:
    """With the default settings a report after a long gap (a year of slots here) is counted,
    live and replaying history; the slots the gap spans are released, one release each."""
    year = 365 * 86_400_000
    for mode in ("history", "live"):
        job = InProcessJob(cfg(event_time=mode, slot_ms=86_400_000, partitions=1))
        job.register(requirement_records(["u0"], [4], [1.0]))
        clock = [year]  # live: the first report comes as the stream starts, the next a year on
        job.accumulators[0].clock_ms = lambda: clock[0]
        job.feed([report("u0", year, 1)])
        clock[0] += year
        job.feed([report("u0", 2 * year, 2)])
        assert job.dead == []
        job.finish()
        assert len(job.releases) == 366
