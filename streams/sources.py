"""Streams of report records to replay: synthetic, the real datasets, or a recorded file."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from mechanisms.datasets import log_probabilities, sin_probabilities, tlns_probabilities
from mechanisms.experiments import dynamic_rows, paper_requirements
from mechanisms.requirements import FixedRequirements

SYNTHETIC = {"sin": sin_probabilities, "log": log_probabilities, "tlns": tlns_probabilities}
SOURCES = (*SYNTHETIC, "taxi", "foursquare", "recorded")


@dataclass
class Source:
    """What a replay sends: requirements, then report records slot by slot.

    ``cells[t]`` holds every user's cell at slot t (-1: no report), so the true histograms are
    known for scoring releases. A recorded file has no such matrix (``cells`` is ``None``).
    """

    users: list[str]
    requirements: FixedRequirements | None
    d: int
    slots: int
    cells: np.ndarray | None
    recorded: Path | None = None
    seed: int = 0

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

    def slot_records(self, origin_ms: int, slot_ms: int) -> Iterator[list[tuple[bytes, bytes]]]:
        """Per slot, the report records of that slot (event times spread inside it)."""
        if self.recorded is not None:
            yield from _recorded(self.recorded)
            return
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


def _recorded(path: Path) -> Iterator[list[tuple[bytes, bytes]]]:
    """A recorded file: JSON lines of reports, replayed in file order, 1,000 a batch."""
    batch: list[tuple[bytes, bytes]] = []
    with path.open("rb") as handle:
        for line in handle:
            line = line.strip()
            if not line:
                continue
            try:
                user = orjson.loads(line).get("user")
            except (orjson.JSONDecodeError, AttributeError):
                user = None
            batch.append((str(user).encode() if user is not None else b"", line))
            if len(batch) == 1000:
                yield batch
                batch = []
    if batch:
        yield batch


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
        from streams.loaders import load_foursquare, load_taxi

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
