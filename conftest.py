"""Test-session settings shared by every test directory.

``-n auto`` (the README's test command) starts two and a half test processes per core, five on
two: most of the suite's time is end-to-end tests waiting on brokers, workers and their
timeouts, not computing, so the extra processes fill that waiting (docs/performance.md, "The
test suite").
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

#: Test processes per core under ``-n auto``.
PROCESSES_PER_CORE = 2.5


#: The directory where the processes of a ``-n`` run share their Apache Kafka node.
RUN_DIR = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """In the process that controls a ``-n`` run, a directory for the node its test processes
    share (tests/brokers.py, ``shared_kafka``), named to them in the environment."""
    if hasattr(config, "workerinput") or not config.getoption("numprocesses", None):
        return
    from brokers import SHARED_KAFKA_DIR

    run_dir = Path(tempfile.mkdtemp(prefix="pwevent-tests-"))
    config.stash[RUN_DIR] = run_dir
    os.environ[SHARED_KAFKA_DIR] = str(run_dir)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Stop the node the test processes shared and delete its directory, however the run
    ended."""
    run_dir = config.stash.get(RUN_DIR, None)
    if run_dir is None:
        return
    from brokers import SHARED_KAFKA_DIR, stop_shared_kafka

    try:
        stop_shared_kafka(run_dir)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
        os.environ.pop(SHARED_KAFKA_DIR, None)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The number of test processes ``-n auto`` starts: :data:`PROCESSES_PER_CORE` per core,
    rounded."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return round(PROCESSES_PER_CORE * max(cores or 1, 1))


#: The longest files, longest first (``--durations=0`` summed per file, docs/performance.md "The
#: test suite"); they start first.
LONG_FILES = (
    "tests/end_to_end/test_membership.py",
    "tests/end_to_end/test_hardening_job.py",
    "tests/end_to_end/test_restart_backlog.py",
    "tests/end_to_end/test_replay.py",
    "tests/end_to_end/test_apache_cluster.py",
    "tests/end_to_end/test_source_event_time.py",
    "tests/end_to_end/test_kills.py",
    "tests/end_to_end/test_job_dynamic.py",
    "tests/end_to_end/test_broker_loss.py",
    "tests/end_to_end/test_job.py",
    "tests/end_to_end/test_apache_failover.py",
    "tests/end_to_end/test_ldp_rounds_job.py",
    "tests/end_to_end/test_ldp_collector_job.py",
    "tests/end_to_end/test_contract.py",
)

#: The files that keep a core busy throughout (statistical checks, property tests, the
#: evaluation), longest first. The end-to-end files leave about a quarter of the cores idle while
#: their brokers and workers wait out slots and timeouts, so these run between them, one after
#: every :data:`END_TO_END_PER_BUSY` end-to-end files, instead of all together at the end
#: (docs/performance.md, "The test suite").
BUSY_FILES = (
    "tests/mechanisms/test_privacy_audit.py",
    "tests/streams/test_evaluate.py",
    "tests/mechanisms/test_dynamic.py",
    "tests/mechanisms/test_dpba_ties.py",
    "tests/mechanisms/test_postprocess.py",
    "tests/mechanisms/test_batch.py",
    "tests/streams/test_avro_decoding.py",
    "tests/streams/test_input_fuzzing.py",
    "tests/streams/test_source_columns.py",
    "tests/streams/test_avro_schemas.py",
    "tests/mechanisms/test_dynamic_state.py",
    "tests/streams/test_registry_batches.py",
)
END_TO_END_PER_BUSY = 3
#: The end-to-end files that start before the first of :data:`BUSY_FILES`, which the fifth
#: process of ``-n auto`` on two cores takes first.
FIRST_FILES = 4


def file_order(paths: list[str]) -> list[str]:
    """The order the files of a run start in: the end-to-end files, :data:`LONG_FILES` first,
    with :data:`BUSY_FILES` between them after the first :data:`FIRST_FILES`, then every other
    file, each group as collected."""
    present = set(paths)
    e2e = [p for p in LONG_FILES if p in present] + [
        p for p in paths if "/end_to_end/" in p and p not in LONG_FILES]
    busy = [p for p in BUSY_FILES if p in present]
    order, rest = e2e[:FIRST_FILES], e2e[FIRST_FILES:]
    while rest or busy:
        if busy:
            order.append(busy.pop(0))
        order += rest[:END_TO_END_PER_BUSY]
        rest = rest[END_TO_END_PER_BUSY:]
    placed = set(order)
    return order + [p for p in paths if p not in placed]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the files as :func:`file_order` does. Under ``--dist loadfile`` each file runs in
    one process and the processes take files in this order (``--no-loadscope-reorder`` in
    ``pyproject.toml`` keeps it): a long file started last would run alone at the end."""
    paths = list(dict.fromkeys(item.location[0].replace(os.sep, "/") for item in items))
    rank = {p: i for i, p in enumerate(file_order(paths))}
    items.sort(key=lambda item: rank[item.location[0].replace(os.sep, "/")])
