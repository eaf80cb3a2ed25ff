"""A worker's partition (:class:`~streams.job.partitions.partition.Partition`) without Kafka:
built from the tables, it admits, slots and counts a batch and answers what to send and store."""

from __future__ import annotations

import asyncio

import orjson

from streams.job.config import JobConfig
from streams.job.partitions.checkpoint_store import read_chunked, write_chunked
from streams.job.partitions.partition import Partition
from streams.job.partitions.registry_store import read_blocks
from streams.job.roles import make_partition
from streams.kafka.producer import key_partition

FIXED = JobConfig(mechanism="pba", domain={"kind": "cells", "size": 3}, slot_ms=100,
                  partitions=2, secret="s", lateness_ms=0, event_time="history")
DYNAMIC = JobConfig(mechanism="dpbd", domain={"kind": "cells", "size": 3}, slot_ms=100,
                    partitions=1, secret="s", lateness_ms=0, event_time="history")


def built(cfg: JobConfig, users: dict, checkpoints: dict, p: int = 0) -> Partition:
    return make_partition(p, cfg, users, checkpoints, asyncio.Lock())


def mine(p: int, n: int = 8) -> list[str]:
    return [u for u in (f"u{i}" for i in range(n)) if key_partition(u.encode(), 2) == p]


def report(user: str, t: int, v: int, p: int, offset: int) -> tuple:
    return user.encode(), orjson.dumps({"user": user, "time": t, "value": v}), p, offset


def test_a_batch_says_its_partials_dead_letters_and_checkpoint() -> None:
    users: dict[bytes, bytes] = {}
    checkpoints: dict[bytes, bytes] = {}
    part = built(FIXED, users, checkpoints)
    names = mine(0)
    stranger = next(u for u in mine(0, 40) if u not in names)
    records = [(u.encode(), orjson.dumps({"user": u, "w": 4, "E": 1.0}), 0, i)
               for i, u in enumerate(names)]
    records.append((b"u-bad", b"{}", 0, len(records)))
    dead = part.register(records, "requirements")
    assert [d.offset for d in dead] == [len(names)]
    assert read_blocks(users, 0) is not None  # the registry is in the users table

    said = part.take_reports([report(names[0], 10, 1, 0, 0), report(names[0], 20, 2, 0, 1),
                              report(stranger, 30, 0, 0, 2)], "reports", None, {})
    assert [d.reason for d in said.dead] == ["duplicate_in_slot", "unregistered_user"]
    assert said.messages == [] and said.checkpoint is None and not said.checkpoint_first
    assert (said.opened, said.counted, said.keyed) == (0, 1, True)

    said = part.take_reports([report(names[1], 150, 0, 0, 3)], "reports", None, {})
    assert [m["closed_through"] for m in said.messages] == [0]
    assert said.messages[0]["slots"]["0"]["accepted"] == 1
    assert said.checkpoint is not None and said.offset == 4


def test_a_partition_built_again_from_the_tables_takes_up_where_it_stood() -> None:
    users: dict[bytes, bytes] = {}
    checkpoints: dict[bytes, bytes] = {}
    part = built(FIXED, users, checkpoints, p=1)
    names = mine(1)
    part.register([(u.encode(), orjson.dumps({"user": u, "w": 3, "E": 2.0}), 1, i)
                   for i, u in enumerate(names)], "requirements")
    batch = [report(u, 150 + i, i % 3, 1, i) for i, u in enumerate(names)]
    said = part.take_reports([*batch, report(names[0], 250, 0, 1, len(names))], "reports",
                             None, {})
    assert said.checkpoint is not None
    write_chunked(checkpoints, 1, said.checkpoint)
    again = built(FIXED, users, checkpoints, p=1)
    assert again.acked == again.next_offset == len(names) + 1
    assert list(again.registry.users) == list(part.registry.users)
    assert again.accumulator.snapshot() == part.accumulator.snapshot()


def test_a_ledger_in_the_partition_checkpoints_first_and_owes_its_messages_once() -> None:
    users: dict[bytes, bytes] = {}
    checkpoints: dict[bytes, bytes] = {}
    part = built(DYNAMIC, users, checkpoints)
    decl = {"user": "a", "wB": 4, "EB": 1.0, "wF": 4, "EF": 1.0}
    part.register([(b"a", orjson.dumps(decl), 0, 0)], "requirements")
    said = part.take_reports([report("a", 10, 1, 0, 0), report("a", 150, 2, 0, 1)],
                             "reports", None, {})
    assert said.checkpoint_first and said.checkpoint is not None
    assert [m.get("closed_through") for m in said.messages] == [0]
    start = {"stream": DYNAMIC.stream, "start": 0}
    heard = part.hear(start, start, {})  # not resumed: owes its closure again, then plans
    assert "closed_through" in heard.messages[0] and heard.messages[-1]["plan"] == 0
    part.resumed = True
    assert part.resume(start, {}).messages == []
    assert read_chunked(checkpoints, 0) is None  # the runner stores checkpoints, not the partition
