"""Shared pieces of the collector's tests: seeded streams of reports made by the Python client
with deterministic words, a stand-in generator that replays given draws, and a two-round stream's
topic as the live system writes it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mechanisms.local import CounterWords, parse_report
from mechanisms.local.rounds import Decision, parse_decision
from streams.job.partitions.key_hashing import key_partitions
from streams.job.partitions.watermarks import watermark_record
from streams.ldp_client import LdpClient, ReportConfig
from streams.ldp_collector import LdpCollector
from streams.ldp_collector.stream_time import PartitionedCollector

ORIGIN_MS = 1_700_000_000_000
SLOT_MS = 60_000
LPU_KEY = "public-lpu-key"


@dataclass(frozen=True)
class Sent:
    """One report a client made: its user, slot, true cell (the oracle's: d for no value) and
    record."""

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
    """The reports of users ``u0``, ``u1``, ... holding ``cells[u, t]`` (-1: no value, reported
    as cell d) at slot ``start + t``, each user's client with requirement ``requirements[u]`` =
    (w, E) and words from CounterWords(seed/user); slot by slot, users in order."""
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
                sent.append(Sent(user, slot, d if cell < 0 else cell, user.encode(), value,
                                 ORIGIN_MS + slot * SLOT_MS + 1000))
    return sent


def padded(cells: np.ndarray, d: int) -> np.ndarray:
    """The users' cells as their clients report them: -1 (no value) as cell d."""
    return np.where(cells < 0, d, cells)


def every_cell(release: dict, key: str = "counts") -> np.ndarray:
    """A release's counts (or ``"std"``) over every cell of the oracle, "no value" last."""
    last = release["no_value" if key == "counts" else "no_value_std"]
    return np.array([*release[key], last], dtype=np.float64)


def oue_split(sent: Sequence[Sent], d: int) -> tuple[np.ndarray, np.ndarray]:
    """The 1-bits of OUE reports per cell (``d``: the oracle's cells), split as the evaluation
    draws them: those of the users holding the cell, and those of the others."""
    bits = np.array([parse_report(s.value).bits for s in sent], dtype=bool).reshape(-1, d)
    own = np.arange(d)[None, :] == np.array([s.cell for s in sent])[:, None]
    return (bits & own).sum(axis=0), (bits & ~own).sum(axis=0)


def grr_split(sent: Sequence[Sent], d: int) -> tuple[np.ndarray, np.ndarray]:
    """GRR reports as the evaluation draws them (``d``: the oracle's cells): per true cell j, the
    reports kept, and those moved to cell (j + k) mod d, k = 1 .. d - 1 (a (d, d - 1) array)."""
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
    """Stands in for a numpy Generator: ``binomial`` and ``multivariate_hypergeometric`` return
    the given draws in order, after checking the probability or the sample size asked for and
    that no draw exceeds what it is drawn from."""

    def __init__(self, draws: list[tuple]) -> None:
        """Draws as (probability expected, outcome) pairs, or ("group", size expected, outcome)
        for a hypergeometric one."""
        self.draws = list(draws)

    def binomial(self, n: np.ndarray, p: float) -> np.ndarray:
        """The next prepared outcome."""
        expected, out = self.draws.pop(0)
        assert p == expected
        assert np.all(out <= np.asarray(n)) and np.all(out >= 0)
        return out

    def multivariate_hypergeometric(self, colors: np.ndarray, nsample: int) -> np.ndarray:
        """The next prepared group."""
        tag, size, out = self.draws.pop(0)
        assert tag == "group" and nsample == size == int(np.sum(out))
        assert np.all(out <= np.asarray(colors)) and np.all(out >= 0)
        return out


#: The first slot of the two-round streams of the tests.
ROUNDS_START = 3


def drifting_cells(users: int, slots: int, d: int, seed: int) -> np.ndarray:
    """Cells whose distribution jumps twice (so the test publishes), a tenth missing (-1)."""
    rng = np.random.default_rng(seed)
    cells = np.empty((users, slots), dtype=np.int64)
    for t in range(slots):
        peak = (t // max(slots // 3, 1)) % d
        weights = np.full(d, 1.0)
        weights[peak] = 4.0 * d
        cells[:, t] = rng.choice(d, size=users, p=weights / weights.sum())
    return np.where(rng.random((users, slots)) < 0.1, -1, cells)


class RoundDevices:
    """One client per user, answering each round as the decisions ask."""

    def __init__(self, protocol: str, cells: np.ndarray, d: int, w: int, E: float,  # noqa: N803
                 users: Sequence[str] | None = None) -> None:
        """Users ``users[i]`` (``u<i>`` by default) holding ``cells[i, t]`` at slot start + t."""
        self.cells, self.protocol, self.d = cells, protocol, d
        self.users = list(users) if users is not None else [f"u{i}" for i in
                                                            range(cells.shape[0])]
        self.clients = [LdpClient(ReportConfig(protocol, user, d=d, w=w, E=E,
                                               start=ROUNDS_START, lpu_key=LPU_KEY),
                                  words=CounterWords(f"rounds/{user}"))
                        for user in self.users]

    def round1(self, t: int, decision: Decision | None) -> list[Sent]:
        """The dissimilarity reports at slot ROUNDS_START + t."""
        return self._sent(t, lambda c, v: c.report(ROUNDS_START + t, v, decision), 1)

    def round2(self, t: int, decision: Decision) -> list[Sent]:
        """The publication reports answering slot ROUNDS_START + t's decision."""
        return self._sent(t, lambda c, v: c.answer(decision, v), 2)

    def _sent(self, t: int, send, round_: int) -> list[Sent]:  # noqa: ANN001
        out = []
        for i, (user, client) in enumerate(zip(self.users, self.clients, strict=True)):
            cell = int(self.cells[i, t])
            value = send(client, None if cell < 0 else cell)
            if value is not None:
                stamp = ORIGIN_MS + (ROUNDS_START + t + round_ - 1) * SLOT_MS + 10
                out.append(Sent(user, ROUNDS_START + t, self.d if cell < 0 else cell,
                                user.encode(), value, stamp))
        return out


def live_topic(protocol: str, cells: np.ndarray, d: int, w: int, E: float,  # noqa: N803
               partitions: int, secret: bytes, stream: str = "s"
               ) -> tuple[list[list[tuple]], list[bytes]]:
    """A topic as the live system writes it: each slot's dissimilarity reports (with the
    previous slot's publication reports), then every partition's watermark at the slot's end,
    then the decision. Returns each partition's records, as (key, value, offset), and the
    decisions written."""
    inner = LdpCollector(protocol, d, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=ROUNDS_START, E=E,
                         w=w, lpu_key=LPU_KEY)
    collecting = PartitionedCollector(inner, partitions, secret, stream)
    devices = RoundDevices(protocol, cells, d, w, E)
    parts: list[list[tuple]] = [[] for _ in range(partitions)]
    written: list[bytes] = []

    def send(records: list[tuple[bytes, bytes]]) -> None:
        homes = key_partitions([k for k, _ in records], partitions) if records else []
        by: dict[int, list] = {}
        for (key, value), p in zip(records, list(homes), strict=True):
            by.setdefault(int(p), []).append((key, value, len(parts[int(p)])))
            parts[int(p)].append((key, value, len(parts[int(p)])))
        for p, chunk in by.items():
            assert collecting.take(p, chunk) == []

    previous: Decision | None = None
    answers: list[Sent] = []
    for t in range(cells.shape[1]):
        sent = devices.round1(t, previous)
        send([(s.key, s.value) for s in answers + sent])
        for p in range(partitions):
            mark = (None, watermark_record(ORIGIN_MS + (ROUNDS_START + t + 1) * SLOT_MS, secret,
                                           stream, p), len(parts[p]))
            parts[p].append(mark)
            assert collecting.take(p, [mark]) == []
        out = collecting.advance()
        assert out.refused == []
        written += [v for _, v in out.decisions]
        previous = parse_decision(out.decisions[-1][1])
        answers = devices.round2(t, previous)
    send([(s.key, s.value) for s in answers])
    return parts, written


def rounds_in_process(protocol: str, cells: np.ndarray, d: int, w: int, E: float,  # noqa: N803
                      users: Sequence[str] | None = None,
                      ) -> tuple[list[dict], list[dict], list[list[Sent]], list[list[Sent]]]:
    """Clients (:class:`RoundDevices`) and one collector of a two-round stream slot by slot:
    decisions, releases and each slot's reports (round 1, round 2)."""
    collector = LdpCollector(protocol, d, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=ROUNDS_START,
                             E=E, w=w, lpu_key=LPU_KEY)
    devices = RoundDevices(protocol, cells, d, w, E, users)
    decisions, releases, first, second = [], [], [], []
    previous = None
    for t in range(cells.shape[1]):
        sent = devices.round1(t, previous)
        assert collector.offer_all(s.record for s in sent) == []
        out = collector.close_until(ORIGIN_MS + (ROUNDS_START + t + 1) * SLOT_MS)
        releases += [o for o in out if "decision" not in o]
        (decided,) = [o for o in out if "decision" in o]
        decisions.append(decided)
        previous = Decision("s", protocol, decided["decision"], decided["eps"], decided["next"],
                            decided.get("from", 0), decided.get("size", 0),
                            tuple(decided.get("starts", ())))
        answers = devices.round2(t, previous)
        assert collector.offer_all(s.record for s in answers) == []
        first.append(sent)
        second.append(answers)
    releases += [o for o in collector.close_until(ORIGIN_MS + (ROUNDS_START + cells.shape[1] + 1)
                                                  * SLOT_MS) if "decision" not in o]
    return decisions, releases, first, second
