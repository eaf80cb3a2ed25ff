"""``pwevent replay``: riding out a broker outage, giving up with one line, resuming with
``--from-slot``, and recorded streams with ``--requirements`` (live and ``--in-process``)."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from brokers import BROKER_KINDS, RestartableKafka, restartable
from forked_workers import Process, run_command, start_captured
from jobkit import (
    SECRET,
    RestartableBroker,
    config,
    job_nonce,
    start_worker,
    stop_worker,
    wait_for_slots,
)

from local_kafka.embedded import EmbeddedBroker, free_port
from streams.data.sources import make_source
from streams.job.partitions.accumulator import watermark_of
from streams.job.pipeline import InProcessJob
from streams.kafka.topics import Topics, create_topics

PARTITIONS = 2
USERS, SLOTS, RATE = 100, 30, 500  # 3,000 reports, about 6 s at RATE
SOURCE_FLAGS = ["--dataset", "sin", "--users", str(USERS), "--slots", str(SLOTS), "--seed", "1"]
ERROR = re.compile(r"pwevent replay: error: the broker at 127\.0\.0\.1:(\d+) has been unreachable "
                   r"for (\d+) s; (\d+) of (\d+) slots sent \(resume with --from-slot (\d+)\)")


async def _read(bootstrap: str, topic: str, upto: dict[int, int] | None = None,
                partitions: int = PARTITIONS) -> dict[int, list[tuple]]:
    """Per partition, ``(offset, key, value)`` of every record below ``upto`` (default: the
    log end now), in offset order."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        if upto is None:
            upto = {tp.partition: end for tp, end in (await consumer.end_offsets(tps)).items()}
        await consumer.seek_to_beginning(*tps)
        out: dict[int, list[tuple]] = {p: [] for p in range(partitions)}
        deadline = time.monotonic() + 30
        while any(len(out[p]) < upto[p] for p in out) and time.monotonic() < deadline:
            for tp, recs in (await consumer.getmany(timeout_ms=200)).items():
                out[tp.partition] += [(r.offset, r.key, r.value) for r in recs
                                      if r.offset < upto[tp.partition]]
        return out
    finally:
        await consumer.stop()


def reported(bootstrap: str, topic: str) -> int:
    """Records on the topic now (all partitions)."""
    async def ends() -> int:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            return sum((await consumer.end_offsets(tps)).values())
        finally:
            await consumer.stop()

    return asyncio.run(ends())


def replay(bootstrap: str, prefix: str, *flags: str) -> Process:
    return start_captured(["replay", "--broker", bootstrap, "--prefix", prefix, "--partitions",
                           str(PARTITIONS), "--stream", "s", "--slot-ms", "1000", "--secret",
                           SECRET, "--register-timeout", "0", *flags])


def wait_for_records(bootstrap: str, topic: str, count: int, proc: Process) -> None:
    deadline = time.monotonic() + 30
    while reported(bootstrap, topic) < count:
        assert proc.poll() is None, proc.communicate()[1].decode()
        assert time.monotonic() < deadline, "the replay did not get going"
        time.sleep(0.1)


def stop_between_slots(broker: RestartableBroker | RestartableKafka, proc: Process,
                       topic: str) -> None:
    """Stop the broker (SIGTERM) while the replay waits between two slots, paused (SIGSTOP)
    for the moment it takes: the topic ends on a slot boundary and has not moved for 0.1 s.

    The embedded broker acknowledges writes that reach it while it shuts down without keeping
    them, a loss no client can mend (the replay's notice can only warn about it); stopped with
    no write in flight it keeps every acknowledged record, so the test checks the replay's part.
    """
    async def wait_for_a_gap() -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            deadline = time.monotonic() + 20
            last, since = -1, time.monotonic()
            while time.monotonic() < deadline:
                count = sum((await consumer.end_offsets(tps)).values())
                if count != last:
                    last, since = count, time.monotonic()
                elif count % USERS == 0 and time.monotonic() - since >= 0.1:
                    return
                await asyncio.sleep(0.01)
            raise AssertionError("the replay never paused between two slots")
        finally:
            await consumer.stop()

    asyncio.run(wait_for_a_gap())
    os.kill(proc.pid, signal.SIGSTOP)
    try:
        broker.stop()
    finally:
        os.kill(proc.pid, signal.SIGCONT)


def finish(proc: Process, timeout: float) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc.returncode, out.decode(), err.decode()


def source_records() -> Counter:
    src = make_source("sin", USERS, SLOTS, seed=1, epsilon=0.6, window=120)
    return Counter(rec for _slot, records in src.slot_batches(0, 1000) for rec in records)


def user_slot(value: bytes) -> tuple[str, int]:
    doc = orjson.loads(value)
    return doc["user"], doc["time"] // 1000


def releases_of(reports: list[tuple[bytes, bytes]], nonce: str) -> tuple[list[bytes], Counter]:
    """The job's releases (and dead-letter reasons) for these report records, in-process."""
    cfg = config("replay", domain={"kind": "cells", "size": 2}, nonce=nonce)
    src = make_source("sin", USERS, SLOTS, seed=1, epsilon=0.6, window=120)
    job = InProcessJob(cfg)
    job.register(src.requirement_records())
    job.feed(reports)
    job.finish(SLOTS * 1000)
    return sorted(job.releases, key=lambda r: orjson.loads(r)["slot"]), Counter(
        d.reason for d in job.dead)


@pytest.mark.parametrize("kind", BROKER_KINDS)
def test_replay_rides_out_a_broker_restart(kind: str, tmp_path: Path) -> None:
    broker = restartable(kind, tmp_path / "broker")
    broker.start()
    proc = None
    try:
        topics = Topics(prefix="restart", partitions=PARTITIONS)
        asyncio.run(create_topics(broker.bootstrap, topics.specs()))
        proc = replay(broker.bootstrap, "restart", *SOURCE_FLAGS, "--rate", str(RATE),
                      "--broker-timeout", "30")
        wait_for_records(broker.bootstrap, topics.reports, 10 * USERS, proc)
        # what the broker holds (so at least what the replay was told it had) before the stop
        before = asyncio.run(_read(broker.bootstrap, topics.reports))
        stop_between_slots(broker, proc, topics.reports)
        time.sleep(5)
        broker.start()
        code, out, err = finish(proc, 60)
        after = asyncio.run(_read(broker.bootstrap, topics.reports))
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()
        broker.stop()
    assert code == 0, err
    summary = orjson.loads(out)
    assert summary["reports"] == USERS * SLOTS and summary["slots"] == SLOTS
    notices = err.splitlines()
    assert len(notices) == 1 and notices[0].startswith(
        f"pwevent replay: reconnected to the broker at {broker.bootstrap} after "), err
    assert summary["reconnects"] == 1
    assert sum(map(len, before.values())) >= 10 * USERS
    # every record the broker held before the stop is still there, at the same offset
    for p in range(PARTITIONS):
        lost = [r for r, again in zip(before[p], after[p][:len(before[p])], strict=False)
                if r != again]
        assert not lost and len(after[p]) >= len(before[p]), (
            f"partition {p}: the restart lost {len(lost) or len(before[p]) - len(after[p])} "
            f"record(s) written before the stop, the first at offset "
            f"{(lost or before[p][len(after[p]):])[0][0]}")
    check_replayed(after, err, summary)


def check_replayed(after: dict[int, list[tuple]], err: str, summary: dict) -> None:
    """The topic holds every record of the source, a report twice only as the replay's notice
    allows, the releases are the source's, and the last slot is closed."""
    records = [(k, v) for p in range(PARTITIONS) for _o, k, v in after[p]]
    reports = [(k, v) for k, v in records if k is not None]
    expected = source_records()
    got = Counter(reports)
    assert set(got) == set(expected), "records missing from or foreign to the topic"
    pairs = Counter(user_slot(v) for _k, v in reports)
    assert set(pairs) == {user_slot(v) for _k, v in expected}
    repeats = sum(n - 1 for n in pairs.values())
    if repeats:
        # the unknown-fate case of the replay's docstring: allowed only when its notice said
        # so, for records it sent again, and only as repeats the job's rule discards (below)
        assert "may be on the topic twice" in err and repeats <= summary["resent"], err
    # the job's rule: one report per user and slot counts, the first; a repeat is a dead
    # letter, and the releases are those of the source as it was
    nonce = "ab" * 16
    from_topic, dead = releases_of(reports, nonce)
    from_source, _ = releases_of(list(expected.elements()), nonce)
    assert len(from_topic) == SLOTS and from_topic == from_source
    assert dead == (Counter({"duplicate_in_slot": repeats}) if repeats else Counter())
    # the last slot is closed: one authentic watermark record per partition, at its end
    marks = [watermark_of((k, v, p, o), SECRET.encode(), "s")
             for p in range(PARTITIONS) for o, k, v in after[p] if k is None]
    assert sorted(marks) == [SLOTS * 1000] * PARTITIONS


REQUEST_TIMEOUT, FREEZE = 2, 7  # seconds: the broker answers nothing for 3.5 request timeouts


@pytest.mark.parametrize("kind", BROKER_KINDS)
def test_replay_rides_out_a_frozen_broker_past_its_request_timeout(kind: str,
                                                                 tmp_path: Path) -> None:
    """The broker stops answering (SIGSTOP: connections stay open, requests hang) for longer
    than the replay client's request and metadata timeouts, lowered with ``--request-timeout``
    so that the test need not outlast aiokafka's 40 s; then it answers again (SIGCONT). The
    replay's requests time out and are retried, and it goes on: no record lost, the releases
    are the source's."""
    broker = restartable(kind, tmp_path / "broker")
    broker.start()
    proc = None
    try:
        topics = Topics(prefix="frozen", partitions=PARTITIONS)
        asyncio.run(create_topics(broker.bootstrap, topics.specs()))
        proc = replay(broker.bootstrap, "frozen", *SOURCE_FLAGS, "--rate", str(RATE),
                      "--broker-timeout", "30", "--request-timeout", str(REQUEST_TIMEOUT))
        wait_for_records(broker.bootstrap, topics.reports, 10 * USERS, proc)
        assert broker.proc is not None
        os.kill(broker.proc.pid, signal.SIGSTOP)
        frozen = time.monotonic()
        try:
            time.sleep(FREEZE)
        finally:
            os.kill(broker.proc.pid, signal.SIGCONT)
        code, out, err = finish(proc, 60)
        took = time.monotonic() - frozen
        after = asyncio.run(_read(broker.bootstrap, topics.reports))
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.communicate()
        broker.stop()
    assert code == 0, err
    assert took >= FREEZE
    summary = orjson.loads(out)
    assert summary["reports"] == USERS * SLOTS and summary["slots"] == SLOTS
    # the replay saw no failure it had to mend (its client retried the timed-out requests), or
    # one outage, noticed once
    assert summary["reconnects"] == len(err.splitlines()) <= 1, err
    check_replayed(after, err, summary)


@pytest.mark.parametrize("kind", BROKER_KINDS)
def test_replay_gives_up_with_one_line_and_resumes_from_the_slot_it_names(kind: str,
                                                                        tmp_path) -> None:
    broker = restartable(kind, tmp_path / "broker")
    broker.start()
    proc = resumed = None
    try:
        topics = Topics(prefix="down", partitions=PARTITIONS)
        asyncio.run(create_topics(broker.bootstrap, topics.specs()))
        proc = replay(broker.bootstrap, "down", *SOURCE_FLAGS, "--rate", str(RATE),
                      "--broker-timeout", "4")
        wait_for_records(broker.bootstrap, topics.reports, 5 * USERS, proc)
        stop_between_slots(broker, proc, topics.reports)
        stopped = time.monotonic()
        code, out, err = finish(proc, 40)
        took = time.monotonic() - stopped
        assert code == 2, err
        assert took < 4 + 6, f"gave up {took:.1f} s after the broker stopped"
        assert out == ""
        lines = err.splitlines()
        assert len(lines) == 1, err
        match = ERROR.fullmatch(lines[0])
        assert match, lines[0]
        port, seconds, done, total, resume = map(int, match.groups())
        assert (port, seconds, total) == (broker.port, 4, SLOTS)
        assert 5 <= done < SLOTS and resume == done  # slots 0.. are sent in order
        # the slots it called sent are on the topic, whole; resuming sends the rest
        broker.start()
        pairs = Counter(user_slot(v) for p, recs in asyncio.run(
            _read(broker.bootstrap, topics.reports)).items() for _o, k, v in recs if k)
        assert all(pairs[(f"u{i}", t)] >= 1 for i in range(USERS) for t in range(done))
        resumed = replay(broker.bootstrap, "down", *SOURCE_FLAGS, "--from-slot", str(resume))
        code, out, err = finish(resumed, 60)
        assert code == 0, err
        assert orjson.loads(out)["slots"] == SLOTS - resume
        after = asyncio.run(_read(broker.bootstrap, topics.reports))
    finally:
        for p in (proc, resumed):
            if p is not None and p.poll() is None:
                p.kill()
                p.communicate()
        broker.stop()
    reports = [(k, v) for p in range(PARTITIONS) for _o, k, v in after[p] if k is not None]
    assert set(reports) == set(source_records())
    repeated = {user_slot(v) for v, n in Counter(v for _k, v in reports).items() if n > 1}
    # only the slot the error line named can be repeated (it may have been partly sent)
    assert {t for _u, t in repeated} <= {resume}


def test_replay_with_no_broker_at_all_gives_up_with_one_line(tmp_path) -> None:
    port = free_port()
    started = time.monotonic()
    code, out, err = finish(replay(f"127.0.0.1:{port}", "none", *SOURCE_FLAGS,
                                   "--broker-timeout", "2"), 30)
    assert code == 2 and out == ""
    assert time.monotonic() - started < 2 + 8
    assert err.splitlines() == [
        f"pwevent replay: error: the broker at 127.0.0.1:{port} has been unreachable for 2 s; "
        f"0 of {SLOTS} slots sent (resume with --from-slot 0)"]


# -- recorded streams -------------------------------------------------------------------------

REC_USERS = [f"r{i}" for i in range(12)]
REC_SLOTS = 5


def write_recording(tmp_path: Path) -> tuple[Path, Path]:
    """A recorded reports file (times as epoch ms and ISO 8601) and its requirements CSV."""
    recording = tmp_path / "reports.jsonl"
    lines = []
    for t in range(REC_SLOTS):
        for i, user in enumerate(REC_USERS):
            if (i + t) % 4 == 0:
                continue  # not every user reports at every slot
            ms = t * 1000 + i * 50
            when = ms if i % 2 else f"1970-01-01T00:00:{ms // 1000:02d}.{ms % 1000:03d}Z"
            lines.append(orjson.dumps({"user": user, "time": when, "value": (i + t) % 3}))
    recording.write_bytes(b"\n".join(lines) + b"\n")
    requirements = tmp_path / "requirements.csv"
    requirements.write_text("user,w,E\n" + "".join(
        f"{u},{3 + i % 3},{1.0 + i % 2}\n" for i, u in enumerate(REC_USERS)))
    return recording, requirements


def in_process(recording: Path, *flags: str) -> subprocess.CompletedProcess:
    return run_command(
        ["replay", "--in-process", "--secret", SECRET, "--dataset", "recorded", "--data",
         str(recording), "--slot-ms", "1000", "--cells", "3", "--partitions", str(PARTITIONS),
         "--event-time", "history", *flags], timeout=60)


def test_recorded_replay_with_requirements_in_process(tmp_path: Path) -> None:
    recording, requirements = write_recording(tmp_path)
    done = in_process(recording, "--requirements", str(requirements))
    assert done.returncode == 0, done.stderr.decode()
    releases = [orjson.loads(line) for line in done.stdout.decode().splitlines()]
    assert [r["slot"] for r in releases] == list(range(REC_SLOTS))  # the last one included
    assert all(r["users"] == len(REC_USERS) for r in releases)
    assert done.stderr.decode().splitlines() == [f"{REC_SLOTS} releases, 0 records rejected"]


def test_recorded_replay_without_requirements_warns_up_front(tmp_path: Path) -> None:
    recording, _requirements = write_recording(tmp_path)
    done = in_process(recording)
    assert done.returncode == 0
    lines = done.stderr.decode().splitlines()
    warnings = [line for line in lines if "warning" in line]
    assert warnings == [lines[0]] == [
        "pwevent replay: warning: --dataset recorded without --requirements registers no users, "
        "so every report goes to dead letters as unregistered_user"]


def test_bad_requirements_file_is_one_line_and_status_2(tmp_path: Path) -> None:
    recording, requirements = write_recording(tmp_path)
    requirements.write_text("user,w,E\nr0,0,1.0\n")
    done = in_process(recording, "--requirements", str(requirements))
    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == [
        f"pwevent replay: error: {requirements}:2: field w=0 must be >= 1"]


def test_recorded_replay_into_the_job_registers_then_closes_the_last_slot(tmp_path) -> None:
    """A recorded file with its requirements, replayed into a running worker: the requirements
    are registered before the reports, the closing watermark records follow them, and the
    worker releases every slot, the last one included, exactly as ``--in-process`` does with
    the job's nonce."""
    recording, requirements = write_recording(tmp_path)
    cfg = config("rec")  # the replay's stream: 2 partitions, 1 s slots, 3 cells, history
    with EmbeddedBroker() as broker:
        topics = Topics(prefix="rec", partitions=PARTITIONS)
        asyncio.run(create_topics(broker.bootstrap, topics.specs()))
        worker = start_worker(broker.bootstrap, cfg, tmp_path / "data", tmp_path / "worker.log")
        try:
            code, out, err = finish(replay(broker.bootstrap, "rec", "--dataset", "recorded",
                                           "--data", str(recording), "--requirements",
                                           str(requirements), "--register-timeout", "60"), 90)
            assert code == 0, err
            assert "warning" not in err, err  # the job registered the users in time
            assert orjson.loads(out)["slots"] == REC_SLOTS
            docs = wait_for_slots(broker.bootstrap, topics, set(range(REC_SLOTS)), 60, worker)
            released = asyncio.run(_read(broker.bootstrap, topics.releases, partitions=1))
            nonce = job_nonce(broker.bootstrap, topics)
            registered = asyncio.run(_read(broker.bootstrap, topics.requirements))
            reports = asyncio.run(_read(broker.bootstrap, topics.reports))
        finally:
            stop_worker(worker, kill=True)  # its shutdown is not what this test is about
    users = sorted(orjson.loads(v)["user"] for recs in registered.values() for _o, _k, v in recs)
    assert users == sorted(REC_USERS)
    lines = recording.read_bytes().splitlines()
    assert sorted(v for recs in reports.values() for _o, k, v in recs if k) == sorted(lines)
    for p, recs in reports.items():
        # after every report of its partition, the replay's closing watermark (the worker's own
        # idle close may add marks of its own, which never move a watermark back)
        last = max(i for i, (_o, k, _v) in enumerate(recs) if k is not None)
        marks = [watermark_of((k, v, p, o), SECRET.encode(), "s") for o, k, v in recs[last + 1:]]
        assert REC_SLOTS * 1000 in marks and max(marks) == REC_SLOTS * 1000, marks
    assert sorted(d["slot"] for d in docs) == list(range(REC_SLOTS))  # the last one included
    assert all(d["users"] == len(REC_USERS) for d in docs)
    done = in_process(recording, "--requirements", str(requirements), "--stream", "s",
                      "--nonce", nonce, "--mechanism", cfg.mechanism)
    assert done.returncode == 0, done.stderr.decode()
    assert [v for _o, _k, v in released[0]] == done.stdout.splitlines()


def test_requirements_and_no_requirements_exclude_each_other(tmp_path: Path) -> None:
    recording, requirements = write_recording(tmp_path)
    done = in_process(recording, "--requirements", str(requirements), "--no-requirements")
    assert done.returncode == 2
    assert b"exclude each other" in done.stderr


def test_from_slot_is_for_a_live_replay(tmp_path: Path) -> None:
    recording, requirements = write_recording(tmp_path)
    done = in_process(recording, "--requirements", str(requirements), "--from-slot", "3")
    assert done.returncode == 2 and b"--from-slot" in done.stderr
