"""The default configuration in the job (docs/design.md, "The default configuration"): without
``--mechanism`` or ``--postprocess`` the job runs ``default``, which takes its branch at the
stream's first slot from that slot's public sizes and the domain size, then releases exactly
what the branch's mechanism and post-processing release when named; a coordinator restored from
its state or rebuilt from the topics keeps the branch, and the audit holds a stream to it."""

from __future__ import annotations

import argparse

import orjson
import pytest
from small_job import SLOTS, decisions, run

from mechanisms.defaults import choose_for_levels
from streams.audit.accounting import audit
from streams.audit.report import Record
from streams.cli.job_args import add_broker, add_job, job_config
from streams.job.config import JobConfig
from streams.job.coordination.coordinator import Coordinator
from streams.job.pipeline import InProcessJob


def test_the_job_runs_the_default_without_flags() -> None:
    parser = argparse.ArgumentParser()
    add_broker(parser)
    add_job(parser)
    config = job_config(parser.parse_args([]))
    assert (config.mechanism, config.postprocess) == ("default", "auto")
    assert (JobConfig().mechanism, JobConfig().postprocess) == ("default", "auto")


@pytest.mark.parametrize(("skewed", "branch", "post"),
                         [(False, "pbu", "kalman_split"), (True, "pbad", "round")])
def test_the_branch_releases_what_it_releases_when_named(skewed, branch, post) -> None:
    # 30 users over 3 cells: (4, 1.0) for all gives a signal-to-noise ratio of 2.5; three
    # users at (20, 0.05) among 27 at (2, 3.0) give 0.018
    default = run("default", "discrete", skewed)
    named = run(branch, "discrete", skewed, postprocess=post)
    assert len(default.releases) == SLOTS
    for a, b in zip(default.releases, named.releases, strict=True):
        doc, ref = orjson.loads(a), orjson.loads(b)
        assert doc["mechanism"] == branch and doc["estimate"]["method"] == post
        assert doc == ref  # byte for byte what the branch releases, mechanism field included
    for d, r in zip(decisions(default), decisions(named), strict=True):
        assert d.pop("mechanism") == branch
        assert d == r


def test_the_branch_is_the_first_slots_public_choice() -> None:
    job = run("default", "laplace", True)
    first = decisions(job)[0]
    levels = {(int(k.split(":")[0]), float(k.split(":")[1])): n
              for k, n in first["users"].items()}
    assert choose_for_levels(levels, 3).mechanism == first["mechanism"] == "pbad"


@pytest.mark.parametrize("skewed", [False, True])
def test_a_restored_or_rebuilt_coordinator_keeps_the_branch(skewed) -> None:
    job = run("default", "laplace", skewed)
    fresh = Coordinator(job.config)
    fresh.restore(job.coordinator.snapshot())
    assert fresh.placement.mechanism_name == job.coordinator.placement.mechanism_name
    assert fresh.postprocessor.state() == job.coordinator.postprocessor.state()
    rebuilt = InProcessJob(job.config).coordinator
    start = {"nonce": job.coordinator.nonce, "start": job.coordinator.start}
    releases = {orjson.loads(r)["slot"]: r for r in job.releases}
    decided = dict(job.coordinator.decisions)
    if skewed:  # the first decision lost with a broker's last writes: the release names it
        del decided[min(releases)]
    assert rebuilt.recover(start, decided, releases) == SLOTS
    assert rebuilt.placement.mechanism_name == job.coordinator.placement.mechanism_name
    assert rebuilt.postprocessor.state() == job.coordinator.postprocessor.state()
    # without the first decision its levels are the next decision's: the same ledger
    assert rebuilt.placement.engine.state() == job.coordinator.placement.engine.state()


def test_a_stream_begun_with_another_post_processing_keeps_it(monkeypatch) -> None:
    """A stream an earlier version started (its default's pbu branch smoothed by kalman_bank)
    goes on with kalman_bank, restored from its state or rebuilt from its releases, so its
    estimates never change method mid-stream."""
    import mechanisms.defaults
    import streams.job.coordination.placement as placement

    with monkeypatch.context() as patch:
        patch.setitem(mechanisms.defaults.BRANCHES, "pbu", "kalman_bank")
        earlier = run("default", "laplace", False)
    assert {orjson.loads(r)["estimate"]["method"] for r in earlier.releases} == {"kalman_bank"}
    assert placement.BRANCHES["pbu"] == "kalman_split"
    fresh = Coordinator(earlier.config)
    fresh.restore(earlier.coordinator.snapshot())
    assert fresh.postprocessor.method == "kalman_bank"
    assert fresh.postprocessor.state() == earlier.coordinator.postprocessor.state()
    rebuilt = InProcessJob(earlier.config).coordinator
    start = {"nonce": earlier.coordinator.nonce, "start": earlier.coordinator.start}
    releases = {orjson.loads(r)["slot"]: r for r in earlier.releases}
    assert rebuilt.recover(start, dict(earlier.coordinator.decisions), releases) == SLOTS
    assert rebuilt.postprocessor.method == "kalman_bank"
    assert rebuilt.postprocessor.state() == earlier.coordinator.postprocessor.state()
    # a new stream takes today's default
    assert {orjson.loads(r)["estimate"]["method"]
            for r in run("default", "laplace", False).releases} == {"kalman_split"}


def _topics(job: InProcessJob) -> tuple[list[Record], list[Record], list[Record]]:
    """The job's requirements, decisions and releases as the audit reads them."""
    from small_job import USERS, requirement

    from streams.kafka.producer import key_partition

    reqs = [Record(key_partition(u.encode(), job.config.partitions), i, u,
                   {"user": u, "w": requirement(i, False)[0], "E": requirement(i, False)[1]})
            for i, u in enumerate(USERS)]
    decs = [Record(0, i, f"s/{d['slot']}" if "slot" in d else "s/start", d)
            for i, d in enumerate(map(orjson.loads, job.decisions))]
    rels = [Record(0, i, f"s/{r['slot']}", r)
            for i, r in enumerate(map(orjson.loads, job.releases))]
    return reqs, decs, rels


def test_the_audit_holds_the_stream_to_its_branch() -> None:
    job = run("default", "discrete", False)
    requirements, decided, released = _topics(job)
    clean = audit(requirements, decided, released, stream="s")
    assert not clean.violations
    assert any("choose pbu" in note for note in clean.notes)
    # a release claiming the other branch is refused, and so is a decision naming it
    forged = [Record(r.partition, r.offset, r.key, {**r.value, "mechanism": "pbad"})
              if r.value["slot"] == 3 else r for r in released]
    bad = audit(requirements, decided, forged, stream="s")
    assert [(v.kind, v.slot) for v in bad.violations] == [("release_mismatch", 3)]
    assert "'pbad', the stream runs 'pbu'" in bad.violations[0].detail
    lied = [Record(r.partition, r.offset, r.key, {**r.value, "mechanism": "pbad"})
            if r.value.get("slot") == 5 else r for r in decided]
    bad = audit(requirements, lied, released, stream="s")
    assert [(v.kind, v.slot) for v in bad.violations] == [("release_mismatch", 5)]
    # an estimate that is not the post-processing of the released fields is refused
    first = released[0].value
    told = [Record(r.partition, r.offset, r.key, {**r.value, "estimate": {
        "method": "kalman_split", "histogram": [c + 1 for c in first["estimate"]["histogram"]]}})
        if r.value["slot"] == first["slot"] else r for r in released]
    bad = audit(requirements, decided, told, stream="s")
    assert [(v.kind, v.slot) for v in bad.violations][:1] == [("exact_count_field", 0)]


def test_pwevent_releases_shows_the_estimate_after_the_release() -> None:
    from streams.cli.releases import row
    from streams.releases.decoding import parse_release

    job = run("default", "discrete", False)
    raw = job.releases[1]
    doc = orjson.loads(raw)
    line = row(parse_release(raw), False)
    # one requirement level: the raw release has its bars, then the estimate follows
    cells = "  ".join(f"{i}: {h}±12" for i, h in enumerate(doc["histogram"]))
    assert doc["noise"]["scale"][0] == pytest.approx(5.65, abs=0.01)  # bars of 1.96 * 5.65
    assert line.endswith(f"published     {cells}  | kalman_split: "
                         + " ".join(map(str, doc["estimate"]["histogram"])))


@pytest.mark.parametrize("mechanism", ["pbd", "pba", "default"])
@pytest.mark.parametrize("lost", [[0], [0, 1, 5], [11]])
def test_a_rebuild_without_lost_decisions_charges_every_level(mechanism, lost) -> None:
    """A coordinator rebuilt from the topics after a broker lost some decisions (their releases
    kept) takes each lost slot's levels from the next decision kept: its ledger is the one the
    job had, so no window is under-charged (before, a lost first decision left every level
    uncharged at that slot)."""
    job = run(mechanism, "laplace", True)
    releases = {orjson.loads(r)["slot"]: r for r in job.releases}
    decided = {s: d for s, d in job.coordinator.decisions.items() if s not in lost}
    rebuilt = InProcessJob(job.config).coordinator
    start = {"nonce": job.coordinator.nonce, "start": job.coordinator.start}
    assert rebuilt.recover(start, decided, releases) == SLOTS
    # (the last decision lost has no later one: its levels are known from earlier slots)
    assert rebuilt.placement.engine.state() == job.coordinator.placement.engine.state()
