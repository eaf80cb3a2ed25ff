"""Workers leaving and joining the job's consumer group, on both brokers.

Four partitions and two or three workers: a worker stopped by SIGTERM leaves the group and the
others take its partitions (the coordinator's included), a replacement with another identity
(another data directory) takes partitions, and so does a worker added to two. A worker killed
by SIGKILL leaves its member behind; ``pwevent group remove`` removes it, and the survivor and a
replacement with another identity take its partitions. In every case each slot is released
exactly once, byte for byte what the same input gives without Kafka.

Not shown here: crash failover by the session timeout alone. The embedded broker never expires
a dead group member, so without ``pwevent group remove`` a killed worker's partitions wait until
it comes back on the same identity (tests/end_to_end/test_kills.py), and a rebalance (a
replacement joining) waits for it too. On Apache Kafka the session timeout (10 s) expires the
member and moves its partitions: tests/end_to_end/test_apache_failover.py shows that.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import orjson
import pytest
from brokers import broker_fixture
from forked_workers import run_command
from jobkit import (
    config,
    dynamic_requirements,
    group_assignment,
    in_process,
    job_nonce,
    register,
    releases,
    requirement_records,
    send_slots,
    setup_topics,
    slot_reports,
    start_worker,
    stop_worker,
    wait_for_assignment,
    wait_for_slots,
)

from streams.kafka.topics import Topics

USERS = [f"u{i}" for i in range(60)]
W = [4 + (i % 3) * 3 for i in range(60)]
E = [0.5 + (i % 4) * 0.5 for i in range(60)]
SLOTS = 30


broker = broker_fixture()


class Run:
    """One job on 4 partitions: its workers (stopped at the end), its input, its checks."""

    def __init__(self, bootstrap: str, prefix: str, tmp_path: Path, mechanism: str) -> None:
        self.bootstrap, self.tmp_path = bootstrap, tmp_path
        self.cfg = config(prefix, mechanism=mechanism, partitions=4)
        self.topics: Topics = setup_topics(bootstrap, self.cfg)
        self.reqs = (dynamic_requirements(USERS) if self.cfg.dynamic
                     else requirement_records(USERS, W, E))
        self.batches = [slot_reports(USERS, t, self.cfg.d) for t in range(SLOTS)]
        self.workers: dict[str, subprocess.Popen] = {}
        self.sent = 0

    def start(self, name: str) -> subprocess.Popen:
        """A worker with a data directory, hence a group identity, of its own."""
        proc = start_worker(self.bootstrap, self.cfg, self.tmp_path / f"data-{name}",
                            self.log_path(name))
        self.workers[name] = proc
        return proc

    def start_two(self) -> None:
        """Workers a and b, b once a holds partitions: two first joins at once can stall the
        embedded broker for its rebalance timeout (tests/end_to_end/test_start_together.py)."""
        self.start("a")
        self.assignment(1)
        self.start("b")
        self.assignment(2)

    def log_path(self, name: str) -> Path:
        return self.tmp_path / f"worker-{name}.log"

    def log(self, name: str) -> str:
        return self.log_path(name).read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"--- {n}\n{self.log(n)[-4000:]}" for n in self.workers)

    def assignment(self, members: int) -> dict[str, set[int]]:
        """Wait until ``members`` workers share the reports partitions, each holding some."""
        got = wait_for_assignment(self.bootstrap, self.cfg, self.topics.reports, members, 45)
        assert got is not None and len(got) == members and all(got.values()), \
            (got, self.logs())
        return got

    def instance(self, name: str) -> str:
        """Worker ``name``'s group instance id, as it logs it at start."""
        found = re.findall(r"as instance (\S+)", self.log(name))
        assert found, self.log(name)[-4000:]
        return found[-1]

    def member(self, name: str, member_ids: set[str], wait: float = 10) -> str | None:
        """Which of ``member_ids`` is worker ``name`` now (its log names its latest join; the
        broker may describe the group a moment before the worker logs it)."""
        deadline = time.monotonic() + wait
        while True:
            joined = re.findall(r"with member_id (\S+)", self.log(name))
            found = next((m for m in reversed(joined) if m in member_ids), None)
            if found is not None or time.monotonic() > deadline:
                return found
            time.sleep(0.2)

    def coordinator_worker(self) -> str:
        """The worker that holds the coordinator (the ``slot-partials`` partition)."""
        deadline = time.monotonic() + 15
        while True:
            held = group_assignment(self.bootstrap, self.cfg, self.topics.slot_partials) or {}
            holder = next((m for m, ps in held.items() if ps), None)
            names = [n for n in self.workers if holder and self.member(n, {holder}, wait=0)]
            if len(names) == 1 or time.monotonic() > deadline:
                break
            time.sleep(0.3)  # the group is rebalancing
        assert len(names) == 1, (held, self.logs())
        return names[0]

    def send(self, through: int) -> None:
        """Send slots up to ``through`` (exclusive) one by one, each closed by watermarks."""
        send_slots(self.bootstrap, self.topics, self.cfg, self.batches, range(self.sent, through))
        self.sent = max(self.sent, through)

    def wait(self, through: int) -> None:
        docs = wait_for_slots(self.bootstrap, self.topics, set(range(through)), 45)
        assert {d["slot"] for d in docs} >= set(range(through)), self.logs()

    def check_released_once_as_in_process(self) -> None:
        raw = [v for _k, v in releases(self.bootstrap, self.topics)]
        slots = sorted(orjson.loads(v)["slot"] for v in raw)
        assert slots == list(range(SLOTS)), (slots, self.logs())  # every slot, exactly once
        expected = in_process(self.cfg, self.reqs, self.batches, SLOTS * self.cfg.slot_ms,
                              nonce=job_nonce(self.bootstrap, self.topics))
        assert sorted(raw, key=lambda v: orjson.loads(v)["slot"]) == expected

    def stop_all(self) -> None:
        for proc in self.workers.values():
            stop_worker(proc)


@pytest.fixture
def run(broker, tmp_path: Path):
    made: list[Run] = []

    def make(prefix: str, mechanism: str = "pbd") -> Run:
        made.append(Run(broker.bootstrap, prefix, tmp_path, mechanism))
        return made[-1]

    yield make
    for r in made:
        r.stop_all()


def stopped(r: Run, name: str) -> None:
    """Wait for a worker sent SIGTERM: it exits cleanly and says it left the group."""
    assert r.workers[name].wait(30) == 0, r.logs()
    assert "left group" in r.log(name), r.log(name)[-4000:]


def sigterm(r: Run, name: str) -> None:
    r.workers[name].send_signal(signal.SIGTERM)
    stopped(r, name)


def test_sigterm_hands_partitions_and_coordinator_over(run):
    r = run("leave", "pba")
    r.start_two()
    register(r.bootstrap, r.topics, r.cfg, r.reqs, r.workers["a"])
    r.send(10)
    r.wait(10)
    # stop the coordinator's worker while slots flow: the other takes everything over
    leaving = r.coordinator_worker()
    staying = "b" if leaving == "a" else "a"
    r.workers[leaving].send_signal(signal.SIGTERM)
    r.send(20)
    stopped(r, leaving)
    got = r.assignment(1)
    assert r.member(staying, set(got)) is not None, (got, r.logs())
    assert r.coordinator_worker() == staying
    r.send(SLOTS)
    r.wait(SLOTS)
    r.stop_all()
    r.check_released_once_as_in_process()


def test_a_replacement_with_another_identity_takes_partitions(run):
    r = run("replace", "dpba")  # partitions and coordinator converse slot by slot
    r.start_two()
    register(r.bootstrap, r.topics, r.cfg, r.reqs, r.workers["a"])
    r.send(10)
    r.wait(10)
    sigterm(r, "a")
    r.assignment(1)
    r.send(15)
    r.start("c")  # another data directory: another group instance id
    got = r.assignment(2)
    assert r.member("c", {m for m, ps in got.items() if ps}) is not None, (got, r.logs())
    r.send(SLOTS)
    r.wait(SLOTS)
    r.stop_all()
    r.check_released_once_as_in_process()


def test_a_worker_added_to_two_gets_partitions(run):
    r = run("add")
    r.start_two()
    register(r.bootstrap, r.topics, r.cfg, r.reqs, r.workers["a"])
    r.send(10)
    r.wait(10)
    r.start("c")
    r.send(15)
    got = r.assignment(3)
    held = {name: got[m] for name in "abc" if (m := r.member(name, set(got)))}
    assert set(held) == {"a", "b", "c"} and all(held.values()), (got, r.logs())
    r.send(SLOTS)
    r.wait(SLOTS)
    r.stop_all()
    r.check_released_once_as_in_process()


def pwevent_group(r: Run, *args: str) -> subprocess.CompletedProcess:
    """``pwevent group ARGS`` as an operator runs it, the broker, prefix and stream given by the
    environment."""
    env = dict(os.environ, PWEVENT_BROKER=r.bootstrap, PWEVENT_PREFIX=r.cfg.prefix,
               PWEVENT_STREAM=r.cfg.stream)
    return run_command(["group", *args], env=env, timeout=60, text=True)


def test_a_crashed_worker_removed_from_the_group_is_replaced(run):
    r = run("crash", "dpbd")  # partitions and coordinator converse slot by slot
    r.start_two()
    register(r.bootstrap, r.topics, r.cfg, r.reqs, r.workers["a"])
    r.send(10)
    r.wait(10)
    # kill the coordinator's worker while slots flow: its member stays in the group
    dead = r.coordinator_worker()
    alive = "b" if dead == "a" else "a"
    stop_worker(r.workers[dead], kill=True)
    # described and removed at once: on Apache Kafka the session timeout (10 s) would expire
    # the member by itself on a slow machine
    group = r.cfg.app_id()
    described = pwevent_group(r, "describe")
    assert described.returncode == 0, described.stderr
    lines = described.stdout.splitlines()
    assert lines[0].startswith(f"group {group}: ") and lines[0].endswith(", 2 members"), lines
    assert {line.split()[0] for line in lines[1:]} == {r.instance(dead), r.instance(alive)}
    removed = pwevent_group(r, "remove", r.instance(dead))
    assert (removed.returncode, removed.stderr) == (0, ""), removed
    assert removed.stdout == (f"removed member {r.instance(dead)} from group {group}: the other "
                              f"workers take its partitions at the next rebalance\n")
    r.send(15)
    got = r.assignment(1)  # the survivor takes every partition, the coordinator's included
    assert r.member(alive, set(got)) is not None, (got, r.logs())
    assert r.coordinator_worker() == alive
    r.wait(15)  # alone, it releases the slots sent since the kill
    r.start("c")  # another data directory: another group instance id
    got = r.assignment(2)
    assert r.member("c", {m for m, ps in got.items() if ps}) is not None, (got, r.logs())
    r.send(SLOTS)
    r.wait(SLOTS)
    again = pwevent_group(r, "remove", r.instance(dead))
    assert again.returncode == 2 and again.stdout == "", again
    assert again.stderr == (f"pwevent group: error: group {group} has no member "
                            f"{r.instance(dead)} (members: "
                            f"{', '.join(sorted({r.instance(alive), r.instance('c')}))})\n")
    r.stop_all()
    r.check_released_once_as_in_process()


def test_group_command_errors_are_one_line(broker, tmp_path: Path, capsys, monkeypatch) -> None:
    """``pwevent group`` takes its options from the environment and the configuration file too;
    an unknown member, a missing INSTANCE_ID and an unreachable broker are one line and status
    2."""
    from local_kafka.embedded import free_port
    from streams.cli.main import main

    config_file = tmp_path / "pwevent.toml"
    config_file.write_text('timeout = 5\n[group]\nprefix = "fromfile"\n')
    monkeypatch.setenv("PWEVENT_STREAM", "fromenv")
    assert main(["--config", str(config_file), "group", "remove", "w-1", "--broker",
                 broker.bootstrap]) == 2
    assert capsys.readouterr().err == ("pwevent group: error: group pwevent-fromfile-fromenv has "
                                       "no member w-1 (members: none)\n")
    assert main(["group", "remove", "--broker", broker.bootstrap]) == 2
    assert capsys.readouterr().err == ("pwevent group: error: remove needs the INSTANCE_ID of "
                                       "the member to remove\n")
    address = f"127.0.0.1:{free_port()}"
    assert main(["group", "describe", "--broker", address, "--timeout", "5"]) == 2
    assert capsys.readouterr().err == (
        f"pwevent group: error: cannot reach the broker at {address}: KafkaConnectionError: "
        f"check --broker and that the broker is running\n")
