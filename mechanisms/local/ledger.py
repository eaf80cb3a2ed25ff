"""One user's per-window budget ledger, kept on the device.

The ledger holds the budget each report spent at the user's last reports within w slots (a
report always lies there) and refuses a report that would make any w consecutive slots spend
more than E. Reports go forward in slots, one per slot at most, so the windows a new report at
slot s enters all end at or after s, and the one ending at s holds the most: the check is
``spent over (s - w, s] + eps <= E``. Sums run oldest first, the new report last, and E is
allowed a rounding slack of 1e-9 E (E/w added w times may exceed E in its last bit): every
language computes the same sums and so refuses alike.
"""

from __future__ import annotations

import math
from typing import Final

#: The relative slack on E that a window's sum may use, for rounding.
SLACK: Final = 1.000000001
#: The largest budget one report may spend (:data:`mechanisms.local.oracles.MAX_EPS`).
MAX_SPEND: Final = 500.0


class LedgerRefusal(ValueError):
    """A report or a state the ledger refuses; ``code`` says why (``not_after_last``,
    ``over_budget``, ``bad_state``)."""

    def __init__(self, code: str, message: str) -> None:
        """A refusal with its ``code`` and a message for people."""
        super().__init__(message)
        self.code = code


class ClientLedger:
    """The spends of one user's reports within its last ``w`` slots, against budget ``E``."""

    def __init__(self, w: int, E: float) -> None:  # noqa: N803 - the papers' name
        if type(w) is not int or w < 1:
            raise ValueError(f"w must be an integer >= 1, got {w!r}")
        if not (isinstance(E, int | float) and math.isfinite(E) and E > 0):
            raise ValueError(f"E must be a finite number > 0, got {E!r}")
        self.w, self.E = w, float(E)
        self.spends: list[tuple[int, float]] = []

    @property
    def last(self) -> int | None:
        """The slot of the last report (None before the first)."""
        return self.spends[-1][0] if self.spends else None

    def spent(self, slot: int) -> float:
        """What the reports in (slot - w, slot] spent, oldest first."""
        total = 0.0
        for s, eps in self.spends:
            if slot - self.w < s <= slot:
                total += eps
        return total

    def check(self, slot: int, eps: float) -> None:
        """Raise :class:`LedgerRefusal` unless a report at ``slot`` spending ``eps`` keeps every
        window within E."""
        last = self.last
        if last is not None and slot <= last:
            raise LedgerRefusal("not_after_last", f"slot {slot} is not after the last report's "
                                f"slot {last}: one report per slot, in slot order")
        total = self.spent(slot) + eps
        if not total <= self.E * SLACK:
            raise LedgerRefusal(
                "over_budget", f"a report at slot {slot} spending {eps!r} would make the window "
                f"of {self.w} slots ending there spend {total!r}, over E = {self.E!r}")

    def commit(self, slot: int, eps: float) -> None:
        """Record a report that :meth:`check` allowed; forget the spends no window reaches."""
        self.check(slot, eps)
        self.spends = [(s, e) for s, e in self.spends if s > slot - self.w]
        self.spends.append((slot, float(eps)))

    def load(self, spends: object) -> None:
        """Replace the spends with ``spends`` (a list of [slot, eps] pairs, as :meth:`dump` gave
        them, kept by the app between runs). What was spent was spent: a history over E (E
        lowered since) is kept and makes reports wait until it leaves the window. Raise
        :class:`LedgerRefusal` (``bad_state``) for anything but slots >= 0 in increasing order
        and budgets in (0, 500]; spends no window reaches any more are dropped."""
        if not isinstance(spends, list):
            raise LedgerRefusal("bad_state", "spends must be a list of [slot, eps] pairs")
        loaded: list[tuple[int, float]] = []
        for pair in spends:
            ok = (isinstance(pair, list | tuple) and len(pair) == 2 and type(pair[0]) is int
                  and pair[0] >= 0 and type(pair[1]) in (int, float)
                  and math.isfinite(pair[1]) and 0 < pair[1] <= MAX_SPEND)
            if not ok:
                raise LedgerRefusal("bad_state", f"a spend must be [slot >= 0, 0 < eps <= "
                                    f"{MAX_SPEND}], got {pair!r}"[:200])
            if loaded and pair[0] <= loaded[-1][0]:
                raise LedgerRefusal("bad_state", f"spends must be in increasing slot order, got "
                                    f"{pair[0]} after {loaded[-1][0]}")
            loaded.append((pair[0], float(pair[1])))
        if loaded:
            last = loaded[-1][0]
            loaded = [(s, e) for s, e in loaded if s > last - self.w]
        self.spends = loaded

    def dump(self) -> list[list[int | float]]:
        """The spends as [slot, eps] pairs, oldest first."""
        return [[s, e] for s, e in self.spends]
