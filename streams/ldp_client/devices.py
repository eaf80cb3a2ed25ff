"""Many devices at once, for replays: one :class:`~streams.ldp_client.client.LdpClient` per
user, each randomising its own reports as an app's client would (``pwevent replay --mechanism
lbu|lsp|lpu|plbu|lbd|lba``).

    devices = Devices("lbu", d=8, start=0, requirement=lambda user: (10, 1.0))
    records = devices.reports(slot, [(user, cell), ...])  # [(key, value)] to ldp-reports

A two-round stream's devices take the decisions: ``reports(slot, values, decision)`` with the
previous slot's, ``answers(decision, values)`` with the slot's own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import numpy as np

from mechanisms.local import CounterWords, LedgerRefusal, ReportConfig
from mechanisms.local.rounds import Decision
from streams.ldp_client.client import LdpClient, SystemWords


class Devices:
    """The clients of a stream's users, made when a user first has a value: ``requirement``
    gives a user's (w, E) (the stream's for lbu/lsp/lpu, the user's own for plbu). Without
    ``nonce`` each client draws from the operating system's CSPRNG, as on a device; with it,
    from words seeded by (nonce, user), so that a replay can be repeated bit for bit."""

    def __init__(self, protocol: str, d: int, start: int,
                 requirement: Callable[[str], tuple[int, float]], *, nonce: str | None = None,
                 lpu_key: str = "", lpu_rotate: int = 0) -> None:
        """Devices of one stream; ValueError for a wrong parameter (at the first report)."""
        self.protocol, self.d, self.start = protocol, d, start
        self.requirement, self.nonce = requirement, nonce
        self.lpu_key, self.lpu_rotate = lpu_key, lpu_rotate
        self.clients: dict[str, LdpClient] = {}
        #: ``reports``, ``not_due`` (the protocol has the user not report there), ``no_value``
        #: (a value outside the cells), ``refused`` (the client's ledger refused)
        self.counts: Counter[str] = Counter()
        #: per slot, the true cells of the users who reported there (for scoring a replay)
        self.truth: dict[int, np.ndarray] = {}

    def _client(self, user: str) -> LdpClient:
        client = self.clients.get(user)
        if client is None:
            w, E = self.requirement(user)  # noqa: N806 - the papers' name
            config = ReportConfig(self.protocol, user, d=self.d, w=int(w), E=float(E),
                                  start=self.start, lpu_key=self.lpu_key, rotate=self.lpu_rotate)
            words = CounterWords(f"{self.nonce}/{user}") if self.nonce is not None \
                else SystemWords()
            client = self.clients[user] = LdpClient(config, words=words)
        return client

    def reports(self, slot: int, values: Iterable[tuple[str, object]],
                decision: Decision | None = None) -> list[tuple[bytes, bytes]]:
        """Each user's report at ``slot`` of its value (a cell index), as (key, value) records
        of ``<prefix>.ldp-reports``; users without a report there are counted in
        :attr:`counts`. A two-round stream's dissimilarity round answers ``decision``, the
        previous slot's."""
        out = []
        for user, value in values:
            if type(value) is not int or not 0 <= value < self.d:
                self.counts["no_value"] += 1
                continue
            if not self._client(user).due(slot):
                self.counts["not_due"] += 1
                continue
            data = self._counted(user, lambda c, v=value: c.report(slot, v, decision))
            if data is not None:
                out.append((user.encode("utf-8"), data))
                self.truth.setdefault(slot, np.zeros(self.d, dtype=np.int64))[value] += 1
        return out

    def answers(self, decision: Decision, values: Iterable[tuple[str, object]]
                ) -> list[tuple[bytes, bytes]]:
        """A two-round stream's publication reports: each user's answer to ``decision`` with
        its value at the decision's slot (:meth:`reports`' records and counts)."""
        out = []
        for user, value in values:
            if type(value) is not int or not 0 <= value < self.d:
                continue  # counted by reports at the slot
            data = self._counted(user, lambda c, v=value: c.answer(decision, v))
            if data is not None:
                out.append((user.encode("utf-8"), data))
        return out

    def _counted(self, user: str, make: Callable[[LdpClient], bytes | None]) -> bytes | None:
        """The report ``make`` has ``user``'s client write, counted in :attr:`counts`; None
        when there is none, or when the client's ledger refuses it (``refused``)."""
        try:
            data = make(self._client(user))
        except LedgerRefusal:
            self.counts["refused"] += 1
            return None
        if data is not None:
            self.counts["reports"] += 1
        return data
