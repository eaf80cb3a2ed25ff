"""``pwevent replay --in-process`` of local-DP streams: one client per user, the collector in
process (streams/cli/replay_ldp.py); the Kafka path's equality with it is
tests/end_to_end/test_ldp_collector_job.py's."""

from __future__ import annotations

import os
import subprocess

import orjson
import pytest
from forked_workers import run_command

COMMON = ["--dataset", "sin", "--users", "120", "--slots", "12", "--cells", "4",
          "--partitions", "3", "--nonce", "n1", "--ldp-window", "4", "--ldp-epsilon", "2"]


def _replay(*argv: str) -> tuple[list[dict], str]:
    done = run_command(["replay", "--in-process", *COMMON, *argv], timeout=120, text=True,
                       env=dict(os.environ, PWEVENT_SECRET="replay-secret"))
    assert done.returncode == 0, done.stderr
    return [orjson.loads(line) for line in done.stdout.splitlines()], done.stderr


def test_lpu_asks_each_user_once_per_block_of_w_slots() -> None:
    releases, _ = _replay("--mechanism", "lpu", "--lpu-key", "public")
    reporters = [r["reporters"] for r in releases]
    assert len(reporters) == 12
    assert [sum(reporters[b:b + 4]) for b in (0, 4, 8)] == [120, 120, 120]


def test_plbu_users_report_every_slot_with_their_own_budgets() -> None:
    releases, note = _replay("--mechanism", "plbu")
    assert [r["reporters"] for r in releases] == [120] * 12
    assert "0 refused by the collector" in note


@pytest.mark.parametrize("protocol", ["lbu", "lsp"])
def test_a_replay_is_repeated_bit_for_bit_with_its_nonce(protocol: str) -> None:
    first, _ = _replay("--mechanism", protocol)
    again, _ = _replay("--mechanism", protocol)
    assert first == again
    other, _ = _replay("--mechanism", protocol, "--nonce", "n2")
    assert other != first


def _worker(*argv: str) -> subprocess.CompletedProcess:
    return run_command(["worker", "--mechanism", "lbu", "--metrics-port", "0", *argv],
                       timeout=120, text=True, env=dict(os.environ, PWEVENT_SECRET="s"))


def test_the_collector_refuses_a_missing_start_and_an_absent_broker_in_one_line() -> None:
    from local_kafka.embedded import free_port

    missing = _worker("--broker", "127.0.0.1:1")
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [
        "pwevent worker: error: --mechanism lbu needs --ldp-start SLOT, the stream's first slot "
        "its clients are configured with (docs/app-developers.md)"]
    absent = _worker("--broker", f"127.0.0.1:{free_port()}", "--ldp-start", "0")
    assert absent.returncode == 2
    errors = [line for line in absent.stderr.splitlines() if line.startswith("pwevent")]
    assert len(errors) == 1 and errors[0].startswith("pwevent worker: error: the broker")
    assert "Traceback" not in absent.stderr and "Unclosed" not in absent.stderr
