"""``pwevent worker --mechanism lbd|lba|lpd|lpa|mtsp`` on both brokers: two rounds a slot, the
decisions on ``<prefix>.ldp-decisions``. A replay through clients answers them slot by slot while
the worker is SIGKILLed and restarted (the population-division lpa on Apache Kafka, the tree's
mtsp on the embedded broker, whose range queries `pwevent releases --range` answers); the
releases and decisions equal the replay run in process, once per slot; the reports audit clean
(lbd's decisions run through the held-back test below); an lpd demo scores its bars. With one
partition held back, the partitions whose reports wait for a decision are paused, and nothing is
late. Live, devices read each decision from the topic and answer it in time."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import orjson
from brokers import broker_fixture, is_apache
from forked_workers import Process, run_command, start_captured, start_command
from jobkit import (
    SECRET,
    produce,
    stop_worker,
    timestamped_records,
    topic_names,
    wait_while_running,
)
from ldp_collector.ldp_collector_kit import (
    ORIGIN_MS,
    ROUNDS_START,
    SLOT_MS,
    drifting_cells,
    live_topic,
)

from local_kafka.embedded import free_port
from mechanisms.local.rounds import parse_decision
from mechanisms.local.words import CounterWords
from streams.cli.replay_rounds import DecisionReader
from streams.kafka.producer import RawProducer
from streams.kafka.topics import create_topics
from streams.ldp_client import LdpClient, ReportConfig
from streams.ldp_collector import LdpCollector
from streams.ldp_collector.kafka_job import LdpJob, LdpJobSettings, topic_specs
from streams.ldp_collector.stream_time import PartitionedCollector

broker = broker_fixture()

PARTITIONS = 4
SLOTS = 14
STREAM = ["--partitions", str(PARTITIONS), "--stream", "s", "--cells", "2",
          "--slot-ms", "60000", "--origin-ms", "0", "--ldp-start", "0", "--ldp-epsilon", "4",
          "--ldp-window", "4"]


def _cli(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_command(argv, env=dict(os.environ, PWEVENT_SECRET=SECRET), timeout=timeout,
                       text=True)


def _worker(bootstrap: str, prefix: str, mechanism: str, log: Path) -> Process:
    args = ["worker", "--broker", bootstrap, "--prefix", prefix, *STREAM, "--mechanism",
            mechanism, "--event-time", "history", "--loglevel", "info", "--metrics-port", "0"]
    return start_command(args, dict(os.environ, PWEVENT_SECRET=SECRET), log)


def _by_key(bootstrap: str, topic: str) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = {}
    for key, value, _p, _offset, _time in timestamped_records(bootstrap, topic, 1):
        out.setdefault(key, []).append(value)
    return out


def test_a_replay_answering_decisions_survives_a_sigkill_and_equals_in_process(
        broker, tmp_path: Path) -> None:
    mechanism = "lpa" if is_apache(broker) else "mtsp"
    bootstrap, prefix = broker.bootstrap, "rounds"
    replay = ["replay", "--mechanism", mechanism, "--prefix", prefix, *STREAM, "--dataset",
              "sin", "--users", "300", "--slots", str(SLOTS), "--nonce", "rounds-1"]
    local = _cli(*replay, "--in-process")
    assert local.returncode == 0, local.stderr
    expected = [orjson.loads(line) for line in local.stdout.splitlines()]
    assert [d["slot"] for d in expected] == list(range(SLOTS))
    assert 2 <= sum(d["published"] for d in expected) < SLOTS
    log = tmp_path / "worker.log"
    worker = _worker(bootstrap, prefix, mechanism, log)
    sender = start_captured([*replay, "--broker", bootstrap],
                            dict(os.environ, PWEVENT_SECRET=SECRET))
    try:
        deadline = time.monotonic() + 120
        while len(_by_key(bootstrap, f"{prefix}.ldp-decisions")) < SLOTS // 2:
            assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-3000:]
            time.sleep(0.3)
        worker.send_signal(signal.SIGKILL)  # mid-replay: the replay waits for its decision
        worker.wait(timeout=30)
        worker = _worker(bootstrap, prefix, mechanism, log)
        out, err = sender.communicate(timeout=240)
        assert sender.returncode == 0, err.decode()[-3000:]
        summary = orjson.loads(out)
        assert summary["last_slot"] == SLOTS - 1 and summary.get("refused", 0) == 0
        deadline = time.monotonic() + 60
        while len(_by_key(bootstrap, f"{prefix}.ldp-releases")) < SLOTS:
            assert time.monotonic() < deadline and worker.poll() is None, log.read_text()[-3000:]
            time.sleep(0.3)
    finally:
        if sender.poll() is None:
            sender.kill()
            sender.wait()
        stop_worker(worker)
    releases = _by_key(bootstrap, f"{prefix}.ldp-releases")
    assert all(len(set(v)) == 1 for v in releases.values())  # a repeat is the same bytes
    assert [orjson.loads(releases[f"s/{d['slot']}".encode()][0]) for d in expected] == expected
    decisions = _by_key(bootstrap, f"{prefix}.ldp-decisions")
    assert all(len(set(v)) == 1 for v in decisions.values())
    read = {parse_decision(v[0]).slot: parse_decision(v[0]) for v in decisions.values()}
    assert sorted(read) == list(range(SLOTS + 1))  # the slot after the last is decided too
    assert [read[d["slot"]].eps > 0 for d in expected] == [d["published"] for d in expected]
    dead = timestamped_records(bootstrap, f"{prefix}.dead-letters", 1)
    assert dead == []  # nothing late, nothing unasked: waiting records were read in order
    audit = _cli("audit", "--ldp", "--broker", bootstrap, "--prefix", prefix, "--json")
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert orjson.loads(audit.stdout)["largest_window_share_of_E"] <= 1 + 1e-9
    shown = _cli("releases", "--ldp", "--json", "--broker", bootstrap, "--prefix", prefix,
                 "--stream", "s")
    assert shown.returncode == 0, shown.stderr
    assert [orjson.loads(line)["slot"] for line in shown.stdout.splitlines()] == list(
        range(SLOTS))
    if mechanism == "mtsp":  # the tree's range queries, from the releases alone
        ranged = _cli("releases", "--ldp", "--json", "--broker", bootstrap, "--prefix", prefix,
                      "--stream", "s", "--range", "0:1", "--delta", "2", "--event", "1.5")
        assert ranged.returncode == 0, ranged.stderr
        rows = [orjson.loads(line) for line in ranged.stdout.splitlines()]
        assert [r["range"]["count"] for r in rows] == [sum(d["counts"]) for d in expected]
        assert rows[0]["range"]["period"] is None
        assert rows[1]["range"]["period"] == rows[0]["range"]["count"] + rows[1]["range"][
            "count"]
        assert {r["range"]["event"] for r in rows} <= {0, 1}


def test_the_demo_of_a_two_round_stream() -> None:
    done = _cli("demo", "--mechanism", "lpd", "--users", "400", "--slots", "12",
                "--ldp-epsilon", "4", "--ldp-window", "4", "--json-summary")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = orjson.loads(done.stdout.splitlines()[-1])
    assert summary["slots_released"] == summary["slots_expected"] == 12
    assert summary["reports_rejected"] == 0


def test_partitions_waiting_for_a_decision_are_paused_and_nothing_is_late(broker) -> None:
    bootstrap, prefix, partitions = broker.bootstrap, "rounds-held", 3
    secret = SECRET.encode()
    parts, written = live_topic("lbd", drifting_cells(90, 8, 4, seed=2), 4, 3, 4.0,
                                partitions=partitions, secret=secret)
    asyncio.run(create_topics(bootstrap, topic_specs(prefix, partitions)))
    topic, held = f"{prefix}.ldp-reports", 1
    for p in range(partitions):
        if p != held:
            produce(bootstrap, topic, partitions, [(k, v) for k, v, _o in parts[p]], partition=p)
    settings = LdpJobSettings(bootstrap, prefix, "s", "lbd", 4, ORIGIN_MS, SLOT_MS,
                              ROUNDS_START, 4.0, 3, secret, event_time="history",
                              partitions=partitions)
    job = LdpJob(settings)

    async def run() -> set[int]:
        stop = asyncio.Event()
        task = asyncio.create_task(job.run(stop))
        deadline = time.monotonic() + 60
        while job.paused != {p for p in range(partitions) if p != held}:
            assert time.monotonic() < deadline and not task.done(), job.counters
            await asyncio.sleep(0.1)
        paused = set(job.paused)  # the others' next slot waits for decision 0: held has no mark
        await asyncio.to_thread(produce, bootstrap, topic, partitions,
                                [(k, v) for k, v, _o in parts[held]], held)
        while job.counters["released"] < 7 or job.paused:
            assert time.monotonic() < deadline and not task.done(), job.counters
            await asyncio.sleep(0.1)
        stop.set()
        await task
        return paused

    paused = asyncio.run(run())
    assert paused == {0, 2}
    assert job.counters["decided"] == 8 and not any(k.startswith("dead:") for k in job.counters)
    decisions = _by_key(bootstrap, f"{prefix}.ldp-decisions")
    assert [decisions[f"s/{ROUNDS_START + t}".encode()] for t in range(8)] == [[v] for v in written]
    inner = LdpCollector("lbd", 4, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=ROUNDS_START,
                         E=4.0, w=3)
    reference = PartitionedCollector(inner, partitions, secret, "s")
    for p in range(partitions):
        assert reference.take(p, parts[p]) == []
    expected = reference.advance()
    releases = _by_key(bootstrap, f"{prefix}.ldp-releases")
    assert {k: v for k, v in releases.items()} == {k: [v] for k, v in expected.releases}


def test_live_devices_answer_each_decision_in_time(broker, tmp_path: Path) -> None:
    """Live: the worker's own watermarks close each round; devices read every decision from the
    topic and answer it within the next slot, and nothing they send is late or unasked. (A
    decision reaches the devices a moment after its slot's end plus the lateness, and their
    answers must reach the topic before the next slot's: slots of 2.5 s leave that round trip
    room on a loaded machine; at 1.5 s it once missed.)"""
    bootstrap, prefix, slot_ms, slots = broker.bootstrap, "rounds-live", 2500, 4
    port = free_port()
    origin = int(time.time() * 1000) // slot_ms * slot_ms
    start = 4  # 10 to 12.5 s from now: the worker has started and created its topics
    log = tmp_path / "worker.log"
    args = ["worker", "--broker", bootstrap, "--prefix", prefix, "--partitions",
            str(PARTITIONS), "--stream", "s", "--cells", "3", "--slot-ms", str(slot_ms),
            "--origin-ms", str(origin), "--ldp-start", str(start), "--ldp-epsilon", "4",
            "--ldp-window", "3", "--mechanism", "lba", "--event-time", "live",
            "--lateness-ms", "100", "--metrics-host", "127.0.0.1", "--metrics-port", str(port)]
    proc = start_command(args, dict(os.environ, PWEVENT_SECRET=SECRET), log)
    built = LdpJobSettings(bootstrap, prefix, "s", "lba", 3, origin, slot_ms, start, 4.0, 3,
                           SECRET.encode(), partitions=PARTITIONS)
    # seeded devices: with random ones no slot publishes in about 1 run in 120 (its four tests
    # each pass with probability about 0.3 to 0.6), and the round trip is then never shown
    clients = [LdpClient(ReportConfig("lba", f"d{i}", d=3, w=3, E=4.0, start=start),
                         words=CounterWords(f"rounds-live/d{i}")) for i in range(40)]

    async def devices() -> list:
        producer = RawProducer(bootstrap, built.reports_topic, PARTITIONS)
        reader = DecisionReader(built)
        await producer.start()
        await reader.start()
        seen = []
        try:
            previous = None
            for slot in range(start, start + slots):
                await asyncio.sleep(max(0.0, (origin + slot * slot_ms) / 1000 - time.time()))
                records = []
                for i, client in enumerate(clients):
                    # every device holds cell slot mod 3: the estimate moves by a whole cell
                    # each slot, so the dissimilarity test publishes wherever it may
                    for data in ((client.answer(previous, previous.slot % 3) if previous
                                  else None), client.report(slot, slot % 3, previous)):
                        if data is not None:
                            records.append((f"d{i}".encode(), data))
                await producer.send_many(records)
                previous = await reader.decision(slot, timeout_s=30)
                seen.append(previous)
        finally:
            await reader.stop()
            await producer.stop()
        return seen

    try:
        # devices send to the worker's topics: asked for before it created them, the embedded
        # broker would auto-create them with one partition
        wait_while_running(lambda: built.reports_topic in topic_names(bootstrap), 60, proc,
                           log)
        decisions = asyncio.run(devices())
        topic = f"{prefix}.ldp-releases"
        releases = wait_while_running(lambda: (r := _by_key(bootstrap, topic))
                                      and len(r) >= slots - 1 and r, 60, proc, log)
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    finally:
        stop_worker(proc)
    assert [d.slot for d in decisions] == list(range(start, start + slots))
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in
              metrics.decode().splitlines() if line and not line.startswith("#")}
    assert values["pwevent_ldp_decisions_total"] >= slots
    assert not [k for k in values if k.startswith("pwevent_ldp_refused")]  # nothing late
    docs = [orjson.loads(v[0]) for v in releases.values()]
    assert all(d["reporters"] in (0, 40) for d in docs)
    assert any(d["published"] for d in docs)

