"""Test-session settings shared by every test directory.

``-n auto`` (the README's test command) starts two test processes per core: most of the suite's
time is end-to-end tests waiting on brokers, workers and their timeouts, not computing, so a
second process per core fills that waiting (docs/performance.md, "The test suite").
"""

from __future__ import annotations

import os

import pytest

#: Test processes per core under ``-n auto``.
PROCESSES_PER_CORE = 2


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """The number of test processes ``-n auto`` starts: :data:`PROCESSES_PER_CORE` per core."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return PROCESSES_PER_CORE * max(cores or 1, 1)


#: The longest files, longest first (``--durations=0`` summed per file, docs/performance.md "The
#: test suite"); they start first, then the other end-to-end files, then the rest.
LONG_FILES = (
    "tests/end_to_end/test_membership.py",
    "tests/end_to_end/test_restart_backlog.py",
    "tests/end_to_end/test_kills.py",
    "tests/end_to_end/test_replay.py",
    "tests/end_to_end/test_hardening_job.py",
    "tests/end_to_end/test_takeover_backlog.py",
    "tests/end_to_end/test_apache_cluster.py",
    "tests/end_to_end/test_apache_failover.py",
    "tests/end_to_end/test_broker_loss.py",
    "tests/end_to_end/test_contract.py",
    "tests/streams/test_evaluate.py",
)


def _file_rank(path: str) -> tuple[int, int]:
    """A test file's place in the run: :data:`LONG_FILES` in their order, then the other
    end-to-end files, then every other file, each group as collected."""
    path = path.replace(os.sep, "/")
    if path in LONG_FILES:
        return (0, LONG_FILES.index(path))
    return (1 if "/end_to_end/" in path else 2, 0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Order the files so that the long ones start first. Under ``--dist loadfile`` each file
    runs in one process and the processes take files in this order (``--no-loadscope-reorder``
    in ``pyproject.toml`` keeps it): a long file started last would run alone at the end."""
    items.sort(key=lambda item: _file_rank(item.location[0]))
