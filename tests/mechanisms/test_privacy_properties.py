"""Privacy decision 4 for the fixed mechanisms, on random requirements and schedules."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms import FIXED_MECHANISMS, ledger_for

from support import fixed_schedules, window_sums


@st.composite
def cases(draw):
    reqs, bits = draw(fixed_schedules(12, 200, 400))
    return draw(st.sampled_from(FIXED_MECHANISMS)), reqs, bits


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
