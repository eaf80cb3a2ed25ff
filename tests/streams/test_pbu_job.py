"""``--mechanism pbu`` in the job (docs/design.md, "The level-combining estimator"): every slot is
published, every level is charged E_i/w_i at every slot and nothing for dissimilarity, a release
of one budget group is the exact histogram plus one noise draw with its bars, a release combining
groups is marked thinned (no bars), and the same nonce gives the same bytes."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from mechanisms.noise.calibrated import noise_std
from streams.job.config import JobConfig
from streams.job.pipeline import InProcessJob

USERS = [f"u{i}" for i in range(30)]
SLOTS = 12


def requirement(i: int, skewed: bool) -> tuple[int, float]:
    """Three users at E/w = 0.0025 among 27 at 1.5, or (4, 1.0) for everyone."""
    if not skewed:
        return 4, 1.0
    return (20, 0.05) if i < 3 else (2, 3.0)


def value(i: int, t: int) -> int:
    return (i * 7 + t) % 3


def run(noise: str, skewed: bool, nonce: str = "c0ffee") -> InProcessJob:
    config = JobConfig(stream="s", mechanism="pbu", domain={"kind": "cells", "size": 3},
                       slot_ms=1000, partitions=2, secret="k", nonce=nonce,
                       event_time="history", noise=noise)
    job = InProcessJob(config)
    job.register([(u.encode(), orjson.dumps({"user": u, "w": requirement(i, skewed)[0],
                                              "E": requirement(i, skewed)[1]}))
                  for i, u in enumerate(USERS)])
    for t in range(SLOTS):
        job.feed([(u.encode(), orjson.dumps({"user": u, "time": t * 1000 + i,
                                             "value": value(i, t)}))
                  for i, u in enumerate(USERS)])
    job.finish(SLOTS * 1000)
    return job


def decisions(job: InProcessJob) -> list[dict]:
    docs = [orjson.loads(v) for k, v in job.coordinator.decisions.items() if k != "start"]
    return sorted((d for d in docs if "slot" in d and "published" in d), key=lambda d: d["slot"])


@pytest.mark.parametrize("noise", ["laplace", "discrete"])
@pytest.mark.parametrize("skewed", [False, True])
def test_every_slot_published_and_every_level_charged_its_even_share(noise, skewed):
    job = run(noise, skewed)
    docs = decisions(job)
    assert [d["slot"] for d in docs] == list(range(SLOTS))
    assert all(d["published"] and not d["nullified"] for d in docs)
    levels = {f"{w}:{E!r}": E / w for w, E in (requirement(i, skewed) for i in range(30))}
    for d in docs:
        assert d["eps1"] == {key: 0.0 for key in levels}
        assert d["eps2"] == pytest.approx(levels, rel=1e-12)


@pytest.mark.parametrize("noise", ["laplace", "discrete"])
def test_one_group_releases_its_histogram_plus_one_draw_with_bars(noise):
    job = run(noise, False)
    scale = noise_std(0.25, noise)
    deviations = []
    for t, raw in enumerate(job.releases):
        doc = orjson.loads(raw)
        assert doc["published"] and "thinned" not in doc["noise"]
        assert doc["noise"]["scale"] == pytest.approx([scale] * 3, rel=1e-12)
        exact = np.bincount([value(i, t) for i in range(30)], minlength=3)
        deviations += (np.array(doc["histogram"]) - exact).tolist()
    # the deviations are the noise: spread about its scale, not zero
    assert 0.3 * scale < np.std(deviations) < 3 * scale


def test_groups_combined_are_marked_thinned_and_the_bytes_repeat():
    a, b = run("discrete", True), run("discrete", True)
    assert a.releases == b.releases
    assert run("discrete", True, nonce="beef").releases != a.releases
    for raw in a.releases:
        doc = orjson.loads(raw)
        assert doc["noise"]["thinned"] is True and doc["threshold"] == 1.5
