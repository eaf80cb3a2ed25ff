"""The collector's estimates (streams/ldp_collector, mechanisms/local/collector.py) from reports
made by the Python client with deterministic words: equal to a direct computation with the
effective probabilities, and to the evaluation's estimate from the same perturbed bits over the
oracle's d + 1 cells (the users without a value in cell d)."""

from __future__ import annotations

import numpy as np
import pytest
from ldp_collector_kit import (
    LPU_KEY,
    ORIGIN_MS,
    SLOT_MS,
    Replay,
    Sent,
    client_reports,
    every_cell,
    grr_split,
    oue_split,
    padded,
)

from mechanisms.baselines.ldp import Plbu, oue_frequencies
from mechanisms.baselines.ldp_ids import LdpIds
from mechanisms.local import (
    WORD,
    grr_keep_threshold,
    oue_threshold,
    parse_report,
    plbu_uses_grr,
)
from mechanisms.local.collector import combine_groups, estimate_group
from mechanisms.requirements import FixedRequirements
from streams.ldp_collector import LdpCollector

START = 5


def seeded_cells(users: int, slots: int, d: int, seed: int) -> np.ndarray:
    """Skewed true cells, a tenth of them missing (-1)."""
    rng = np.random.default_rng(seed)
    weights = np.arange(d, 0, -1, dtype=np.float64) ** 2
    cells = rng.choice(d, size=(users, slots), p=weights / weights.sum())
    return np.where(rng.random((users, slots)) < 0.1, -1, cells)


def collect(protocol: str, sent: list[Sent], slots: int, d: int, **stream: object) -> list[dict]:
    """Every report offered (none refused), then slots start .. start + slots - 1 closed."""
    collector = LdpCollector(protocol, d, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=START,
                             **stream)
    assert collector.offer_all(s.record for s in sent) == []
    releases = collector.close_until(ORIGIN_MS + (START + slots) * SLOT_MS)
    assert [r["slot"] for r in releases] == list(range(START, START + slots))
    return releases


def direct_oue(sent: list[Sent], d: int, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Counts and their std written out: q = T/2^32, f = (ones/n - q)/(1/2 - q), Var f =
    q(1 - q)/(n (1/2 - q)^2) + f/n (f clipped to [0, 1])."""
    n = len(sent)
    ones = sum(parse_report(s.value).bits.astype(np.int64) for s in sent)
    q = oue_threshold(eps) / 2**32
    f = (ones / n - q) / (0.5 - q)
    var = q * (1 - q) / (n * (0.5 - q) ** 2) + np.clip(f, 0, 1) / n
    return n * f, n * np.sqrt(var)


def test_lbu_is_the_direct_computation_and_the_evaluations_estimate() -> None:
    users, slots, d, w, E = 300, 3, 6, 4, 2.0
    cells = seeded_cells(users, slots, d, seed=1)
    sent = client_reports("lbu", cells, d=d, start=START, requirements=[(w, E)] * users)
    releases = collect("lbu", sent, slots, d, E=E, w=w)
    eps = E / w
    q_nominal = 1.0 / (np.exp(eps) + 1.0)
    draws = []
    for t, release in enumerate(releases):
        at = [s for s in sent if s.slot == START + t]
        # every user reports, with a value or without: the reporters say nothing of who had one
        assert release["reporters"] == len(at) == users
        counts, std = direct_oue(at, d, eps)
        np.testing.assert_allclose(every_cell(release), counts, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(every_cell(release, "std"), std, rtol=1e-12)
        own, others = oue_split(at, d + 1)
        draws += [(0.5, own), (q_nominal, others)]
    replay = Replay(draws)
    evaluation = LdpIds("lbu", w, E, users, d + 1, replay)  # type: ignore[arg-type]
    for t, release in enumerate(releases):
        histogram = evaluation.step(padded(cells[:, t], d)).histogram
        own, others = oue_split([s for s in sent if s.slot == START + t], d + 1)
        n = release["reporters"]
        # the same formula at the nominal q gives the evaluation's numbers exactly
        nominal = estimate_group(own + others, n, 0.5, q_nominal, oracle="oue", eps=eps)
        np.testing.assert_array_equal(nominal.frequency * n, histogram)
        # the effective q differs from it by under 2^-32: so do the estimates, scaled
        np.testing.assert_allclose(every_cell(release), histogram, rtol=0, atol=1e-6)
    assert replay.draws == []  # every slot drew the clients' bits


def test_lsp_matches_at_its_rounds_and_releases_nothing_between() -> None:
    users, slots, d, w, E = 250, 7, 5, 3, 1.0
    cells = seeded_cells(users, slots, d, seed=2)
    sent = client_reports("lsp", cells, d=d, start=START, requirements=[(w, E)] * users)
    assert {s.slot for s in sent} == {START, START + 3, START + 6}
    releases = collect("lsp", sent, slots, d, E=E, w=w)
    q_nominal = 1.0 / (np.exp(E) + 1.0)
    draws = []
    for t in (0, 3, 6):
        own, others = oue_split([s for s in sent if s.slot == START + t], d + 1)
        draws += [(0.5, own), (q_nominal, others)]
    replay = Replay(draws)
    evaluation = LdpIds("lsp", w, E, users, d + 1, replay)  # type: ignore[arg-type]
    for t, release in enumerate(releases):
        out = evaluation.step(padded(cells[:, t], d))
        if t % w == 0:
            at = [s for s in sent if s.slot == START + t]
            counts, std = direct_oue(at, d, E)
            np.testing.assert_allclose(every_cell(release), counts, rtol=1e-12, atol=1e-9)
            np.testing.assert_allclose(every_cell(release, "std"), std, rtol=1e-12)
            assert out.published and release["reporters"] == users
            np.testing.assert_allclose(every_cell(release), out.histogram, rtol=0, atol=1e-6)
        else:  # the evaluation releases its last estimate again; nobody reported here
            assert not out.published
            assert release["reporters"] == 0 and release["std"] is None
            assert release["counts"] == [0.0] * d and release["no_value"] == 0.0
            assert release["no_value_std"] is None
    assert replay.draws == []


def test_lpu_counts_each_user_once_a_block_with_the_evaluations_estimator() -> None:
    users, slots, d, w, E = 400, 8, 4, 4, 1.5
    cells = seeded_cells(users, slots, d, seed=3)
    sent = client_reports("lpu", cells, d=d, start=START, requirements=[(w, E)] * users)
    releases = collect("lpu", sent, slots, d, E=E, w=w, lpu_key=LPU_KEY)
    for block in (0, 1):
        in_block = [s for s in sent if 0 <= s.slot - START - block * w < w]
        assert len({s.user for s in in_block}) == len(in_block)
    q_nominal = 1.0 / (np.exp(E) + 1.0)
    for t, release in enumerate(releases):
        at = [s for s in sent if s.slot == START + t]
        assert release["reporters"] == len(at) > 0
        counts, std = direct_oue(at, d, E)
        np.testing.assert_allclose(every_cell(release), counts, rtol=1e-12, atol=1e-9)
        np.testing.assert_allclose(every_cell(release, "std"), std, rtol=1e-12)
        own, others = oue_split(at, d + 1)
        true = np.bincount([s.cell for s in at], minlength=d + 1)
        frequency = oue_frequencies(true, E, Replay([(0.5, own), (q_nominal, others)]))  # type: ignore[arg-type]
        np.testing.assert_allclose(every_cell(release) / len(at), frequency, atol=1e-8)


@pytest.mark.parametrize("d", [2, 8])
def test_plbu_combines_its_groups_as_the_evaluation(d: int) -> None:
    users, slots = 360, 2
    choices = [(4, 1.0), (2, 1.0), (1, 1.0), (1, 2.0)]  # eps 0.25, 0.5, 1, 2
    requirements = [choices[i % 4] for i in range(users)]
    cells = seeded_cells(users, slots, d, seed=4)
    sent = client_reports("plbu", cells, d=d, start=START, requirements=requirements)
    c = d + 1  # the oracle's cells
    grr = {E / w: plbu_uses_grr(E / w, c) for w, E in choices}
    assert (set(grr.values()) == {True, False}) == (d == 8)
    releases = collect("plbu", sent, slots, d)
    evaluation = Plbu(FixedRequirements.from_arrays(
        [f"u{i}" for i in range(users)], [w for w, _ in requirements],
        [E for _, E in requirements]), c, np.random.default_rng(0))
    budgets = evaluation.group_eps.tolist()
    assert budgets == sorted(grr) and evaluation.use_grr.tolist() == [grr[e] for e in budgets]
    for t, release in enumerate(releases):
        at = [s for s in sent if s.slot == START + t]
        G = len(budgets)
        ones, kept = np.zeros((1, G, c), np.int64), np.zeros((1, G, c), np.int64)
        moved = np.zeros((1, G, c, c - 1), np.int64)
        effective, nominal = [], []
        for g, eps in enumerate(budgets):
            group = [s for s in at if parse_report(s.value).eps == eps]
            n = len(group)
            e = np.exp(eps)
            if grr[eps]:
                kept[0, g], moved[0, g] = grr_split(group, c)
                observed = np.bincount([parse_report(s.value).cell for s in group], minlength=c)
                p = grr_keep_threshold(eps, c) / WORD
                effective.append((observed, n, p, (1 - p) / (c - 1), "grr", eps))
                nominal.append((observed, n, e / (e + c - 1), 1 / (e + c - 1), "grr", eps))
            else:
                own, others = oue_split(group, c)
                ones[0, g] = own + others
                effective.append((own + others, n, 0.5, oue_threshold(eps) / WORD, "oue", eps))
                nominal.append((own + others, n, 0.5, 1 / (e + 1), "oue", eps))
        # written out: inverse-variance weights 1/N_g, N_g = q(1-q)/(n(p-q)^2)
        weights = np.array([(n * (p - q) ** 2) / (q * (1 - q)) for _, n, p, q, _, _ in effective])
        freqs = np.array([(o / n - q) / (p - q) for o, n, p, q, _, _ in effective])
        var = np.array([(q * (1 - q) + np.clip(f, 0, 1) * (p - q) * (1 - p - q))
                        / (n * (p - q) ** 2)
                        for (_, n, p, q, _, _), f in zip(effective, freqs, strict=True)])
        n_all = len(at)
        assert n_all == users
        np.testing.assert_allclose(every_cell(release), n_all * (weights @ freqs) / weights.sum(),
                                   rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose(every_cell(release, "std"), n_all * np.sqrt(weights**2 @ var)
                                   / weights.sum(), rtol=1e-10)
        # the evaluation, its draws replaced by the clients' perturbed reports
        evaluation._batch._draw = lambda *_: (ones, kept, moved if c > 2 else None)  # noqa: B023
        histogram = evaluation.step(padded(cells[:, t], d)).histogram
        combined = combine_groups(tuple(estimate_group(o, n, p, q, oracle=k, eps=e)
                                        for o, n, p, q, k, e in nominal), c)
        np.testing.assert_allclose(combined.counts, histogram, rtol=1e-10, atol=1e-9)
        np.testing.assert_allclose(every_cell(release), histogram, rtol=0, atol=1e-5)
