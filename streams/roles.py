"""The job's parts for a configuration: fixed mechanisms or dynamic ones (DPBD, DPBA)."""

from __future__ import annotations

from streams.config import JobConfig
from streams.coordinator import Coordinator
from streams.dynamic_coordinator import DynamicCoordinator
from streams.dynamic_partition import DynamicAccumulator, DynamicRegistry
from streams.partition import PartitionAccumulator, Registry


def make_registry(config: JobConfig, partition: int) -> Registry | DynamicRegistry:
    """Partition ``partition``'s registry of users."""
    if config.dynamic:
        return DynamicRegistry(config.mechanism, config.max_window, partition, config)
    return Registry(config, partition)


def make_accumulator(
    partition: int, config: JobConfig, registry: Registry | DynamicRegistry
) -> PartitionAccumulator:
    """A partition's accumulator over ``registry``."""
    if config.dynamic:
        assert isinstance(registry, DynamicRegistry)
        return DynamicAccumulator(partition, config, registry)
    assert isinstance(registry, Registry)
    return PartitionAccumulator(partition, config, registry)


def make_coordinator(config: JobConfig) -> Coordinator | DynamicCoordinator:
    """The coordinator."""
    return DynamicCoordinator(config) if config.dynamic else Coordinator(config)
