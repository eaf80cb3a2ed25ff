"""Fixtures of the end-to-end tests: the brokers the test process shares (tests/brokers.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from brokers import SharedBrokers


@pytest.fixture(scope="session")
def shared_brokers() -> Iterator[SharedBrokers]:
    """One broker of each kind for the whole test process, stopped when it ends."""
    brokers = SharedBrokers()
    try:
        yield brokers
    finally:
        brokers.close()
