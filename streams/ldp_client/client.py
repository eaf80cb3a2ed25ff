"""One user's client on the device: the protocol's reports, randomised with the operating
system's CSPRNG, and a ledger the app keeps between runs (:meth:`LdpClient.state`)."""

from __future__ import annotations

import os

import numpy as np

from mechanisms.local import LedgerRefusal, ReportConfig, Reporter, WordSource
from mechanisms.local.rounds import Decision
from streams.job.slot_clock import SlotClock

#: The library's name and version, written into every report.
CLIENT_NAME = "pwevent-ldp-python/0.3.0"
#: The topic the reports go to, under the stream's topic prefix.
TOPIC = "ldp-reports"


def topic_name(prefix: str) -> str:
    """The reports' topic of a stream whose topics are named ``<prefix>.<topic>``."""
    return f"{prefix}.{TOPIC}"


def slot_of(time_ms: int, origin_ms: int, slot_ms: int) -> int:
    """The job's slot holding ``time_ms`` (:meth:`streams.job.slot_clock.SlotClock.slot_of`)."""
    return int(SlotClock(int(slot_ms), int(origin_ms)).slot_of(int(time_ms)))


class SystemWords:
    """Uniform 32-bit words from ``os.urandom``, read 4 KiB at a time."""

    def __init__(self, chunk: int = 1024) -> None:
        """A source reading ``chunk`` words per call to the operating system."""
        self.chunk = int(chunk)
        self.buffer = np.zeros(0, dtype=np.uint32)

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` words."""
        if self.buffer.size < n:
            fresh = np.frombuffer(os.urandom(4 * max(n, self.chunk)), dtype=np.uint32)
            self.buffer = np.concatenate([self.buffer, fresh])
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out


class LdpClient:
    """One user's client: ``report(slot, value)`` gives the report's bytes or None, and raises
    :class:`~mechanisms.local.LedgerRefusal` rather than spend over the user's budget."""

    def __init__(self, config: ReportConfig, *, state: dict | None = None,
                 words: WordSource | None = None, client: str = CLIENT_NAME) -> None:
        """A client for ``config``, its ledger loaded from ``state`` (what :meth:`state` gave
        earlier) if given; ``words`` replaces the CSPRNG in tests only."""
        self.config = config
        self.reporter = Reporter(config, words if words is not None else SystemWords(), client)
        if state is not None:
            self.load_state(state)

    def due(self, slot: int) -> bool:
        """Whether the user reports at ``slot`` (with a value there or without)."""
        return self.reporter.due(slot)

    def report(self, slot: int, value: int | None,
               decision: Decision | None = None) -> bytes | None:
        """The randomised report of cell ``value`` (None: no value, reported as such) at
        ``slot``, or None (not due); LedgerRefusal when the budget does not allow it, or the
        slot is not after the last.
        For lbd/lba this is the dissimilarity round, asked by ``decision``, the previous slot's
        (none needed at the stream's first slot; without it, no report)."""
        return self.reporter.report(slot, value, decision)

    def answer(self, decision: Decision, value: int | None) -> bytes | None:
        """lbd/lba: the publication report of ``value`` at the budget ``decision`` names for
        its slot (None: no value, reported as such), or None (none named); LedgerRefusal as
        :meth:`report`."""
        return self.reporter.answer(decision, value)

    def state(self) -> dict:
        """The ledger as JSON-ready data, for the app to keep between runs."""
        c = self.config
        return {"protocol": c.protocol, "user": c.user, "w": c.w, "E": c.E,
                "spends": self.reporter.ledger.dump()}

    def load_state(self, state: dict) -> None:
        """Load a ledger :meth:`state` gave; LedgerRefusal (``bad_state``) if it is not one, or
        belongs to another user."""
        if not isinstance(state, dict) or state.get("user") != self.config.user:
            raise LedgerRefusal("bad_state", "the state is not this user's ledger")
        self.reporter.ledger.load(state.get("spends"))
