"""Privacy hardening of the Kafka job against the embedded broker: what a producer who may write
to the input topics can do to the releases, and what an analyst can read in them."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import orjson
import pytest
from jobkit import (
    close_through,
    config,
    produce,
    register,
    releases,
    requirement_records,
    setup_topics,
    slot_reports,
    start_worker,
    stop_worker,
    wait_for_slots,
)

from streams.cli.main import main
from streams.kafka.broker import EmbeddedBroker
from streams.kafka.offsets import read_topic
from streams.kafka.producer import key_partition

USERS = [f"u{i}" for i in range(24)]
SLOTS = 8
RELEASE_FIELDS = {"stream", "slot", "start", "end", "mechanism", "published", "nullified",
                  "histogram", "threshold", "users",
                  # format version 2: public values only (tests/end_to_end/test_contract.py)
                  "schema_version", "cells", "noise", "approximates"}


@pytest.fixture(scope="module")
def broker():
    with EmbeddedBroker() as b:
        yield b


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
            asyncio.run(read_topic(broker.bootstrap, topics.dead_letters, partitions=1,
                                   idle=0.5))]
    reasons = sorted(d["reason"] for d in dead)
    assert reasons == sorted(["missing_key"] + ["wrong_partition"] * 2
                             + ["invalid_requirement"] * 3 + ["unauthenticated_control"])
    decisions = [orjson.loads(v) for _k, v in
                 asyncio.run(read_topic(broker.bootstrap, topics.decisions, idle=0.5))]
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


@pytest.mark.parametrize("mechanism", ["pbd", "pba", "bd", "ba", "dpbd", "dpba"])
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


async def topic_names(bootstrap: str) -> set[str]:
    """The topic prefixes on the broker."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {name.rsplit(".", 1)[0] for name in await admin.list_topics()}
    finally:
        await admin.close()
