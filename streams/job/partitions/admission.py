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

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from streams.job.config import JobConfig
from streams.job.partitions.key_hashing import key_partitions
from streams.kafka.producer import key_partition
from streams.records.field_formats import USER_MAX_LENGTH, WINDOW_MIN, Reason
from streams.records.field_parsing import RecordError
from streams.records.json_limits import screen_one
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


FIXED, DYNAMIC, REMOVAL, REJECTED = 0, 1, 2, -1  # kinds of :class:`AdmittedBatch` records


@dataclass
class AdmittedBatch:
    """A batch of requirement records as the job admits them, one entry per record: its
    ``kind`` (:data:`FIXED`, :data:`DYNAMIC`, :data:`REMOVAL` or :data:`REJECTED`), its user
    (``None`` when rejected), its fields (zero where they do not apply) and, for a rejected
    record, the error."""

    kind: np.ndarray
    users: list[str | None]
    w: np.ndarray
    E: np.ndarray
    wB: np.ndarray
    EB: np.ndarray
    wF: np.ndarray
    EF: np.ndarray
    errors: dict[int, RecordError]


def admit_requirements(keys: Sequence[bytes | None], values: Sequence[bytes | None],
                       partition: int, config: JobConfig) -> AdmittedBatch:
    """:func:`admit_requirement` over a batch: the same outcome for every record.

    The keys' partitions are computed for the whole batch at once
    (:func:`~streams.job.partitions.key_hashing.key_partitions`); a record of the common shapes
    (exactly the fields of a fixed or of a dynamic requirement, within bounds, or a tombstone) is
    admitted on a short path, and any other record goes through :func:`admit_requirement`,
    which says why it is rejected.
    """
    n = len(keys)
    keyed = [i for i in range(n) if keys[i] is not None]
    placed = np.zeros(n, dtype=bool)
    if keyed:
        parts = key_partitions([keys[i] for i in keyed], config.partitions)  # type: ignore[misc]
        placed[keyed] = parts == partition
    kind = [REJECTED] * n
    users: list[str | None] = [None] * n
    w, E, wB, EB, wF, EF = ([0] * n, [0.0] * n, [0] * n, [0.0] * n, [0] * n, [0.0] * n)
    errors: dict[int, RecordError] = {}
    lo_w, hi_w = WINDOW_MIN, config.max_window
    lo_e, hi_e = config.min_epsilon, config.max_epsilon
    loads = orjson.loads
    for i, ok in enumerate(placed.tolist()):
        key, value = keys[i], values[i]
        if ok:
            if value is None:  # a tombstone of a placed key
                try:
                    user = key.decode()  # type: ignore[union-attr]
                except UnicodeDecodeError:
                    user = ""
                if 0 < len(user) <= USER_MAX_LENGTH:
                    kind[i], users[i] = REMOVAL, user
                    continue
            else:
                try:
                    doc = None if screen_one(value) else loads(value)
                except orjson.JSONDecodeError:
                    doc = None
                if type(doc) is dict:
                    user = doc.get("user")
                    if type(user) is str and 0 < len(user) <= USER_MAX_LENGTH \
                            and key == user.encode():
                        size = len(doc)
                        if size == 3:
                            a, b = doc.get("w"), doc.get("E")
                            if type(a) is int and lo_w <= a <= hi_w and (
                                    type(b) is float or type(b) is int) and lo_e <= b <= hi_e:
                                kind[i], users[i], w[i], E[i] = FIXED, user, a, float(b)
                                continue
                        elif size == 5:
                            a, b = doc.get("wB"), doc.get("EB")
                            c, e = doc.get("wF"), doc.get("EF")
                            if (type(a) is int and lo_w <= a <= hi_w
                                    and type(c) is int and lo_w <= c <= hi_w
                                    and (type(b) is float or type(b) is int) and lo_e <= b <= hi_e
                                    and (type(e) is float or type(e) is int)
                                    and lo_e <= e <= hi_e):
                                kind[i], users[i] = DYNAMIC, user
                                wB[i], EB[i], wF[i], EF[i] = a, float(b), c, float(e)
                                continue
        try:  # the long path: an uncommon shape, or a rejection and its reason
            req = admit_requirement(key, value, partition, config)
        except RecordError as exc:
            errors[i] = exc
            continue
        except Exception as exc:  # noqa: BLE001 - no record may stop the worker
            errors[i] = RecordError(Reason.UNPROCESSABLE, f"processing it raised "
                                    f"{type(exc).__name__}: {exc}"[:200])
            continue
        users[i] = req.user
        if isinstance(req, RequirementRemoval):
            kind[i] = REMOVAL
        elif isinstance(req, FixedRequirement):
            kind[i], w[i], E[i] = FIXED, req.w, req.E
        else:
            kind[i] = DYNAMIC
            wB[i], EB[i], wF[i], EF[i] = req.wB, req.EB, req.wF, req.EF
    return AdmittedBatch(
        np.array(kind, dtype=np.int8), users, np.array(w, dtype=np.int64),
        np.array(E, dtype=np.float64), np.array(wB, dtype=np.int64),
        np.array(EB, dtype=np.float64), np.array(wF, dtype=np.int64),
        np.array(EF, dtype=np.float64), errors)
