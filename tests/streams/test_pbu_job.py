"""``--mechanism pbu`` in the job (docs/design.md, "The level-combining estimator"): every slot is
published, every level is charged E_i/w_i at every slot and nothing for dissimilarity, a release
of one budget group is the exact histogram plus one noise draw with its bars, a release combining
groups is marked thinned (no bars), and the same nonce gives the same bytes."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from small_job import SLOTS, decisions, requirement, run, value

from mechanisms.noise.calibrated import noise_std


@pytest.mark.parametrize("noise", ["laplace", "discrete"])
@pytest.mark.parametrize("skewed", [False, True])
def test_every_slot_published_and_every_level_charged_its_even_share(noise, skewed):
    job = run("pbu", noise, skewed)
    docs = decisions(job)
    assert [d["slot"] for d in docs] == list(range(SLOTS))
    assert all(d["published"] and not d["nullified"] for d in docs)
    levels = {f"{w}:{E!r}": E / w for w, E in (requirement(i, skewed) for i in range(30))}
    for d in docs:
        assert d["eps1"] == {key: 0.0 for key in levels}
        assert d["eps2"] == pytest.approx(levels, rel=1e-12)


@pytest.mark.parametrize("noise", ["laplace", "discrete"])
def test_one_group_releases_its_histogram_plus_one_draw_with_bars(noise):
    job = run("pbu", noise, False)
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
    a, b = run("pbu", "discrete", True), run("pbu", "discrete", True)
    assert a.releases == b.releases
    assert run("pbu", "discrete", True, nonce="beef").releases != a.releases
    for raw in a.releases:
        doc = orjson.loads(raw)
        assert doc["noise"]["thinned"] is True and doc["threshold"] == 1.5
