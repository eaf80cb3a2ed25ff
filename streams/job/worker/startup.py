"""What a worker checks before it starts: the deployment's topics and its data directory.

A worker started against the wrong deployment would otherwise fail late or not at all: with a
wrong ``--prefix`` the broker auto-creates the topics it subscribes to (with one partition) and
the worker waits for records that never come; a data directory holding another stream's RocksDB
state makes the worker crash while it recovers its tables; an unreachable broker, or one that
refuses the worker's login, ends in a long traceback. :func:`check_topics` and
:func:`bind_data_dir` find these before the Faust app is built and raise :class:`StartupError`,
whose message is one line naming what is wrong and how to fix it.

:func:`check_topics` never creates a topic: it reads the cluster's metadata for all topics at
once (a metadata request without topic names, which never auto-creates one) and compares it with
:meth:`~streams.kafka.topics.Topics.specs`.

:func:`check_local_state` refuses a data directory whose tables are ahead of a broker that lost
writes; ``--reset-local-state`` is the way out: :func:`restore_lost_releases` puts back what the
coordinator store recorded and the broker lost, then :func:`reset_local_state` deletes the stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import zlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Final

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from streams.kafka.errors import HANDSHAKE_TIMEOUT_S, authentication_failed, authentication_failure
from streams.kafka.settings import client_options
from streams.kafka.topics import TopicError, Topics, TopicSpec, create_topics, min_insync_replicas

if TYPE_CHECKING:
    from streams.job.config import JobConfig

__all__ = [
    "BINDING_FILE",
    "StartupError",
    "bind_data_dir",
    "check_topics",
    "layout_problem",
    "reset_local_state",
    "restore_lost_releases",
]

#: The file in a data directory that names the (prefix, stream) whose state it holds.
BINDING_FILE: Final = "pwevent-binding.json"
#: Where Faust keeps a table's RocksDB store per partition, under the data directory.
TABLES_DIR: Final = Path("v1") / "tables"
#: The key under which Faust's RocksDB store records the changelog offset it has applied.
_OFFSET_KEY: Final = b"__faust\0offset__"

#: How the state of a data directory is given up; true because every table of the job
#: (``users``, ``checkpoints``, ``coordinator``) is RocksDB with a changelog topic.
RESET: Final = ("to reuse it for another stream, stop the worker and delete the directory "
                "(its state is rebuilt from the changelog topics)")

_GRACE: Final = 0.5  # seconds past a client's own request timeout before it is cancelled


class StartupError(RuntimeError):
    """The worker must not start; the message is one line: the cause and the fix."""


# -- topics ---------------------------------------------------------------------------------------


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
    with _quiet_kafka_logs(), asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
        found = runner.run(_partition_counts(bootstrap, timeout))
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
        with _quiet_kafka_logs(), asyncio.Runner(loop_factory=asyncio.new_event_loop) as runner:
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


async def _partition_counts(bootstrap: str, timeout: float) -> dict[str, int]:
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
            await asyncio.wait_for(admin.start(), remaining + _GRACE)
            reached = True
            # no topic names: all topics, and a request that cannot auto-create any
            described = await asyncio.wait_for(
                admin.describe_topics(), max(deadline - loop.time(), 0.1) + _GRACE)
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
def _quiet_kafka_logs() -> Iterator[None]:
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


# -- the data directory ---------------------------------------------------------------------------


def bind_data_dir(data_dir: Path, prefix: str, stream: str, reset: bool = False) -> bool:
    """Make sure ``data_dir`` holds (or will hold) the state of this (prefix, stream) only;
    returns whether it was bound to them before.

    The job's tables (``users``, ``checkpoints``, ``coordinator``) live as RocksDB files in the
    data directory under names that do not say which deployment they belong to, so a directory
    reused for another prefix or stream would be read as that stream's state. On first use this
    writes ``data_dir/pwevent-binding.json`` (``{"prefix", "stream"}``), creating the directory
    if need be; on later starts it compares and raises :class:`StartupError` on a mismatch.

    A directory that holds table state but no binding file (written by a version that wrote
    none, or copied from elsewhere) may be another stream's: it is refused, unless ``reset``
    (``--reset-local-state``), which deletes that state before the worker starts; files other
    than table state do not count.
    """
    path = data_dir / BINDING_FILE
    wanted = {"prefix": prefix, "stream": stream}
    if data_dir.exists() and not data_dir.is_dir():
        raise StartupError(f"--data-dir {data_dir} is not a directory")
    if path.exists():
        try:
            bound = json.loads(path.read_text(encoding="utf-8"))
            bound = {"prefix": str(bound["prefix"]), "stream": str(bound["stream"])}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StartupError(f"data directory {data_dir} has an unreadable {BINDING_FILE} "
                               f"({type(exc).__name__}); {RESET}") from None
        if bound != wanted:
            raise StartupError(
                f"data directory {data_dir} holds the state of {_binding(bound)}, not of "
                f"{_binding(wanted)}: use another --data-dir, or, {RESET}")
        return True
    tables = data_dir / TABLES_DIR
    if not reset and tables.is_dir() and any(tables.iterdir()):
        raise StartupError(
            f"data directory {data_dir} holds table state but no {BINDING_FILE}, so it may be "
            f"another stream's: start the worker with --reset-local-state to rebuild its tables "
            f"from the changelog topics of {_binding(wanted)}, or use another --data-dir")
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        partial = data_dir / f".{BINDING_FILE}.tmp"
        partial.write_text(json.dumps(wanted) + "\n", encoding="utf-8")
        os.replace(partial, path)
    except OSError as exc:
        raise StartupError(f"cannot write {path}: {exc.strerror or exc}") from None
    return False


def _binding(binding: Mapping[str, str]) -> str:
    return (f"--prefix {shlex.quote(binding['prefix'])} "
            f"--stream {shlex.quote(binding['stream'])}")


# -- local state against the broker ---------------------------------------------------------------


def _store_values(path: Path, keys: list[bytes], data_dir: Path) -> list[bytes | None]:
    """The values of ``keys`` in the RocksDB store at ``path`` (opened read only)."""
    from rocksdict import AccessType, Options, Rdict

    try:
        db = Rdict(str(path), options=Options(raw_mode=True),
                   access_type=AccessType.read_only())
    except Exception as exc:  # noqa: BLE001 - a store that cannot be read is reported
        raise StartupError(f"cannot read the table store {path}: {exc}; stop any worker "
                           f"using --data-dir {data_dir}") from None
    try:
        return [db.get(key) for key in keys]
    finally:
        db.close()


def local_offsets(data_dir: Path) -> dict[tuple[str, int], int]:
    """``{(table, partition): changelog offset}`` that the worker's RocksDB stores in
    ``data_dir`` have applied (read only; stores without an offset are left out)."""
    out: dict[tuple[str, int], int] = {}
    root = data_dir / TABLES_DIR
    if not root.is_dir():
        return out
    for path in sorted(root.glob("*-*.db")):
        table, _, part = path.name[:-len(".db")].rpartition("-")
        if not part.isdigit():
            continue
        (value,) = _store_values(path, [_OFFSET_KEY], data_dir)
        if value is not None:
            out[(table, int(part))] = int(value)
    return out


def check_local_state(data_dir: Path, app_id: str, bootstrap: str, timeout: float) -> None:
    """Refuse to start when the worker's local state is ahead of the broker.

    A broker that lost its last acknowledged writes (a crash before they reached its disk)
    leaves each table's changelog shorter than what the worker's RocksDB store had applied;
    Faust would then refuse to recover the table and the worker would crash at every start.
    This names the first such changelog partition with both offsets, and the way out:
    ``--reset-local-state``, which first puts back on the topics the releases that the worker's
    coordinator store holds and the broker lost (:func:`restore_lost_releases`); the tables are
    then rebuilt from the changelogs and the coordinator takes the slots already released from
    the ``releases`` topic.
    """
    held = local_offsets(data_dir)
    if not held:
        return
    ends = asyncio.run(_changelog_ends(bootstrap, app_id, sorted({t for t, _ in held}),
                                       timeout))
    for (table, part), offset in sorted(held.items()):
        topic = f"{app_id}-{table}-changelog"
        end = ends.get((topic, part))
        if end is not None and offset >= end:
            raise StartupError(
                f"the broker has lost writes that this worker's state holds: {topic}[{part}] "
                f"ends before offset {end}, the state in {data_dir} has applied offset {offset}; "
                f"restart the worker with --reset-local-state (releases its state holds and the "
                f"broker lost are put back, its tables are rebuilt from the changelogs)")


async def _changelog_ends(bootstrap: str, app_id: str, tables: list[str],
                          timeout: float) -> dict[tuple[str, int], int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **client_options(),
                                request_timeout_ms=int(timeout * 1000))
    try:
        with _quiet_kafka_logs():
            await asyncio.wait_for(consumer.start(), timeout + _GRACE)
            tps = []
            for table in tables:
                topic = f"{app_id}-{table}-changelog"
                parts = consumer.partitions_for_topic(topic)
                if parts is None:
                    await consumer._client.force_metadata_update()  # noqa: SLF001
                    parts = consumer.partitions_for_topic(topic)
                tps += [TopicPartition(topic, p) for p in sorted(parts or ())]
            if not tps:
                return {}
            ends = await asyncio.wait_for(consumer.end_offsets(tps), timeout + _GRACE)
            return {(tp.topic, tp.partition): off for tp, off in ends.items()}
    except (KafkaError, OSError, TimeoutError) as exc:
        raise StartupError(f"cannot read the changelog offsets from the broker at {bootstrap} "
                           f"({type(exc).__name__})") from None
    finally:
        with contextlib.suppress(Exception):
            await consumer.stop()


def restore_lost_releases(data_dir: Path, config: JobConfig, topics: Topics, bootstrap: str,
                          timeout: float) -> int:
    """Put back on ``decisions`` and ``releases`` what the coordinator store in ``data_dir``
    recorded and the broker lost (:meth:`~streams.job.coordination.coordinator.Coordinator.lost`:
    the stream's start record, its last releases and decisions), byte for byte, before
    :func:`reset_local_state` deletes the store; returns how many records were sent.

    Without this, a broker that lost the stream's start record would have the coordinator draw
    a fresh nonce, and releases it lost would be computed again: analysts who read them before
    the loss would see a slot released twice with different values. Nothing is sent when the
    store holds no coordinator state, or when the topics hold a start record with another nonce
    (the stream was started again without this state)."""
    import orjson

    from streams.job.coordination.coordinator import Coordinator
    from streams.job.worker.coordinator_runner import (
        COORDINATOR_KEY,
        emitted_records,
        stream_records,
    )

    path = data_dir / TABLES_DIR / "coordinator-0.db"
    if not path.is_dir():
        return 0
    (saved,) = _store_values(path, [COORDINATOR_KEY.encode()], data_dir)
    if not saved:
        return 0
    coord = Coordinator(config)
    coord.load_log(orjson.loads(zlib.decompress(saved)))

    async def put_back() -> int:
        start, decisions, releases = await stream_records(bootstrap, topics, config.stream)
        records = emitted_records(config, topics, coord.lost(start, decisions, releases))
        if records:
            await _send_records(bootstrap, records, timeout)
        return len(records)

    try:
        with _quiet_kafka_logs():
            return asyncio.run(put_back())
    except (KafkaError, OSError, TimeoutError) as exc:
        raise StartupError(f"cannot put back the releases of {data_dir} on the broker at "
                           f"{bootstrap} ({type(exc).__name__}); nothing was deleted") from None


async def _send_records(bootstrap: str, records: list[tuple[str, bytes, bytes, int]],
                        timeout: float) -> None:
    """Send (topic, key, value, timestamp) records to partition 0 of their topics, in order,
    each acknowledged by every replica before the next."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **client_options(), acks="all",
                                enable_idempotence=True, request_timeout_ms=int(timeout * 1000))
    await asyncio.wait_for(producer.start(), timeout + _GRACE)
    try:
        for topic, key, value, timestamp in records:
            await producer.send_and_wait(topic, value, key=key, partition=0,
                                         timestamp_ms=timestamp)
    finally:
        await producer.stop()


def reset_local_state(data_dir: Path) -> bool:
    """Delete the worker's table stores under ``data_dir`` (its binding stays); returns whether
    there was any. The worker rebuilds them from the changelog topics."""
    import shutil

    root = data_dir / TABLES_DIR
    if not root.exists():
        return False
    shutil.rmtree(root)
    return True


# -- the deployment secret ------------------------------------------------------------------------


def check_secret(bootstrap: str, decisions_topic: str, stream: str, secret: bytes,
                 timeout: float) -> None:
    """Refuse to start with a secret other than the one ``stream`` started with.

    The stream's start record (key ``<stream>/start`` on the decisions topic) carries a fingerprint
    of the secret (:func:`streams.job.slot_protocol.secret_check`). A worker with another secret
    would refuse the watermarks that the other workers sign and draw other noise; it stops here
    with one line instead. A stream that has not started yet passes."""
    import orjson

    from streams.job.slot_protocol import secret_check
    from streams.kafka.offsets import read_topic

    try:
        with _quiet_kafka_logs():
            records = asyncio.run(read_topic(bootstrap, decisions_topic, limit=timeout))
    except (KafkaError, OSError, TimeoutError) as exc:
        raise StartupError(f"cannot read {decisions_topic} from the broker at {bootstrap} "
                           f"({type(exc).__name__})") from None
    key = f"{stream}/start".encode()
    start = next((v for k, v in records if k == key), None)
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
        found = runner.run(_partition_counts(bootstrap, timeout))
    missing = [n for n in names if n not in found]
    if missing:
        raise StartupError(f"source topic {missing[0]} does not exist at {bootstrap}; a source "
                           "topic is read in place and never created")
    return {n: found[n] for n in names}
