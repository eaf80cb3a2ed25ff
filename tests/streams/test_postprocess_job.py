"""``--postprocess`` in the job: the release record keeps its raw histogram and gains the
post-processed one (``estimate``), computed from the records' released and public fields only;
the ledger's charges and every other field are those of the job without it."""

from __future__ import annotations

import jsonschema
import orjson
import pytest

from mechanisms.postprocess import Postprocessor
from streams.job.config import JobConfig
from streams.job.pipeline import InProcessJob
from streams.records.formats import load_schema
from streams.releases.decoding import parse_release

USERS = [f"u{i}" for i in range(30)]
RELEASES = jsonschema.Draft202012Validator(load_schema("releases"))


def run(mechanism: str, postprocess: str, noise: str = "discrete") -> InProcessJob:
    config = JobConfig(stream="s", mechanism=mechanism, domain={"kind": "cells", "size": 3},
                       slot_ms=1000, partitions=2, secret="k", nonce="c0ffee",
                       event_time="history", noise=noise, postprocess=postprocess)
    job = InProcessJob(config)
    if config.dynamic:
        job.register([(u.encode(), orjson.dumps({"user": u, "wB": 4, "EB": 1.0, "wF": 4,
                                                  "EF": 1.0 + (i % 2)}))
                      for i, u in enumerate(USERS)])
    else:
        job.register([(u.encode(), orjson.dumps({"user": u, "w": 4 + 2 * (i % 2),
                                                  "E": 1.0 + (i % 3)}))
                      for i, u in enumerate(USERS)])
    for t in range(12):
        job.feed([(u.encode(), orjson.dumps({"user": u, "time": t * 1000 + i,
                                             "value": (i * 7 + t) % 3}))
                  for i, u in enumerate(USERS) if (i + t) % 4])
    job.finish(12 * 1000)
    return job


@pytest.mark.parametrize("mechanism", ["pbd", "pba", "uniform", "dpba"])
@pytest.mark.parametrize("method", ["round", "kalman", "kalman_bank", "kalman_split"])
def test_charges_and_raw_releases_are_unchanged(mechanism: str, method: str) -> None:
    plain, post = run(mechanism, "none"), run(mechanism, method)
    assert len(post.releases) == len(plain.releases) == 12
    # the decisions (what the ledger charged every user at every slot) are byte-identical
    assert post.coordinator.decisions == plain.coordinator.decisions
    replay = Postprocessor(method, 3)
    for raw, new in zip(plain.releases, post.releases, strict=True):
        a, b = orjson.loads(raw), orjson.loads(new)
        RELEASES.validate(b)
        assert "estimate" not in a
        estimate = b.pop("estimate")
        assert a == b  # the raw release is recoverable, field for field
        assert estimate["method"] == method
        # the estimate is the post-processing of the records' released and public fields
        scale = None if a["noise"] is None else a["noise"]["scale"]
        assert estimate["histogram"] == replay.step(a["histogram"], a["published"], scale,
                                                    a["users"])
        decoded = parse_release(new)
        assert decoded.estimate == tuple(estimate["histogram"])
        assert decoded.to_json()["estimate"] == estimate


@pytest.mark.parametrize("method", ["kalman", "kalman_bank", "kalman_split"])
def test_a_restored_coordinator_continues_the_filter(method: str) -> None:
    job = run("pbd", method, noise="laplace")
    config = job.config
    # a coordinator restored from a snapshot taken before the last slots re-derives them alike
    fresh = InProcessJob(config).coordinator
    fresh.restore(job.coordinator.snapshot())
    assert fresh.postprocessor.state() == job.coordinator.postprocessor.state()
    # one rebuilt from the topics alone (its state lost) replays the filter from the releases
    rebuilt = InProcessJob(config).coordinator
    start = {"nonce": job.coordinator.nonce, "start": job.coordinator.start}
    releases = {orjson.loads(r)["slot"]: r for r in job.releases}
    assert rebuilt.recover(start, dict(job.coordinator.decisions), releases) == 12
    assert rebuilt.postprocessor.state() == job.coordinator.postprocessor.state()


def test_unknown_postprocessing_is_refused() -> None:
    with pytest.raises(ValueError, match="postprocess must be one of"):
        JobConfig(postprocess="smooth")


@pytest.mark.parametrize("mechanism", ["pbd", "pba"])
def test_bars_only_where_their_coverage_is_shown(mechanism: str) -> None:
    """The only bars a release yields are those of a published raw histogram that sampled no
    users away (their coverage is measured in docs/results.md): an approximated or nullified
    slot has none, and the Kalman estimate, whose error the noise scale does not describe,
    gets none either."""
    from dataclasses import fields

    from streams.releases.error_bars import error_bars

    job = run(mechanism, "kalman", noise="laplace")
    releases = [parse_release(raw) for raw in job.releases]
    assert {r.published for r in releases} == {True, False}
    assert not [f.name for f in fields(releases[0])
                if f.name.startswith("estimate") and f.name not in ("estimate",
                                                                    "estimate_method")]
    for rel in releases:
        assert rel.estimate is not None and rel.estimate_method == "kalman"
        if rel.published and not rel.noise.thinned:
            assert (rel.lower, rel.upper) == error_bars(rel.histogram, rel.noise)
        else:
            assert rel.lower is None and rel.upper is None
        if not rel.published:
            assert rel.noise is None and rel.lower is None and rel.upper is None


def _skewed(mechanism: str) -> InProcessJob:
    """Three users with a tiny budget next to 27 with a large one: PBD's publication samples
    the three (OBS's threshold is the large level's budget); BD runs everyone at one level."""
    config = JobConfig(stream="s", mechanism=mechanism, domain={"kind": "cells", "size": 3},
                       slot_ms=1000, partitions=2, secret="k", nonce="c0ffee",
                       event_time="history", noise="laplace")
    job = InProcessJob(config)
    job.register([(u.encode(), orjson.dumps({"user": u, "w": 20 if i < 3 else 2,
                                              "E": 0.05 if i < 3 else 3.0}))
                  for i, u in enumerate(USERS)])
    for t in range(12):
        job.feed([(u.encode(), orjson.dumps({"user": u, "time": t * 1000 + i,
                                             "value": (i * 7 + t) % 3}))
                  for i, u in enumerate(USERS)])
    job.finish(12 * 1000)
    return job


@pytest.mark.parametrize("mechanism", ["pbd", "bd"])
def test_a_publication_that_sampled_users_away_has_no_bars(mechanism: str) -> None:
    """Bars describe the noise around the sampled count; where users were sampled away their
    measured coverage of the true count is below nominal (docs/results.md), so the record says
    so (``noise.thinned``) and the client gives none. The flag is recomputed here from public
    values only: the decision's per-level budgets and registered users and the threshold."""
    from mechanisms.release.sampling import inclusion_probabilities

    job = _skewed(mechanism)
    flags = []
    for raw in job.releases:
        record, rel = orjson.loads(raw), parse_release(raw)
        RELEASES.validate(record)
        if not rel.published:
            continue
        decision = orjson.loads(job.coordinator.decisions[rel.slot])
        keys = list(decision["eps2"])
        p = inclusion_probabilities([decision["eps2"][k] for k in keys], record["threshold"])
        sampled = any(q < 1 and decision["users"][k] > 0 for q, k in zip(p, keys, strict=True))
        assert rel.noise.thinned == sampled == record["noise"].get("thinned", False)
        assert (rel.lower is None) == sampled and (rel.upper is None) == sampled
        assert rel.to_json()["lower"] is None if sampled else rel.to_json()["lower"]
        flags.append(sampled)
    assert flags and all(flags) if mechanism == "pbd" else flags and not any(flags)
