"""Privacy hardening of the Kafka job against the embedded broker: what a producer who may write
to the input topics can do to the releases, and what an analyst can read in them."""

from __future__ import annotations

import asyncio
import base64
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
import pytest
from brokers import broker_fixture
from jobkit import (
    close_through,
    config,
    job_nonce,
    produce,
    produce_batches,
    register,
    releases,
    report,
    requirement_records,
    setup_topics,
    slot_reports,
    start_worker,
    stop_worker,
    wait_for_slots,
)

from local_kafka.embedded import EmbeddedBroker
from streams.cli.main import main
from streams.job.partitions.registries import Registry
from streams.job.pipeline import InProcessJob
from streams.kafka.offsets import read_topic
from streams.kafka.producer import key_partition

USERS = [f"u{i}" for i in range(24)]
SLOTS = 8
RELEASE_FIELDS = {"stream", "slot", "start", "end", "mechanism", "published", "nullified",
                  "histogram", "threshold", "users",
                  # format version 2: public values only (tests/end_to_end/test_contract.py)
                  "schema_version", "cells", "noise", "approximates"}


broker = broker_fixture()


def run_job(broker: EmbeddedBroker, tmp_path: Path, prefix: str, batches, poison: bool):
    """One worker under ``uniform`` (it publishes every slot it does not nullify), 24 users;
    with ``poison``, the records an attacker who may produce to the input topics would send."""
    cfg = config(prefix, mechanism="uniform")
    topics = setup_topics(broker.bootstrap, cfg)
    worker = start_worker(broker.bootstrap, cfg, tmp_path / prefix, tmp_path / f"{prefix}.log")
    reqs = requirement_records(USERS, [4] * len(USERS), [1.0] * len(USERS))
    try:
        register(broker.bootstrap, topics, cfg, reqs, worker)
        if poison:
            wrong = (key_partition(b"u1", cfg.partitions) + 1) % cfg.partitions
            # the same user registered a second time, on another partition (a keyless
            # requirement the compacted topic refuses itself; test_hardening covers it)
            produce(broker.bootstrap, topics.requirements, cfg.partitions,
                    [(b"u1", orjson.dumps({"user": "u1", "w": 2, "E": 5.0}))], partition=wrong)
            extreme = [("x1", 4, 1e-20), ("x2", 10**9, 1.0), ("x3", 2**63, 1.0)]
            register(broker.bootstrap, topics, cfg,
                     [(u.encode(), json.dumps({"user": u, "w": w, "E": E}).encode())
                      for u, w, E in extreme], worker)
        for t, batch in enumerate(batches):
            if poison and t == 3:
                # an unsigned watermark once closed every slot up to it
                produce(broker.bootstrap, topics.reports, cfg.partitions,
                        [(None, b'{"watermark": 100000000}')], partition=0)
                produce(broker.bootstrap, topics.reports, cfg.partitions,
                        [(None, orjson.dumps({"user": "u2", "time": 3100, "value": 1}))],
                        partition=0)
                produce(broker.bootstrap, topics.reports, cfg.partitions,
                        [(b"u1", orjson.dumps({"user": "u1", "time": 3200, "value": 1}))],
                        partition=wrong)
            produce(broker.bootstrap, topics.reports, cfg.partitions, batch)
        close_through(broker.bootstrap, topics, cfg, SLOTS * cfg.slot_ms)
        docs = wait_for_slots(broker.bootstrap, topics, set(range(SLOTS)), 90, worker)
        assert worker.poll() is None, "the worker must survive every record"
    finally:
        stop_worker(worker)
    log = (tmp_path / f"{prefix}.log").read_text()
    assert sorted(d["slot"] for d in docs) == list(range(SLOTS)), log[-3000:]
    return cfg, topics, sorted(docs, key=lambda d: d["slot"])


def test_attacks_through_the_input_topics_fail_and_noise_is_fresh_per_run(broker, tmp_path):
    batches = [slot_reports(USERS, t, 3) for t in range(SLOTS)]
    cfg, topics, first = run_job(broker, tmp_path, "harden-a", batches, poison=True)
    # nothing exact and data-dependent in a release; every user counted once
    assert all(set(d) == RELEASE_FIELDS for d in first)
    assert [d["users"] for d in first] == [len(USERS)] * SLOTS
    dead = [orjson.loads(v) for _k, v in
            asyncio.run(read_topic(broker.bootstrap, topics.dead_letters, partitions=1))]
    reasons = sorted(d["reason"] for d in dead)
    assert reasons == sorted(["missing_key"] + ["wrong_partition"] * 2
                             + ["invalid_requirement"] * 3 + ["unauthenticated_control"])
    decisions = [orjson.loads(v) for _k, v in
                 asyncio.run(read_topic(broker.bootstrap, topics.decisions))]
    start = [d for d in decisions if "nonce" in d]
    assert len(start) == 1 and start[0]["config"]["mechanism"] == "uniform"
    assert all(sum(d["users"].values()) == len(USERS) for d in decisions if "slot" in d)
    # the same stream name and secret, one report fewer: the noise is fresh, so the releases
    # differ everywhere, not just in the one cell that user reported
    fewer = [list(b) for b in batches]
    fewer[5] = fewer[5][1:]
    _, other_topics, second = run_job(broker, tmp_path, "harden-b", fewer, poison=False)
    a = np.array([d["histogram"] for d in first])
    b = np.array([d["histogram"] for d in second])
    assert (a != b).sum() > SLOTS, (a, b)
    # the auditor, from the topics alone, finds nothing wrong
    code = main(["audit", "--broker", broker.bootstrap, "--prefix", "harden-a", "--stream",
                 "s", "--partitions", str(cfg.partitions)])
    assert code == 0
    assert releases(broker.bootstrap, other_topics)


@pytest.mark.parametrize("mechanism", ["pbd", "pba", "pbad", "pbd_ipw", "bd", "ba", "dpbd",
                                       "dpba"])
def test_the_audit_finds_nothing_wrong_with_a_demo_run(broker, mechanism: str, capsys):
    """``pwevent demo --broker`` runs the job end to end; ``pwevent audit`` then checks it from
    the topics alone. Every run shares the module's broker, under topics of its own."""
    before = asyncio.run(topic_names(broker.bootstrap))
    code = main(["demo", "--broker", broker.bootstrap, "--mechanism", mechanism, "--users",
                 "300", "--slots", "12", "--json-summary"])
    summary = orjson.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and summary["slots_released"] == 12
    new = {k for k in asyncio.run(topic_names(broker.bootstrap)) - before
           if k.startswith("pwevent-demo-")}
    assert len(new) == 1, new  # the prefix of this run's topics
    prefix = new.pop()
    assert main(["audit", "--broker", broker.bootstrap, "--prefix", prefix, "--stream", "demo",
                 "--json"]) == 0
    report = orjson.loads(capsys.readouterr().out)
    assert report["slots_audited"] == 12 and report["violations"] == []
    assert report["windows_checked"] > 0  # every user's windows, dynamic ones too


@pytest.fixture(scope="module")
def restarted(broker, tmp_path_factory):
    """A PBD job whose worker is killed after slot 2 and started again on its data directory.
    Before the kill, requirements on the partition after their key's: u1 declaring another
    requirement and a new user x1. While it is down, an entry for a new user x2 written straight
    into the ``users`` table's changelog, on the partition x2's key does not belong to. x1 and
    x2 report in every slot. The reference: the job's code without Kafka, under the job's nonce,
    given the same reports and only the requirements on their own partitions."""
    tmp = tmp_path_factory.mktemp("identities")
    cfg = config("ident", mechanism="pbd")
    topics = setup_topics(broker.bootstrap, cfg)
    reqs = requirement_records(USERS, [3 + i % 3 for i in range(24)],
                               [1.0 + i % 2 for i in range(24)])
    misplaced = [(b"u1", orjson.dumps({"user": "u1", "w": 2, "E": 5.0})),
                 (b"x1", orjson.dumps({"user": "x1", "w": 4, "E": 1.0}))]
    batches = [slot_reports(USERS, t, 3) + [report("x1", t * 1000 + 500, 1),
                                            report("x2", t * 1000 + 600, 2)]
               for t in range(SLOTS)]
    own = key_partition(b"x2", cfg.partitions)
    foreign = Registry(cfg, own)
    assert foreign.apply(b"x2", orjson.dumps({"user": "x2", "w": 4, "E": 1.0})) == ("x2", "", "")
    changelog = f"{cfg.app_id()}-users-changelog"
    data, log = tmp / "data", tmp / "worker.log"
    worker = start_worker(broker.bootstrap, cfg, data, log)
    try:
        register(broker.bootstrap, topics, cfg, reqs, worker)
        register(broker.bootstrap, topics, cfg, misplaced, worker, misplaced=True)
        produce_batches(broker.bootstrap, topics.reports, cfg.partitions, batches[:4])
        wait_for_slots(broker.bootstrap, topics, {0, 1, 2}, 60, worker)
    finally:
        stop_worker(worker, kill=True)
    produce(broker.bootstrap, changelog, cfg.partitions, [(b"x2", foreign.export("x2"))],
            partition=(own + 1) % cfg.partitions)
    produce_batches(broker.bootstrap, topics.reports, cfg.partitions, batches[4:])
    close_through(broker.bootstrap, topics, cfg, SLOTS * cfg.slot_ms)
    worker = start_worker(broker.bootstrap, cfg, data, log)
    try:
        docs = wait_for_slots(broker.bootstrap, topics, set(range(SLOTS)), 90, worker)
    finally:
        stop_worker(worker)
    assert sorted(d["slot"] for d in docs) == list(range(SLOTS)), log.read_text()[-3000:]
    reference = InProcessJob(replace(cfg, nonce=job_nonce(broker.bootstrap, topics)))
    reference.register(reqs)
    for batch in batches:
        reference.feed(batch)
    reference.finish(SLOTS * cfg.slot_ms)
    dead = [orjson.loads(v) for _k, v in
            asyncio.run(read_topic(broker.bootstrap, topics.dead_letters))]
    for d in dead:
        d["key"] = base64.b64decode(d["key"]).decode()  # dead letters carry keys in base64
    decided = {k: v for k, v in asyncio.run(read_topic(broker.bootstrap, topics.decisions))}
    return {"releases": sorted((v for _k, v in releases(broker.bootstrap, topics)),
                               key=lambda v: orjson.loads(v)["slot"]),
            "decisions": [decided.get(f"s/{t}".encode()) for t in range(SLOTS)],
            "dead": dead, "reference": reference, "log": log.read_text(),
            "changelog": asyncio.run(read_topic(broker.bootstrap, changelog,
                                                partitions=cfg.partitions))}


def decisions(records: list[bytes] | dict[int, bytes]) -> list[dict]:
    """Decision records of slots 0.. in order, parsed (the order of the levels in them is that
    in which the partitions' counts arrived)."""
    return [orjson.loads(records[t]) for t in range(SLOTS)]


def test_a_misplaced_requirement_leaves_no_trace_across_a_restart(restarted):
    """The users table takes a requirement only from its key's partition: one sent elsewhere
    is dead-lettered, and the worker started again rebuilds its registries from the table
    without it; the releases are the reference's byte for byte, the decisions its values."""
    reference = restarted["reference"]
    misplaced = [d for d in restarted["dead"] if d["reason"] == "wrong_partition"]
    assert sorted(d["key"] for d in misplaced) == ["u1", "x1"]
    x1 = {d["offset"] for d in restarted["dead"] if d["key"] == "x1" and d["topic"].endswith(
        ".reports")}
    assert len(x1) == SLOTS and {d["reason"] for d in restarted["dead"] if d["key"] == "x1"
                                 and d["topic"].endswith(".reports")} == {"unregistered_user"}
    assert restarted["releases"] == reference.releases
    assert decisions(restarted["decisions"]) == decisions(reference.coordinator.decisions)
    users = [orjson.loads(v)["users"] for v in restarted["decisions"]]
    assert all(sum(u.values()) == len(USERS) for u in users) and "2:5.0" not in str(users)


def test_a_users_entry_on_another_partitions_changelog_is_not_restored(restarted):
    """An entry of the ``users`` changelog on a partition its key does not belong to (x2's,
    written while the worker was down) is not taken when the worker restores the table: x2 is
    registered nowhere, its reports after the restart are dead letters like those before, and
    no slot counts or charges it."""
    assert [k for k, _v in restarted["changelog"]].count(b"x2") == 1  # it was there to take
    assert ("users table: 1 changelog records on a partition their user does not belong to "
            "were not restored") in restarted["log"]
    x2 = [d for d in restarted["dead"] if d["key"] == "x2"]
    assert {d["offset"] for d in x2} and {d["reason"] for d in x2} == {"unregistered_user"}
    assert len({d["offset"] for d in x2}) == SLOTS  # before the restart and after
    users = [orjson.loads(v)["users"] for v in restarted["decisions"]]
    assert [sum(u.values()) for u in users] == [len(USERS)] * SLOTS
    reference = restarted["reference"]
    assert decisions(restarted["decisions"]) == decisions(reference.coordinator.decisions)
    assert restarted["releases"] == reference.releases


async def topic_names(bootstrap: str) -> set[str]:
    """The topic prefixes on the broker."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {name.rsplit(".", 1)[0] for name in await admin.list_topics()}
    finally:
        await admin.close()
