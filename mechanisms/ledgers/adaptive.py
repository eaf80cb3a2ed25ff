"""The adaptive ledger: at every slot, the larger of budget distribution's and budget
absorption's publication budget, within what the level's window has left (docs/design.md,
"The adaptive ledger").

Both of the paper's ledgers give each slot eps1 = E/(2w) for the dissimilarity test and differ
in the publication budget eps2. For a level (w, E) let R_t = max(E/2 - S_t, 0), where S_t is
what the level's publications charged over the previous w - 1 slots. Distribution plans R_t / 2;
absorption plans k E/(2w), k the slots since the run's last publication (at most w). This ledger
plans

    eps2_t = min(max(R_t / 2, k E/(2w)), R_t)

so a level follows distribution in a burst of publications (k small) and absorption after a
quiet spell (k large), with no nullified slot. It is private whatever rule set each slot's
budget, because every plan is at most R_t:

*every window of w slots sums eps2 to at most E/2.* Take the window ending at slot t. If t
published, its sum is eps2_t + S_t <= R_t + S_t = E/2 (or S_t alone when R_t = 0 spent nothing
at t, and S_t is then a part of an earlier window's sum). If t did not publish, the window's sum
is that of its slots up to its last publication t' (or 0), which lie inside the window ending at
t', bounded the same way. With w slots of eps1 = E/(2w), every window charges at most E.

The choice reads only the level's requirement and the run's past publish decisions, which are
released (docs/design.md, decision 2), so it is a function of public data like every ledger
here. Slots are numbered from 1; before its first publication a run's k is the slot number, as
in absorption (Algorithm 5), so the first slot gets distribution's E/4.

>>> ledger = AdaptiveLedger(np.array([4]), np.array([1.0]))  # E/(2w) = 0.125
>>> ledger.commit(True).eps2.tolist()  # slot 1: distribution's E/4
[0.25]
>>> ledger.plan().eps2.tolist()  # slot 2: half of what the window has left
[0.125]
>>> [ledger.commit(False).published for _ in range(2)]
[False, False]
>>> ledger.plan().eps2.tolist(), ledger.rules()  # slot 4: 3 shares, capped by the window
([0.25], ['absorption'])
>>> ledger.commit(False).published
False
>>> ledger.plan().eps2.tolist()  # slot 5: the window is empty, 4 shares: all of E/2
[0.5]
"""

from __future__ import annotations

import numpy as np

from mechanisms.ledgers.fixed import WindowHistoryLedger
from mechanisms.ledgers.plan import RunsPlan

#: which rule set a level's budget (:meth:`AdaptiveLedger.rules`)
RULES = ("distribution", "absorption")


class AdaptiveLedger(WindowHistoryLedger):
    """The larger of distribution's and absorption's plan, capped by the window (module doc)."""

    name = "adaptive"
    published_runs = np.zeros(0, dtype=np.int64)

    def _grow(self) -> None:
        super()._grow()
        if self.published_runs.shape[0] != self.runs:
            self.published_runs = np.zeros(self.runs, dtype=np.int64)

    @property
    def last_published(self) -> int:
        """The one run's last publishing slot (0: never)."""
        return int(self._one(self.published_runs[:, None])[0])

    def _budgets(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per (run, level): what the window has left, distribution's and absorption's plan."""
        remaining = np.maximum(self.half - self._spent_before(), 0.0)
        since = np.where(self.published_runs > 0, self.slot - self.published_runs, self.slot)
        absorbed = self.eps1 * np.minimum(since[:, None], self.windows)
        return remaining, remaining / 2.0, absorbed

    def _plan(self) -> tuple[np.ndarray, np.ndarray]:
        remaining, distributed, absorbed = self._budgets()
        return np.minimum(np.maximum(distributed, absorbed), remaining), self.never

    def rules(self) -> list[str]:
        """For the one run's next slot, which rule sets each level's budget: ``absorption``
        where absorbing gives more than distribution, ``distribution`` otherwise."""
        _, distributed, absorbed = self._budgets()
        return [RULES[int(a)] for a in self._one(absorbed > distributed)]

    def _commit(self, plan: RunsPlan, published: np.ndarray) -> None:
        self._push(np.where(published[:, None], plan.eps2, 0.0))
        self.published_runs = np.where(published, self.slot, self.published_runs)

    def state(self) -> dict:
        return super().state() | {"last_published": self.last_published}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.published_runs = np.array([int(state["last_published"])], dtype=np.int64)
