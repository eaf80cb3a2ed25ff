"""A source topic whose transactional producer aborted transactions: no consumer of pwevent reads
their records (``streams.kafka.settings.ISOLATION_LEVEL``). The history replay of
test_source_transactional.py with an aborted transaction after each committed one (an event of a
device that never reports, and an earlier event of a device that does, in another country, which
would be the one that counts) releases every slot once, nothing is ``late``, and the releases are
the in-process run of the committed records alone.

On Apache Kafka only: the embedded broker names, in its fetch answers, aborted transactions that
ended before the offset fetched from, and a consumer reading committed records then skips the
committed transaction that follows one (docs/design.md, "Running it")."""

from __future__ import annotations

from pathlib import Path

from brokers import broker_fixture
from test_source_transactional import replay_transactional

broker = broker_fixture(("apache-kafka",))


def test_aborted_transactions_of_a_source_count_for_nothing(broker, tmp_path: Path) -> None:
    replay_transactional(broker.bootstrap, tmp_path, "txab", abort=True)
