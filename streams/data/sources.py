"""Streams of report records to replay: synthetic, the real datasets, or a recorded file."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from mechanisms.evaluation.datasets import log_probabilities, sin_probabilities, tlns_probabilities
from mechanisms.evaluation.experiments import dynamic_rows, paper_requirements
from mechanisms.requirements import FixedRequirements

SYNTHETIC = {"sin": sin_probabilities, "log": log_probabilities, "tlns": tlns_probabilities}
SOURCES = (*SYNTHETIC, "taxi", "foursquare", "recorded")

#: ``(key, value)`` records.
Records = list[tuple[bytes, bytes]]
#: Requirement records by the slot they are declared at, counted from 1.
Schedule = list[tuple[int, Records]]


@dataclass
class Source:
    """What a replay sends: requirements, then report records slot by slot.

    ``cells[t]`` holds every user's cell at slot t (-1: no report), so the true histograms are
    known for scoring releases. A recorded file has no such matrix (``cells`` is ``None``), and
    its requirements come from a file (``declared``, see :func:`read_requirement_file`) or not
    at all.
    """

    users: list[str]
    requirements: FixedRequirements | None
    d: int
    slots: int
    cells: np.ndarray | None
    recorded: Path | None = None
    seed: int = 0
    #: Requirements read from a file: ``(slot, records)`` pairs, slots counted from 1 as in
    #: ``pwevent plan`` (1: before the first report). Replaces ``requirements`` when set.
    declared: Schedule | None = None

    def requirement_records(self, dynamic: bool = False) -> list[tuple[bytes, bytes]]:
        """One record per user: ``{user, w, E}``, or with ``dynamic`` the requirement
        ``{user, wB, EB, wF, EF}`` that ``pwevent evaluate`` gives DPBD and DPBA (a forward
        requirement no stricter than the user's (w, E), the backward one inactive)."""
        if self.requirements is None:
            return []
        r = self.requirements
        if dynamic:
            rows = dynamic_rows(r, np.random.default_rng([self.seed, 8]))
            return [(u.encode(), orjson.dumps({"user": u, "wB": wB, "EB": EB, "wF": wF,
                                               "EF": EF}))
                    for _, u, wB, EB, wF, EF in rows]
        return [(u.encode(), orjson.dumps({"user": u, "w": int(w), "E": float(E)}))
                for u, w, E in zip(r.users, r.w.tolist(), r.E.tolist(), strict=True)]

    def requirement_schedule(self, dynamic: bool = False) -> Schedule:
        """Requirement records by the slot they are declared at, counted from 1 (the stream's
        first slot), in slot order: the file's rows with ``declared``, otherwise every user's
        :meth:`requirement_records` at slot 1 (none for a recorded file)."""
        if self.declared is not None:
            return self.declared
        records = self.requirement_records(dynamic)
        return [(1, records)] if records else []

    def slot_batches(self, origin_ms: int, slot_ms: int) -> Iterator[tuple[int, Records]]:
        """``(slot, records)`` in replay order, slot numbered as the job numbers them (from
        ``origin_ms``). A synthetic or real dataset gives each slot once, in order. A recorded
        file is replayed in file order, cut where the slot of the event time changes: one batch
        per slot when the file is in time order. A line whose time cannot be read (the job
        rejects it) stays with the batch it is in."""
        if self.recorded is not None:
            yield from _recorded(self.recorded, origin_ms, slot_ms)
            return
        yield from enumerate(self._synthetic(origin_ms, slot_ms))

    def slot_numbers(self, origin_ms: int, slot_ms: int) -> list[int]:
        """The slot of every batch :meth:`slot_batches` yields, in order (a recorded file is
        read once more for this, without keeping its records)."""
        if self.recorded is None:
            return list(range(self.slots))
        return [slot for slot, _records in _recorded(self.recorded, origin_ms, slot_ms)]

    def slot_records(self, origin_ms: int, slot_ms: int) -> Iterator[list[tuple[bytes, bytes]]]:
        """Per slot, the report records of that slot (event times spread inside it)."""
        for _slot, records in self.slot_batches(origin_ms, slot_ms):
            yield records

    def _synthetic(self, origin_ms: int, slot_ms: int) -> Iterator[Records]:
        assert self.cells is not None
        names = [u.encode() for u in self.users]
        spread = (np.arange(len(self.users)) * 7919) % max(slot_ms, 1)
        for t in range(self.slots):
            row = self.cells[t]
            start = origin_ms + t * slot_ms
            out = []
            for i in np.flatnonzero(row >= 0).tolist():
                out.append((names[i], orjson.dumps({"user": self.users[i],
                                                    "time": int(start + spread[i]),
                                                    "value": int(row[i])})))
            yield out

    def true_histograms(self) -> np.ndarray | None:
        """(slots, d) true counts, when known."""
        if self.cells is None:
            return None
        T = self.cells.shape[0]
        c = self.cells.astype(np.int64)
        flat = c + self.d * np.arange(T)[:, None]
        return np.bincount(flat[c >= 0], minlength=T * self.d).reshape(T, self.d)


def _peek(line: bytes) -> tuple[bytes, int | None]:
    """A recorded line's key (its user, as the job keys reports) and event time (``None``
    when the job could not read one)."""
    from streams.records.field_parsing import RecordError, parse_time

    try:
        doc: Any = orjson.loads(line)
    except orjson.JSONDecodeError:
        return b"", None
    if not isinstance(doc, dict):
        return b"", None
    user = doc.get("user")
    key = str(user).encode() if user is not None else b""
    try:
        return key, parse_time(doc.get("time"))
    except RecordError:
        return key, None


def _recorded_lines(path: Path) -> Iterator[tuple[int | None, bytes, bytes]]:
    """``(event time or None, key, line)`` for every non-blank line of a recorded file."""
    with path.open("rb") as handle:
        for line in handle:
            line = line.strip()
            if line:
                key, ms = _peek(line)
                yield ms, key, line


def _recorded(path: Path, origin_ms: int, slot_ms: int) -> Iterator[tuple[int, Records]]:
    """A recorded file: JSON lines of reports, replayed in file order, one batch per run of
    lines in one slot (lines without a readable time join the run they are in; lines before
    the first readable time join the first run)."""
    batch: Records = []
    slot: int | None = None
    for ms, key, line in _recorded_lines(path):
        if ms is not None:
            s = (ms - origin_ms) // slot_ms
            if slot is not None and s != slot:
                yield slot, batch
                batch = []
            slot = s
        batch.append((key, line))
    if batch:
        yield (0 if slot is None else slot), batch


def read_requirement_file(path: str | Path, dynamic: bool) -> Schedule:
    """Requirement records from the CSV ``pwevent plan`` reads, by declaration slot (from 1):
    ``user,w,E`` (every row at slot 1) for the fixed mechanisms, ``slot,user,wB,EB,wF,EF`` with
    ``dynamic`` (DPBD, DPBA). A bad file raises ``InputError`` (a ``ValueError``) naming the
    row."""
    from streams.data.requirements import read_dynamic_requirements, read_fixed_requirements

    if not dynamic:
        r = read_fixed_requirements(path)
        return [(1, [(u.encode(), orjson.dumps({"user": u, "w": int(w), "E": float(E)}))
                     for u, w, E in zip(r.users, r.w.tolist(), r.E.tolist(), strict=True)])]
    d = read_dynamic_requirements(path)
    by_slot: dict[int, Records] = {}
    for slot, u, wB, EB, wF, EF in zip(d.slot.tolist(), d.user, d.wB.tolist(), d.EB.tolist(),
                                       d.wF.tolist(), d.EF.tolist(), strict=True):
        by_slot.setdefault(int(slot), []).append(
            (u.encode(), orjson.dumps({"user": u, "wB": int(wB), "EB": float(EB),
                                       "wF": int(wF), "EF": float(EF)})))
    return sorted(by_slot.items())


def make_source(
    dataset: str,
    users: int,
    slots: int,
    seed: int,
    epsilon: float,
    window: int,
    data: str | None = None,
) -> Source:
    """Build a source; requirements follow the paper's set-up around (epsilon, window)."""
    rng = np.random.default_rng([seed, 7])
    if dataset in SYNTHETIC:
        probs = SYNTHETIC[dataset](slots)
        cells = (rng.random((slots, users)) < probs[:, None]).astype(np.int8)
        d = 2
    elif dataset in ("taxi", "foursquare"):
        from streams.data.loaders import load_foursquare, load_taxi

        if data is None:
            raise ValueError(f"dataset {dataset} needs --data PATH")
        path = Path(data)
        if dataset == "taxi":
            sd = load_taxi(path)
        else:
            folder = path if path.is_dir() else path.parent
            sd = load_foursquare(folder / "checkins.tsv.gz", folder / "pois.tsv.gz")
        cells = sd.cells[:slots]
        d = sd.d
        users = cells.shape[1]
    elif dataset == "recorded":
        if data is None:
            raise ValueError("dataset recorded needs --data FILE (JSON lines of reports)")
        return Source([], None, 0, 0, None, Path(data))
    else:
        raise ValueError(f"unknown dataset {dataset!r}; choose from {', '.join(SOURCES)}")
    reqs = paper_requirements(users, epsilon, window, rng)
    return Source(list(reqs.users), reqs, d, cells.shape[0], cells, seed=seed)
