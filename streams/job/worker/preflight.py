"""What a worker checks against the broker before it starts: the deployment's topics, the
tables' changelog topics, the source topics and the deployment secret.

A worker started against the wrong deployment would otherwise fail late or not at all: with a
wrong ``--prefix`` the broker auto-creates the topics it subscribes to (with one partition) and
the worker waits for records that never come; an unreachable broker, or one that refuses the
worker's login, ends in a long traceback. :func:`check_topics` finds these before the Faust app
is built and raises :class:`StartupError`, whose message is one line naming what is wrong and
how to fix it. It never creates a topic: it reads the cluster's metadata for all topics at once
(a metadata request without topic names, which never auto-creates one) and compares it with
:meth:`~streams.kafka.topics.Topics.specs`.

The data directory is checked by :mod:`streams.job.worker.data_dir`, the tables' state against
the broker by :mod:`streams.job.worker.local_state`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shlex
from collections.abc import Iterator, Mapping, Sequence
from typing import Final

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from streams.kafka.errors import HANDSHAKE_TIMEOUT_S, authentication_failed, authentication_failure
from streams.kafka.settings import client_options
from streams.kafka.topics import TopicError, Topics, TopicSpec, create_topics, min_insync_replicas

__all__ = [
    "GRACE",
    "TABLE_PARTITIONS",
    "StartupError",
    "changelog_specs",
    "check_stream",
    "check_source_topics",
    "check_topics",
    "create_changelogs",
    "layout_problem",
    "partition_counts",
    "quiet_kafka_logs",
]

#: The key suffix of a stream's start record on the decisions topic.
START_SUFFIX: Final = b"/start"
GRACE: Final = 0.5  # seconds past a client's own request timeout before it is cancelled


class StartupError(RuntimeError):
    """The worker must not start; the message is one line: the cause and the fix."""


def check_topics(bootstrap: str, topics: Topics, timeout: float) -> None:
    """Check that every topic of ``topics.specs()`` exists with its partition count.

    Connects to ``bootstrap`` (retrying until ``timeout`` seconds have passed, so a worker may
    start while the broker is still coming up), reads the partition counts of all topics of the
    cluster and compares. Creates nothing. Raises :class:`StartupError` when the broker cannot be
    reached or listed within ``timeout`` or when a topic is missing or has another partition
    count; every client is closed either way.

    Runs on an event loop of its own: call it outside a running loop (the worker calls it
    before Faust starts its own).
    """
    if timeout <= 0:
        raise ValueError("the startup timeout must be positive")
    with quiet_kafka_logs(), asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        found = runner.run(partition_counts(bootstrap, timeout))
    problem = layout_problem(topics, found, bootstrap)
    if problem is not None:
        raise StartupError(problem)


#: The job's tables (``streams/job/worker/faust_job.py``) and their partition counts; ``None``: one
#: per partition of the job.
TABLE_PARTITIONS: Final[Mapping[str, int | None]] = {
    "users": None, "checkpoints": None, "coordinator": 1}


def changelog_specs(app_id: str, partitions: int, replication: int) -> list[TopicSpec]:
    """The changelog topics of the job's tables, as Faust would create them: compacted, with
    the job's ``min.insync.replicas``."""
    config = {"cleanup.policy": "compact",
              "min.insync.replicas": str(min_insync_replicas(replication))}
    return [TopicSpec(table, f"{app_id}-{table}-changelog", n or partitions, replication, config)
            for table, n in TABLE_PARTITIONS.items()]


def create_changelogs(bootstrap: str, specs: list[TopicSpec], timeout: float) -> None:
    """Create the tables' changelog topics that do not exist yet, and wait until the broker
    describes their partitions, before Faust subscribes to them.

    Faust creates them too, but then subscribes at once; Apache Kafka may describe a topic
    created a moment ago without partitions, the consumer keeps that count (0) until its next
    metadata refresh (minutes), and the first write to a table then stops the worker with
    ``PartitionsMismatch`` (seen on Apache Kafka with a new stream). Raises
    :class:`StartupError` naming the topic when one cannot be created."""
    try:
        with quiet_kafka_logs(), asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
            runner.run(create_topics(bootstrap, specs, timeout=timeout))
    except (TopicError, KafkaError, OSError, TimeoutError) as exc:
        raise StartupError(f"the tables' changelog topics could not be created on {bootstrap}: "
                           f"{exc}") from exc


def layout_problem(topics: Topics, found: Mapping[str, int], bootstrap: str) -> str | None:
    """The first topic of ``topics`` that ``found`` (``{topic: partitions}`` of a cluster) lacks
    or has with another partition count, as a one-line message with the fix; ``None`` if all
    topics are as specified."""
    specs = topics.specs()
    prefix = shlex.quote(topics.prefix)
    create = (f"`pwevent topics create --broker {bootstrap} --prefix {prefix} "
              f"--partitions {topics.partitions}`")
    missing = [s for s in specs if s.name not in found]
    if missing:
        first = missing[0]
        also = (f"; {len(missing) - 1} more of its {len(specs)} topics are missing too"
                if len(missing) > 1 else "")
        where = (f"topic {first.name} does not exist on the broker at {bootstrap} (expected "
                 f"{_partitions(first.partitions)}, found none{also})")
        if len(missing) < len(specs):  # the prefix is right, the deployment is incomplete
            return f"{where}: create the missing topics with {create}"
        others = _other_prefixes(found, topics.prefix)
        hint = (f" (the broker has the topics of --prefix {', '.join(map(shlex.quote, others))})"
                if others else "")
        return f"{where}: check --prefix {prefix}{hint}, or create the topics with {create}"
    for spec in specs:
        count = found[spec.name]
        if count == spec.partitions:
            continue
        if spec.key in ("reports", "requirements"):
            counts = {found[s.name] for s in specs if s.key in ("reports", "requirements")}
            other = (f"start every worker with --partitions {count} if the topics were created "
                     f"with {count}, or " if counts == {count} else "")
            return (f"topic {spec.name} has {_partitions(count)}, expected "
                    f"{_partitions(spec.partitions)} (--partitions {topics.partitions}): "
                    f"{other}delete the topics of --prefix {prefix} and run {create}")
        return (f"topic {spec.name} has {_partitions(count)}, expected "
                f"{_partitions(spec.partitions)} (the job's layout): delete it and run {create}")
    return None


def _partitions(n: int) -> str:
    return f"{n} partition" if n == 1 else f"{n} partitions"


def _other_prefixes(found: Mapping[str, int], prefix: str) -> list[str]:
    """Prefixes of the deployments whose ``reports`` topic the cluster has, but ``prefix``."""
    suffix = ".reports"
    return sorted(name[: -len(suffix)] for name in found
                  if name.endswith(suffix) and name[: -len(suffix)] != prefix)[:3]


async def partition_counts(bootstrap: str, timeout: float) -> dict[str, int]:
    """``{topic: partitions}`` of every topic of the cluster, trying until ``timeout``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    reached = False
    last = ""
    delay = 0.2
    while True:
        remaining = deadline - loop.time()
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **client_options(),
                                    request_timeout_ms=max(100, int(remaining * 1000)))
        try:
            await asyncio.wait_for(admin.start(), remaining + GRACE)
            reached = True
            # no topic names: all topics, and a request that cannot auto-create any
            described = await asyncio.wait_for(
                admin.describe_topics(), max(deadline - loop.time(), 0.1) + GRACE)
            return {d["topic"]: len(d["partitions"]) for d in described
                    if d.get("error_code", 0) == 0}
        except (KafkaError, OSError, TimeoutError) as exc:
            last = type(exc).__name__
            refused = None if reached else await authentication_failure(
                bootstrap, exc, max(min(deadline - loop.time(), HANDSHAKE_TIMEOUT_S), 0.1))
            if refused is not None:  # trying again cannot help
                raise StartupError(authentication_failed(bootstrap, refused)) from None
        finally:
            with contextlib.suppress(Exception):
                await admin.close()
        remaining = deadline - loop.time()
        if remaining <= 0:
            break
        await asyncio.sleep(min(delay, remaining))
        delay = min(2 * delay, 2.0)
    if reached:
        raise StartupError(f"the broker at {bootstrap} did not list its topics within "
                           f"{timeout:g} s ({last}): check that it is healthy")
    raise StartupError(f"cannot reach the broker at {bootstrap} within {timeout:g} s: check "
                       f"--broker (or PWEVENT_BROKER) and that the broker is running")


@contextlib.contextmanager
def quiet_kafka_logs() -> Iterator[None]:
    """Keep aiokafka's connection errors off stderr while :func:`check_topics` retries: without
    logging configured they would reach Python's last-resort handler; the outcome is reported
    as one :class:`StartupError` instead."""
    logger = logging.getLogger("aiokafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def check_stream(bootstrap: str, decisions_topic: str, stream: str, secret: bytes,
                 timeout: float) -> None:
    """Refuse to start ``stream`` on topics another stream started on, or with a secret other
    than the one it started with.

    Every stream of a prefix reads the same ``reports`` and ``requirements``: a second stream
    there would count every report of the first again, mapped by its own source and domain, and
    spend every user's budget a second time in its own ledger. A stream's start record (key
    ``<stream>/start`` on the decisions topic) also carries a fingerprint of the secret
    (:func:`streams.job.slot_protocol.secret_check`): a worker with another secret would refuse
    the watermarks that the other workers sign and draw other noise. Either stops here with one
    line. A stream that has not started yet, alone on its topics, passes."""
    import orjson

    from streams.job.slot_protocol import secret_check
    from streams.kafka.offsets import read_topic

    try:
        with quiet_kafka_logs():
            records = asyncio.run(read_topic(bootstrap, decisions_topic, limit=timeout))
    except (KafkaError, OSError, TimeoutError) as exc:
        raise StartupError(f"cannot read {decisions_topic} from the broker at {bootstrap} "
                           f"({type(exc).__name__})") from None
    starts = {k[:-len(START_SUFFIX)].decode("utf-8", "replace"): v for k, v in records
              if k is not None and k.endswith(START_SUFFIX)}
    others = sorted(name for name in starts if name != stream)
    if others:
        raise StartupError(
            f"{decisions_topic} carries stream {others[0]!r} already: a second stream on the "
            f"same topics would count every report again and spend every user's budget twice; "
            f"give stream {stream!r} topics of its own (--prefix)")
    start = starts.get(stream)
    if start is None:
        return
    try:
        expected = orjson.loads(start).get("secret_check")
    except (orjson.JSONDecodeError, AttributeError):
        return
    if expected is not None and expected != secret_check(secret, stream):
        raise StartupError(
            f"the secret differs from the one stream {stream!r} started with (its start record "
            f"on {decisions_topic}): give every worker the deployment's secret (--secret or "
            f"PWEVENT_SECRET)")


def check_source_topics(bootstrap: str, names: Sequence[str], timeout: float) -> dict[str, int]:
    """The partition counts of the source topics; raises ``StartupError`` naming one that does
    not exist (a source topic is never created)."""
    with asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        found = runner.run(partition_counts(bootstrap, timeout))
    missing = [n for n in names if n not in found]
    if missing:
        raise StartupError(f"source topic {missing[0]} does not exist at {bootstrap}; a source "
                           "topic is read in place and never created")
    return {n: found[n] for n in names}
