"""Privacy decision 4 for the fixed mechanisms, on random requirements and schedules."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms import FIXED_MECHANISMS, FixedRequirements, ledger_for

from support import window_sums


@st.composite
def cases(draw):
    n = draw(st.integers(1, 12))
    w = draw(st.lists(st.integers(1, 200), min_size=n, max_size=n))
    E = draw(st.lists(st.floats(0.001, 5.0), min_size=n, max_size=n))
    T = draw(st.integers(1, 400))
    bits = draw(st.lists(st.booleans(), min_size=T, max_size=T))
    name = draw(st.sampled_from(FIXED_MECHANISMS))
    return name, FixedRequirements.from_arrays([f"u{i}" for i in range(n)], w, E), bits


@settings(max_examples=150, deadline=None)
@given(cases())
def test_every_window_within_budget(case):
    name, reqs, bits = case
    ledger, level_of_user = ledger_for(name, reqs)
    eps1, eps2 = [], []
    for want in bits:
        plan = ledger.plan()
        charge = ledger.commit(want)
        assert (charge.eps1 >= 0).all() and (charge.eps2 >= 0).all()
        if not charge.published:
            assert (charge.eps2 == 0).all()
        if charge.nullified:
            assert not charge.published
        if plan.adaptive and not want:
            assert not charge.published
        eps1.append(charge.eps1[level_of_user])
        eps2.append(charge.eps2[level_of_user])
    total = np.array(eps1) + np.array(eps2)
    assert (window_sums(total, reqs.w) <= reqs.E + 1e-9).all()
