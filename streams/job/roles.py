"""The job's parts for a configuration: the registry and the placement of the budget ledger
that its mechanism needs (on the coordinator for fixed requirements, in the partitions for
dynamic ones, DPBD and DPBA), and a worker's partition built from them."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, MutableMapping

from streams.job.config import JobConfig
from streams.job.coordination.coordinator import Coordinator
from streams.job.partitions.accumulator import PartitionAccumulator
from streams.job.partitions.ledger import PartitionLedger
from streams.job.partitions.partition import Partition
from streams.job.partitions.placement import CoordinatorLedger, Placement
from streams.job.partitions.registries import DynamicRegistry, Registry
from streams.job.partitions.registry_columns import UserRegistry


def make_registry(config: JobConfig, partition: int) -> UserRegistry:
    """Partition ``partition``'s registry of users."""
    if config.dynamic:
        return DynamicRegistry(config.mechanism, config.max_window, partition, config)
    return Registry(config, partition)


def placement_type(config: JobConfig) -> type[Placement]:
    """Where ``config``'s mechanism keeps the budget ledger (a partition's side)."""
    return PartitionLedger if config.dynamic else CoordinatorLedger


def make_placement(config: JobConfig, registry: UserRegistry) -> Placement:
    """A partition's side of the placement of the ledger, over ``registry``."""
    if config.dynamic:
        assert isinstance(registry, DynamicRegistry)
        return PartitionLedger(config, registry)
    assert isinstance(registry, Registry)
    return CoordinatorLedger(registry)


def make_accumulator(partition: int, config: JobConfig,
                     registry: UserRegistry) -> PartitionAccumulator:
    """A partition's worker over ``registry``."""
    return PartitionAccumulator(partition, config, make_placement(config, registry))


def make_partition(partition: int, config: JobConfig, users: MutableMapping[bytes, bytes],
                   checkpoints: Mapping[bytes, bytes], lock: asyncio.Lock) -> Partition:
    """Partition ``partition`` as a worker holds it, restored from the ``users`` and
    ``checkpoints`` tables."""
    registry = make_registry(config, partition)
    return Partition.restored(partition, registry, make_accumulator(partition, config, registry),
                              users, checkpoints, lock, config.partitions)


def make_coordinator(config: JobConfig) -> Coordinator:
    """The coordinator (with the placement of the ledger ``config``'s mechanism needs)."""
    return Coordinator(config)
