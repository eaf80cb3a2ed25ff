"""The README's main command: ``pwevent demo`` on the embedded broker; its errors in one line, and
the connection settings it hands its worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from local_kafka.embedded import broker_binary, free_port
from streams.kafka import settings as kafka_settings


def _brokers_running(tmp: Path) -> set[int]:
    """The embedded brokers whose data lies under ``tmp``: those of a demo run with ``TMPDIR``
    there (other brokers, of tests running beside this one, do not count)."""
    out = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True).stdout
    binary = str(broker_binary())
    return {int(line.split(None, 1)[0]) for line in out.splitlines()
            if binary in line and str(tmp) in line}


def _demo(tmp: Path, *flags: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``pwevent demo FLAGS`` with its temporary files (the embedded broker's data) in ``tmp``."""
    return subprocess.run([sys.executable, "-m", "streams.cli", "demo", *flags],
                          capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "TMPDIR": str(tmp)})


def test_demo_releases_every_slot_and_stops_what_it_started(tmp_path: Path):
    run = _demo(tmp_path, "--users", "400", "--slots", "12", "--mechanism", "pba",
                "--json-summary", timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(summary) == {"slots_expected", "slots_released", "reports_sent",
                            "reports_rejected", "amre", "seconds"}
    assert summary["slots_expected"] == summary["slots_released"] == 12
    assert summary["reports_sent"] > 0 and summary["reports_rejected"] == 0
    assert summary["amre"] is not None and summary["amre"] >= 0
    assert not _brokers_running(tmp_path)


def test_demo_against_an_unreachable_broker_is_one_line():
    bootstrap = f"127.0.0.1:{free_port()}"
    run = subprocess.run(
        [sys.executable, "-m", "streams.cli", "demo", "--broker", bootstrap, "--json-summary"],
        capture_output=True, text=True, timeout=120,
    )
    assert run.returncode == 2, run.stderr[-3000:]
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert lines == [f"pwevent demo: error: cannot reach the broker at {bootstrap}: "
                     "KafkaConnectionError: check --broker and that the broker is running"]
    assert run.stdout == ""


def test_demo_creates_its_topics_with_the_replication_factor_given(tmp_path: Path):
    """The embedded broker has one node: it refuses a topic of three replicas, naming the
    factor it was asked for, which is how it shows the factor reached the creation request;
    the demo stops the broker it started."""
    run = _demo(tmp_path, "--replication-factor", "3", "--json-summary", timeout=120)
    assert run.returncode == 2, run.stderr[-3000:]
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("pwevent demo: error: creating "), lines
    assert "replication factor of 3" in lines[0], lines
    assert not _brokers_running(tmp_path)


@pytest.fixture
def kafka_settings_restored() -> Iterator[None]:
    before = kafka_settings.current()
    try:
        yield
    finally:
        kafka_settings.configure(before)


def test_demo_hands_its_connection_settings_to_its_worker(
        monkeypatch: pytest.MonkeyPatch, kafka_settings_restored: None):
    """The worker of ``pwevent demo --broker ...`` connects as the demo does: its settings
    reach it through the environment (the password not on its command line), and the demo's
    topics get the replication factor."""
    from streams.cli import demo
    from streams.cli.main import main

    seen: dict[str, object] = {}

    class Started(Exception):
        """The worker would start here."""

    def create_topics(bootstrap: str, topics: object) -> None:
        seen["topics"] = topics

    def popen(cmd: list[str], **kwargs: object) -> None:
        seen["cmd"], seen["env"] = cmd, kwargs["env"]
        raise Started

    monkeypatch.setattr(demo, "_create_topics", create_topics)
    monkeypatch.setattr(demo.subprocess, "Popen", popen)
    monkeypatch.setenv("PWEVENT_SASL_PASSWORD", "s3cret")
    with pytest.raises(Started):
        main(["demo", "--broker", "kafka-0:9093", "--security-protocol", "SASL_PLAINTEXT",
              "--sasl-mechanism", "SCRAM-SHA-256", "--sasl-username", "job",
              "--replication-factor", "3", "--slots", "2", "--users", "20"])
    assert all(s.replication == 3 for s in seen["topics"].specs())
    cmd, env = seen["cmd"], seen["env"]
    assert "s3cret" not in " ".join(cmd) and "--broker" in cmd
    assert cmd[cmd.index("--broker") + 1] == "kafka-0:9093"
    # the worker reads these as its flags' defaults: the same settings as the demo's
    assert env.items() >= {
        "PWEVENT_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "PWEVENT_SASL_MECHANISM": "SCRAM-SHA-256",
        "PWEVENT_SASL_USERNAME": "job", "PWEVENT_SASL_PASSWORD": "s3cret",
        "PWEVENT_REPLICATION_FACTOR": "3", "PWEVENT_SSL_CAFILE": ""}.items()
    assert env["PWEVENT_SECRET"]


def test_the_text_summary_shows_the_last_release_as_the_releases_command_does():
    """Without ``--json-summary`` the demo shows its last slot's release, the table line that
    ``pwevent releases`` prints for it, before the summary."""
    from streams.cli.demo import last_release
    from streams.cli.releases import header, row
    from streams.releases.client import DEFAULT_CONFIDENCE
    from streams.releases.decoding import parse_release

    last = {"schema_version": 2, "stream": "s", "slot": 7, "start": 7000, "end": 8000,
            "mechanism": "pbu", "published": True, "nullified": False, "approximates": None,
            "cells": ["DE", "FR"], "histogram": [120, 40], "threshold": 0.2, "users": 200,
            "noise": {"distribution": "discrete_laplace", "thinned": True, "scale": [9.5, 9.5]},
            "estimate": {"method": "kalman_split", "histogram": [117, 41]}}
    earlier = {**last, "slot": 6, "start": 6000, "end": 7000, "histogram": [1, 2]}
    shown = last_release({7: last, 6: earlier}).splitlines()
    assert shown[-2:] == [header(DEFAULT_CONFIDENCE, False), row(parse_release(last), False)]
    assert shown[-1].split()[:3] == ["7", "1970-01-01T00:00:07.000Z", "published"]
    assert "DE: 120" in shown[-1] and shown[-1].endswith("| kalman_split: 117 41")
