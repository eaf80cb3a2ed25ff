"""``pwevent worker --mechanism lbu``: the local-DP collector on both brokers. Reports made by
the Python client on six partitions, one of them held back while the others run ahead; the
worker SIGKILLed and restarted; releases equal to the in-process collector over the same
records; live, the worker's own watermarks close the slots."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import numpy as np
import orjson
from brokers import broker_fixture
from forked_workers import Process, run_command, start_command
from jobkit import SECRET, produce, stop_worker, timestamped_records, wait_while_running
from ldp_collector.ldp_collector_kit import ORIGIN_MS, SLOT_MS, client_reports

from local_kafka.embedded import free_port
from streams.job.partitions.key_hashing import key_partitions
from streams.job.partitions.watermarks import watermark_record
from streams.kafka.topics import create_topics
from streams.ldp_collector import LdpCollector
from streams.ldp_collector.kafka_job import topic_specs
from streams.ldp_collector.stream_time import PartitionedCollector
from streams.records.dead_letters import decode_dead_letter

broker = broker_fixture()

PARTITIONS = 6
D = 4
USERS = 60
SLOTS = 6


def _worker(bootstrap: str, prefix: str, log: Path, *extra: str, event_time: str = "history",
            origin_ms: int = ORIGIN_MS, slot_ms: int = SLOT_MS, start: int = 0) -> Process:
    args = ["worker", "--broker", bootstrap, "--prefix", prefix, "--partitions",
            str(PARTITIONS), "--stream", "s", "--mechanism", "lbu", "--cells", str(D),
            "--slot-ms", str(slot_ms), "--origin-ms", str(origin_ms), "--ldp-start", str(start),
            "--ldp-epsilon", "1", "--ldp-window", "4", "--event-time", event_time,
            "--loglevel", "info", "--metrics-port", "0", *extra]
    return start_command(args, dict(os.environ, PWEVENT_SECRET=SECRET), log)


def _read(bootstrap: str, topic: str, partitions: int) -> list[list[tuple]]:
    """Each partition's (key, value, offset), in offset order."""
    parts: list[list[tuple]] = [[] for _ in range(partitions)]
    for key, value, partition, offset, _time in timestamped_records(bootstrap, topic,
                                                                     partitions):
        parts[partition].append((key, value, offset))
    return parts


def _releases(bootstrap: str, prefix: str) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = {}
    for key, value, _offset in _read(bootstrap, f"{prefix}.ldp-releases", 1)[0]:
        out.setdefault(key, []).append(value)
    return out



def _in_process(topic: list[list[tuple]], origin_ms: int = ORIGIN_MS, slot_ms: int = SLOT_MS,
                start: int = 0) -> tuple[dict[bytes, bytes], list[str]]:
    stream = PartitionedCollector(
        LdpCollector("lbu", D, origin_ms=origin_ms, slot_ms=slot_ms, start=start, E=1.0, w=4),
        PARTITIONS, SECRET.encode(), "s")
    refused = [r.reason for p, records in enumerate(topic) for r in stream.take(p, records)]
    return dict(stream.ready()), refused


def _by_partition(sent: list) -> dict[int, list]:
    home = key_partitions([s.key for s in sent], PARTITIONS).tolist()
    parts: dict[int, list] = {p: [] for p in range(PARTITIONS)}
    for s, p in zip(sent, home, strict=True):
        parts[p].append((s.key, s.value))
    return parts


def test_history_with_a_held_back_partition_and_a_sigkill(broker, tmp_path: Path) -> None:
    bootstrap, prefix = broker.bootstrap, "ldph"
    asyncio.run(create_topics(bootstrap, topic_specs(prefix, PARTITIONS)))
    cells = np.random.default_rng(5).integers(0, D, size=(USERS, SLOTS))
    parts = _by_partition(client_reports("lbu", cells, d=D, start=0,
                                         requirements=[(4, 1.0)] * USERS))
    topic, held = f"{prefix}.ldp-reports", PARTITIONS - 1
    end = watermark_record(ORIGIN_MS + SLOTS * SLOT_MS, SECRET.encode(), "s", 0)
    forged = end.replace(b'"mac":"', b'"mac":"0')
    for p in range(PARTITIONS - 1):
        closing = watermark_record(ORIGIN_MS + SLOTS * SLOT_MS, SECRET.encode(), "s", p)
        produce(bootstrap, topic, PARTITIONS, [*parts[p], (None, closing)], partition=p)
    produce(bootstrap, topic, PARTITIONS, [(None, forged)], partition=0)
    produce(bootstrap, topic, PARTITIONS, [(b"u0", b"not a report")],
            partition=int(key_partitions([b"u0"], PARTITIONS)[0]))
    log = tmp_path / "worker.log"
    proc = _worker(bootstrap, prefix, log)
    try:
        dead = wait_while_running(lambda: _read(bootstrap, f"{prefix}.dead-letters", 1)[0], 60,
                                  proc, log)
        time.sleep(1.5)  # the worker read the five partitions; the sixth holds every slot
        assert _releases(bootstrap, prefix) == {}
        stop_worker(proc, kill=True)
        produce(bootstrap, topic, PARTITIONS, [*parts[held], (None, watermark_record(
            ORIGIN_MS + SLOTS * SLOT_MS, SECRET.encode(), "s", held))], partition=held)
        proc = _worker(bootstrap, prefix, log)
        releases = wait_while_running(
            lambda: (r := _releases(bootstrap, prefix)) and len(r) == SLOTS and r, 90, proc, log)
    finally:
        stop_worker(proc)
    expected, refused = _in_process(_read(bootstrap, topic, PARTITIONS))
    assert sorted(refused) == ["malformed", "unauthenticated_control"]
    assert {k: set(v) for k, v in releases.items()} == {k: {v} for k, v in expected.items()}
    docs = [orjson.loads(v) for v in expected.values()]
    assert [d["reporters"] for d in sorted(docs, key=lambda d: d["slot"])] == [USERS] * SLOTS
    dead = _read(bootstrap, f"{prefix}.dead-letters", 1)[0]
    letters = [decode_dead_letter(v) for _k, v, _o in dead]
    assert "late" not in [d["reason"] for d in letters]
    assert {d["reason"] for d in letters} == set(refused)
    # the collector's topics hold nothing a client did not write: each dead letter is a
    # record of the reports topic, at its partition and offset, byte for byte
    written = {(p, o): (k, v) for p, records in enumerate(_read(bootstrap, topic, PARTITIONS))
               for k, v, o in records}
    assert all(written[(d["partition"], d["offset"])] == (d["key"], d["value"])
               for d in letters)


def test_live_the_workers_watermarks_close_each_slot(broker, tmp_path: Path) -> None:
    bootstrap, prefix, slot_ms = broker.bootstrap, "ldpl", 2000
    asyncio.run(create_topics(bootstrap, topic_specs(prefix, PARTITIONS)))
    origin = int(time.time() * 1000) // slot_ms * slot_ms
    start = 2  # the stream starts two slots (about 4 s) from now
    cells = np.random.default_rng(6).integers(0, D, size=(USERS, 1))
    sent = client_reports("lbu", cells, d=D, start=start, requirements=[(4, 1.0)] * USERS)
    log = tmp_path / "worker.log"
    port = free_port()
    proc = _worker(bootstrap, prefix, log, "--metrics-host", "127.0.0.1", "--metrics-port",
                   str(port), event_time="live", origin_ms=origin, slot_ms=slot_ms, start=start)
    try:
        wait_s = (origin + start * slot_ms) / 1000 - time.time()
        time.sleep(max(0.0, wait_s) + 0.2)
        for p, records in _by_partition(sent).items():
            produce(bootstrap, f"{prefix}.ldp-reports", PARTITIONS, records, partition=p)
        releases = wait_while_running(
            lambda: (r := _releases(bootstrap, prefix)) and len(r) >= 2 and r, 60, proc, log)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
        ready = urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=5).status
    finally:
        stop_worker(proc)
    assert ready == 200
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in
              metrics.decode().splitlines() if line and not line.startswith("#")}
    assert values["pwevent_ldp_caught_up"] == 1
    assert values["pwevent_ldp_releases_total"] >= 2
    # rounds of one mark to every partition; a round late on the clock closes every slot whose
    # end it passed, so two releases may follow from a single round
    written = values["pwevent_ldp_watermarks_written_total"]
    assert written >= PARTITIONS and written % PARTITIONS == 0
    assert values["pwevent_ldp_records_total"] >= USERS
    assert values["pwevent_ldp_holding_behind_ms"] == 0  # every partition gets every mark
    first = orjson.loads(releases[f"s/{start}".encode()][0])
    assert first["reporters"] == USERS and first["start"] == origin + start * slot_ms
    expected, refused = _in_process(_read(bootstrap, f"{prefix}.ldp-reports", PARTITIONS),
                                    origin, slot_ms, start)
    assert refused == []
    assert {k: set(v) for k, v in releases.items() if k in expected} == \
        {k: {v} for k, v in expected.items() if k in releases}


def test_a_second_collector_stream_on_a_prefixs_topics_is_one_line(broker,
                                                                   tmp_path: Path) -> None:
    """Every collector stream of a prefix reads its ``ldp-reports``: a worker of stream ``s``
    where stream ``first`` released stops with one line instead of counting its reports."""
    prefix = "ldp-second"
    asyncio.run(create_topics(broker.bootstrap, topic_specs(prefix, PARTITIONS)))
    produce(broker.bootstrap, f"{prefix}.ldp-releases", 1, [(b"first/3", b"{}")])
    log = tmp_path / "worker.log"
    worker = _worker(broker.bootstrap, prefix, log)
    try:
        assert worker.wait(60) == 2, log.read_text()[-2000:]
    finally:
        stop_worker(worker)
    errors = [line for line in log.read_text().splitlines() if "error" in line]
    assert errors == [f"pwevent worker: error: {prefix}.ldp-releases holds releases of stream "
                      f"'first': its reports, on the same {prefix}.ldp-reports, would be counted "
                      f"in stream 's' too; give stream 's' topics of its own (--prefix)"], errors


def _cli(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return run_command(argv, env=dict(os.environ, PWEVENT_SECRET=SECRET), timeout=300,
                       text=True)


def test_a_replay_through_clients_equals_its_in_process_run(broker, tmp_path: Path) -> None:
    bootstrap, prefix = broker.bootstrap, "ldpr"
    stream = ["--prefix", prefix, "--partitions", str(PARTITIONS), "--stream", "s",
              "--cells", str(D), "--slot-ms", str(SLOT_MS), "--origin-ms", str(ORIGIN_MS),
              "--ldp-start", "0", "--ldp-epsilon", "1", "--ldp-window", "4"]
    replay = ["replay", "--mechanism", "lsp", *stream, "--dataset", "sin", "--users", "150",
              "--slots", "9", "--nonce", "r1"]
    local = _cli(*replay, "--in-process")
    assert local.returncode == 0, local.stderr
    expected = [orjson.loads(line) for line in local.stdout.splitlines()]
    assert [d["slot"] for d in expected] == list(range(9))
    assert [d["reporters"] for d in expected] == [150, 0, 0, 0, 150, 0, 0, 0, 150]
    sent = _cli(*replay, "--broker", bootstrap)
    assert sent.returncode == 0, sent.stderr
    assert orjson.loads(sent.stdout)["reports"] == 450
    # two collectors of the one stream at once: each reads every partition and releases the
    # same bytes, so a reader keeping the first per key sees one release per slot
    args = ["worker", "--broker", bootstrap, *stream, "--mechanism", "lsp", "--event-time",
            "history", "--metrics-port", "0"]
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    procs = [start_command(args, dict(os.environ, PWEVENT_SECRET=SECRET), log) for log in logs]
    try:
        releases = wait_while_running(
            lambda: (r := _releases(bootstrap, prefix)) and len(r) == 9 and r, 90, procs[0],
            logs[0])
        time.sleep(1.0)  # the other may release too, or find the releases there at its start
        releases = _releases(bootstrap, prefix)
    finally:
        for proc in procs:
            stop_worker(proc)
    assert [orjson.loads(releases[f"s/{d['slot']}".encode()][0]) for d in expected] == expected
    assert all(len(set(v)) == 1 for v in releases.values())
    audit = _cli("audit", "--ldp", "--broker", bootstrap, "--prefix", prefix)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    shown = _cli("releases", "--ldp", "--json", "--broker", bootstrap, "--prefix", prefix,
                 "--stream", "s")
    assert shown.returncode == 0, shown.stderr
    docs = [orjson.loads(line) for line in shown.stdout.splitlines()]
    assert [{k: d[k] for k in expected[0]} for d in docs] == expected  # once per slot
    for d in docs:
        assert (d["upper"] is None) == (d["std"] is None)
        if d["std"] is not None:
            assert all(abs(u - c - 1.959964 * s) < 1e-4 * s for c, u, s in zip(
                d["counts"], d["upper"], d["std"], strict=True))


def test_the_demo_of_a_local_dp_stream() -> None:
    # 40 slots: 40 independent pairs of bars (two cells whose errors mirror each other), so
    # that 95% bars holding under 85% of the true counts is a defect, not chance (P < 1e-3 at
    # 0.95; over 12 slots it was 0.12, and it failed once)
    done = _cli("demo", "--mechanism", "plbu", "--users", "300", "--slots", "40",
                "--json-summary")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = orjson.loads(done.stdout.splitlines()[-1])
    assert summary["slots_released"] == summary["slots_expected"] == 40
    assert summary["reports_sent"] == 300 * 40 and summary["reports_rejected"] == 0
    assert 0.85 <= summary["coverage_95"] <= 1.0
