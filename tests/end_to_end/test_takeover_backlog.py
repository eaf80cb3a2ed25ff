"""A worker that joins a running live group takes its share of the partitions, then is
SIGKILLed for good while events keep coming: the session timeout hands its partitions back to
the first worker, whose slots stayed open meanwhile; no event becomes ``late`` and the releases
are the in-process run of the records (test_restart_backlog.py's checks). On Apache Kafka: the
embedded broker never expires a static member's session (tests/end_to_end/test_membership.py)."""

from __future__ import annotations

from pathlib import Path

from brokers import broker_fixture
from test_restart_backlog import run_scenario

broker = broker_fixture(("apache-kafka",))


def test_partitions_taken_over_from_a_dead_worker_lose_nothing(broker, tmp_path: Path) -> None:
    run_scenario(broker, tmp_path, "joined-then-killed")
