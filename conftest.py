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
