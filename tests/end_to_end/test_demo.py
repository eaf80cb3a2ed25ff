"""The README's main command: ``pwevent demo`` on the embedded broker."""

from __future__ import annotations

import json
import subprocess
import sys

from streams.kafka.broker import broker_binary


def _brokers_running() -> set[int]:
    out = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True).stdout
    binary = str(broker_binary())
    return {int(line.split(None, 1)[0]) for line in out.splitlines() if binary in line}


def test_demo_releases_every_slot_and_stops_what_it_started():
    before = _brokers_running()
    run = subprocess.run(
        [sys.executable, "-m", "streams.cli", "demo", "--users", "400", "--slots", "12",
         "--mechanism", "pba", "--json-summary"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert set(summary) == {"slots_expected", "slots_released", "reports_sent",
                            "reports_rejected", "amre", "seconds"}
    assert summary["slots_expected"] == summary["slots_released"] == 12
    assert summary["reports_sent"] > 0 and summary["reports_rejected"] == 0
    assert summary["amre"] is not None and summary["amre"] >= 0
    assert _brokers_running() == before
