"""Shared pieces of the collector's tests: seeded streams of reports made by the Python client
with deterministic words, and a stand-in generator that replays given draws."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mechanisms.local import CounterWords, parse_report
from streams.ldp_client import LdpClient, ReportConfig

ORIGIN_MS = 1_700_000_000_000
SLOT_MS = 60_000
LPU_KEY = "public-lpu-key"


@dataclass(frozen=True)
class Sent:
    """One report a client made: its user, slot, true cell and record."""

    user: str
    slot: int
    cell: int
    key: bytes
    value: bytes
    timestamp_ms: int

    @property
    def record(self) -> tuple[bytes, bytes, int]:
        """(key, value, timestamp) as the collector takes it."""
        return self.key, self.value, self.timestamp_ms


def client_reports(protocol: str, cells: np.ndarray, *, d: int, start: int,
                   requirements: Sequence[tuple[int, float]], seed: str = "collector",
                   ) -> list[Sent]:
    """The reports of users ``u0``, ``u1``, ... holding ``cells[u, t]`` (-1: no value) at slot
    ``start + t``, each user's client with requirement ``requirements[u]`` = (w, E) and words
    from CounterWords(seed/user); slot by slot, users in order."""
    users = [f"u{i}" for i in range(cells.shape[0])]
    clients = [LdpClient(ReportConfig(protocol, user, d=d, w=w, E=E, start=start,
                                      lpu_key=LPU_KEY), words=CounterWords(f"{seed}/{user}"))
               for user, (w, E) in zip(users, requirements, strict=True)]
    sent = []
    for t in range(cells.shape[1]):
        slot = start + t
        for user, client, cell in zip(users, clients, cells[:, t].tolist(), strict=True):
            value = client.report(slot, None if cell < 0 else cell)
            if value is not None:
                sent.append(Sent(user, slot, cell, user.encode(), value,
                                 ORIGIN_MS + slot * SLOT_MS + 1000))
    return sent


def oue_split(sent: Sequence[Sent], d: int) -> tuple[np.ndarray, np.ndarray]:
    """The 1-bits of OUE reports per cell, split as the evaluation draws them: those of the
    users holding the cell, and those of the others."""
    bits = np.array([parse_report(s.value).bits for s in sent], dtype=bool).reshape(-1, d)
    own = np.arange(d)[None, :] == np.array([s.cell for s in sent])[:, None]
    return (bits & own).sum(axis=0), (bits & ~own).sum(axis=0)


def grr_split(sent: Sequence[Sent], d: int) -> tuple[np.ndarray, np.ndarray]:
    """GRR reports as the evaluation draws them: per true cell j, the reports kept, and those
    moved to cell (j + k) mod d, k = 1 .. d - 1 (a (d, d - 1) array)."""
    kept = np.zeros(d, dtype=np.int64)
    moved = np.zeros((d, max(d - 1, 1)), dtype=np.int64)
    for s in sent:
        offset = (parse_report(s.value).cell - s.cell) % d
        if offset == 0:
            kept[s.cell] += 1
        else:
            moved[s.cell, offset - 1] += 1
    return kept, moved


class Replay:
    """Stands in for a numpy Generator: ``binomial`` returns the given draws in order, after
    checking the probability asked for and that no draw exceeds its trials."""

    def __init__(self, draws: list[tuple[float, np.ndarray]]) -> None:
        """Draws as (probability expected, outcome) pairs."""
        self.draws = list(draws)

    def binomial(self, n: np.ndarray, p: float) -> np.ndarray:
        """The next prepared outcome."""
        expected, out = self.draws.pop(0)
        assert p == expected
        assert np.all(out <= np.asarray(n)) and np.all(out >= 0)
        return out
