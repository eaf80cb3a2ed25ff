"""Topic definitions and their idempotent creation on the embedded broker, with the replication
factor asked for."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest
from brokers import broker_fixture
from forked_workers import run_command

from local_kafka.embedded import EmbeddedBroker
from streams.kafka.topics import (
    TOPIC_KEYS,
    TopicError,
    Topics,
    TopicSpec,
    create_topics,
    describe_topics,
)

ROOT = Path(__file__).resolve().parents[2]


broker = broker_fixture()


def test_names_carry_the_deployment_prefix() -> None:
    topics = Topics(prefix="acme")
    assert [s.name for s in topics.specs()] == [f"acme.{k}" for k in TOPIC_KEYS]
    assert topics.reports == "acme.reports"
    assert topics.slot_partials == "acme.slot-partials"
    assert topics.dead_letters == "acme.dead-letters"
    assert Topics(prefix="").requirements == "requirements"
    with pytest.raises(KeyError):
        topics.name("nope")
    with pytest.raises(ValueError):
        Topics(partitions=0)


def test_layout() -> None:
    topics = Topics(partitions=6)
    by_key = {s.key: s for s in topics.specs()}
    assert set(by_key) == set(TOPIC_KEYS)
    assert by_key["requirements"].compacted
    assert not any(s.compacted for k, s in by_key.items() if k != "requirements")
    # reports and requirements are co-partitioned; the coordinator topics have one partition
    assert by_key["reports"].partitions == by_key["requirements"].partitions == 6
    for key in ("releases", "slot-partials", "decisions", "dead-letters"):
        assert by_key[key].partitions == 1
    assert by_key["reports"].config["cleanup.policy"] == "delete"
    assert topics.with_partitions(2).spec("reports").partitions == 2


def test_create_is_idempotent(broker: EmbeddedBroker) -> None:
    topics = Topics(prefix="t1", partitions=3)
    specs = topics.specs()
    first = asyncio.run(create_topics(broker.bootstrap, specs))
    assert first == {s.name: True for s in specs}
    second = asyncio.run(create_topics(broker.bootstrap, specs))
    assert second == {s.name: False for s in specs}

    described = asyncio.run(describe_topics(broker.bootstrap, [s.name for s in specs]))
    for spec in specs:
        partitions, config = described[spec.name]
        assert partitions == spec.partitions
        for name, value in spec.config.items():
            assert config[name] == value, (spec.name, name)
    assert described[topics.requirements][1]["cleanup.policy"] == "compact"


def test_conflicting_partition_count_is_refused(broker: EmbeddedBroker) -> None:
    asyncio.run(create_topics(broker.bootstrap, [TopicSpec("reports", "t2.reports", 2)]))
    with pytest.raises(TopicError, match="2 partitions"):
        asyncio.run(create_topics(broker.bootstrap, [TopicSpec("reports", "t2.reports", 4)]))


def test_topics_create_asks_for_the_replication_factor_given(broker: EmbeddedBroker) -> None:
    """``--replication-factor`` reaches the creation request: the embedded broker (one node)
    refuses three replicas, quoting the factor asked for, and creates the topics with one."""
    def create(*flags: str) -> subprocess.CompletedProcess[str]:
        return run_command(["topics", "create", "--broker", broker.bootstrap, "--prefix", "rf",
                            "--partitions", "2", *flags], timeout=120, cwd=ROOT, text=True)

    refused = create("--replication-factor", "3")
    assert refused.returncode == 2, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pwevent topics: error: creating 'rf."), lines
    assert "replication factor of 3" in lines[0], lines
    # the same from the environment, as a deployment sets it
    env = run_command(["topics", "create", "--broker", broker.bootstrap, "--prefix", "rf",
                       "--partitions", "2"], timeout=120, cwd=ROOT, text=True,
                      env={**os.environ, "PWEVENT_REPLICATION_FACTOR": "3"})
    assert env.returncode == 2 and "replication factor of 3" in env.stderr, env.stderr
    created = create("--replication-factor", "1")
    assert created.returncode == 0, created.stderr
    assert created.stdout.splitlines()[0] == "rf.reports: 2 partitions (created)"


def test_created_topics_are_described_when_create_returns(broker: EmbeddedBroker) -> None:
    """A worker started the moment ``pwevent topics create`` returns finds every topic: the
    broker describes them, partitions and all (Apache Kafka describes a topic created a moment
    ago without partitions until its metadata has spread)."""
    from streams.job.worker.preflight import layout_problem, partition_counts

    async def rounds() -> list[str | None]:
        problems = []
        for n in range(5):
            topics = Topics(prefix=f"described{n}", partitions=4)
            await create_topics(broker.bootstrap, topics.specs())
            found = await partition_counts(broker.bootstrap, 10.0)
            problems.append(layout_problem(topics, found, broker.bootstrap))
        return problems

    assert asyncio.run(rounds()) == [None] * 5
