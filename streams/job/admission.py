"""Which input records the job admits: one identity per user, requirements within bounds.

A user is the key of its records. Kafka's default partitioner maps a key to one partition, and
each partition keeps its own registry, so a record that is keyless or sits on another partition
than its key's could register, or count, the same user a second time. Such records are
dead-lettered (``missing_key``, ``wrong_partition``) before anything else is looked at.

Requirements are public mechanism parameters, but extreme ones are a weapon: a budget of 1e-20
or 1e300, or a window of 10**9 slots, would break the noise or the ledgers for everybody. They
are ``invalid_requirement`` outside the job's bounds (``--min-epsilon``, ``--max-epsilon``,
``--max-window``).
"""

from __future__ import annotations

from streams.job.config import JobConfig
from streams.kafka.producer import key_partition
from streams.records.field_formats import Reason
from streams.records.field_parsing import RecordError
from streams.records.requirement_parsing import (
    DynamicRequirement,
    FixedRequirement,
    RequirementRemoval,
    parse_requirement,
)


def check_placement(key: bytes | None, partition: int, partitions: int) -> None:
    """Raise :class:`RecordError` unless the record is keyed and on its key's partition."""
    if key is None:
        raise RecordError(Reason.MISSING_KEY, "records must be keyed by their user id")
    expected = key_partition(key, partitions)
    if partition != expected:
        raise RecordError(Reason.WRONG_PARTITION,
                          f"key {key[:64]!r} belongs on partition {expected}, not {partition}")


def check_bounds(req: FixedRequirement | DynamicRequirement, config: JobConfig) -> None:
    """Raise ``invalid_requirement`` when a window or budget lies outside the job's bounds."""
    if isinstance(req, FixedRequirement):
        windows, budgets = (("w", req.w),), (("E", req.E),)
    else:
        windows = (("wB", req.wB), ("wF", req.wF))
        budgets = (("EB", req.EB), ("EF", req.EF))
    for name, w in windows:
        if w > config.max_window:
            raise RecordError(Reason.INVALID_REQUIREMENT,
                              f"{name} = {w} exceeds the job's max window {config.max_window}")
    for name, e in budgets:
        if not config.min_epsilon <= e <= config.max_epsilon:
            raise RecordError(
                Reason.INVALID_REQUIREMENT,
                f"{name} = {e!r} lies outside the job's budget bounds "
                f"[{config.min_epsilon!r}, {config.max_epsilon!r}]")


def admit_requirement(
    key: bytes | None, value: bytes | None, partition: int, config: JobConfig
) -> FixedRequirement | DynamicRequirement | RequirementRemoval:
    """Parse one record of the requirements topic as the job admits it; raises
    :class:`RecordError` with the reason otherwise."""
    if key is None and value is None:
        raise RecordError(Reason.MISSING_FIELD, "tombstone without a key")
    check_placement(key, partition, config.partitions)
    req = parse_requirement(value, key)
    if not isinstance(req, RequirementRemoval):
        check_bounds(req, config)
    return req
