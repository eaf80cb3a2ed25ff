"""``--mechanism pbd_ipw|pba_ipw`` in the job: the unbiased Sampling Mechanism option charges
what PBD and PBA charge, releases what they release where nothing is sampled away, and
states the noise it added (the noise term of docs/design.md, "The unbiased Sampling Mechanism
option") from public values."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from small_job import SLOTS, USERS, decisions, requirement, run

from mechanisms import FixedRequirements, ledger_for
from mechanisms.noise.calibrated import noise_std
from mechanisms.release.sampling import inclusion_probabilities

from support import window_sums


@pytest.mark.parametrize("noise", ["laplace", "discrete"])
@pytest.mark.parametrize(("ipw", "paper"), [("pbd_ipw", "pbd"), ("pba_ipw", "pba")])
def test_without_sampling_it_releases_what_the_paper_releases(ipw, paper, noise):
    a, b = run(paper, noise, False), run(ipw, noise, False)
    assert decisions(a) == decisions(b)
    for x, y in zip(a.releases, b.releases, strict=True):
        x, y = orjson.loads(x), orjson.loads(y)
        assert x.pop("mechanism") == paper and y.pop("mechanism") == ipw
        assert x == y
    assert any(orjson.loads(r)["published"] for r in b.releases)


@pytest.mark.parametrize("noise", ["laplace", "discrete"])
@pytest.mark.parametrize(("ipw", "paper"), [("pbd_ipw", "pbd"), ("pba_ipw", "pba")])
def test_with_sampling_it_charges_the_papers_ledger_and_states_its_noise(ipw, paper, noise):
    job = run(ipw, noise, True)
    docs = decisions(job)
    assert len(docs) == SLOTS == len(job.releases)
    # the charges are those of the paper's ledger under the same publish decisions
    reqs = FixedRequirements.from_arrays(USERS, *zip(*(requirement(i, True)
                                                       for i in range(len(USERS))), strict=True))
    ledger, level_of_user = ledger_for(paper, reqs)
    keys = {f"{w}:{E!r}": level for (w, E), level in
            zip(zip(reqs.w.tolist(), reqs.E.tolist(), strict=True), level_of_user.tolist(),
                strict=True)}
    charged = []
    for doc in docs:
        charge = ledger.commit(doc["published"])
        assert charge.published == doc["published"] and charge.nullified == doc["nullified"]
        for key, level in keys.items():
            assert doc["eps1"][key] == pytest.approx(charge.eps1[level], rel=1e-12)
            assert doc["eps2"][key] == pytest.approx(charge.eps2[level], rel=1e-12)
        charged.append((charge.eps1 + charge.eps2)[level_of_user])
    assert (window_sums(np.array(charged), reqs.w) <= reqs.E * (1 + 1e-9)).all()
    # each publication states the noise it added, from its public budgets, users and threshold
    published = 0
    for raw, doc in zip(job.releases, docs, strict=True):
        rel = orjson.loads(raw)
        if not rel["published"]:
            assert rel["noise"] is None
            continue
        published += 1
        budgets = np.array(list(doc["eps2"].values()))
        sizes = np.array([doc["users"][k] for k in doc["eps2"]])
        p = inclusion_probabilities(budgets, rel["threshold"])
        partial = p[(sizes > 0) & (p > 0) & (p < 1)]
        s = noise_std(rel["threshold"], noise)
        assert rel["noise"]["scale"] == pytest.approx([s * np.sqrt(1 + (1 / partial**2).sum())]
                                                      * 3, rel=1e-12)
        assert rel["noise"].get("thinned") is (True if partial.size else None)
    assert published
