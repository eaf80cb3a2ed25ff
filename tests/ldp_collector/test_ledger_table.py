"""The collector's columnar ledgers (streams/ldp_collector/ledgers.py) hold what each user's
ClientLedger would, committed one by one: the same spends after any batches, trims of the log
and users taken apart."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms.local import ClientLedger
from streams.ldp_collector.ledgers import APART, LedgerTable

USERS = ["a", "b", "c", "d"]
#: a batch: per report, (user, slot step after the user's last, eps); or ("apart", user)
REPORT = st.tuples(st.integers(0, 3), st.integers(1, 4), st.sampled_from([0.25, 0.5, 1.0]))
STEP = st.one_of(st.lists(REPORT, min_size=1, max_size=12),
                 st.tuples(st.just("apart"), st.integers(0, 3)))


@settings(max_examples=200, deadline=None)
@given(st.lists(STEP, min_size=1, max_size=25), st.integers(1, 6), st.integers(1, 8))
def test_the_columns_hold_what_each_ledger_would(steps: list, w: int, trim: int) -> None:
    table = LedgerTable()
    table.trim_after = trim  # trims the log often
    reference: dict[str, ClientLedger] = {}
    last = {u: -1 for u in USERS}
    for step in steps:
        if isinstance(step, tuple):  # a user read one by one from now on
            user = USERS[step[1]]
            taken = table.take(user)
            assert (taken is None) == (user not in reference)
            if taken is not None:
                assert taken.dump() == reference[user].dump()
            continue
        batch = sorted(step, key=lambda r: r[0])  # each user's reports together, in order
        users = sorted({USERS[k] for k, _, _ in batch})
        rows = table.lookup(users)
        owner, slots, spent = [], [], []
        for k, gap, eps in batch:
            user = USERS[k]
            last[user] += gap
            ledger = reference.setdefault(user, ClientLedger(w, 1e9))
            ledger.commit(last[user], eps)
            if rows[users.index(user)] == APART:
                apart = table.apart[user]
                apart.commit(last[user], eps)
                continue
            owner.append(users.index(user))
            slots.append(last[user])
            spent.append(eps)
        if owner:
            table.commit(users, rows, np.full(len(users), w), np.full(len(users), 1e9),
                         np.array(owner), np.array(slots), np.array(spent))
        assert table.dump() == {u: x.dump() for u, x in reference.items()}
        assert len(table) == len(reference)
