"""The local-DP collector's cost per report next to the central job's, in one run.

For each case, ``--users`` users report at each of ``--slots`` slots through the Python client
(:class:`streams.ldp_client.LdpClient`, with fast deterministic words from numpy's PCG64 in place
of the CSPRNG; making the reports is not timed):

- ``lbu-oue-d8``, ``lbu-oue-d32``: LBU (E = 1, w = 10), OUE over 8 and 32 cells;
- ``plbu-mixed-d8``: PLBU over 8 cells, the users' (w, E) cycling through four levels whose
  budgets 0.1, 0.5, 1 and 2 mix OUE and GRR reports;
- ``lbd-oue-d8``: LBD (E = 4, w = 10), two rounds a slot over 8 cells, the clients answering the
  collector's decisions (made once, untimed; the timed collector takes the same reports slot
  by slot and decides the same);
- ``lpd-oue-d8``: LPD (E = 4, w = 10), the same with the population divided: each round asks
  the users its decision names (the central job still takes every user at every slot);
- ``mtsp-oue-d8``: MTSP-LDP (E = 4, w = 10) over 8 cells, round 1 over each user's level of
  the tree, round 2 over the decision's intervals.

The records are grouped as they arrive (a two-round stream's slot by slot; ``--chunk`` records a
call) before timing, for both sides. Timed, in alternation, best of ``--repeat``: (a) a fresh
:class:`streams.ldp_collector.LdpCollector` taking every record (``offer_all``) and closing every
slot; (b) the central job in process (:class:`streams.job.pipeline.InProcessJob`: one partition,
``--event-time history``, the users registered beforehand, untimed) fed the same users' central
reports, one per user and slot, ``{"user", "time", "value"}`` with the same cells, and finishing
every slot: ``uniform`` for LBU, ``pbd`` for PLBU, ``bd`` for LBD (the central mechanisms at the
same requirements). Also timed, as a reference, the collector offered the records one by one
(``offer``; ``--no-one-by-one`` leaves it out, inf in the table). Printed: microseconds per report
(a two-round stream's rounds each count) and the ratio collector/central per report (the target: at
most 2).

Run: ``.venv/bin/python benchmarks/bench_ldp_collector.py [--users 2000] [--slots 10]
[--repeat 3] [--cases ...] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mechanisms.local.rounds import Decision  # noqa: E402
from mechanisms.local.schedule import ROUND_PROTOCOLS  # noqa: E402
from streams.job.config import JobConfig  # noqa: E402
from streams.job.pipeline import InProcessJob  # noqa: E402
from streams.ldp_client import LdpClient, ReportConfig  # noqa: E402
from streams.ldp_collector import LdpCollector  # noqa: E402

ORIGIN_MS = 1_700_000_000_000
SLOT_MS = 60_000
START = 5
TARGET = 2.0
PLBU_LEVELS = ((10, 1.0), (2, 1.0), (1, 1.0), (1, 2.0))  # budgets 0.1, 0.5 (OUE), 1, 2 (GRR)


@dataclass(frozen=True)
class Case:
    """One comparison: the local protocol, its cells, the users' requirements by level, and
    the central mechanism it is set against."""

    protocol: str
    d: int
    levels: tuple[tuple[int, float], ...]
    central: str


CASES = {
    "lbu-oue-d8": Case("lbu", 8, ((10, 1.0),), "uniform"),
    "lbu-oue-d32": Case("lbu", 32, ((10, 1.0),), "uniform"),
    "plbu-mixed-d8": Case("plbu", 8, PLBU_LEVELS, "pbd"),
    "lbd-oue-d8": Case("lbd", 8, ((10, 4.0),), "bd"),
    "lpd-oue-d8": Case("lpd", 8, ((10, 4.0),), "bd"),
    "mtsp-oue-d8": Case("mtsp", 8, ((10, 4.0),), "bd"),
}
#: The public key of the population cases' positions.
KEY = "bench"


class GeneratorWords:
    """Deterministic uniform words from numpy's PCG64, drawn a block at a time (fast: the
    benchmark's reports are not the CSPRNG's)."""

    def __init__(self, seed: int, block: int = 4096) -> None:
        """Words from ``seed``."""
        self.rng = np.random.default_rng(seed)
        self.block = block
        self.buffer = np.zeros(0, dtype=np.uint32)

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` words."""
        if self.buffer.size < n:
            fresh = self.rng.integers(0, 2**32, max(n, self.block), dtype=np.uint32)
            self.buffer = np.concatenate([self.buffer, fresh])
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out


Local = list[tuple[bytes, bytes, int]]
Central = list[tuple[bytes, bytes]]


def make_reports(case: Case, users: int, slots: int, seed: int) -> tuple[Local, Central]:
    """Every user's local report at every slot (key, value, timestamp), slot by slot, and the
    central reports of the same cells and times."""
    rng = np.random.default_rng(seed)
    names = [f"u{i}" for i in range(users)]
    clients = [LdpClient(ReportConfig(case.protocol, name, d=case.d, w=w, E=E, start=START,
                                      lpu_key=KEY),
                         words=GeneratorWords(seed * 1_000_003 + i))
               for i, name in enumerate(names)
               for w, E in [case.levels[i % len(case.levels)]]]
    cells = rng.integers(0, case.d, (slots, users)).tolist()
    local: Local = []
    central: Central = []
    rounds = case.protocol in ("lbd", "lba", "lpd", "lpa", "mtsp")
    deciding = LdpCollector(case.protocol, case.d, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS,
                            start=START, E=case.levels[0][1], w=case.levels[0][0],
                            lpu_key=KEY) if rounds else None
    previous = None
    for t in range(slots):
        slot = START + t
        if previous is not None:  # the answers to the previous slot's decision
            answers = [(n.encode(), c.answer(previous, cells[t - 1][i]),
                        ORIGIN_MS + slot * SLOT_MS + 1)
                       for i, (n, c) in enumerate(zip(names, clients, strict=True))]
            answers = [a for a in answers if a[1] is not None]
            local += answers
            deciding.offer_all(answers)  # type: ignore[union-attr]
        sent = 0
        for i, (name, client) in enumerate(zip(names, clients, strict=True)):
            ms = ORIGIN_MS + slot * SLOT_MS + (i * 7919) % SLOT_MS
            value = client.report(slot, cells[t][i], previous) if rounds \
                else client.report(slot, cells[t][i])
            key = name.encode()
            if value is not None:  # a population round asks some users only
                local.append((key, value, ms))
                sent += 1
            central.append((key, orjson.dumps({"user": name, "time": ms, "value": cells[t][i]})))
        if deciding is not None:
            deciding.offer_all(local[len(local) - sent:])
            out = [o for o in deciding.close_until(ORIGIN_MS + (slot + 1) * SLOT_MS)
                   if "decision" in o][0]
            previous = Decision("bench", case.protocol, slot, out["eps"], out["next"],
                                out.get("from", 0), out.get("size", 0),
                                tuple(out.get("starts", ())))
    return local, central


def central_config(case: Case) -> JobConfig:
    """The central job's configuration: one partition, history, the case's cells."""
    return JobConfig(mechanism=case.central, domain={"kind": "cells", "size": case.d},
                     slot_ms=SLOT_MS, origin_ms=ORIGIN_MS, partitions=1, secret="bench",
                     event_time="history", lateness_ms=0)


def requirement_records(case: Case, users: int) -> list[tuple[bytes, bytes]]:
    """Every user's fixed requirement, the level its client has."""
    out = []
    for i in range(users):
        w, E = case.levels[i % len(case.levels)]
        out.append((f"u{i}".encode(), orjson.dumps({"user": f"u{i}", "w": w, "E": E})))
    return out


def chunks(records: list, size: int) -> list[list]:
    """``records`` in runs of ``size`` (0: all in one)."""
    size = size or max(1, len(records))
    return [records[i:i + size] for i in range(0, len(records), size)]


def arrivals(case: Case, records: Local, chunk: int) -> list[tuple[int | None, list[Local]]]:
    """How the records reach the collector, made before timing: (the time to close until, or
    None, and the chunks of records before it); a two-round stream's slot by slot (each slot's
    records, then its rounds closed), a one-round stream's all at once."""
    if case.protocol not in ROUND_PROTOCOLS:
        return [(None, chunks(records, chunk))]
    return [(ORIGIN_MS + (slot_of(part[-1][2]) + 1) * SLOT_MS, chunks(part, chunk))
            for part in by_slot(records)]


def run_collector(case: Case, parts: list[tuple[int | None, list[Local]]], slots: int,
                  one_by_one: bool) -> list[dict]:
    """A fresh collector takes every record (chunk by chunk, or one by one) and closes every
    slot; its releases."""
    homogeneous = case.protocol != "plbu"
    w, E = case.levels[0] if homogeneous else (None, None)
    collector = LdpCollector(case.protocol, case.d, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS,
                             start=START, E=E, w=w, lpu_key=KEY)
    dead: list = []
    out: list[dict] = []
    for closing, subs in parts:
        for sub in subs:
            if one_by_one:
                dead += [d for d in (collector.offer(*r) for r in sub) if d is not None]
            else:
                dead += collector.offer_all(sub)
        if closing is not None:
            out += collector.close_until(closing)
    assert not dead, dead[:3]
    if collector.rounds:
        return [o for o in out if "decision" not in o]
    return [collector.close(s) for s in range(START, START + slots)]


def slot_of(ms: int) -> int:
    """The slot of a timestamp."""
    return (ms - ORIGIN_MS) // SLOT_MS


def by_slot(records: Local) -> list[Local]:
    """``records`` cut where their timestamps' slot changes (a two-round stream's records are
    in slot order: the previous slot's answers, then the slot's dissimilarity reports)."""
    parts: list[Local] = []
    for record in records:
        if parts and slot_of(parts[-1][-1][2]) == slot_of(record[2]):
            parts[-1].append(record)
        else:
            parts.append([record])
    return parts


def run_central(job: InProcessJob, fed: list[Central], slots: int) -> list[bytes]:
    """The registered job takes every chunk of reports and releases every slot."""
    for part in fed:
        job.feed(part)
    job.finish(ORIGIN_MS + (START + slots) * SLOT_MS)
    assert not job.dead, job.dead[:3]
    return job.releases


def timed(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes."""
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def measure(name: str, case: Case, users: int, slots: int, repeat: int, seed: int, chunk: int,
            one_by_one: bool = True) -> dict:
    """Best-of-``repeat`` seconds of the collector (batch and, with ``one_by_one``, one by one)
    and the central job, timed in alternation over the same users, slots and cells."""
    local, central = make_reports(case, users, slots, seed)
    n = len(local)
    parts = arrivals(case, local, chunk)
    fed = chunks(central, chunk)
    best = {"collector": float("inf"), "one_by_one": float("inf"), "central": float("inf")}
    releases = 0
    for _ in range(repeat):
        best["collector"] = min(best["collector"],
                                timed(lambda: run_collector(case, parts, slots, False)))
        job = InProcessJob(central_config(case))
        job.register(requirement_records(case, users))
        assert not job.dead, job.dead[:3]
        best["central"] = min(best["central"],
                              timed(lambda job=job: run_central(job, fed, slots)))
        releases = len(job.releases)
        if one_by_one:
            best["one_by_one"] = min(best["one_by_one"],
                                     timed(lambda: run_collector(case, parts, slots, True)))
    assert releases == slots, f"the central job released {releases} of {slots} slots"
    per = {"collector": n, "one_by_one": n, "central": len(central)}  # reports each took
    us = {k: v / per[k] * 1e6 for k, v in best.items()}
    return {"case": name, "central_mechanism": case.central, "reports": n,
            "central_reports": len(central), "users": users, "slots": slots, "chunk": chunk,
            **{f"{k}_us": v for k, v in us.items()},
            "ratio": us["collector"] / us["central"],
            "ratio_one_by_one": us["one_by_one"] / us["central"]}


def main() -> int:
    """Measure, print a table; 1 when a case's ratio exceeds the target."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=2000)
    parser.add_argument("--slots", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=5, help="passes; the best is kept")
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--chunk", type=int, default=1000,
                        help="records per call (offer_all, feed); 0: all at once")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--no-one-by-one", dest="one_by_one", action="store_false",
                        help="leave out the one-by-one reference (slow for two-round streams)")
    args = parser.parse_args()
    rows = []
    print(f"{'case':<14} {'central':>8} {'reports':>8} {'collector us':>13} "
          f"{'one-by-one us':>14} {'central us':>11} {'ratio':>6} {'1-by-1':>7}", flush=True)
    for name in args.cases:
        r = measure(name, CASES[name], args.users, args.slots, args.repeat, args.seed,
                    args.chunk, args.one_by_one)
        rows.append(r)
        print(f"{name:<14} {r['central_mechanism']:>8} {r['reports']:>8,} "
              f"{r['collector_us']:>13.2f} {r['one_by_one_us']:>14.2f} {r['central_us']:>11.2f} "
              f"{r['ratio']:>6.2f} {r['ratio_one_by_one']:>7.2f}", flush=True)
    worst = max(r["ratio"] for r in rows)
    print(f"largest ratio collector/central: {worst:.2f} (target <= {TARGET:g}): "
          f"{'met' if worst <= TARGET else 'MISSED'}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
