"""The paper's worked examples as recomputed in docs/design.md, driven through ledgers."""

import numpy as np
import pytest

from mechanisms import FixedRequirements, ledger_for
from mechanisms.run.planning import plan_fixed

E = np.array([1.2, 0.9, 1.5])
REQS = FixedRequirements.from_arrays(["u1", "u2", "u3"], [4, 2, 3], E)


def run(name: str, schedule: str) -> list[dict]:
    return list(plan_fixed(name, REQS, schedule))


def eps2(rec: dict) -> list[float]:
    return [rec["eps2"][u] for u in ("u1", "u2", "u3")]


def test_example_4_pba():
    recs = run("pba", "10111")
    assert [r["published"] for r in recs] == [True, False, True, False, True]
    assert [r["nullified"] for r in recs] == [False, False, False, True, False]
    share = E / (2 * np.array([4, 2, 3]))
    assert eps2(recs[0]) == pytest.approx(share)
    assert eps2(recs[1]) == [0, 0, 0]
    assert eps2(recs[2]) == pytest.approx([E[0] / 4, E[1] / 2, E[2] / 3])
    assert eps2(recs[3]) == [0, 0, 0]
    assert eps2(recs[4]) == pytest.approx([E[0] / 8, E[1] / 4, E[2] / 6])
    for r in recs:
        assert [r["eps1"][u] for u in ("u1", "u2", "u3")] == pytest.approx(share)


def test_example_3_pbd():
    recs = run("pbd", "101")
    # u1: eps1 = E1/8; t=1 eps2 = (E1/2)/2; t=2 skipped; t=3 eps2 = (E1/2 - E1/4)/2
    assert recs[0]["eps1"]["u1"] == pytest.approx(E[0] / 8)
    assert recs[0]["eps2"]["u1"] == pytest.approx(E[0] / 4)
    assert recs[1]["eps2"]["u1"] == 0
    assert recs[2]["eps2"]["u1"] == pytest.approx(E[0] / 8)
    # u2 (w=2): at t=3 the publication at t=1 has left its window
    assert recs[2]["eps2"]["u2"] == pytest.approx(E[1] / 4)


def test_nullified_slot_ignores_its_bit():
    a = run("pba", "10111")
    b = run("pba", "10101")
    assert a[3]["nullified"] and b[3]["nullified"]
    assert a == b


def test_baselines_use_the_strictest_requirement():
    for name in ("bd", "ba", "uniform", "sample"):
        ledger, levels = ledger_for(name, REQS)
        assert ledger.levels == 1
        assert int(ledger.w[0]) == 4 and float(ledger.E[0]) == 0.9
        assert (levels == 0).all()


def test_uniform_and_sample():
    uni = run("uniform", "000")
    assert all(r["published"] for r in uni)
    assert uni[0]["eps2"]["u3"] == pytest.approx(0.9 / 4)
    smp = run("sample", "11111")
    assert [r["published"] for r in smp] == [True, False, False, False, True]
    assert [r["nullified"] for r in smp] == [False, True, True, True, False]
    assert smp[0]["eps2"]["u1"] == pytest.approx(0.9)
