"""Exactly-once releases on Apache Kafka: the job's idempotent release against transactions.

Starts a three-node Apache Kafka (KRaft, replication 3, ``min.insync.replicas`` 2) from the jars
``./setup.sh test`` fetched, then measures two ways of putting each slot's release and decision
on the broker once, under faults aimed at the moment between putting a release on the broker
and noting that it is there, and the node leading partition 0 of ``releases`` killed with
SIGKILL once mid-stream and started again ``--leader-down`` seconds later.

1. **The job, as built** (idempotent release): one real ``pbd`` worker on 2 partitions, reports
   of ``--slots`` one-second slots produced live and closed by watermarks. The coordinator
   records a release in its table (a changelogged RocksDB table) before it emits it, and after a
   restart emits what it recorded and had not marked emitted again, byte for byte. A reader
   tailing ``releases`` SIGKILLs the worker the moment it sees the release of each of ``--kills``
   drawn slots; every second restart is on an empty data directory (its tables come back from
   the changelogs, where the last mark may be missing, after the dead member's session expired).
2. **Transactions**: a child process emits the same release values (those part 1 published)
   with the same keys, each slot's release and decision in one Kafka transaction of a producer
   with a fixed ``transactional.id``; it notes a slot as done in a local file (fsynced) after the
   commit, as a coordinator would note it in its table, and a restart (same ``transactional.id``)
   fences the killed producer and aborts its open transaction. At the same drawn slots it
   SIGKILLs itself, alternately after the commit (before the note) and inside the transaction
   (the release sent, the commit not).

What readers see is counted twice: as ``read_uncommitted`` (Kafka's default, and what most
analytics consumers run with) and as ``read_committed``. Also the time one slot's emission
takes, plain (``acks=all``, idempotent producer) and in a transaction, without faults. Run::

    .venv/bin/python benchmarks/bench_exactly_once.py [--slots 60] [--kills 6] [--seed 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import orjson

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from aiokafka.client import AIOKafkaClient  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from jobkit import ReleaseKiller  # noqa: E402

from local_kafka.apache import ApacheKafka  # noqa: E402
from streams.job.partitions.accumulator import watermark_record  # noqa: E402
from streams.kafka.offsets import wait_consumed  # noqa: E402
from streams.kafka.producer import RawProducer, produce_raw  # noqa: E402
from streams.kafka.topics import Topics, create_topics  # noqa: E402

SECRET = "bench-eos"
STREAM = "s"
PARTITIONS = 2
SLOT_MS = 1000
USERS = 200
CELLS = 4


# -- reading ----------------------------------------------------------------------------------


async def read_all(bootstrap: str, topic: str, isolation: str) -> list[tuple[bytes, bytes]]:
    """Every record of partition 0 of ``topic`` up to its end, as a reader with ``isolation``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", isolation_level=isolation)
    await consumer.start()
    out: list[tuple[bytes, bytes]] = []
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]  # the last stable offset when committed
        await consumer.seek_to_beginning(tp)
        deadline = time.monotonic() + 60
        while await consumer.position(tp) < end and time.monotonic() < deadline:
            batch = await consumer.getmany(tp, timeout_ms=500)
            out.extend((r.key, r.value) for r in batch.get(tp, []))
    finally:
        await consumer.stop()
    return out


def tally(records: list[tuple[bytes, bytes]]) -> dict[str, int]:
    """Slots seen, records, slots seen more than once, slots whose records differ."""
    by_slot: dict[bytes, list[bytes]] = defaultdict(list)
    for key, value in records:
        by_slot[key].append(value)
    return {"slots": len(by_slot), "records": len(records),
            "repeated": sum(len(v) > 1 for v in by_slot.values()),
            "differing": sum(len(set(v)) > 1 for v in by_slot.values())}


async def leader_of(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The node leading ``partition`` of ``topic``."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        await client.force_metadata_update()
        return int(client.cluster.leader_for_partition(TopicPartition(topic, partition)))
    finally:
        await client.close()


# -- part 1: the job --------------------------------------------------------------------------


def start_worker(bootstrap: str, prefix: str, data_dir: Path, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "streams.cli", "worker", "--broker", bootstrap, "--prefix",
           prefix, "--partitions", str(PARTITIONS), "--stream", STREAM, "--mechanism", "pbd",
           "--cells", str(CELLS), "--slot-ms", str(SLOT_MS), "--idle-close-ms", "600000",
           "--event-time", "history", "--data-dir", str(data_dir), "--loglevel", "info",
           "--metrics-port", "0", "--replication-factor", "3"]
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT,
                            env=dict(os.environ, PWEVENT_SECRET=SECRET))


def kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()


def slot_batch(slot: int) -> list[tuple[bytes | None, bytes]]:
    """One report per user of ``slot``, then its close on every partition."""
    out: list[tuple[bytes | None, bytes]] = [
        (f"u{i}".encode(), orjson.dumps({"user": f"u{i}", "time": slot * SLOT_MS + i,
                                         "value": (i + slot) % CELLS})) for i in range(USERS)]
    return out


async def send_slot(bootstrap: str, topic: str, slot: int) -> None:
    """The slot's reports, then a watermark to each partition that closes it; sent again
    while a leader is moving (the job keeps one report per user and slot)."""
    for attempt in range(20):
        producer = RawProducer(bootstrap, topic, PARTITIONS)
        try:
            await producer.start()
            await producer.send_many(slot_batch(slot))
            for p in range(PARTITIONS):
                mark = watermark_record((slot + 1) * SLOT_MS, SECRET.encode(), STREAM, p)
                await producer.send_many([(None, mark)], partition=p)
            return
        except Exception:  # noqa: BLE001 - a leader moving; try again
            if attempt == 19:
                raise
            await asyncio.sleep(1)
        finally:
            await producer.stop()


def run_job(cluster: ApacheKafka, slots: int, kills: list[int], leader_at: int,
            leader_down: float, workdir: Path) -> dict:
    """Part 1; returns the tallies and the release values by slot."""
    bootstrap = cluster.bootstrap
    prefix = "eosjob"
    topics = Topics(prefix=prefix, partitions=PARTITIONS, replication=3)
    asyncio.run(create_topics(bootstrap, topics.specs()))
    reqs = [(f"u{i}".encode(), orjson.dumps({"user": f"u{i}", "w": 3 + i % 4,
                                             "E": 1.0 + (i % 3)})) for i in range(USERS)]
    asyncio.run(produce_raw(bootstrap, topics.requirements, reqs, partitions=PARTITIONS))
    log = workdir / "worker.log"
    data = iter(range(10**6))
    data_dir = workdir / f"data{next(data)}"
    worker = start_worker(bootstrap, prefix, data_dir, log)
    procs = [worker]
    killer = ReleaseKiller(bootstrap, topics.releases, set(kills), lambda: procs[-1])
    restarts = fresh = 0
    try:
        group = f"pwevent-{prefix}-{STREAM}"
        assert asyncio.run(wait_consumed(bootstrap, group, topics.requirements, PARTITIONS, 180)), \
            log.read_text()[-2000:]
        killer.start()
        victim = asyncio.run(leader_of(bootstrap, topics.releases))
        down_since = None
        slot = 0
        deadline = time.monotonic() + 900
        seen: dict[str, int] = {}
        while time.monotonic() < deadline:
            if worker.poll() is not None:  # killed: started again at once
                restarts += 1
                if restarts % 2 == 0:  # a lost disk: tables from the changelogs
                    data_dir, fresh = workdir / f"data{next(data)}", fresh + 1
                worker = start_worker(bootstrap, prefix, data_dir, log)
                procs.append(worker)
            if slot < slots:
                asyncio.run(send_slot(bootstrap, topics.reports, slot))
                if slot == leader_at:
                    cluster.kill(victim)
                    down_since = time.monotonic()
                slot += 1
            if down_since is not None and time.monotonic() - down_since >= leader_down:
                cluster.restart(victim)
                down_since = None
            time.sleep(0.3)
            if slot >= slots and down_since is None:
                seen = tally(asyncio.run(read_all(bootstrap, topics.releases,
                                                  "read_uncommitted")))
                if seen["slots"] >= slots:
                    break
    finally:
        killer.stop.set()
        worker.terminate()
        worker.wait(30)
    uncommitted = asyncio.run(read_all(bootstrap, topics.releases, "read_uncommitted"))
    committed = asyncio.run(read_all(bootstrap, topics.releases, "read_committed"))
    values: dict[int, bytes] = {}
    for key, value in uncommitted:
        values.setdefault(int(key.split(b"/")[1]), value)
    return {"read_uncommitted": tally(uncommitted), "read_committed": tally(committed),
            "restarts": restarts, "fresh_data_dirs": fresh, "killed_at": killer.killed,
            "values": values, "leader": victim}


# -- part 2: a transactional emitter ----------------------------------------------------------


async def emit_child(bootstrap: str, releases: str, decisions: str, workdir: Path,
                     kill_slots: list[int], pace: float) -> None:
    """Emit every slot not noted done, one transaction per slot; at the ``i``-th of
    ``kill_slots`` SIGKILL this process once, after the commit (even ``i``) or inside the
    transaction (odd ``i``)."""
    values_file, done_file, used_file = (workdir / "values.json", workdir / "done.txt",
                                         workdir / "killed.txt")
    values = {int(k): v.encode() for k, v in orjson.loads(values_file.read_bytes()).items()}
    done = {int(x) for x in done_file.read_text().split()} if done_file.exists() else set()
    used = {int(x) for x in used_file.read_text().split()} if used_file.exists() else set()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="eos-emitter",
                                enable_idempotence=True, request_timeout_ms=30000)
    await producer.start()  # fences the killed producer, aborts its open transaction

    def die_at(slot: int, after_commit: bool) -> None:
        if slot in kill_slots and slot not in used \
                and (kill_slots.index(slot) % 2 == 0) == after_commit:
            with used_file.open("a") as fh:
                fh.write(f"{slot}\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.kill(os.getpid(), signal.SIGKILL)

    try:
        with done_file.open("a") as note:
            for slot in sorted(values):
                if slot in done:
                    continue
                key = f"{STREAM}/{slot}".encode()
                await producer.begin_transaction()
                await producer.send_and_wait(releases, values[slot], key=key, partition=0)
                die_at(slot, after_commit=False)
                await producer.send_and_wait(decisions, b'{"slot":%d}' % slot, key=key,
                                             partition=0)
                await producer.commit_transaction()
                die_at(slot, after_commit=True)
                note.write(f"{slot}\n")
                note.flush()
                os.fsync(note.fileno())
                await asyncio.sleep(pace)
    finally:
        await producer.stop()


def start_emitter(bootstrap: str, topics: Topics, workdir: Path, kills: list[int],
                  pace: float, log: Path) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--child-emit", bootstrap, topics.releases,
           topics.decisions, str(workdir), ",".join(map(str, kills)), str(pace)]
    return subprocess.Popen(cmd, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def run_transactions(cluster: ApacheKafka, values: dict[int, bytes], kills: list[int],
                     leader_at: int, leader_down: float, workdir: Path) -> dict:
    """Part 2: the same faults around a transactional emitter."""
    bootstrap = cluster.bootstrap
    topics = Topics(prefix="eostxn", partitions=PARTITIONS, replication=3)
    asyncio.run(create_topics(bootstrap, topics.specs()))
    txdir = workdir / "txn"
    txdir.mkdir()
    (txdir / "values.json").write_bytes(
        orjson.dumps({str(k): v.decode() for k, v in values.items()}))
    done_file = txdir / "done.txt"
    log = workdir / "emitter.log"
    pace = 0.3
    victim = asyncio.run(leader_of(bootstrap, topics.releases))
    emitter = start_emitter(bootstrap, topics, txdir, kills, pace, log)
    restarts, down_since, noted, pending_leader = 0, None, 0, True
    deadline = time.monotonic() + 900
    try:
        while time.monotonic() < deadline:
            noted = len(done_file.read_text().split()) if done_file.exists() else 0
            status = emitter.poll()
            if status == 0 and noted >= len(values):
                break
            if status is not None:  # killed (or failed while a leader moved): again
                restarts += status != 0
                emitter = start_emitter(bootstrap, topics, txdir, kills, pace, log)
            if pending_leader and noted >= leader_at:
                cluster.kill(victim)
                down_since, pending_leader = time.monotonic(), False
            if down_since is not None and time.monotonic() - down_since >= leader_down:
                cluster.restart(victim)
                down_since = None
            time.sleep(0.02)
    finally:
        kill(emitter)
        if down_since is not None:
            cluster.restart(victim)
    uncommitted = asyncio.run(read_all(bootstrap, topics.releases, "read_uncommitted"))
    committed = asyncio.run(read_all(bootstrap, topics.releases, "read_committed"))
    return {"read_uncommitted": tally(uncommitted), "read_committed": tally(committed),
            "restarts": restarts, "noted": noted, "leader": victim}


async def emission_times(bootstrap: str, n: int) -> dict[str, float]:
    """Median and p99 ms of one slot's emission (release and decision), plain and in a
    transaction, on the healthy cluster."""
    topics = Topics(prefix="eostime", partitions=PARTITIONS, replication=3)
    await create_topics(bootstrap, topics.specs())
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    txn = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id="eos-timing",
                           enable_idempotence=True)
    await plain.start()
    await txn.start()
    out: dict[str, float] = {}
    value = b"x" * 300
    try:
        for name, producer in (("plain", plain), ("transaction", txn)):
            took = []
            for slot in range(n):
                key = f"{STREAM}/{slot}".encode()
                t0 = time.perf_counter()
                if producer is txn:
                    async with txn.transaction():
                        await txn.send(topics.releases, value, key=key, partition=0)
                        await txn.send(topics.decisions, value, key=key, partition=0)
                else:
                    a = await plain.send(topics.releases, value, key=key, partition=0)
                    b = await plain.send(topics.decisions, value, key=key, partition=0)
                    await asyncio.gather(a, b)
                took.append((time.perf_counter() - t0) * 1000)
            out[f"{name}_p50_ms"] = float(np.median(took))
            out[f"{name}_p99_ms"] = float(np.percentile(took, 99))
    finally:
        await plain.stop()
        await txn.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=60)
    parser.add_argument("--kills", type=int, default=6, help="SIGKILLs of the worker/emitter")
    parser.add_argument("--leader-down", type=float, default=5.0,
                        help="seconds the killed leader node stays down")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child-emit", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child_emit:
        bootstrap, releases, decisions, workdir, kill_slots, pace = args.child_emit
        asyncio.run(emit_child(bootstrap, releases, decisions, Path(workdir),
                               [int(x) for x in kill_slots.split(",") if x], float(pace)))
        return 0
    rng = random.Random(args.seed)
    kills = sorted(rng.sample(range(5, args.slots - 5), args.kills))
    leader_at = args.slots // 2
    workdir = Path(tempfile.mkdtemp(prefix="pwevent-eos-"))
    print(f"kills at the releases of slots {kills}, leader node killed after slot {leader_at}; "
          f"logs in {workdir}", flush=True)
    with ApacheKafka(3, heap_mb=384) as cluster:
        times = asyncio.run(emission_times(cluster.bootstrap, 300))
        print(orjson.dumps(times).decode(), flush=True)
        job = run_job(cluster, args.slots, kills, leader_at, args.leader_down, workdir)
        values = job.pop("values")
        print(orjson.dumps({"job": job}).decode(), flush=True)
        txn = run_transactions(cluster, values, kills, leader_at, args.leader_down, workdir)
        print(orjson.dumps({"transactions": txn}).decode(), flush=True)
    print("| emission | kills | reader | slots | records | slots repeated | repeats differing |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for name, row in (("job: recorded, then emitted", job),
                      ("transaction per slot", txn)):
        for reader in ("read_uncommitted", "read_committed"):
            t = Counter(row[reader])
            print(f"| {name} | {row['restarts']} + leader | {reader} | {t['slots']} | "
                  f"{t['records']} | {t['repeated']} | {t['differing']} |")
    print(f"one slot's emission on the healthy cluster: plain p50 {times['plain_p50_ms']:.1f} ms "
          f"(p99 {times['plain_p99_ms']:.1f}), transaction p50 "
          f"{times['transaction_p50_ms']:.1f} ms (p99 {times['transaction_p99_ms']:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
