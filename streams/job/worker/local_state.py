"""The tables' local state against the broker: :func:`check_local_state` refuses a data
directory whose tables are ahead of a broker that lost writes; ``--reset-local-state`` is the
way out: :func:`restore_lost_releases` puts back what the coordinator store recorded and the
broker lost, then :func:`reset_local_state` deletes the stores."""

from __future__ import annotations

import asyncio
import contextlib
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Final

from aiokafka.errors import KafkaError

from streams.job.worker.data_dir import TABLES_DIR
from streams.job.worker.preflight import GRACE, StartupError, quiet_kafka_logs
from streams.kafka.consumer_stop import stop_consumer
from streams.kafka.settings import client_options, consumer_options
from streams.kafka.topics import Topics

if TYPE_CHECKING:
    from streams.job.config import JobConfig

__all__ = ["changelog_ends", "check_local_state", "local_offsets", "reset_local_state",
           "restore_lost_releases", "send_records"]

#: The key under which Faust's RocksDB store records the changelog offset it has applied.
_OFFSET_KEY: Final = b"__faust\0offset__"


def _store_values(path: Path, keys: list[bytes], data_dir: Path) -> list[bytes | None]:
    """The values of ``keys`` in the RocksDB store at ``path`` (opened read only); none for a
    store whose creation never finished.

    RocksDB writes a new store's ``CURRENT`` file last, renamed into place once the store is
    complete, and nothing is written to a store before that. A worker SIGKILLed while creating
    one leaves a directory without it: such a store holds nothing, Faust opens it as a new one,
    and its table is recovered from the changelog."""
    from rocksdict import AccessType, Options, Rdict

    if not (path / "CURRENT").exists():
        return [None] * len(keys)
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
    ends = asyncio.run(changelog_ends(bootstrap, app_id, sorted({t for t, _ in held}),
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


async def changelog_ends(bootstrap: str, app_id: str, tables: list[str],
                          timeout: float) -> dict[tuple[str, int], int]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **consumer_options(),
                                request_timeout_ms=int(timeout * 1000))
    try:
        with quiet_kafka_logs():
            await asyncio.wait_for(consumer.start(), timeout + GRACE)
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
            ends = await asyncio.wait_for(consumer.end_offsets(tps), timeout + GRACE)
            return {(tp.topic, tp.partition): off for tp, off in ends.items()}
    except (KafkaError, OSError, TimeoutError) as exc:
        raise StartupError(f"cannot read the changelog offsets from the broker at {bootstrap} "
                           f"({type(exc).__name__})") from None
    finally:
        with contextlib.suppress(Exception):
            await stop_consumer(consumer)


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
            await send_records(bootstrap, records, timeout)
        return len(records)

    try:
        with quiet_kafka_logs():
            return asyncio.run(put_back())
    except (KafkaError, OSError, TimeoutError) as exc:
        raise StartupError(f"cannot put back the releases of {data_dir} on the broker at "
                           f"{bootstrap} ({type(exc).__name__}); nothing was deleted") from None


async def send_records(bootstrap: str, records: list[tuple[str, bytes, bytes, int]],
                        timeout: float) -> None:
    """Send (topic, key, value, timestamp) records to partition 0 of their topics, in order,
    each acknowledged by every replica before the next."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **client_options(), acks="all",
                                enable_idempotence=True, request_timeout_ms=int(timeout * 1000))
    await asyncio.wait_for(producer.start(), timeout + GRACE)
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


