"""Batched simulation: every run of a batch releases exactly what it releases alone."""

from __future__ import annotations

import numpy as np
import pytest

from mechanisms.batch.fixed import BatchedFixed
from mechanisms.build import batch, build
from mechanisms.evaluation.runs import (
    ClassCounts,
    class_counts,
    make_step,
    run_batch,
    run_stream,
    true_histograms,
)
from mechanisms.kernels import compiled
from mechanisms.registry import REGISTRY, names
from mechanisms.release.obs import batch_optimal_budget, optimal_budget
from mechanisms.requirements import FixedRequirements, user_classes

N, D, T = 60, 3, 70
# (E, w, seed) of the runs of a batch: different budgets, windows and seeds
SETTINGS = ((0.8, 6, 0), (2.0, 4, 1), (0.5, 9, 2), (5.0, 3, 3), (1.5, 5, 4))


def requirements(E: float, w: int, seed: int, n: int = N) -> FixedRequirements:
    """Four user types with windows <= w and budgets >= E; type 0 takes (E, w) itself."""
    rng = np.random.default_rng([seed, 11])
    type_w = rng.integers(1, w + 1, 4)
    type_E = E * rng.choice([1.0, 1.5, 2.0, 3.0], 4)
    type_w[0], type_E[0] = w, E
    kind = np.arange(n) % 4
    return FixedRequirements.from_arrays([f"u{i}" for i in range(n)], type_w[kind], type_E[kind])


def stream(seed: int, n: int = N, d: int = D, slots: int = T) -> np.ndarray:
    """(slots, n) cells, a tenth of them -1 (no report), drifting over the slots."""
    rng = np.random.default_rng([seed, 12])
    shift = np.arange(slots)[:, None] // 10
    cells = (rng.integers(0, d, (slots, n)) + shift) % d
    cells[rng.random((slots, n)) < 0.1] = -1
    return cells


def runs(name: str, noise: str = "laplace"):
    """One fresh mechanism per setting, built as the evaluation builds a run alone."""
    out = []
    for E, w, seed in SETTINGS:
        rng = np.random.default_rng([seed, 13])
        if REGISTRY[name].family in ("central", "dynamic", "baseline"):
            out.append(make_step(name, requirements(E, w, seed), D, rng, noise))
        else:
            out.append(make_step(name, requirements(E, w, seed), D, rng))
    return out


@pytest.mark.parametrize("compiled_loops", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_run_of_a_batch_releases_what_it_releases_alone(name, compiled_loops, monkeypatch):
    """With the compiled loops (numba, as the evaluation runs) and without them (numpy alone,
    where the evaluation extra is not installed)."""
    if not compiled_loops:
        monkeypatch.setattr(compiled, "available", lambda runs: False)
    alone, together = runs(name), batch(runs(name))
    streams = [stream(s) for _, _, s in SETTINGS]  # each run its own stream (repeats)
    published = 0
    for t in range(T):
        cells = [s[t] for s in streams]
        got = together.step(cells)
        for b, mech in enumerate(alone):
            want = mech.step(cells[b])
            assert got.slot == want.slot == t + 1
            assert bool(got.published[b]) == bool(want.published), (name, t, b)
            assert np.array_equal(got.histogram[b],
                                  np.asarray(want.histogram, dtype=np.float64)), (name, t, b)
            published += bool(want.published)
    assert published > 0


@pytest.mark.parametrize("name", names(family="central"))
def test_central_batch_under_discrete_noise(name):
    alone, together = runs(name, "discrete"), batch(runs(name, "discrete"))
    assert isinstance(together, BatchedFixed)
    cells = stream(9)
    for t in range(T):
        got = together.step([cells[t]] * len(alone))
        assert got.histogram.dtype.kind == "i"
        for b, mech in enumerate(alone):
            want = mech.step(cells[t])
            assert bool(got.published[b]) == want.published
            assert np.array_equal(got.histogram[b], want.histogram)


@pytest.mark.parametrize("name", [*names(family="central"), *names(family="dynamic"),
                                  "spas", "plbu", "mtsp"])
def test_count_path_gives_the_results_of_runs_alone(name):
    """Counting each stream once per class of users and feeding the counts gives every run
    the result it gets alone on the cells."""
    reqs = [requirements(E, w, seed) for E, w, seed in SETTINGS]
    classes = user_classes(*reqs)
    streams = [stream(s) for _, _, s in SETTINGS[:2]]
    counted = [class_counts(c, classes, D, chunk=16) for c in streams]
    trues = [true_histograms(c, D) for c in streams]
    which = [k % 2 for k in range(len(SETTINGS))]  # two repeats, settings sharing each
    def fresh():
        return [make_step(name, r, D, np.random.default_rng([k, 14]))
                for k, r in enumerate(reqs)]
    together = run_batch(fresh(), [counted[i] for i in which], [trues[i] for i in which],
                         chunk=32)
    for b, mech in enumerate(fresh()):
        alone = run_stream(mech, streams[which[b]], trues[which[b]])
        got = together[b]
        assert (got.amre, got.ajsd, got.mae, got.fresh) == (
            alone.amre, alone.ajsd, alone.mae, alone.fresh), (name, b)
    cells_path = run_batch(fresh(), [streams[i] for i in which], [trues[i] for i in which])
    assert [r.amre for r in cells_path] == [r.amre for r in together]


def test_class_counts_match_the_users():
    cells = stream(3)
    classes = np.arange(N) % 5
    counted = class_counts(cells, classes, D, chunk=7)
    assert isinstance(counted, ClassCounts) and counted.counts.shape == (T, 5, D)
    for t in (0, 33, T - 1):
        for c in range(5):
            mine = cells[t][(classes == c) & (cells[t] >= 0)]
            assert counted.counts[t, c].tolist() == np.bincount(mine, minlength=D).tolist()


def test_a_class_spanning_levels_is_refused():
    reqs = requirements(1.0, 5, 0)
    mech = BatchedFixed([build("pbd", reqs, D, np.random.default_rng(0))])
    with pytest.raises(ValueError, match="spans several levels"):
        mech.class_matrix([np.zeros(N, dtype=np.int64)])


def test_batched_obs_matches_obs():
    rng = np.random.default_rng(5)
    budgets = rng.choice([0.0, 0.01, 0.05, 0.1, 0.3, 0.31, 1.0], (400, 6))
    sizes = rng.integers(0, 4, (400, 6)) * rng.integers(1, 5000, (400, 6))
    for noise in ("laplace", "discrete"):
        theta, err = batch_optimal_budget(budgets, sizes, noise)
        for b in range(400):
            keep = sizes[b] > 0
            want = optimal_budget(budgets[b][keep], sizes[b][keep], noise) if keep.any() else (
                0.0, float("inf"))
            assert (theta[b], err[b]) == want


def test_batch_refuses_mixed_mechanisms():
    reqs = requirements(1.0, 5, 0)
    mixed = [build(n, reqs, D, np.random.default_rng(0)) for n in ("pbd", "pba")]
    with pytest.raises(ValueError, match="one mechanism"):
        BatchedFixed(mixed)


def test_value_by_value_binomial_draws_what_one_array_call_draws():
    from mechanisms.release.sampling import draw_binomial

    counts = np.array([[3000, 20, 0, 7], [1, 0, 500, 4000], [9, 9, 9, 9]] * 3)
    p = np.linspace(0.05, 0.95, counts.shape[0])
    for rows in (1, 3, 9):  # 4, 12 and 36 draws: value by value, then one array call
        a = draw_binomial(np.random.default_rng(8), counts[:rows], p[:rows])
        b = np.random.default_rng(8).binomial(counts[:rows], p[:rows][:, None]).sum(axis=0)
        assert [int(x) for x in a] == b.tolist()


@pytest.mark.parametrize("compiled_loops", [True, False], ids=["compiled", "numpy"])
@pytest.mark.parametrize("d", [1, 2, 5, 40])
def test_plbu_batch_over_two_cells_and_many(d, compiled_loops, monkeypatch):
    """One cell: no draw; two cells: GRR's reports drawn value by value; five: GRR's kept
    reports and its multinomial over the four other cells; many cells: OUE's array draws."""
    if not compiled_loops:
        monkeypatch.setattr(compiled, "available", lambda runs: False)
    reqs = [requirements(E, w, seed) for E, w, seed in SETTINGS]
    alone = [make_step("plbu", r, d, np.random.default_rng([k, 15])) for k, r in enumerate(reqs)]
    assert all(m.use_grr.all() for m in alone) == (d <= 5)
    together = batch([make_step("plbu", r, d, np.random.default_rng([k, 15]))
                      for k, r in enumerate(reqs)])
    cells = stream(5, d=d)
    for t in range(T):
        got = together.step([cells[t]] * len(alone))
        for b, mech in enumerate(alone):
            assert np.array_equal(got.histogram[b], mech.step(cells[t]).histogram), (d, t, b)


@pytest.mark.parametrize("name", names(family="dynamic"))
def test_dynamic_batch_follows_declarations_over_time(name):
    """Users join late and declare again, then all declare alike (alone, their groups merge
    once their histories have left every window): every run of the batch still releases what
    it releases alone (one ledger for the batch, each run's columns its own, never merged)."""
    from mechanisms.requirements import DynamicRequirements
    from mechanisms.run.dynamic import DynamicMechanism

    def rows(seed: int) -> list:
        rng = np.random.default_rng([seed, 16])
        out = []
        for slot, users in ((1, range(30)), (12, range(0, 40, 3)), (20, range(30, 40)),
                            (33, range(5, 35, 2))):
            for u in users:
                out.append((slot, f"u{u}", int(rng.integers(1, 9)), float(rng.uniform(0.5, 6)),
                            int(rng.integers(1, 9)), float(rng.uniform(0.5, 6))))
        alike = (int(rng.integers(1, 9)), float(rng.uniform(0.5, 6)), int(rng.integers(1, 9)),
                 float(rng.uniform(0.5, 6)))
        return out + [(40, f"u{u}", *alike) for u in range(40)]

    def fresh():
        return [DynamicMechanism(name, DynamicRequirements.from_rows(rows(s)), D,
                                 np.random.default_rng([s, 17])) for s in range(4)]

    alone, together = fresh(), batch(fresh())
    cells = stream(21, n=40)
    published = 0
    for t in range(T):
        n = 30 if t + 1 < 12 else 34 if t + 1 < 20 else 40  # u30, u33, u36, u39 join at 12
        got = together.step([cells[t, :n]] * len(alone))
        for b, mech in enumerate(alone):
            want = mech.step(cells[t, :n])
            assert bool(got.published[b]) == want.published, (t, b)
            assert np.array_equal(got.histogram[b], want.histogram), (t, b)
            published += want.published
    assert published > 0
    assert any(m.ledger.groups < 40 for m in alone)  # alone, groups did merge
