"""Topic definitions of the job, as data, and their idempotent creation.

Every deployment prefixes the topic names (``Topics(prefix="pwevent")`` gives ``pwevent.reports``
and so on) so that several deployments can share one cluster. The same definitions are the source
of truth for ``docker-compose.yml`` and ``deploy/``.

=================  ==========  ===========================================================
topic              key         what it carries
=================  ==========  ===========================================================
``reports``        user        raw user reports; partitioned by user, so every user's
                               reports meet in one partition worker
``requirements``   user        each user's privacy requirement; compacted (latest wins);
                               a tombstone unregisters the user
``releases``       stream/slot one private histogram per released slot
``slot-partials``  stream/slot per partition and slot: counts per (budget level, cell) and
                               the public per-level user counts (dpbd, dpba: closures and
                               per-slot plans); one partition, read by the coordinator
``decisions``      stream/slot the coordinator's publish/approximate decision per slot and
                               what it charged each level (dpbd, dpba: also the stream's
                               start, read by every worker); one partition
``dead-letters``   source      rejected input with its original bytes and the reason
=================  ==========  ===========================================================
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from streams.kafka.settings import client_options

__all__ = [
    "DAY_MS",
    "TOPIC_KEYS",
    "TopicError",
    "TopicSpec",
    "Topics",
    "create_topics",
    "describe_topics",
]

DAY_MS: Final = 24 * 60 * 60 * 1000

#: The logical topic names, in a stable order.
TOPIC_KEYS: Final = (
    "reports",
    "requirements",
    "releases",
    "slot-partials",
    "decisions",
    "dead-letters",
)

_TOPIC_ALREADY_EXISTS: Final = 36


def min_insync_replicas(replication: int) -> int:
    """The ``min.insync.replicas`` of every topic pwevent writes, for a replication factor."""
    return min(2, replication)


class TopicError(RuntimeError):
    """A topic could not be created, or exists with a conflicting layout."""


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """One topic: its full name, partition count, replication factor and configs."""

    key: str
    name: str
    partitions: int
    replication: int = 1
    config: Mapping[str, str] = field(default_factory=dict)

    @property
    def compacted(self) -> bool:
        """True when the topic's cleanup policy includes compaction."""
        return "compact" in self.config.get("cleanup.policy", "")

    def new_topic(self) -> NewTopic:
        """The admin-client request for this topic."""
        return NewTopic(
            self.name, self.partitions, self.replication, topic_configs=dict(self.config)
        )


class _TopicName:
    """A logical topic's full name, read as an attribute of :class:`Topics`
    (``topics.reports`` is ``topics.name("reports")``)."""

    def __init__(self, key: str) -> None:
        self.key = key

    def __get__(self, topics: Topics | None, owner: type | None = None) -> Any:
        return self if topics is None else topics.name(self.key)


@dataclass(frozen=True, slots=True)
class Topics:
    """The job's topics for one deployment.

    ``partitions`` is the partition count of ``reports``; it bounds the number of partition
    workers. ``requirements`` gets the same count, so that a user's requirement and reports live in
    partitions with the same number and the tables that join them are co-partitioned.
    """

    prefix: str = "pwevent"
    partitions: int = 4
    replication: int = 1
    reports_retention_ms: int = 7 * DAY_MS
    releases_retention_ms: int = -1
    internal_retention_ms: int = 7 * DAY_MS
    dead_letters_retention_ms: int = 30 * DAY_MS

    def __post_init__(self) -> None:
        if self.partitions < 1 or self.replication < 1:
            raise ValueError("partitions and replication must be at least 1")
        if any(c.isspace() for c in self.prefix):
            raise ValueError("the topic prefix must not contain whitespace")

    def name(self, key: str) -> str:
        """Full topic name of a logical topic (``"reports"`` -> ``"<prefix>.reports"``)."""
        if key not in TOPIC_KEYS:
            raise KeyError(f"unknown topic {key!r}; expected one of {TOPIC_KEYS}")
        return f"{self.prefix}.{key}" if self.prefix else key

    reports = _TopicName("reports")
    requirements = _TopicName("requirements")
    releases = _TopicName("releases")
    slot_partials = _TopicName("slot-partials")
    decisions = _TopicName("decisions")
    dead_letters = _TopicName("dead-letters")

    def specs(self) -> list[TopicSpec]:
        """All topic definitions, in :data:`TOPIC_KEYS` order."""

        def delete(retention_ms: int) -> dict[str, str]:
            return {"cleanup.policy": "delete", "retention.ms": str(retention_ms)}

        n, r = self.partitions, self.replication
        layout: dict[str, tuple[int, dict[str, str]]] = {
            "reports": (n, delete(self.reports_retention_ms)),
            "requirements": (
                n,
                {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"},
            ),
            "releases": (1, delete(self.releases_retention_ms)),
            "slot-partials": (1, delete(self.internal_retention_ms)),
            "decisions": (1, delete(self.internal_retention_ms)),
            "dead-letters": (1, delete(self.dead_letters_retention_ms)),
        }
        # a write (the producers' acks=all) is acknowledged once min.insync.replicas replicas
        # hold it: 2 with 2 or more replicas, so that one node lost loses no acknowledged write
        durable = {"min.insync.replicas": str(min_insync_replicas(r))}
        return [
            TopicSpec(key, self.name(key), parts, r, {**config, **durable})
            for key, (parts, config) in layout.items()
        ]

    def spec(self, key: str) -> TopicSpec:
        """The definition of one logical topic."""
        for spec in self.specs():
            if spec.key == key:
                return spec
        raise KeyError(key)

    def with_partitions(self, partitions: int) -> Topics:
        """A copy with another ``reports`` partition count."""
        return replace(self, partitions=partitions)


async def create_topics(
    bootstrap: str,
    specs: Iterable[TopicSpec],
    *,
    timeout: float = 30.0,
) -> dict[str, bool]:
    """Create the topics that do not exist yet; return ``{name: created}``.

    Idempotent: an existing topic with the expected partition count is left alone. An existing topic
    with a different partition count raises :class:`TopicError`, because partition workers and
    table changelogs rely on the declared layout. Returns once the broker describes every topic
    with its partitions (up to ``timeout``): Apache Kafka answers a create before its metadata
    has spread, and a worker started at that moment would find the topics missing.
    """
    specs = list(specs)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options(),
                                request_timeout_ms=int(timeout * 1000))
    await asyncio.wait_for(admin.start(), timeout)
    try:
        response = await admin.create_topics(
            [s.new_topic() for s in specs], timeout_ms=int(timeout * 1000)
        )
        created: dict[str, bool] = {}
        for topic, code, message in _topic_errors(response):
            if code == 0:
                created[topic] = True
            elif code == _TOPIC_ALREADY_EXISTS:
                created[topic] = False
            else:
                raise TopicError(f"creating {topic!r} failed: error {code}: {message}")
        existing = {s.name: s for s in specs if not created.get(s.name, False)}
        names = [s.name for s in specs]
        partitions = await _partition_counts(admin, names)
        # Apache Kafka describes a topic created a moment ago without its partitions (or not
        # at all) until its metadata has spread; wait for it rather than report "None
        # partitions", or return before a worker could find the topics
        deadline = asyncio.get_running_loop().time() + timeout
        while (any(partitions.get(n) is None for n in names)
               and asyncio.get_running_loop().time() < deadline):
            await asyncio.sleep(0.1)
            partitions = await _partition_counts(admin, names)
        for name, spec in existing.items():
            if partitions.get(name) != spec.partitions:
                raise TopicError(
                    f"topic {name!r} exists with {partitions.get(name)} partitions, "
                    f"expected {spec.partitions}"
                )
        return {s.name: created.get(s.name, False) for s in specs}
    finally:
        await admin.close()


async def describe_topics(
    bootstrap: str, names: Iterable[str], *, timeout: float = 30.0
) -> dict[str, tuple[int, dict[str, str]]]:
    """Return ``{name: (partitions, explicitly set configs)}`` for existing topics."""
    names = list(names)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options(),
                                request_timeout_ms=int(timeout * 1000))
    await asyncio.wait_for(admin.start(), timeout)
    try:
        partitions = await _partition_counts(admin, names)
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, n) for n in partitions]
        )
        configs: dict[str, dict[str, str]] = {n: {} for n in partitions}
        for response in responses:
            for resource in response.resources:
                _code, _msg, _rtype, rname, entries = resource[:5]
                for entry in entries:
                    cname, cvalue, _ro, source = entry[:4]
                    # source 1 = set on the topic (DYNAMIC_TOPIC_CONFIG)
                    if source == 1 and rname in configs:
                        configs[rname][cname] = cvalue
        return {n: (partitions[n], configs[n]) for n in partitions}
    finally:
        await admin.close()


async def _partition_counts(admin: AIOKafkaAdminClient, names: list[str]) -> dict[str, int]:
    described = await admin.describe_topics(names)
    return {
        d["topic"]: len(d["partitions"])
        for d in described
        if d.get("error_code", 0) == 0 and d["partitions"]
    }


def _topic_errors(response: object) -> list[tuple[str, int, str | None]]:
    rows = getattr(response, "topic_errors", [])
    out = []
    for row in rows:
        topic, code = row[0], row[1]
        message = row[2] if len(row) > 2 else None
        out.append((topic, code, message))
    return out
