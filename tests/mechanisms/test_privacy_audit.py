"""The empirical privacy audit (mechanisms/evaluation/privacy_audit/): its bounds, its runs
against the product's batched path, the honest mechanisms within budget, and every planted
defect found."""

from __future__ import annotations

import argparse
import io
import math

import numpy as np
import orjson
import pytest

from mechanisms.batch.dynamic import BatchedDynamic
from mechanisms.batch.fixed import BatchedFixed
from mechanisms.build import build
from mechanisms.evaluation.privacy_audit import (
    AUDITED,
    MODES,
    PAIRS,
    Setting,
    TrialStreams,
    audit_pair,
    clopper_pearson,
    default_population,
    distinguish,
    neighbour_pair,
    next_level_budgets,
    postprocessed,
    regularized_beta,
    run_input,
    settings_for,
)
from mechanisms.postprocess import Postprocessor
from mechanisms.registry import spec
from mechanisms.requirements import DynamicRequirements
from mechanisms.run.dynamic import DynamicMechanism

#: trials per input of the mechanism tests: enough for every planted defect (its bound clears
#: E by 0.3 or more over seeds) and cheap for the honest runs
TRIALS = 20_000


@pytest.fixture(scope="module")
def streams() -> TrialStreams:
    return TrialStreams(TRIALS)


# -- the bounds ----------------------------------------------------------------------------


def test_regularized_beta_closed_forms():
    for x in (1e-6, 0.03, 0.5, 0.97):
        assert regularized_beta(x, 1.0, 7.0) == pytest.approx(1.0 - (1.0 - x) ** 7, rel=1e-12)
        assert regularized_beta(x, 5.0, 1.0) == pytest.approx(x**5, rel=1e-12)
    assert regularized_beta(0.5, 40.0, 40.0) == pytest.approx(0.5, abs=1e-12)
    assert (regularized_beta(0.0, 2.0, 3.0), regularized_beta(1.0, 2.0, 3.0)) == (0.0, 1.0)


def test_clopper_pearson_known_values():
    # closed forms: no success, or all successes
    for n, alpha in ((10, 0.05), (50_000, 0.00625)):
        assert clopper_pearson(0, n, alpha)[1] == pytest.approx(1 - alpha ** (1 / n), rel=1e-8)
        assert clopper_pearson(n, n, alpha)[0] == pytest.approx(alpha ** (1 / n), rel=1e-8)
        assert clopper_pearson(0, n, alpha)[0] == 0.0 and clopper_pearson(n, n, alpha)[1] == 1.0
    # beta quantiles (scipy.stats.beta.ppf)
    lo, hi = clopper_pearson(37, 100, 0.025)
    assert (lo, hi) == pytest.approx((0.2755665796145515, 0.47235164055168316), rel=1e-8)
    assert lo < 0.2755665796145515 and hi > 0.47235164055168316  # widened outwards
    lo, hi = clopper_pearson(500, 50_000, 0.00625)
    assert (lo, hi) == pytest.approx((0.008922704989789847, 0.0111664270623938), rel=1e-8)
    with pytest.raises(ValueError):
        clopper_pearson(3, 2, 0.05)
    with pytest.raises(ValueError):
        clopper_pearson(1, 2, 1.5)


def test_clopper_pearson_against_scipy_where_installed():
    stats = pytest.importorskip("scipy.stats")
    for k, n, alpha in ((1, 7, 0.05), (13, 400, 0.001), (2_999, 3_000, 0.01), (20, 50_000, 0.05)):
        lo, hi = clopper_pearson(k, n, alpha)
        assert lo == pytest.approx(stats.beta.ppf(alpha, k, n - k + 1), rel=1e-8)
        assert hi == pytest.approx(stats.beta.ppf(1 - alpha, k + 1, n - k), rel=1e-8)


def test_toy_laplace_bound_is_valid_tight_and_monotone():
    """Laplace(1/eps) on a count of 0 or 1 is exactly eps-DP: the bound stays below eps, comes
    within half of it at 1e5 trials, and grows with eps."""
    n = 100_000
    bounds = []
    for eps in (0.5, 1.0, 2.0):
        rng = np.random.default_rng([7, int(eps * 10)])
        x0 = rng.laplace(0.0, 1.0 / eps, n)
        x1 = 1.0 + rng.laplace(0.0, 1.0 / eps, n)
        found = distinguish({"x": x0}, np.zeros(n, dtype=np.int64), {"x": x1},
                            np.zeros(n, dtype=np.int64))
        assert 0.5 * eps < found.epsilon_lb <= eps, (eps, found)
        assert found.p_lower > 0 and found.halves == (n // 2, n // 2)
        bounds.append(found.epsilon_lb)
    assert bounds == sorted(bounds)


def test_identical_inputs_give_no_bound():
    n = 40_000
    rng = np.random.default_rng(3)
    cats = rng.integers(0, 3, (2, n))
    found = distinguish({"x": rng.normal(size=n)}, cats[0], {"x": rng.normal(size=n)}, cats[1])
    assert found.epsilon_lb < 0.1


def test_a_deterministic_difference_is_bounded_by_the_trials():
    """Outputs that never meet: the bound is finite, about ln(trials / ln(1/level))."""
    n = 20_000
    found = distinguish({"x": np.zeros(n)}, np.zeros(n, dtype=np.int64), {"x": np.ones(n)},
                        np.zeros(n, dtype=np.int64))
    assert 7.0 < found.epsilon_lb < math.log(n)


# -- inputs, generators and runs -------------------------------------------------------------


def test_neighbouring_pairs_change_the_target_only():
    pop = default_population("declared")
    u = pop.target
    for name in PAIRS:
        pair = neighbour_pair(pop, name)
        other = np.delete(np.arange(len(pop.users)), u)
        assert np.array_equal(pair.cells0[:, other], pair.cells1[:, other])
        assert (pair.E, pair.w) == (float(pop.E[u]), int(pop.w[u])) == (1.0, 2)
        assert float(pop.E[u]) == pop.E.min()  # the strictest requirement
    assert neighbour_pair(pop, "slot").slots == (2,)
    assert neighbour_pair(pop, "window").slots == (1, 2)  # w_u consecutive slots
    moved = neighbour_pair(pop, "first_event")
    assert moved.slots == (1,) and moved.cells1[0, u] == -1 and moved.cells1[1, u] == 0
    replaced = neighbour_pair(pop, "slot", "replace")
    assert replaced.cells1[1, u] == 1 and replaced.cells0[1, u] == 0


def test_trial_streams_reseed_reproducibly():
    streams = TrialStreams(6)
    a = [r.random() for r in streams.reseed(1, 2)]
    b = [r.random() for r in streams.reseed(1, 2)]
    c = [r.random() for r in streams.reseed(1, 3)]
    assert a == b and a != c and len(set(a)) == 6


@pytest.mark.parametrize(("name", "noise"), [(name, "laplace") for name in AUDITED] + [
    (name, "discrete") for name in ("pbd", "sample", "pba_ipw", "dpba")])
def test_runs_release_what_the_batched_path_releases(name, noise):
    """Runs grouped by publish history release, bit for bit, what the product's batch of the
    same runs releases (BatchedFixed, BatchedDynamic) from the same generators."""
    pop = default_population("defaults")
    runs = 24
    rngs = TrialStreams(runs).reseed(5, 6)
    twins = []
    for r in rngs:
        twin = np.random.Generator(np.random.PCG64(0))
        twin.bit_generator.state = r.bit_generator.state
        twins.append(twin)
    observed = run_input(name, pop, pop.cells, rngs, noise=noise)
    if spec(name).family == "dynamic":
        rows = [(1, u, int(w), float(E), int(w), float(E))
                for u, w, E in zip(pop.users, pop.w, pop.E, strict=True)]
        product = BatchedDynamic([DynamicMechanism(name, DynamicRequirements.from_rows(rows),
                                                   pop.d, g, noise) for g in twins])
    else:
        product = BatchedFixed([build(name, pop.requirements(), pop.d, g, noise)
                                for g in twins])
    for t in range(pop.T):
        out = product.step(np.stack([pop.cells[t]] * runs))
        assert np.array_equal(out.histogram, observed.released[:, t])
        assert np.array_equal(out.published, observed.published[:, t])
    assert observed.users.tolist() == [len(pop.users)] * pop.T
    assert len(observed.keys) == len(np.unique(observed.history))


def test_latent_users_are_constant_and_realised_users_are_not():
    pop = default_population("defaults")
    moved = neighbour_pair(pop, "first_event")
    rngs = TrialStreams(8).reseed(1)
    for cells in (moved.cells0, moved.cells1):
        assert run_input("pbd", pop, cells, rngs).users.tolist() == [9, 9, 9]
    realised = [run_input("pbd", pop, cells, rngs, plant="realised_users", realised=True).users
                for cells in (moved.cells0, moved.cells1)]
    assert [u.tolist() for u in realised] == [[7, 9, 9], [6, 9, 9]]


def test_next_level_budgets():
    budgets = np.array([[0.25, 2.0, 2.5], [0.25, 2.0, 2.5]])
    sizes = np.array([[2, 6, 1], [2, 0, 1]])
    assert next_level_budgets(budgets, sizes).tolist() == [[2.0, 2.5, 2.5], [2.5, 2.5, 2.5]]


# -- the audit -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", AUDITED)
def test_honest_mechanisms_stay_within_the_targets_budget(name, mode, streams):
    """Every mechanism the job runs, declared and under default requirements (the latent
    population), every pair: the lower bound stays within the target's E."""
    for pair in PAIRS:
        result = audit_pair(name, mode, pair, trials=TRIALS, streams=streams)
        assert result.passed and 0.0 <= result.epsilon_lb <= result.E == 1.0, result
        assert result.trials == TRIALS and result.w == 2 and result.target == "u0"


@pytest.mark.parametrize(("plant", "name", "mode", "pair"), [
    ("noise_halved", "uniform", "declared", "window"),
    ("charge_dropped", "sample", "declared", "window"),
    ("threshold_off_by_one", "pbd", "declared", "slot"),
    ("realised_users", "pbd", "defaults", "first_event"),
])
def test_planted_defect_is_found(plant, name, mode, pair, streams):
    honest = audit_pair(name, mode, pair, trials=TRIALS, streams=streams)
    planted = audit_pair(name, mode, pair, trials=TRIALS, streams=streams, plant=plant)
    assert honest.passed, honest
    assert planted.epsilon_lb > planted.E and not planted.passed, planted
    if plant == "realised_users":  # the users an analyst reads differ: a deterministic leak
        assert planted.epsilon_lb > 5.0 and "users" in planted.event


def test_settings_resolve_the_default_and_refuse_unknown_names():
    got = settings_for(["pba", "default"], "dpbd", "round")
    assert [(s.label, s.mechanism, s.postprocess) for s in got] == [
        ("pba", "pba", "none"), ("default", "dpbd", "round")]
    with pytest.raises(ValueError, match="unknown mechanism"):
        settings_for(["nope"], "pbd")


@pytest.mark.parametrize("method", ["round", "kalman", "kalman_bank", "kalman_split"])
def test_postprocessing_is_the_jobs_slot_by_slot(method):
    pop = default_population("declared")
    observed = run_input("pbd", pop, pop.cells, TrialStreams(12).reseed(1))
    estimates = postprocessed(method, observed, pop.d)
    for b in range(12):
        job = Postprocessor(method, pop.d)
        for t in range(pop.T):
            std = np.full(pop.d, observed.std[b, t]) if observed.published[b, t] else None
            assert job.step(observed.released[b, t], bool(observed.published[b, t]), std,
                            int(observed.users[t])) == estimates[b, t].tolist()
    result = audit_pair(Setting("default", "pbd", method), "declared", "window", trials=400)
    assert result.setting == "default" and result.mechanism == "pbd" and result.passed


# -- the command-line module -------------------------------------------------------------------


def _cli(argv: list[str], parser: argparse.ArgumentParser | None = None) -> tuple[int, str, str]:
    from streams.cli import audit_empirical

    parser = parser or argparse.ArgumentParser()
    audit_empirical.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    status = audit_empirical.run(parser.parse_args(argv), out, err)
    return status, out.getvalue(), err.getvalue()


def test_cli_prints_a_report_and_exits_by_the_bounds():
    from mechanisms.defaults import choose

    status, out, err = _cli(["--trials", "400", "--mechanisms", "default,uniform", "--json"])
    report = orjson.loads(out)
    assert status == 0 and report["passed"] and report["trials"] == 400
    assert len(report["results"]) == 2 * len(MODES) * len(PAIRS)
    # the job's default configuration runs the branch the audit's public population chooses
    assert {r["mechanism"] for r in report["results"] if r["setting"] == "default"} == {
        choose(default_population(m).requirements(), 2).mechanism for m in MODES} == {"pbu"}
    assert len(err.strip().splitlines()) == len(report["results"])  # one progress line each
    status, out, _ = _cli(["--trials", "400", "--mechanisms", "pbd", "--plant",
                           "realised_users"])
    assert status == 1 and "FAIL" in out and "| pbd +realised_users | defaults | first_event" in out


def test_pwevent_audit_empirical_runs_the_audit():
    """The command as users run it: ``pwevent audit --empirical`` (no stream needed)."""
    from contextlib import redirect_stderr, redirect_stdout

    from streams.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        status = main(["audit", "--empirical", "--trials", "300", "--mechanisms", "sample",
                       "--json"])
    report = orjson.loads(out.getvalue())
    assert status == 0 and report["passed"] and len(report["results"]) == 6
    with redirect_stdout(out), redirect_stderr(err):
        assert main(["audit", "--empirical", "--trials", "300", "--mechanisms", "pbd",
                     "--plant", "realised_users"]) == 1


def test_cli_options_fit_a_command_that_prints_json_already():
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    status, out, _ = _cli(["--trials", "200", "--mechanisms", "bd", "--json"], parser)
    assert status == 0 and orjson.loads(out)["results"][0]["mechanism"] == "bd"
    with pytest.raises(SystemExit):
        _cli(["--mechanisms", "pbd,nope"])
