"""Every user's ledger of one collector, as columns (docs/ldp-reports.md, "What it keeps").

The collector keeps, per user, what its client's ledger holds
(:class:`mechanisms.local.ClientLedger`): the requirement (w, E) and the spends of its kept
reports within w slots of the last. Users whose reports are decided in batches
(:mod:`.keeping`) live in columns: a row per user with its requirement and last slot, and one
log of every spend, (row, slot, eps), appended a batch at a time and trimmed to the windows now
and then, so a batch's work is array work whatever the number of users. A user whose report
must be read one by one is taken *apart*: its spends become a
:class:`~mechanisms.local.ClientLedger`, which it keeps from then on.
"""

from __future__ import annotations

import numpy as np

from mechanisms.local import ClientLedger

#: The log is trimmed when it has grown by this many spends and doubled since the last trim.
TRIM_AFTER = 1 << 16


#: :meth:`LedgerTable.lookup`'s row of a user without a ledger, and of a user taken apart.
NEW, APART = -1, -2


class LedgerTable:
    """The users' ledgers: rows of the columns, or :attr:`apart`."""

    def __init__(self) -> None:
        """No user yet."""
        #: user -> its row in the columns, or APART
        self.rows: dict[str, int] = {}
        self.w = np.zeros(0, dtype=np.int64)
        self.E = np.zeros(0, dtype=np.float64)  # noqa: N815 - the papers' name
        self.last = np.zeros(0, dtype=np.int64)
        self.used = 0
        self.log_row = np.zeros(0, dtype=np.int64)
        self.log_slot = np.zeros(0, dtype=np.int64)
        self.log_eps = np.zeros(0, dtype=np.float64)
        self.logged = 0
        self._trimmed = 0
        #: the log's growth that makes it trimmed (:data:`TRIM_AFTER`)
        self.trim_after = TRIM_AFTER
        #: the users taken apart, with their ledgers
        self.apart: dict[str, ClientLedger] = {}

    def __len__(self) -> int:
        """The users with a ledger."""
        return len(self.rows)

    def lookup(self, users: list[str]) -> np.ndarray:
        """Each user's row: >= 0 in the columns, NEW without a ledger, APART taken apart."""
        get = self.rows.get
        return np.array([get(u, NEW) for u in users], dtype=np.int64)

    def take(self, user: str) -> ClientLedger | None:
        """``user``'s ledger as a :class:`ClientLedger`, taken apart from the columns if it
        was there (None: no ledger yet); store it back with :meth:`keep`."""
        row = self.rows.get(user, NEW)
        if row == APART:
            return self.apart[user]
        if row == NEW:
            return None
        w, last = int(self.w[row]), int(self.last[row])
        mine = np.flatnonzero(self.log_row[: self.logged] == row)
        slots, spent = self.log_slot[mine], self.log_eps[mine]
        inside = slots > last - w
        ledger = ClientLedger(w, float(self.E[row]))
        ledger.spends = list(zip(slots[inside].tolist(), spent[inside].tolist(), strict=True))
        self.log_row[mine] = -1
        self.keep(user, ledger)
        return ledger

    def dump(self) -> dict[str, list[list[int | float]]]:
        """Every user's spends as its :meth:`ClientLedger.dump` gives them (those within w
        slots of its last), by user."""
        n = self.logged
        row = self.log_row[:n]
        live = row >= 0
        safe = np.where(live, row, 0)
        keep = np.flatnonzero(live & (self.log_slot[:n] > self.last[safe] - self.w[safe]))
        keep = keep[np.argsort(row[keep], kind="stable")]
        found = row[keep].tolist()
        slots, spent = self.log_slot[keep].tolist(), self.log_eps[keep].tolist()
        by_row: dict[int, list[list[int | float]]] = {}
        for r, s, e in zip(found, slots, spent, strict=True):
            by_row.setdefault(r, []).append([s, e])
        return {user: (self.apart[user].dump() if r == APART else by_row[r])
                for user, r in self.rows.items()}

    def keep(self, user: str, ledger: ClientLedger) -> None:
        """Store ``user``'s ledger apart (after :meth:`take`, or a new one)."""
        self.rows[user] = APART
        self.apart[user] = ledger

    def commit(self, users: list[str], rows: np.ndarray, w: np.ndarray, E: np.ndarray,  # noqa: N803
               owner: np.ndarray, slots: np.ndarray, eps: np.ndarray) -> None:
        """Record reports of users in the columns, as their ledgers would commit them one by
        one: user ``users[k]`` has row ``rows[k]`` (NEW: a ledger of requirement ``w[k]``,
        ``E[k]`` is made), report i is user ``owner[i]``'s (nondecreasing, each user's in slot
        order, after its last) at ``slots[i]`` spending ``eps[i]``."""
        if not slots.size:
            return
        rows = rows.copy()
        new = np.flatnonzero(rows == NEW)
        if new.size:
            rows[new] = self._add([users[k] for k in new.tolist()], w[new], E[new])
        report_rows = rows[owner]
        ends = np.flatnonzero(np.r_[owner[1:] != owner[:-1], True])
        self.last[report_rows[ends]] = slots[ends]
        self._log(report_rows, slots, eps)

    def _add(self, users: list[str], w: np.ndarray, E: np.ndarray) -> np.ndarray:  # noqa: N803
        """New rows for ``users``, with their requirements."""
        first, n = self.used, len(users)
        if first + n > self.w.size:
            size = max(2 * self.w.size, first + n, 1024)
            self.w = np.resize(self.w, size)
            self.E = np.resize(self.E, size)
            self.last = np.resize(self.last, size)
        rows = np.arange(first, first + n, dtype=np.int64)
        self.w[rows], self.E[rows], self.last[rows] = w, E, -1
        self.rows.update(zip(users, rows.tolist(), strict=True))
        self.used += n
        return rows

    def _log(self, rows: np.ndarray, slots: np.ndarray, eps: np.ndarray) -> None:
        """Append spends to the log, trimming it to the windows when it has grown enough."""
        n = rows.size
        if self.logged - self._trimmed >= max(self.trim_after, self._trimmed):
            self._trim()
        if self.logged + n > self.log_row.size:
            size = max(2 * self.log_row.size, self.logged + n, 4096)
            self.log_row = np.resize(self.log_row, size)
            self.log_slot = np.resize(self.log_slot, size)
            self.log_eps = np.resize(self.log_eps, size)
        at = slice(self.logged, self.logged + n)
        self.log_row[at], self.log_slot[at], self.log_eps[at] = rows, slots, eps
        self.logged += n

    def _trim(self) -> None:
        """Drop the spends no window reaches any more (and those of users taken apart)."""
        n = self.logged
        row = self.log_row[:n]
        live = row >= 0
        safe = np.where(live, row, 0)
        keep = live & (self.log_slot[:n] > self.last[safe] - self.w[safe])
        kept = int(keep.sum())
        for column in (self.log_row, self.log_slot, self.log_eps):
            column[:kept] = column[:n][keep]
        self.logged = self._trimmed = kept
