"""The per-slot messages between the partitions and the coordinator, and their wire format.

Partitions write to the internal ``slot-partials`` topic (key ``<stream>/<partition>``):

- under the coordinator's ledger (fixed requirements): a :class:`Partial` whenever slots close;
- under the partitions' ledgers (dynamic requirements): a :class:`Closure` whenever slots close
  and a :class:`Plan` per slot the partition's ledger planned.

The coordinator writes to ``decisions`` (key ``<stream>/start``, ``<stream>/<slot>``) a
:class:`Start` record and a :class:`Decision` per released slot; partitions under their own
ledgers read both back (the control messages) and write a :class:`Declared` record per chunk of
declarations that took effect (key :func:`declaration_key`), for auditors.

A closure's ``closed_at_ms`` is the partition worker's clock (epoch ms) when its watermark passed
the end of slot ``closed_through``; the coordinator's worker measures the release latency from
it (``pwevent_slot_release_seconds``). Messages written before it existed lack it: the
coordinator then counts from their receipt.

Every message is a JSON object, written with :func:`encode` (``orjson``, keys in the order the
TypedDicts list them) and read with :func:`decode`: the bytes are those the job always wrote.
Budget levels of the partitions' ledgers are named ``"<c1>:<c2>"``, the grid codes of eps1 and
eps2 on the grid of ``GRID_BITS`` (:func:`level_budgets`).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Literal, NotRequired, TypedDict

import numpy as np
import orjson

from mechanisms.ledgers.columns import UNIT, grid_table

GRID_BITS = 3  # budgets rounded down to 4 significant bits, as in DynamicMechanism
DECLARED_CHUNK = 5_000  # users per declaration record: far below Kafka's record size limit


class SlotCounts(TypedDict):
    """One closed slot of a :class:`Partial`: reports per cell per level, reports counted."""

    counts: dict[str, list[int]]
    accepted: int


class Partial(TypedDict):
    """Fixed requirements: a partition closed every slot up to ``closed_through``, at
    ``closed_at_ms``; the counts of those with reports, its registered users per level
    ``"<w>:<E>"``, records rejected."""

    partition: int
    closed_through: int
    closed_at_ms: NotRequired[int]
    slots: dict[str, SlotCounts]
    users: dict[str, int]
    rejected: int


class Closure(TypedDict):
    """Dynamic requirements: a partition closed every slot up to ``closed_through``, at
    ``closed_at_ms``; ``first`` is its earliest slot with a report (``None``: none yet)."""

    partition: int
    closed_through: int
    closed_at_ms: NotRequired[int]
    first: int | None
    rejected: int


class Plan(TypedDict):
    """Dynamic requirements: a partition's plan of slot ``plan``, per budget level."""

    partition: int
    plan: int
    counts: dict[str, list[int]]
    users: dict[str, int]
    accepted: int
    nullified: bool
    projected: dict[str, int]


class Declared(TypedDict):
    """Declarations (``[wB, EB, wF, EF]``) or suspensions (``None``) taking effect at slot
    ``declared`` in a partition: chunk ``chunk`` of ``chunks``."""

    stream: str
    declared: int
    partition: int
    chunk: int
    chunks: int
    users: dict[str, list | None]


class Start(TypedDict):
    """The stream's start record: its first slot, nonce, secret fingerprint and settings."""

    stream: str
    start: int
    nonce: str
    secret_check: str
    config: dict


class Decision(TypedDict):
    """A released slot's decision and the charges per level (``projected``: dynamic only)."""

    stream: str
    slot: int
    published: bool
    nullified: bool
    eps1: dict[str, float]
    eps2: dict[str, float]
    users: dict[str, int]
    projected: NotRequired[dict[str, int]]
    #: the default configuration's mechanism (a stream run with ``--mechanism default``)
    mechanism: NotRequired[str]


PartitionMessage = Partial | Closure | Plan
Control = Start | Decision
Kind = Literal["partial", "closure", "plan", "declared"]


def encode(message: PartitionMessage | Declared | Control) -> bytes:
    """A message's bytes on its topic."""
    return orjson.dumps(message)


def kind(message: dict) -> Kind:
    """What a partition's message is; ``ValueError`` when it is none of them."""
    if "declared" in message:
        return "declared"
    if "plan" in message:
        return "plan"
    if "closed_through" not in message:
        raise ValueError("a partition's message needs closed_through or plan")
    return "partial" if "slots" in message else "closure"


def decode(value: bytes) -> PartitionMessage:
    """A ``slot-partials`` record's message; ``ValueError`` when it is not one."""
    doc = orjson.loads(value)
    if not isinstance(doc, dict) or "partition" not in doc or kind(doc) == "declared":
        raise ValueError("a slot-partials record is a partition's message")
    return doc


def control(doc: object, stream: str) -> Control | None:
    """A decisions record of ``stream`` that partitions act on (a start or a decision);
    ``None`` for another stream's record or a declaration record."""
    if not isinstance(doc, dict) or doc.get("stream") != stream or "declared" in doc:
        return None
    return doc


def partials_key(stream: str, partition: int) -> bytes:
    """The key of a partition's messages on ``slot-partials``."""
    return f"{stream}/{partition}".encode()


def declaration_key(note: Declared) -> str:
    """The decisions-topic key of a declaration record: ``<stream>/declared/<slot>/<p>/<k>``."""
    return f"{note['stream']}/declared/{note['declared']}/{note['partition']}/{note['chunk']}"


def level_name(code1: int, code2: int) -> str:
    """The name of the budget level with grid codes ``code1`` (eps1) and ``code2`` (eps2)."""
    return f"{code1}:{code2}"


def parse_level_name(name: str) -> tuple[int, int]:
    """Inverse of :func:`level_name`; ``ValueError`` when malformed."""
    a, sep, b = name.partition(":")
    if not sep:
        raise ValueError(f"budget level {name!r} is not <code1>:<code2>")
    return int(a), int(b)


def level_budgets(names: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """eps1 and eps2 of budget levels named by :func:`level_name`."""
    codes = np.array([parse_level_name(k) for k in names], dtype=np.int64).reshape(-1, 2)
    table = grid_table(GRID_BITS)
    return table[codes[:, 0]] * UNIT, table[codes[:, 1]] * UNIT


def secret_check(secret: bytes, stream: str) -> str:
    """A public fingerprint of the deployment secret for ``stream`` (the start record carries
    it): HMAC-SHA256 of a fixed message, 16 hex digits. Like the watermarks' signatures it tells
    nothing about the secret, but lets a worker see that it was given another one."""
    message = b"\0".join((b"pwevent-secret-check", stream.encode()))
    return hmac.new(secret, message, hashlib.sha256).hexdigest()[:16]
