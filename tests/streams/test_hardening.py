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
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jobkit import report, requirement_records, slot_reports

from mechanisms.ledgers.plan import SlotPlan
from mechanisms.noise.calibrated import DISCRETE_MAX_EPS, DISCRETE_MIN_EPS
from mechanisms.noise.discrete_laplace import rational_scale
from mechanisms.release.rule import ReleaseRule
from streams.job.config import JOB_MECHANISMS, JobConfig
from streams.job.partitions.accumulator import watermark_record
from streams.job.pipeline import InProcessJob
from streams.kafka.producer import key_partition

USERS = [f"u{i}" for i in range(24)]
RELEASE_FIELDS = {"stream", "slot", "start", "end", "mechanism", "published", "nullified",
                  "histogram", "threshold", "users", "schema_version", "cells", "noise",
                  "approximates"}


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
    histogram: no field counts the reports accepted or rejected. The noise scale is a function
    of the threshold and the configuration, the cells of the configuration, and approximates
    of the earlier publish decisions."""
    reqs = requirement_records(USERS, [4] * 24, [1.0] * 24)
    batches = [slot_reports(USERS, t, 3) for t in range(6)]
    fewer = [list(b) for b in batches]
    fewer[2] = fewer[2][1:] + [report("stranger", 2500, 0)]  # one report less, one rejected
    for name, noise in (("pbd", "discrete"), ("uniform", "laplace"), ("dpbd", "discrete"),
                        ("dpba", "laplace")):
        config = cfg(mechanism=name, noise=noise)
        r = requirement_records(USERS, [4] * 24, [1.0] * 24) if not config.dynamic else [
            (u.encode(), orjson.dumps({"user": u, "wB": 4, "EB": 1.0, "wF": 4, "EF": 1.0}))
            for u in USERS]
        a = releases(run(config, r, batches, 6000))
        b = releases(run(config, r, fewer, 6000))
        assert len(a) == len(b) == 6
        rule, last = ReleaseRule(config.d, noise), None
        for x, y in zip(a, b, strict=True):
            assert set(x) == RELEASE_FIELDS
            assert x["cells"] == ["0", "1", "2"]
            if x["published"]:
                assert x["noise"]["scale"] == rule.noise_std(x["threshold"]).tolist()
                assert x["approximates"] is None
                last = x["slot"]
            else:
                assert x["noise"] is None and x["approximates"] == last
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
    # wider bounds are the deployment's to set (with Laplace noise here: integer noise needs
    # E / (2w) >= 2**-29, test_bounds_the_noise_sampler_cannot_serve_are_refused)
    ok = run(cfg(mechanism="uniform", min_epsilon=1e-3, max_window=10**9, noise="laplace"),
             requirement_records(["y"], [10**9], [1e-3]), [], 0)
    assert reasons(ok) == []


def test_the_bounds_apply_to_dynamic_requirements() -> None:
    config = cfg(mechanism="dpbd")
    job = InProcessJob(config)
    job.register([(b"a", orjson.dumps({"user": "a", "wB": 4, "EB": 1e-20, "wF": 4, "EF": 1.0})),
                  (b"b", orjson.dumps({"user": "b", "wB": 4, "EB": 1.0, "wF": 10**9,
                                       "EF": 1.0}))])
    assert reasons(job) == ["invalid_requirement"] * 2


def test_bounds_the_noise_sampler_cannot_serve_are_refused() -> None:
    """With ``--min-epsilon 1e-12`` a requirement E = 1e-12 was admitted, and then the exact
    sampler refused every slot's integer noise in the coordinator: no slot was released. Bounds
    whose per-slot share E / (2w) (E / 4 when w = 1), over the sensitivity, falls below 2**-29,
    or whose E over the sensitivity exceeds 2**20, are refused with the limit named."""
    with pytest.raises(ValueError, match=r"min epsilon 1e-12 is too small for the discrete "
                                         r"noise sampler: .* gets 2\.5e-15 per slot, and it "
                                         r"must get at least 2\*\*-29; use min epsilon >= "
                                         r"7\.45e-07"):
        cfg(min_epsilon=1e-12)
    with pytest.raises(ValueError, match=r"max epsilon 2\.09715e\+06 is too large .* at most "
                                         r"2\*\*20; use max epsilon <= 1\.04858e\+06"):
        cfg(max_epsilon=2.0**21)
    edge = 2.0**-29 * 2 * 200  # the smallest min epsilon at the default max window of 200
    for kw in ({"min_epsilon": np.nextafter(edge, 0)},
               {"min_epsilon": edge, "neighbouring": "replace"},  # twice the noise: half the eps
               {"min_epsilon": 2.0**-29 * 3, "max_window": 1},  # E / 4 at w = 1
               {"max_epsilon": np.nextafter(2.0**20, np.inf)}):
        with pytest.raises(ValueError, match="for the discrete noise sampler"):
            cfg(**kw)
    cfg(min_epsilon=2.0**-29 * 4, max_window=1)
    cfg(max_epsilon=2.0**21, neighbouring="replace")
    cfg(min_epsilon=1e-12, noise="laplace")  # Laplace noise is not drawn by the exact sampler
    # the range the bounds are checked against is the sampler's own
    rational_scale(DISCRETE_MIN_EPS), rational_scale(DISCRETE_MAX_EPS)
    for outside in (np.nextafter(DISCRETE_MIN_EPS, 0), np.nextafter(DISCRETE_MAX_EPS, np.inf)):
        with pytest.raises(ValueError):
            rational_scale(outside)
    # at the bounds every mechanism of the job releases every slot
    users = [f"u{i}" for i in range(6)]
    batches = [slot_reports(users, t, 3) for t in range(6)]
    for E, w, kw in ((edge, 200, {"min_epsilon": edge}),
                     (2 * edge, 200, {"min_epsilon": 2 * edge, "neighbouring": "replace"}),
                     (2.0**20, 1, {"max_epsilon": 2.0**20})):
        for name in JOB_MECHANISMS:
            config = cfg(mechanism=name, **kw)
            reqs = requirement_records(users, [w] * 6, [E] * 6) if not config.dynamic else [
                (u.encode(), orjson.dumps({"user": u, "wB": w, "EB": E, "wF": w, "EF": E}))
                for u in users]
            with np.errstate(over="ignore", invalid="ignore"):  # e**E overflows at 2**20
                job = run(config, reqs, batches, 6000)
            assert reasons(job) == [] and [d["slot"] for d in releases(job)] == list(range(6))


def test_the_bounds_reach_the_job_from_the_command_line(capsys) -> None:
    """``--max-window``, ``--min-epsilon``, ``--max-epsilon``, ``--neighbouring`` and
    ``--max-clock-skew-ms`` are the settings the worker's job runs with; bounds the noise
    sampler cannot serve stop ``pwevent worker`` with one line, status 2, before it looks for
    the broker."""
    from streams.cli.job_args import job_config
    from streams.cli.main import build_parser, main

    base = ["worker", "--broker", "127.0.0.1:9", "--stream", "s", "--secret", "k"]
    args = build_parser().parse_args(base + [
        "--max-window", "50", "--min-epsilon", "0.001", "--max-epsilon", "20",
        "--neighbouring", "replace", "--max-clock-skew-ms", "1234"])
    config = job_config(args)
    assert (config.max_window, config.min_epsilon, config.max_epsilon, config.neighbouring,
            config.sensitivity, config.max_skew_ms) == (50, 0.001, 20.0, "replace", 2, 1234)
    config = job_config(build_parser().parse_args(base))
    assert (config.max_window, config.min_epsilon, config.max_epsilon, config.neighbouring,
            config.max_skew_ms) == (200, 0.01, 10.0, "add-remove", 300_000)
    assert main(base + ["--min-epsilon", "1e-12"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "pwevent worker: error: min epsilon 1e-12 is too small for the discrete noise sampler: "
        "a requirement at the bounds (E = 1e-12, w = 200, sensitivity 1) gets 2.5e-15 per slot, "
        "and it must get at least 2**-29; use min epsilon >= 7.45e-07 or a smaller max window"]
    assert main(base + ["--max-epsilon", "2e6"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "pwevent worker: error: max epsilon 2e+06 is too large for the discrete noise sampler: "
        "a slot may spend a whole budget E (divided by the sensitivity 1), and the sampler "
        "takes at most 2**20; use max epsilon <= 1.04858e+06"]


def test_budgets_below_the_samplers_range_are_not_drawn() -> None:
    """The default bounds admit a dynamic requirement whose backward budget leaves a
    remainder of 2**-31 for the dissimilarity after a few slots: the exact sampler refused it,
    and the coordinator raised at that slot and every later one. Budgets a ledger plans below
    the sampler's range are not drawn: such a dissimilarity threshold is not tested (as a zero
    one), and no publication is made at such a threshold."""
    job = InProcessJob(cfg(mechanism="dpbd", partitions=1))
    job.register([(b"a", orjson.dumps({"user": "a", "wB": 10, "EB": 1.0 + 2.0**-30, "wF": 1,
                                       "EF": 0.5}))])
    for t in range(12):
        job.feed(slot_reports(["a"], t, 3))
    job.finish(12_000)
    docs = releases(job)
    assert [d["slot"] for d in docs] == list(range(12))
    below = [d for d in docs if 0 < d["threshold"] < DISCRETE_MIN_EPS]
    assert below and not any(d["published"] for d in below)
    counts, sizes, last = np.array([[5, 0, 1]]), np.array([6]), np.zeros(3, dtype=np.int64)
    tiny, one = np.array([DISCRETE_MIN_EPS / 2]), np.array([1.0])

    def decide(rule: ReleaseRule, eps1: np.ndarray, eps2: np.ndarray):
        return rule.decide(SlotPlan(1, eps1, eps2, False, True), counts, sizes, last,
                           np.random.default_rng(5))

    discrete = ReleaseRule(3, "discrete")
    publication = decide(discrete, one, tiny)
    assert not publication.published and publication.threshold == tiny[0]
    dissimilarity = decide(discrete, tiny, one)
    assert dissimilarity.published and dissimilarity.dissimilarity == np.inf
    edge = np.array([DISCRETE_MIN_EPS])
    assert np.isfinite(decide(discrete, edge, edge).dissimilarity)  # the range's edge is drawn
    # Laplace noise has no such range: the dissimilarity is tested at any positive threshold
    assert np.isfinite(decide(ReleaseRule(3, "laplace"), tiny, one).dissimilarity)


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
    starts when a partition first takes records, at the worker's clock minus the allowed skew,
    and earlier reports are late, while one made seconds before the worker read it counts (with
    the default lateness of 0, which once made a partition's whole first batch late). The start
    is kept in the checkpoint; replaying history starts at the origin."""
    now, day, skew = 1_700_000_000_000, 86_400_000, 60_000
    live = cfg(event_time="live", max_skew_ms=skew)
    assert live.lateness_ms == 0
    job = InProcessJob(live)
    job.register(requirement_records(["u0", "u1"], [4, 4], [1.0, 1.0]))
    p = key_partition(b"u0", 3)
    acc = job.accumulators[p]
    acc.clock_ms = lambda: now
    _, dead = acc.process([(*report("u0", now - day, 1), p, 0), (*report("u0", 0, 1), p, 1),
                           (*report("u0", now - skew - 1, 1), p, 2),
                           (*report("u0", now - 4_000, 1), p, 3)])
    assert [(d.offset, d.reason) for d in dead] == [(0, "late"), (1, "late"), (2, "late")]
    assert acc.stream_start == now - skew and acc.start_unsaved
    assert acc.slotter.watermark == now - 4_000
    saved = acc.snapshot()
    assert not acc.start_unsaved
    again = InProcessJob(live)
    again.register(requirement_records(["u0", "u1"], [4, 4], [1.0, 1.0]))
    later = again.accumulators[p]
    later.restore(saved)
    later.clock_ms = lambda: now + day  # restarted a day later: the stream's start is kept
    _, dead = later.process([(*report("u0", now + 1_000, 2), p, 4)])
    assert dead == [] and later.stream_start == now - skew
    wide = InProcessJob(cfg(event_time="live", max_skew_ms=skew, lateness_ms=2 * skew))
    wide.register(requirement_records(["u0"], [4], [1.0]))
    wide.accumulators[p].clock_ms = lambda: now
    _, dead = wide.accumulators[p].process([(*report("u0", now - 2 * skew, 1), p, 0)])
    assert dead == [] and wide.accumulators[p].stream_start == now - 2 * skew
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
        job.accumulators[0].clock_ms = lambda c=clock: c[0]
        job.feed([report("u0", year, 1)])
        clock[0] += year
        job.feed([report("u0", 2 * year, 2)])
        assert job.dead == []
        job.finish()
        assert len(job.releases) == 366


def test_noise_is_fresh_for_every_run_and_reproducible_with_its_nonce() -> None:
    """Two runs under one secret and stream name once drew the same noise, so releases that
    differed by one report revealed that user's cell; the nonce drawn at the stream's start
    makes every run's noise fresh, and pinning it reproduces a run."""
    reqs = requirement_records(USERS, [4] * 24, [1.0] * 24)
    batches = [slot_reports(USERS, t, 3) for t in range(8)]
    fresh = cfg(mechanism="uniform", nonce="")
    a, b = run(fresh, reqs, batches, 8000), run(fresh, reqs, batches, 8000)
    assert a.coordinator.nonce != b.coordinator.nonce
    ha = np.array([d["histogram"] for d in releases(a)])
    hb = np.array([d["histogram"] for d in releases(b)])
    assert (ha != hb).mean() > 0.5
    again = run(replace(fresh, nonce=a.coordinator.nonce), reqs, batches, 8000)
    assert again.releases == a.releases


def test_a_removed_users_report_does_not_move_public_counts() -> None:
    """Under DPBD a user removed in a slot once counted in that slot's ``users``, levels and
    OBS inputs only if it reported: registrations alone must decide them."""
    decl = [(u.encode(), orjson.dumps({"user": u, "wB": 4, "EB": 1.0, "wF": 4, "EF": 1.0}))
            for u in USERS]
    out = []
    for reported in (True, False):
        job = InProcessJob(cfg(mechanism="dpbd"))
        job.register(decl)
        for t in range(6):
            batch = slot_reports(USERS, t, 3)
            if t == 3 and not reported:
                batch = [r for r in batch if r[0] != b"u0"]
            job.feed(batch)
            if t == 3:  # u0 leaves after its report of slot 3, before slot 3 is planned
                job.register([(b"u0", None)])
        job.finish(6000)
        docs = [orjson.loads(r) for r in job.releases]
        decided = job.coordinator.decisions
        out.append((docs,  # the releases whole: the report is withdrawn, the noise the same
                    # the decisions whole: levels, users and projected users per level, eps
                    [orjson.loads(decided[s]) for s in sorted(decided)]))
    assert out[0] == out[1]
    released, decisions = out[0]
    assert [d["users"] for d in released] == [24, 24, 24, 23, 23, 23]
    assert [d["slot"] for d in decisions] == list(range(6))
    assert [sum(d["users"].values()) for d in decisions] == [24, 24, 24, 23, 23, 23]
    assert all(d["eps1"] and set(d["eps1"]) == set(d["users"]) for d in decisions)


def test_replace_neighbours_double_the_noise() -> None:
    """Under ``replace`` the rule runs as on half the budgets: same OBS choice, twice the noise
    scale, same ledger charges."""
    d = 4
    plan = SlotPlan(1, np.array([0.2, 0.4]), np.array([0.6, 0.8]), False, True)
    counts = np.array([[5, 0, 1, 2], [3, 3, 0, 1]])
    sizes = np.array([10, 8])
    half = SlotPlan(1, plan.eps1 / 2, plan.eps2 / 2, False, True)
    for noise in ("laplace", "discrete"):
        two = ReleaseRule(d, noise, sensitivity=2).decide(plan, counts, sizes, np.zeros(d),
                                                          np.random.default_rng(3))
        one = ReleaseRule(d, noise).decide(half, counts, sizes, np.zeros(d),
                                           np.random.default_rng(3))
        assert two.threshold == one.threshold and two.dissimilarity == one.dissimilarity
        assert np.array_equal(two.histogram, one.histogram)
    assert cfg(neighbouring="replace").sensitivity == 2 and cfg().sensitivity == 1
    # and the releases say so: twice the Laplace scale for the same requirements
    reqs = requirement_records(USERS, [4] * 24, [1.0] * 24)
    batches = [slot_reports(USERS, t, 3) for t in range(3)]
    scales = []
    for neighbouring in ("add-remove", "replace"):
        docs = releases(run(cfg(mechanism="uniform", noise="laplace",
                                neighbouring=neighbouring), reqs, batches, 3000))
        assert all(doc["published"] for doc in docs)
        scales.append(np.array([doc["noise"]["scale"] for doc in docs]))
    assert np.allclose(scales[1], 2 * scales[0])


def test_decisions_carry_projected_users_per_level() -> None:
    config = cfg(mechanism="dpbd", partitions=1)
    job = InProcessJob(config)
    said: list[dict] = []
    deliver = job._deliver
    job._deliver = lambda msgs: (said.extend(msgs), deliver(msgs))  # type: ignore[method-assign]
    job.register([(b"a", orjson.dumps({"user": "a", "wB": 4, "EB": 2.0, "wF": 4, "EF": 2.0}))])
    job.feed([report("a", 10, 0)])
    job.finish(1000)
    # the backward budget lowered below what the window already spent is projected
    job.register([(b"a", orjson.dumps({"user": "a", "wB": 4, "EB": 0.1, "wF": 4, "EF": 0.1}))])
    job.feed([report("a", 1010, 1)])
    job.finish(2000)
    decisions = [orjson.loads(r[2]) for r in job.coordinator.unemitted() if r[1] is not None]
    assert [doc["slot"] for doc in decisions] == [0, 1]
    # slot 0 spends 0.25 of a's backward window (level 305:313); at slot 1 its budget of 0.1
    # is projected to that: a's level charges nothing more (0:0), with a counted there alone
    assert [doc["users"] for doc in decisions] == [{"305:313": 1}, {"0:0": 1}]
    assert [doc["projected"] for doc in decisions] == [{}, {"0:0": 1}]
    assert (decisions[1]["eps1"], decisions[1]["eps2"]) == ({"0:0": 0.0}, {"0:0": 0.0})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**80, 2**80) | st.floats(allow_nan=True)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                  max_size=3),
    max_leaves=6)
fields = st.fixed_dictionaries({}, optional={
    "user": st.sampled_from(["a", "b", 7]) | json_values, "time": json_values,
    "value": json_values, "w": json_values, "E": json_values, "wB": json_values,
    "EB": json_values, "wF": json_values, "EF": json_values, "watermark": json_values})
records = st.tuples(st.sampled_from([b"b", b"7", None, b"\xff"]),
                    st.one_of(fields.map(lambda doc: json.dumps(doc).encode()),
                              st.binary(max_size=20), st.none()))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mechanism=st.sampled_from(["pbd", "uniform", "dpba"]),
       reqs=st.lists(records, max_size=8), reps=st.lists(records, max_size=12))
def test_no_record_raises_out_of_the_job(mechanism: str, reqs, reps) -> None:
    """Any bytes on any input topic are either taken or dead-lettered, and the job releases."""
    job = InProcessJob(cfg(mechanism=mechanism, partitions=2))
    valid = [(b"a", orjson.dumps({"user": "a", "w": 4, "E": 1.0} if mechanism != "dpba" else
                                 {"user": "a", "wB": 4, "EB": 1.0, "wF": 4, "EF": 1.0}))]
    job.register(valid + reqs)
    job.feed([report("a", 5, 0)] + [(k, v) for k, v in reps if v is not None])
    job.finish(3000)
    assert len(job.releases) >= 1
