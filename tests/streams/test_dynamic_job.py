"""The job's code under DPBD and DPBA without Kafka: partitions, the slot conversation, the
coordinator, checkpoints, bad requirements."""

from __future__ import annotations

import jsonschema
import numpy as np
import orjson
import pytest
from jobkit import spy_deliveries

from mechanisms.noise.slot_randomness import slot_generator
from mechanisms.requirements import DynamicRequirements
from mechanisms.run.dynamic import DynamicMechanism
from streams.job.config import JobConfig
from streams.job.coordination.coordinator import Coordinator
from streams.job.partitions.registries import SUSPENDED, DynamicRegistry
from streams.job.pipeline import InProcessJob
from streams.job.roles import make_accumulator
from streams.job.slot_protocol import secret_check
from streams.records.formats import load_schema

D = 4
SLOT_MS = 100


def cfg(name: str, partitions: int = 3, **kw) -> JobConfig:
    base = dict(mechanism=name, domain={"kind": "cells", "size": D}, slot_ms=SLOT_MS,
                partitions=partitions, secret="k", stream="s", noise="laplace", nonce="5eed",
                event_time="history")
    base.update(kw)
    return JobConfig(**base)


def spy_received(job: InProcessJob) -> list[dict]:
    """Every message the coordinator of ``job`` receives from now on, in order."""
    said: list[dict] = []
    receive = job.coordinator.receive

    def spy(message: dict) -> list:
        said.append(message)
        return receive(message)

    job.coordinator.receive = spy  # type: ignore[method-assign]
    return said


def declaration(user: str, wB: int, EB: float, wF: int, EF: float) -> tuple[bytes, bytes]:
    doc = {"user": user, "wB": int(wB), "EB": float(EB), "wF": int(wF), "EF": float(EF)}
    return user.encode(), orjson.dumps(doc)


def reports(users: list[str], t: int, cells: np.ndarray) -> list[tuple[bytes, bytes]]:
    return [(u.encode(), orjson.dumps({"user": u, "time": t * SLOT_MS + i % SLOT_MS,
                                       "value": int(cells[i])}))
            for i, u in enumerate(users) if cells[i] >= 0]


def draw(rng: np.random.Generator, k: int) -> tuple[np.ndarray, ...]:
    return (rng.integers(1, 9, k), rng.choice([0.4, 1.0, 3.0], k),
            rng.integers(1, 9, k), rng.choice([0.4, 1.0, 3.0], k))


@pytest.mark.parametrize("name", ["dpbd", "dpba"])
@pytest.mark.parametrize("seed", [1, 2])
def test_partitioned_job_equals_one_mechanism(name: str, seed: int) -> None:
    """Three partitions conversing with the coordinator release exactly what one
    DynamicMechanism releases from the same reports, declarations and per-slot generators,
    requirement changes between slots included."""
    rng = np.random.default_rng(seed)
    n, T = 36, 40
    users = [f"u{i}" for i in range(n)]
    first = draw(rng, n)
    changes: dict[int, tuple[list[int], tuple[np.ndarray, ...]]] = {}
    for t in range(1, T):
        who = np.flatnonzero(rng.random(n) < 0.15).tolist()
        if who:
            changes[t] = (who, draw(rng, len(who)))
    cells = rng.integers(-1, D, (T, n))
    cells[:, :3] = rng.integers(0, D, (T, 3))  # every partition gets reports every slot
    config = cfg(name)
    job = InProcessJob(config)
    said = spy_received(job)
    job.register(declaration(u, *(f[i] for f in first)) for i, u in enumerate(users))
    for t in range(T):
        job.feed(reports(users, t, cells[t]))
        if t in changes:  # slot t closes with the next feed: these take effect there
            who, new = changes[t]
            job.register(declaration(users[i], *(f[k] for f in new)) for k, i in enumerate(who))
    job.finish()
    assert not job.dead
    got = [orjson.loads(r) for r in job.releases]
    assert [r["slot"] for r in got] == list(range(T))
    decisions = [orjson.loads(job.coordinator.decisions[t]) for t in range(T)]

    req = DynamicRequirements(np.ones(n, dtype=np.int64), tuple(users), *first)
    mech = DynamicMechanism(name, req, D, noise="laplace", max_window=config.max_window)
    published = 0
    for t in range(T):
        if t in changes:
            who, new = changes[t]
            mech.declare([users[i] for i in who], *new)
        mech.rng = slot_generator(b"k", "s", t, "5eed")
        ref = mech.step(cells[t])
        assert got[t]["published"] == ref.published, t
        assert got[t]["nullified"] == ref.nullified, t
        np.testing.assert_array_equal(got[t]["histogram"], ref.histogram)
        accepted = sum(m["accepted"] for m in said if m.get("plan") == t)
        assert accepted == int((cells[t] >= 0).sum())
        assert sum(decisions[t]["projected"].values()) == ref.projected
        published += ref.published
    assert 0 < published < T  # both branches of the rule were taken


def run_job(config: JobConfig, users: list[str], decl, cells: np.ndarray,
            stop_at: int | None = None) -> InProcessJob:
    job = InProcessJob(config)
    job.register(declaration(u, *(f[i] for f in decl)) for i, u in enumerate(users))
    for t in range(cells.shape[0] if stop_at is None else stop_at):
        job.feed(reports(users, t, cells[t]))
    if stop_at is None:
        job.finish()
    return job


@pytest.mark.parametrize("name", ["dpbd", "dpba"])
@pytest.mark.parametrize("journal", [2, 64])
def test_restart_from_checkpoints_resends_and_changes_nothing(
    name: str, journal: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Partitions and coordinator restored from their snapshots mid-stream, with the messages
    a partition checkpointed but never sent, go on to release the same bytes (with the ledger
    compacted every 2 slots, and with the whole run in the journal)."""
    monkeypatch.setattr("streams.job.partitions.ledger.JOURNAL_SLOTS", journal)
    rng = np.random.default_rng(7)
    n, T, cut = 30, 24, 11
    users = [f"u{i}" for i in range(n)]
    decl = draw(rng, n)
    cells = rng.integers(0, D, (T, n))
    config = cfg(name, partitions=2)
    whole = run_job(config, users, decl, cells)

    job = run_job(config, users, decl, cells, stop_at=cut)
    for acc in job.accumulators:  # snapshots along the way, as the job takes them
        acc.snapshot()
    # partition 0 takes slot `cut`, checkpoints, and crashes before sending what it said
    batch = [(k, v, 0, job.offsets[0] + j) for j, (k, v) in enumerate(
        r for r in reports(users, cut, cells[cut]) if job._partition(r[0]) == 0)]
    lost, _dead = job.accumulators[0].process(batch)
    assert any("plan" in m for m in lost)
    saved = [acc.snapshot() for acc in job.accumulators]
    entries = [[(u, reg.export(u)) for u in reg.users] for reg in job.registries]
    coordinator = job.coordinator.snapshot()

    again = InProcessJob(config)
    for p in range(config.partitions):
        again.registries[p].load(entries[p])
        again.accumulators[p] = make_accumulator(p, config, again.registries[p])
        again.accumulators[p].restore(saved[p])
        again.offsets[p] = job.offsets[p] + (len(batch) if p == 0 else 0)
    again.coordinator = Coordinator(config)
    again.coordinator.restore(coordinator)
    again.releases = list(job.releases)
    resent = [m for acc in again.accumulators for m in acc.resend()]
    assert [m for m in resent if "plan" in m and m["partition"] == 0] == \
        [m for m in lost if "plan" in m]
    again._deliver(resent)
    for t in range(cut, T):
        records = reports(users, t, cells[t])
        if t == cut:  # partition 0 has these already
            records = [r for r in records if again._partition(r[0]) != 0]
        again.feed(records)
    again.finish()
    assert again.releases == whole.releases
    assert again.coordinator.duplicates > 0  # the re-sent closures were dropped


def test_bad_requirements_and_reports_go_to_dead_letters() -> None:
    config = cfg("dpbd", partitions=1, max_window=10)
    job = InProcessJob(config)
    job.register([
        declaration("a", 3, 1.0, 4, 1.0),
        declaration("b", 3, 1.0, 4, 1.0),
        (b"c", orjson.dumps({"user": "c", "w": 3, "E": 1.0})),
        declaration("d", 11, 1.0, 4, 1.0),
        declaration("e", 3, 1.0, 12, 1.0),
        (b"f", orjson.dumps({"user": "f", "wB": 3, "EB": -1.0, "wF": 4, "EF": 1.0})),
        (b"g", orjson.dumps({"user": "g", "wB": 3, "EB": 1.0})),
    ])
    reasons = {d.key: (d.reason, d.detail) for d in job.dead}
    assert set(reasons) == {b"c", b"d", b"e", b"f", b"g"}
    assert reasons[b"c"][0] == "invalid_requirement" and "dynamic" in reasons[b"c"][1]
    assert reasons[b"d"] == ("invalid_requirement", "wB = 11 exceeds the job's max window 10")
    assert reasons[b"e"] == ("invalid_requirement", "wF = 12 exceeds the job's max window 10")
    assert reasons[b"f"][0] == "invalid_requirement" and "EB" in reasons[b"f"][1]
    assert reasons[b"g"][0] == "missing_field"
    job.dead.clear()
    both = np.array([1, 2])
    job.feed(reports(["a", "b"], 0, both))
    said = spy_received(job)
    job.register([(b"b", None)])  # b leaves: its later reports are refused, it is counted no
    # more, and its report of slot 0, not yet planned, is withdrawn with it
    job.feed(reports(["a", "b"], 1, both) + [(b"zz", orjson.dumps(
        {"user": "zz", "time": SLOT_MS + 5, "value": 1}))])
    job.feed(reports(["a"], 2, np.array([0])) + [(b"a", orjson.dumps(
        {"user": "a", "time": 2 * SLOT_MS + 9, "value": D}))])
    job.finish()
    reasons = sorted((d.key, d.reason) for d in job.dead)
    assert reasons == [(b"a", "out_of_domain"), (b"b", "unregistered_user"),
                       (b"zz", "unregistered_user")]
    got = [orjson.loads(r) for r in job.releases]
    accepted = {m["plan"]: m["accepted"] for m in said if "plan" in m}
    assert [(r["slot"], r["users"], accepted[r["slot"]]) for r in got] == [
        (0, 1, 1), (1, 1, 1), (2, 1, 1)]
    assert sum(m.get("rejected", 0) for m in said) == 3


def test_a_user_back_after_removal_keeps_its_history() -> None:
    """A removed user keeps its index and waits to be suspended; declaring again makes its
    declaration pending (the windows its ledger already spent stay spent)."""
    reg = DynamicRegistry("dpbd", 10)
    assert reg.apply(*declaration("a", 2, 1.0, 2, 1.0)) == ("a", "", "")
    assert reg.apply(b"a", None) == ("a", "", "")
    assert reg.level_of_index.tolist() == [-1] and reg.removed == {0}
    assert reg.apply(*declaration("a", 3, 2.0, 3, 2.0)) == ("a", "", "")
    assert reg.level_of_index.tolist() == [0] and reg.index_of == {"a": 0}
    assert reg.pending == {0: (3, 2.0, 3, 2.0)}
    clone = DynamicRegistry("dpbd", 10)
    clone.load([("a", reg.export("a"))])
    clone.sync_pending([(3, 2.0, 3, 2.0)])
    assert clone.pending == {} and clone.latest == reg.latest


def test_messages_and_records_match_the_schemas() -> None:
    config = cfg("dpba", partitions=2)
    job = InProcessJob(config)
    users = [f"u{i}" for i in range(10)]
    job.register(declaration(u, 2 + i % 3, 1.0, 3, 2.0) for i, u in enumerate(users))
    said = spy_deliveries(job)
    rng = np.random.default_rng(3)
    for t in range(6):
        job.feed(reports(users, t, rng.integers(0, D, len(users))))
    job.finish()
    partials = jsonschema.Draft202012Validator(load_schema("slot-partials"))
    decisions = jsonschema.Draft202012Validator(load_schema("decisions"))
    releases = jsonschema.Draft202012Validator(load_schema("releases"))
    assert {"closed_through" in m for m in said} == {True, False}  # closures and plans
    assert all(type(m["closed_at_ms"]) is int for m in said if "closed_through" in m)
    for m in said:
        partials.validate(orjson.loads(orjson.dumps(m)))
    for acc in job.accumulators:
        for m in acc.resend():
            partials.validate(orjson.loads(orjson.dumps(m)))
    start = orjson.loads(job.coordinator.start_record())
    decisions.validate(start)
    assert start == {"stream": "s", "start": 0, "nonce": "5eed",
                     "secret_check": secret_check(b"k", "s"), "config": config.public()}
    for rec in job.coordinator.decisions.values():
        decisions.validate(orjson.loads(rec))
    assert job.declarations  # every user's first declaration, at the stream's start
    for rec in job.declarations:
        decisions.validate(orjson.loads(rec))
    for rec in job.releases:
        releases.validate(orjson.loads(rec))
    assert len(job.releases) == 6


def test_coordinator_starts_only_when_no_partition_can_report_earlier() -> None:
    config = cfg("dpbd", partitions=2)
    coord = Coordinator(config)
    assert coord.receive({"partition": 0, "closed_through": 4, "first": 3, "rejected": 0}) == []
    # partition 1 has no report yet and closed only through slot 1: it could still take slot 2
    assert coord.receive({"partition": 1, "closed_through": 1, "first": None,
                          "rejected": 0}) == []
    out = coord.receive({"partition": 1, "closed_through": 3, "first": None, "rejected": 0})
    assert [(s, r) for s, r, _d in out] == [(2, None)]
    assert orjson.loads(out[0][2])["start"] == 3
    assert coord.receive({"partition": 1, "closed_through": 3, "first": None,
                          "rejected": 0}) == []
    assert coord.duplicates == 1
    with pytest.raises(ValueError, match="partition 5"):
        coord.receive({"partition": 5, "closed_through": 3, "first": None, "rejected": 0})


def test_checkpoints_are_cut_into_records_and_replaced_whole() -> None:
    from streams.job.partitions.checkpoint_store import read_chunked, write_chunked

    table: dict[bytes, bytes] = {}
    assert read_chunked(table, 3) is None
    big = bytes(range(256)) * 40
    write_chunked(table, 3, big, chunk=1000)
    assert read_chunked(table, 3) == big
    assert len(table) == 1 + 11 and all(len(v) <= 1000 for v in table.values())
    write_chunked(table, 3, b"small", chunk=1000)
    assert read_chunked(table, 3) == b"small"
    assert sorted(table) == [b"3", b"3/2/0"]  # the first generation is gone
    write_chunked(table, 4, b"", chunk=1000)
    assert read_chunked(table, 4) == b"" and read_chunked(table, 3) == b"small"
    table[b"5"] = b"x\x9c whole"  # a checkpoint written before chunks existed
    assert read_chunked(table, 5) == b"x\x9c whole"
    del table[b"3/2/0"]
    with pytest.raises(RuntimeError, match="lacks chunks"):
        read_chunked(table, 3)


def test_replayed_sources_declare_the_dynamic_requirements_of_evaluate() -> None:
    """`pwevent demo/replay --mechanism dpbd|dpba` register what `pwevent evaluate` gives
    DPBD and DPBA; the fixed mechanisms keep {user, w, E}."""
    from mechanisms.evaluation.experiments import dynamic_rows
    from streams.data.sources import make_source
    from streams.records.requirement_parsing import (
        DynamicRequirement,
        FixedRequirement,
        parse_requirement,
    )

    src = make_source("sin", 30, 3, seed=4, epsilon=0.6, window=120)
    assert src.requirements is not None
    rows = dynamic_rows(src.requirements, np.random.default_rng([4, 8]))
    parsed = [parse_requirement(v, k) for k, v in src.requirement_records(dynamic=True)]
    assert [(r.user, r.wB, r.EB, r.wF, r.EF) for r in parsed if
            isinstance(r, DynamicRequirement)] == [row[1:] for row in rows]
    fixed = [parse_requirement(v, k) for k, v in src.requirement_records()]
    assert all(isinstance(r, FixedRequirement) for r in fixed) and len(fixed) == 30


def record_charges(job: InProcessJob, seen: dict | None = None) -> dict[int, dict]:
    """Per planned slot, each user's planned eps1 and whether its ledger is suspended, for a
    one-partition job (a spy on plans that fills ``seen``, or a new dict)."""
    acc = job.accumulators[0]
    seen = {} if seen is None else seen
    plan_slot = acc.placement._plan

    def plan() -> dict | None:
        msg = plan_slot()
        if msg is not None:
            eps1 = acc.placement.ledger.plan().eps1
            seen[msg["plan"]] = {u: (float(eps1[i]), acc.placement.applied[i] == SUSPENDED)
                                 for u, i in acc.registry.index_of.items()
                                 if i < acc.placement.ledger.n}
        return msg

    acc.placement._plan = plan
    return seen


@pytest.mark.parametrize("name", ["dpbd", "dpba"])
def test_a_removed_user_is_suspended_from_the_slot_planned_next(name: str) -> None:
    """b leaves after its report of slot 2 was accepted, before slot 2 closed: its report is
    withdrawn and its ledger charged nothing from slot 2, the slot the partition plans next,
    however far the partition has read ahead; charged again once it declares anew."""
    config = cfg(name, partitions=1, max_window=6)
    job = InProcessJob(config)
    seen = record_charges(job)
    said = spy_received(job)
    job.register([declaration("a", 3, 1.0, 4, 1.0), declaration("b", 3, 1.0, 4, 1.0)])
    ab = np.array([1, 2])
    for t in range(3):
        job.feed(reports(["a", "b"], t, ab))
    job.register([(b"b", None)])
    acc = job.accumulators[0]
    # slots 3 and 4 read at once: the partition has read into slot 4 when it plans slot 2
    job.feed(reports(["a"], 3, np.array([0])) + reports(["a"], 4, np.array([0])))
    assert acc.placement.suspend_at == {} and acc.placement.applied[1] == SUSPENDED
    for t in range(5, 12):
        job.feed(reports(["a"], t, np.array([0])))
    assert [t for t in sorted(seen) if not seen[t]["b"][1]] == [0, 1]
    assert all(seen[t]["b"][0] > 0 for t in range(2))
    assert all(seen[t]["b"][0] == 0 for t in range(2, 11))
    assert all(seen[t]["a"][0] > 0 and not seen[t]["a"][1] for t in seen)
    # b's report of slot 2 was withdrawn with b: slot 2 was planned after the removal
    accepted = {m["plan"]: m["accepted"] for m in said if "plan" in m}
    assert [accepted[t] for t in range(5)] == [2, 2, 1, 1, 1]
    release = {orjson.loads(r)["slot"]: orjson.loads(r) for r in job.releases}
    assert [release[t]["users"] for t in range(5)] == [2, 2, 1, 1, 1]
    job.register([declaration("b", 2, 1.0, 2, 1.0)])
    for t in (12, 13):
        job.feed(reports(["a", "b"], t, ab))
    job.finish()
    assert seen[12]["b"] == (0.25, False) and acc.placement.applied[1] == (2, 1.0, 2, 1.0)


@pytest.mark.parametrize("cut", ["suspended", "removed"])
def test_suspensions_survive_a_restart(cut: str) -> None:
    """A partition restored from a checkpoint taken after b's suspension, or before the
    partition heard of b's removal at all, keeps b suspended from the same slot and releases
    what the uninterrupted partition releases."""
    config = cfg("dpba", partitions=1, max_window=6)
    users = ["a", "b", "c"]
    cells = np.random.default_rng(5).integers(0, D, (16, 3))

    def run(restart_at: int | None) -> tuple[InProcessJob, list[int]]:
        job = InProcessJob(config)
        seen = record_charges(job)
        job.register(declaration(u, 3, 1.0, 4, 2.0) for u in users)
        for t in range(16):
            live = users if t < 3 else ["a", "c"]
            if t == 3 and cut == "suspended":
                job.register([(b"b", None)])
            feed = reports(live, t, cells[t, [users.index(u) for u in live]])
            if t == restart_at:
                saved = job.accumulators[0].snapshot()
                entries = [(u, job.registries[0].export(u)) for u in job.registries[0].users]
                if cut == "removed":
                    job.registries[0].apply(b"b", None)
                    entries = [(u, job.registries[0].export(u)) for u in users]
                again = InProcessJob(config)
                again.registries[0].load(entries)
                again.accumulators[0] = make_accumulator(0, config, again.registries[0])
                again.accumulators[0].restore(saved)
                again.offsets, again.coordinator = job.offsets, job.coordinator
                again.releases = job.releases
                job = again
                record_charges(job, seen)  # the spy goes on in the restored job
            elif t == 3 and cut == "removed":
                job.register([(b"b", None)])
            job.feed(feed)
        job.finish()
        return job, [t for t in sorted(seen) if not seen[t]["b"][1]]

    (whole, charged), (restored, charged_again) = run(None), run(5 if cut == "suspended" else 3)
    assert restored.releases == whole.releases
    assert charged_again == charged == [0, 1]
    for job in (whole, restored):
        assert job.accumulators[0].placement.applied[1] == SUSPENDED
        assert job.accumulators[0].placement.ledger.plan().eps1[1] == 0
