"""The two brokers the end-to-end tests run on: the embedded Kafka-protocol broker and Apache Kafka.

A module's ``broker`` fixture made by :func:`broker_fixture` runs each of its tests on both (test
ids ``[embedded]`` and ``[apache-kafka]``). The brokers are the test process's
(:class:`SharedBrokers`, the ``shared_brokers`` fixture of ``tests/end_to_end/conftest.py``): one
of each kind, started when a module first asks for it and stopped when the process ends, so the
modules a process runs one after another share them, each under topics, groups and prefixes of its
own. Under ``-n`` the processes of a run share one Apache Kafka node (:func:`shared_kafka`): the
first process that asks starts it and the controlling process stops it at the end of the run
(conftest.py); each JVM idles at about 0.03 of a core. A test that stops, kills or reconfigures
a broker starts its own. Apache Kafka is a
single KRaft node started from the jars ``./setup.sh test`` fetches
(:class:`local_kafka.apache.ApacheKafka`); without them its tests fail with the line naming
``./setup.sh test``, they are never skipped. :func:`restartable` gives either kind on a fixed port
that a test can stop, kill and start again with the data it kept.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from jobkit import RestartableBroker

from local_kafka.apache import ApacheKafka, kill_detached
from local_kafka.embedded import EmbeddedBroker

BROKER_KINDS = ("embedded", "apache-kafka")
#: The environment variable naming the directory where the processes of one ``-n`` run share
#: their Apache Kafka node; the controlling process sets it (conftest.py).
SHARED_KAFKA_DIR = "PWEVENT_TEST_SHARED_KAFKA"


@dataclass(frozen=True)
class SharedKafka:
    """The run's shared Apache Kafka node, as the test processes use it: its address."""

    bootstrap: str


def shared_kafka(run_dir: Path) -> SharedKafka:
    """The run's one Apache Kafka node in ``run_dir``: started, under a lock, by the first
    process that asks, and left running for the others; :func:`stop_shared_kafka` stops it."""
    with (run_dir / "kafka.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        info = run_dir / "kafka.json"
        if not info.exists():
            cluster = ApacheKafka(1, root=run_dir / "kafka")
            try:
                cluster.start()
            except BaseException:
                cluster.stop()
                raise
            info.write_text(json.dumps(cluster.detach()))
        return SharedKafka(json.loads(info.read_text())["bootstrap"])


def stop_shared_kafka(run_dir: Path) -> None:
    """Stop the node :func:`shared_kafka` started in ``run_dir``, if any."""
    info = run_dir / "kafka.json"
    if info.exists():
        kill_detached(json.loads(info.read_text()))


def is_apache(broker: object) -> bool:
    """Whether a ``broker`` fixture's broker is Apache Kafka (of the process or of the run)."""
    return isinstance(broker, ApacheKafka | SharedKafka)


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


class SharedBrokers:
    """One running broker of each kind for the test process, started when first asked for."""

    def __init__(self) -> None:
        self.stack = contextlib.ExitStack()
        self.started: dict[str, EmbeddedBroker | ApacheKafka] = {}

    def get(self, kind: str) -> EmbeddedBroker | ApacheKafka | SharedKafka:
        """The process's broker of ``kind``, started if it is not yet (Apache Kafka under
        ``-n``: the run's, :func:`shared_kafka`)."""
        run_dir = os.environ.get(SHARED_KAFKA_DIR)
        if kind == "apache-kafka" and run_dir:
            return shared_kafka(Path(run_dir))
        if kind not in self.started:
            self.started[kind] = self.stack.enter_context(running(kind))
        return self.started[kind]

    def close(self) -> None:
        """Stop every broker started, with every process it started."""
        self.stack.close()


def broker_fixture(kinds: tuple[str, ...] = BROKER_KINDS):  # type: ignore[no-untyped-def]
    """A module-scoped ``broker`` fixture parametrised over ``kinds``: the process's shared
    broker of each kind."""

    @pytest.fixture(scope="module", params=kinds)
    def broker(request: pytest.FixtureRequest,
               shared_brokers: SharedBrokers) -> EmbeddedBroker | ApacheKafka:
        return shared_brokers.get(request.param)

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
