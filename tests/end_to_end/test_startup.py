"""A worker refuses a wrong deployment with one line on stderr and exit status 2, and creates
nothing: missing topics, topics with another partition count, a data directory of another
stream, an unreachable broker. The right layout passes."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from brokers import broker_fixture
from jobkit import topic_names

from local_kafka.embedded import free_port
from streams.job.worker.data_dir import BINDING_FILE, RESET, bind_data_dir
from streams.job.worker.preflight import StartupError, check_topics, layout_problem
from streams.kafka.topics import Topics, create_topics

SECRET = "test-secret"


broker = broker_fixture()


def run_worker(bootstrap: str, prefix: str, data_dir: Path, *, partitions: int = 2,
               stream: str = "s", startup_timeout: float = 10) -> tuple[int, list[str], float]:
    """``pwevent worker`` to its end (killed after a minute): exit status, the non-blank lines
    of its stderr and the seconds it ran. Unclosed resources are warned about on stderr."""
    cmd = [sys.executable, "-W", "always::ResourceWarning", "-m", "streams.cli", "worker",
           "--broker", bootstrap, "--prefix", prefix, "--partitions", str(partitions),
           "--stream", stream, "--mechanism", "pbd", "--cells", "3", "--slot-ms", "1000",
           "--data-dir", str(data_dir), "--startup-timeout", str(startup_timeout)]
    env = dict(os.environ, PWEVENT_SECRET=SECRET)
    start = time.monotonic()
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=env)
    lines = [line for line in run.stderr.strip().splitlines() if line.strip()]
    return run.returncode, lines, time.monotonic() - start


def test_a_wrong_prefix_is_one_line_and_creates_no_topic(broker, tmp_path: Path):
    code, lines, _ = run_worker(broker.bootstrap, "nosuch", tmp_path / "data")
    assert code == 2, lines
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("pwevent worker: error: topic nosuch.reports does not exist"), line
    assert (f"`pwevent topics create --broker {broker.bootstrap} --prefix nosuch "
            f"--partitions 2`") in line
    assert "check --prefix nosuch" in line
    assert not [t for t in topic_names(broker.bootstrap) if "nosuch" in t]
    assert not (tmp_path / "data").exists()  # not bound to a deployment that is not there


def test_another_partition_count_names_the_topic_and_both_counts(broker, tmp_path: Path):
    asyncio.run(create_topics(broker.bootstrap, Topics("wide", partitions=3).specs()))
    code, lines, _ = run_worker(broker.bootstrap, "wide", tmp_path / "data", partitions=2)
    assert code == 2, lines
    assert len(lines) == 1, lines
    line = lines[0]
    assert "topic wide.reports has 3 partitions, expected 2 partitions" in line, line
    assert "--partitions 3" in line and "pwevent topics create" in line
    assert not (tmp_path / "data").exists()


def test_a_single_partition_topic_with_more_partitions_is_named():
    topics = Topics("p", partitions=2)
    found = {s.name: s.partitions for s in topics.specs()}
    assert layout_problem(topics, found, "h:1") is None
    found["p.decisions"] = 4
    problem = layout_problem(topics, found, "h:1")
    assert problem is not None and "\n" not in problem
    assert problem.startswith("topic p.decisions has 4 partitions, expected 1 partition")
    # reports and requirements disagree: no --partitions makes them right
    found = {s.name: s.partitions for s in topics.specs()} | {"p.requirements": 3}
    problem = layout_problem(topics, found, "h:1")
    assert problem is not None and "p.requirements has 3 partitions" in problem
    assert "start every worker with" not in problem


def test_the_right_layout_passes_and_creates_nothing(broker, tmp_path: Path):
    topics = Topics("right", partitions=2)
    asyncio.run(create_topics(broker.bootstrap, topics.specs()))
    # the broker's topics of this prefix (other processes of the run may share the broker)
    before = {t for t in topic_names(broker.bootstrap) if "right" in t}
    check_topics(broker.bootstrap, topics, 10)
    assert {t for t in topic_names(broker.bootstrap) if "right" in t} == before
    data = tmp_path / "data"
    assert bind_data_dir(data, "right", "s") is False  # bound now
    assert bind_data_dir(data, "right", "s") is True  # a restart: bound before
    assert json.loads((data / BINDING_FILE).read_text()) == {"prefix": "right", "stream": "s"}


def test_a_data_dir_of_another_stream_stops_the_worker_before_anything_starts(
    broker, tmp_path: Path
):
    asyncio.run(create_topics(broker.bootstrap, Topics("bound", partitions=2).specs()))
    data = tmp_path / "data"
    bind_data_dir(data, "bound", "other")
    binding = (data / BINDING_FILE).read_text()
    code, lines, _ = run_worker(broker.bootstrap, "bound", data, stream="s")
    assert code == 2, lines
    assert len(lines) == 1, lines
    line = lines[0]
    assert "holds the state of --prefix bound --stream other, not of --prefix bound --stream s" \
        in line, line
    assert line.endswith(RESET)
    assert RESET == ("to reuse it for another stream, stop the worker and delete the directory "
                     "(its state is rebuilt from the changelog topics)")
    # nothing started: no table state, no changelog topic of the worker's app
    assert sorted(p.name for p in data.iterdir()) == [BINDING_FILE]
    assert (data / BINDING_FILE).read_text() == binding
    assert not [t for t in topic_names(broker.bootstrap) if t.startswith("pwevent-bound-s")]


def test_another_prefix_in_the_binding_is_refused(tmp_path: Path):
    bind_data_dir(tmp_path, "a", "s")
    with pytest.raises(StartupError, match="--prefix a --stream s, not of --prefix b --stream s"):
        bind_data_dir(tmp_path, "b", "s")


def test_state_without_a_binding_is_refused_unless_reset(broker, tmp_path: Path):
    """Table state without a binding file may be another stream's (or an older version's): the
    worker refuses it with one line naming the reset; ``--reset-local-state`` (which deletes
    that state) binds the directory. Other files than table state do not count."""
    data = tmp_path / "data"
    (data / "v1" / "tables").mkdir(parents=True)
    (data / "v1" / "tables" / "users-0.db").write_bytes(b"state")
    asyncio.run(create_topics(broker.bootstrap, Topics("unbound", partitions=2).specs()))
    code, lines, _ = run_worker(broker.bootstrap, "unbound", data)
    assert code == 2, lines
    assert lines == [
        f"pwevent worker: error: data directory {data} holds table state but no {BINDING_FILE}, "
        f"so it may be another stream's: start the worker with --reset-local-state to rebuild "
        f"its tables from the changelog topics of --prefix unbound --stream s, or use another "
        f"--data-dir"]
    assert not (data / BINDING_FILE).exists()
    assert (data / "v1" / "tables" / "users-0.db").read_bytes() == b"state"  # untouched
    assert bind_data_dir(data, "unbound", "s", reset=True) is False
    assert json.loads((data / BINDING_FILE).read_text()) == {"prefix": "unbound", "stream": "s"}
    assert bind_data_dir(data, "unbound", "s") is True
    with pytest.raises(StartupError):
        bind_data_dir(data, "unbound", "another")
    # a volume's own files (no table state) are no reason to refuse
    fresh = tmp_path / "volume"
    (fresh / "lost+found").mkdir(parents=True)
    (fresh / "v1" / "tables").mkdir(parents=True)  # and no store in it
    assert bind_data_dir(fresh, "unbound", "s") is False


def test_an_unreadable_binding_is_one_line(tmp_path: Path):
    (tmp_path / BINDING_FILE).write_text("{not json")
    with pytest.raises(StartupError) as info:
        bind_data_dir(tmp_path, "pwevent", "default")
    assert "\n" not in str(info.value) and str(info.value).endswith(RESET)


def test_an_unreachable_broker_is_one_line_within_the_timeout(tmp_path: Path):
    bootstrap = f"127.0.0.1:{free_port()}"
    code, lines, seconds = run_worker(bootstrap, "pwevent", tmp_path / "data",
                                      startup_timeout=2)
    assert code == 2, lines
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        f"pwevent worker: error: cannot reach the broker at {bootstrap} within 2 s"), lines
    assert not any("Unclosed" in line for line in lines)
    assert 2 <= seconds < 2 + 15  # it kept trying for the timeout, and no longer
    assert not (tmp_path / "data").exists()


def test_a_partly_created_deployment_names_the_missing_topic():
    topics = Topics("p", partitions=2)
    found = {s.name: s.partitions for s in topics.specs() if s.key != "dead-letters"}
    problem = layout_problem(topics, found, "h:1")
    assert problem == ("topic p.dead-letters does not exist on the broker at h:1 (expected 1 "
                       "partition, found none): create the missing topics with `pwevent topics "
                       "create --broker h:1 --prefix p --partitions 2`")


def test_another_secret_than_the_stream_started_with_is_one_line(broker, tmp_path: Path):
    """The stream's start record carries a fingerprint of the secret: a worker with another
    secret stops before it joins, though its data directory is fresh (no coordinator state
    that could say otherwise): a new secret takes a new stream, not a fresh coordinator state.
    With the right secret it passes this check."""
    from streams.job.config import JobConfig
    from streams.job.coordination.coordinator import Coordinator
    from streams.kafka.producer import produce_raw

    topics = Topics(prefix="secret", partitions=2)
    asyncio.run(create_topics(broker.bootstrap, topics.specs()))
    config = JobConfig(stream="s", mechanism="pbd", domain={"kind": "cells", "size": 3},
                       slot_ms=1000, partitions=2, secret="another-secret", prefix="secret")
    coord = Coordinator(config)
    coord.begin(0)
    asyncio.run(produce_raw(broker.bootstrap, topics.decisions,
                            [(b"s/start", coord.start_record())], partitions=1))
    code, lines, _took = run_worker(broker.bootstrap, "secret", tmp_path / "data")
    assert code == 2
    assert lines == [f"pwevent worker: error: the secret differs from the one stream 's' started "
                     f"with (its start record on {topics.decisions}): give every worker the "
                     f"deployment's secret (--secret or PWEVENT_SECRET)"]
    from streams.job.worker.preflight import check_stream

    # the right secret passes, and so does a stream that has not started, alone on its topics
    check_stream(broker.bootstrap, topics.decisions, "s", b"another-secret", 10)
    empty = Topics(prefix="secret-empty", partitions=2)
    asyncio.run(create_topics(broker.bootstrap, empty.specs()))
    check_stream(broker.bootstrap, empty.decisions, "other", SECRET.encode(), 10)
    with pytest.raises(StartupError, match="the secret differs"):
        check_stream(broker.bootstrap, topics.decisions, "s", SECRET.encode(), 10)


def test_a_second_stream_on_a_prefixs_topics_is_one_line(broker, tmp_path: Path):
    """Every stream of a prefix reads its ``reports``: a worker of a second stream would count
    every report of the first again and spend every user's budget twice, so it stops before it
    joins, with or without the first stream's secret."""
    from streams.job.config import JobConfig
    from streams.job.coordination.coordinator import Coordinator
    from streams.job.worker.preflight import check_stream
    from streams.kafka.producer import produce_raw

    topics = Topics(prefix="twostreams", partitions=2)
    asyncio.run(create_topics(broker.bootstrap, topics.specs()))
    config = JobConfig(stream="first", mechanism="pbd", domain={"kind": "cells", "size": 3},
                       slot_ms=1000, partitions=2, secret=SECRET, prefix="twostreams")
    coord = Coordinator(config)
    coord.begin(0)
    asyncio.run(produce_raw(broker.bootstrap, topics.decisions,
                            [(b"first/start", coord.start_record())], partitions=1))
    code, lines, _took = run_worker(broker.bootstrap, "twostreams", tmp_path / "data",
                                    stream="second")
    assert code == 2
    assert lines == [f"pwevent worker: error: {topics.decisions} carries stream 'first' already: "
                     f"a second stream on the same topics would count every report again and "
                     f"spend every user's budget twice; give stream 'second' topics of its own "
                     f"(--prefix)"]
    check_stream(broker.bootstrap, topics.decisions, "first", SECRET.encode(), 10)
    with pytest.raises(StartupError, match="carries stream 'first' already"):
        check_stream(broker.bootstrap, topics.decisions, "second", b"another-secret", 10)


def test_topics_create_without_a_broker_is_one_line(tmp_path: Path):
    cmd = [sys.executable, "-m", "streams.cli", "topics", "create", "--broker",
           f"127.0.0.1:{free_port()}", "--prefix", "nobroker"]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 2
    lines = [line for line in run.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(
        "pwevent topics: error: cannot reach the broker at 127.0.0.1:"), lines
