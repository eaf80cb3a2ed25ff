"""The registry names every mechanism once, and every name in it is a working mechanism: the
evaluation runs each, the job accepts exactly those marked as running in it, and the
homogeneous central mechanisms release exactly what their personalised counterpart releases
for everyone at the strictest requirement."""

from __future__ import annotations

import numpy as np
import pytest

from mechanisms.build import build
from mechanisms.evaluation.runs import KNOWN, make_step
from mechanisms.registry import REGISTRY, histogram_dtype, names, spec
from mechanisms.requirements import FixedRequirements
from mechanisms.run.mechanism import Released, Stepper
from streams.job.config import JOB_MECHANISMS, JobConfig

REQS = FixedRequirements.from_arrays([f"u{i}" for i in range(12)], [2, 3, 4] * 4,
                                     [0.5, 1.0, 2.0, 1.5] * 3)


def test_names_are_unique_and_tables_derive_from_the_registry():
    assert len(REGISTRY) == len({s.name for s in REGISTRY.values()})
    assert (*REGISTRY, "default") == KNOWN  # the evaluation runs the default configuration too
    assert ("default", *names(in_job=True)) == JOB_MECHANISMS  # the job's default first
    with pytest.raises(ValueError, match="unknown mechanism 'xyz'"):
        spec("xyz")


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_registered_mechanism_runs(name: str):
    rng = np.random.default_rng(1)
    mech = make_step(name, REQS, 3, rng, noise="laplace")
    assert isinstance(mech, Stepper)
    cells = rng.integers(-1, 3, size=REQS.n)
    release = mech.step(cells)
    assert isinstance(release, Released) and release.slot == 1
    assert release.histogram.shape == (3,) and np.all(np.isfinite(release.histogram))


@pytest.mark.parametrize("name", list(REGISTRY))
def test_the_job_takes_exactly_the_mechanisms_marked_for_it(name: str):
    kwargs = dict(stream="s", mechanism=name, domain={"kind": "cells", "size": 3},
                  slot_ms=1000, partitions=2, secret="k")
    if spec(name).in_job:
        assert JobConfig(**kwargs).mechanism == name
    else:
        with pytest.raises(ValueError, match="mechanism must be one of"):
            JobConfig(**kwargs)


@pytest.mark.parametrize("name", names(family="central", homogeneous=True))
def test_homogeneous_mechanisms_run_everyone_at_the_strictest_requirement(name: str):
    """A homogeneous mechanism's releases depend on the requirements only through the
    strictest one: given everyone's requirements or everyone at (max w, min E), the same."""
    w, E = REQS.strictest()
    strict = FixedRequirements.from_arrays(list(REQS.users), [w] * REQS.n, [E] * REQS.n)
    a = build(name, REQS, 3, np.random.default_rng(5), "discrete")
    b = build(name, strict, 3, np.random.default_rng(5), "discrete")
    cells = np.random.default_rng(6).integers(-1, 3, size=(20, REQS.n))
    for row in cells:
        ra, rb = a.step(row), b.step(row)
        assert np.array_equal(ra.histogram, rb.histogram) and ra.published == rb.published
        assert np.array_equal(ra.eps2, rb.eps2) and len(set(ra.eps2.tolist())) == 1


@pytest.mark.parametrize("name", names(family="central", homogeneous=False))
def test_personalised_mechanisms_use_each_requirement(name: str):
    w, E = REQS.strictest()
    strict = FixedRequirements.from_arrays(list(REQS.users), [w] * REQS.n, [E] * REQS.n)
    a = build(name, REQS, 3, np.random.default_rng(5), "discrete")
    b = build(name, strict, 3, np.random.default_rng(5), "discrete")
    rows = np.random.default_rng(6).integers(-1, 3, size=(20, REQS.n))
    # the dissimilarity budget eps1, or eps2 for a ledger without one (pbu's uniform ledger)
    field = "eps2" if spec(name).ledger == "uniform" else "eps1"
    charged = [(getattr(a.step(row), field), getattr(b.step(row), field)) for row in rows]
    assert any(not np.array_equal(x, y) for x, y in charged)


def test_histograms_are_integers_under_discrete_noise():
    assert histogram_dtype("discrete") is np.int64 and histogram_dtype("laplace") is np.float64
