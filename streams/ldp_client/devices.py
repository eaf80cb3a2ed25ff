"""Many devices at once, for replays: one :class:`~streams.ldp_client.client.LdpClient` per
user, each randomising its own reports as an app's client would (``pwevent replay --mechanism
lbu|lsp|lpu|plbu|lbd|lba|lpd|lpa|mtsp``).

    devices = Devices("lbu", d=8, start=0, requirement=lambda user: (10, 1.0))
    records = devices.reports(slot, [(user, cell), ...])  # [(key, value)] to ldp-reports

A device is enrolled at its user's first value; from then on it reports at every slot its
protocol has it report, with its value or without one (the oracle's "no value" cell), as an app's
client does. A two-round stream's devices take the decisions: ``reports(slot, values, decision)``
with the previous slot's, ``answers(decision, values)`` with the slot's own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable

import numpy as np

from mechanisms.local import CounterWords, LedgerRefusal, ReportConfig
from mechanisms.local.rounds import Decision
from streams.ldp_client.client import LdpClient, SystemWords


class Devices:
    """The clients of a stream's users, enrolled when a user first has a value: ``requirement``
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
        #: (a record without a user or with a value outside the cells: its device, if
        #: enrolled, reports no value), ``refused`` (the client's ledger refused)
        self.counts: Counter[str] = Counter()
        #: per slot, the true cells of the users who reported there, "no value" last (for
        #: scoring a replay)
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
                decision: Decision | None = None, *, absent: bool = True
                ) -> list[tuple[bytes, bytes]]:
        """Each enrolled user's report at ``slot`` of its value (a cell index; the users
        ``values`` leaves out report no value), as (key, value) records of
        ``<prefix>.ldp-reports``, in enrolment order; users without a report there are counted
        in :attr:`counts`. A two-round stream's dissimilarity round answers ``decision``, the
        previous slot's. ``absent=False`` leaves out the users ``values`` does not name (a
        recorded file's further batch of a slot already sent)."""
        held = self._enrol(values)
        out = []
        truth = self.truth.setdefault(slot, np.zeros(self.d + 1, dtype=np.int64))
        for user in self.clients if absent else held:
            client = self.clients[user]
            if not client.due(slot):
                self.counts["not_due"] += 1
                continue
            value = held.get(user)
            data = self._counted(client, lambda c, v=value: c.report(slot, v, decision))
            if data is not None:
                out.append((user.encode("utf-8"), data))
                truth[self.d if value is None else value] += 1
        return out

    def _enrol(self, values: Iterable[tuple[str, object]]) -> dict[str, int]:
        """Each user's value (the last given) among ``values``, its device enrolled; values
        outside the cells are counted as ``no_value`` and left out."""
        held: dict[str, int] = {}
        for user, value in values:
            self._client(user)
            if type(value) is not int or not 0 <= value < self.d:
                self.counts["no_value"] += 1
                held.pop(user, None)
            else:
                held[user] = value
        return held

    def answers(self, decision: Decision, values: Iterable[tuple[str, object]]
                ) -> list[tuple[bytes, bytes]]:
        """A two-round stream's publication reports: each enrolled user's answer to
        ``decision`` with its value at the decision's slot, the values :meth:`reports` had
        there (:meth:`reports`' records and counts)."""
        held = {user: value for user, value in values
                if type(value) is int and 0 <= value < self.d}
        out = []
        for user, client in self.clients.items():
            value = held.get(user)
            data = self._counted(client, lambda c, v=value: c.answer(decision, v))
            if data is not None:
                out.append((user.encode("utf-8"), data))
        return out

    def _counted(self, client: LdpClient, make: Callable[[LdpClient], bytes | None]
                 ) -> bytes | None:
        """The report ``make`` has ``client`` write, counted in :attr:`counts`; None when
        there is none, or when the client's ledger refuses it (``refused``)."""
        try:
            data = make(client)
        except LedgerRefusal:
            self.counts["refused"] += 1
            return None
        if data is not None:
            self.counts["reports"] += 1
        return data
