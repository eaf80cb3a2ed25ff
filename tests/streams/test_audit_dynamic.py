"""The per-user audit of DPBD and DPBA: every user's ledger rebuilt from the declaration records,
checked against the decisions and against every backward and forward window."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from streams.audit.accounting import audit
from streams.audit.dynamic import check_windows
from streams.audit.report import AuditReport, Record
from streams.job.config import JobConfig
from streams.job.pipeline import InProcessJob
from streams.kafka.producer import key_partition

SLOT_MS = 100
USERS = [f"u{i}" for i in range(30)]


def declaration(user: str, wB: int, EB: float, wF: int, EF: float) -> tuple[bytes, bytes]:
    doc = {"user": user, "wB": wB, "EB": EB, "wF": wF, "EF": EF}
    return user.encode(), orjson.dumps(doc)


def run(name: str) -> tuple[JobConfig, list, InProcessJob]:
    """A dynamic job with requirement changes and a removal mid-run: u1 lowers its backward
    budget below what its window has spent by slot 3, whatever the noise (a projection)."""
    config = JobConfig(stream="s", mechanism=name, domain={"kind": "cells", "size": 3},
                       slot_ms=SLOT_MS, partitions=2, secret="k", nonce="5eed",
                       event_time="history")
    rng = np.random.default_rng(4)
    reqs = [declaration(u, 2 + i % 4, 0.5 + (i % 3) * 0.5, 2 + i % 3, 1.0 + (i % 2))
            for i, u in enumerate(USERS)]
    job = InProcessJob(config)
    job.register(reqs)
    later = {4: [declaration("u1", 3, 0.1, 2, 0.4), declaration("u2", 6, 3.0, 6, 3.0)],
             7: [(b"u3", None)]}
    for t in range(14):
        job.register(later.get(t, []))
        reqs += later.get(t, [])
        cells = rng.integers(-1, 3, len(USERS))
        job.feed([(u.encode(), orjson.dumps({"user": u, "time": t * SLOT_MS + i, "value": c}))
                  for i, (u, c) in enumerate(zip(USERS, cells.tolist(), strict=True)) if c >= 0])
    job.finish()
    return config, reqs, job


def records(config: JobConfig, reqs, job: InProcessJob) -> tuple[list, list, list]:
    requirements = [Record(key_partition(k, config.partitions), i, k.decode(),
                           None if v is None else orjson.loads(v)) for i, (k, v) in enumerate(reqs)]
    coord = job.coordinator
    decisions = [Record(0, 0, "s/start", orjson.loads(coord.start_record()))]
    for slot in sorted(coord.decisions):
        decisions.append(Record(0, slot + 1, f"s/{slot}", orjson.loads(coord.decisions[slot])))
    for note in job.declarations:
        doc = orjson.loads(note)
        key = f"s/declared/{doc['declared']}/{doc['partition']}/{doc['chunk']}"
        decisions.append(Record(0, 10_000 + len(decisions), key, doc))
    releases = [Record(0, i, f"s/{orjson.loads(r)['slot']}", orjson.loads(r))
                for i, r in enumerate(job.releases)]
    return requirements, decisions, releases


@pytest.mark.parametrize("name", ["dpbd", "dpba"])
def test_a_clean_dynamic_job_passes_with_every_users_windows_checked(name: str) -> None:
    config, reqs, job = run(name)
    report = audit(*records(config, reqs, job), stream="s")
    assert report.violations == [], report.violations
    assert report.slots_audited == 14
    # two windows per user and slot while a requirement is in force: 30 users, 14 slots, one
    # user suspended a few slots before the end
    assert 2 * 29 * 14 < report.windows_checked <= 2 * 30 * 14


@pytest.mark.parametrize("name", ["dpbd", "dpba"])
def test_a_decision_that_disagrees_with_the_rebuilt_ledgers_is_caught(name: str) -> None:
    config, reqs, job = run(name)
    requirements, decisions, releases = records(config, reqs, job)
    for rec in decisions:
        if rec.key == "s/5":
            level = next(iter(rec.value["users"]))
            rec.value["users"][level] += 3
    report = audit(requirements, decisions, releases, stream="s")
    assert {(v.kind, v.slot) for v in report.violations} >= {("ledger_mismatch", 5)}


def test_projected_users_that_differ_from_the_rebuilt_ledgers_are_caught() -> None:
    """A decision's projected users per level are those of the rebuilt ledgers: a projection
    left out (slot 3 under DPBA, where u1's lowered backward budget is projected) or one claimed
    where no budget was projected (slot 6) is a mismatch."""
    config, reqs, job = run("dpba")
    requirements, decisions, releases = records(config, reqs, job)
    projected = {rec.value["slot"]: rec.value["projected"] for rec in decisions
                 if rec.key and rec.key.count("/") == 1 and "slot" in rec.value}
    assert {s: p for s, p in projected.items() if p} == {3: {"0:0": 1}}
    for rec in decisions:
        if rec.key == "s/3":
            rec.value["projected"] = {}
        elif rec.key == "s/6":
            rec.value["projected"] = {next(iter(rec.value["users"])): 1}
    report = audit(requirements, decisions, releases, stream="s")
    assert sorted((v.kind, v.slot) for v in report.violations) == [
        ("ledger_mismatch", 3), ("ledger_mismatch", 6)], report.violations


def test_a_declaration_record_that_differs_from_what_the_job_applied_is_caught() -> None:
    config, reqs, job = run("dpbd")
    requirements, decisions, releases = records(config, reqs, job)
    for rec in decisions:
        if rec.key and rec.key.startswith("s/declared/0/") and "u1" in rec.value["users"]:
            rec.value["users"]["u1"] = [2, 0.01, 2, 0.01]
    report = audit(requirements, decisions, releases, stream="s")
    assert ("ledger_mismatch", 0) in {(v.kind, v.slot) for v in report.violations}


def test_overspent_windows_are_caught() -> None:
    """The window checks on their own: one user within both windows, one whose charge exceeds
    what its backward window leaves, one whose forward window spends more than EF."""
    report = AuditReport("s", "dpbd")
    req = np.array([[3, 1.0, 2, 1.0]] * 3)
    rows = [np.array([0.3, 0.6, 0.2]), np.array([0.3, 0.6, 0.9]), np.array([0.3, 0.0, 0.0])]
    check_windows(report, rows, [req] * 3, first=10)
    found = {(v.slot, v.detail.split(" window")[0]) for v in report.violations}
    # user 1 (0.6, 0.6): 0.6 + 0.6 > 1 from slot 10 (forward) and at slot 11 (backward)
    # user 2 (0.2, 0.9): 0.2 + 0.9 > 1 from slot 10 (forward) and at slot 11 (backward)
    assert found == {(10, "2 users overspend their forward"),
                     (11, "2 users overspend their backward")}
    assert report.windows_checked == 2 * 9
