"""The two brokers the end-to-end tests run on: the embedded Kafka-protocol broker and Apache Kafka.

A module's ``broker`` fixture made by :func:`broker_fixture` runs each of its tests on both (test
ids ``[embedded]`` and ``[apache-kafka]``), one broker of each kind per module. Apache Kafka is a
single KRaft node started from the jars ``./setup.sh test`` fetches
(:class:`local_kafka.apache.ApacheKafka`); without them its tests fail with the line naming
``./setup.sh test``, they are never skipped. :func:`restartable` gives either kind on a fixed port
that a test can stop, kill and start again with the data it kept.
"""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from jobkit import RestartableBroker

from local_kafka.apache import ApacheKafka
from local_kafka.embedded import EmbeddedBroker

BROKER_KINDS = ("embedded", "apache-kafka")


@contextlib.contextmanager
def running(kind: str) -> Iterator[EmbeddedBroker | ApacheKafka]:
    """A broker of ``kind``, stopped (with every process it started) on leaving."""
    if kind == "embedded":
        with EmbeddedBroker() as broker:
            yield broker
    elif kind == "apache-kafka":
        with ApacheKafka(1) as cluster:
            yield cluster
    else:
        raise ValueError(f"unknown broker kind {kind!r}")


def broker_fixture(kinds: tuple[str, ...] = BROKER_KINDS):  # type: ignore[no-untyped-def]
    """A module-scoped ``broker`` fixture parametrised over ``kinds``."""

    @pytest.fixture(scope="module", params=kinds)
    def broker(request: pytest.FixtureRequest) -> Iterator[EmbeddedBroker | ApacheKafka]:
        with running(request.param) as b:
            yield b

    return broker


class RestartableKafka:
    """One Apache Kafka node with :class:`tests.jobkit.RestartableBroker`'s interface: ``start``
    (again, with the data it kept), ``stop`` (SIGTERM), ``kill`` (SIGKILL), ``port``, ``proc``."""

    def __init__(self, root: Path) -> None:
        self.cluster = ApacheKafka(1, root=root)
        self.port = self.cluster.nodes[0].port
        self._started = False

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def proc(self) -> subprocess.Popen[bytes] | None:
        return self.cluster.nodes[0].proc

    def start(self, timeout: float = 90.0) -> None:
        if self._started:
            self.cluster.restart(1, timeout)
        else:
            self.cluster.start(timeout)
            self._started = True

    def stop(self) -> None:
        self.cluster.stop_node(1)

    def kill(self) -> None:
        self.cluster.kill(1)


def restartable(kind: str, root: Path) -> RestartableBroker | RestartableKafka:
    """A broker of ``kind`` that a test stops and starts again, on a fixed port."""
    return RestartableBroker(root) if kind == "embedded" else RestartableKafka(root)
