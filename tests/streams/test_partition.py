"""The partition side of the job without Kafka: registry, slotting, de-duplication, checkpoints."""

from __future__ import annotations

import orjson
import pytest

from streams.job.config import JobConfig
from streams.job.coordination.coordinator import Coordinator
from streams.job.partitions.accumulator import PartitionAccumulator, watermark_of, watermark_record
from streams.job.partitions.placement import CoordinatorLedger
from streams.job.partitions.registries import Registry
from streams.records.field_parsing import RecordError

CFG = JobConfig(mechanism="pba", domain={"kind": "cells", "size": 3}, slot_ms=100, partitions=1,
                secret="s", lateness_ms=0, event_time="history")


def req(user: str, w: int = 4, E: float = 1.0) -> tuple[bytes, bytes]:
    return user.encode(), orjson.dumps({"user": user, "w": w, "E": E})


def rep(user: str, t: int, v: int, offset: int) -> tuple[bytes, bytes, int, int]:
    return user.encode(), orjson.dumps({"user": user, "time": t, "value": v}), 0, offset


def test_registry_rejects_changed_requirements_even_after_removal():
    reg = Registry()
    assert reg.apply(*req("a")) == ("a", "", "")
    assert reg.apply(*req("a"))[1] == ""  # the same again is fine
    user, reason, detail = reg.apply(*req("a", w=5))
    assert (user, reason) == ("a", "invalid_requirement") and "cannot change" in detail
    assert reg.apply(b"a", None) == ("a", "", "")  # removal
    assert reg.users_per_level() == {}
    assert reg.apply(*req("a", w=5))[1] == "invalid_requirement"
    assert reg.apply(*req("a"))[1] == ""
    assert reg.users_per_level() == {"4:1.0": 1}


def test_registry_export_load_keeps_indices():
    reg = Registry()
    for u in ("z", "a", "m"):
        reg.apply(*req(u, w=3 if u == "a" else 4))
    reg.apply(b"m", None)
    other = Registry()
    other.load([(u, reg.export(u)) for u in sorted(reg.index_of)])
    assert other.index_of == reg.index_of
    assert other.users_per_level() == reg.users_per_level()
    assert other.apply(*req("m", w=9))[1] == "invalid_requirement"
    assert other.apply(*req("new"))[0] == "new" and other.index_of["new"] == 3


def test_first_report_wins_and_duplicates_are_dead_letters():
    reg = Registry()
    for u in ("a", "b"):
        reg.apply(*req(u))
    acc = PartitionAccumulator(0, CFG, CoordinatorLedger(reg))
    partials, dead = acc.process([rep("a", 10, 0, 0), rep("a", 20, 2, 1), rep("b", 30, 1, 2)])
    assert partials == [] and [d.reason for d in dead] == ["duplicate_in_slot"]
    partials, dead = acc.process([rep("a", 40, 1, 3), rep("a", 150, 1, 4)])
    assert [d.offset for d in dead] == [3]
    assert len(partials) == 1 and partials[0]["closed_through"] == 0
    assert partials[0]["slots"]["0"] == {"counts": {"4:1.0": [1, 1, 0]}, "accepted": 2}
    assert partials[0]["users"] == {"4:1.0": 2}
    assert partials[0]["rejected"] == 2


def test_checkpoint_restores_the_same_future():
    reg = Registry()
    for u in ("a", "b", "c"):
        reg.apply(*req(u))
    recs = [rep(u, t * 100 + i, (i + t) % 3, 3 * t + i) for t in range(4)
            for i, u in enumerate("abc")]
    recs.append(rep("a", 350, 0, 12))  # a duplicate in slot 3

    def merged(messages: list) -> tuple:
        slots = {}
        for m in messages:
            slots.update(m["slots"])
        return slots, messages[-1]["closed_through"], sum(m["rejected"] for m in messages)

    def run(split: int | None) -> tuple:
        acc = PartitionAccumulator(0, CFG, CoordinatorLedger(reg))
        out = []
        if split is None:
            out += acc.process(recs)[0]
        else:
            out += acc.process(recs[:split])[0]
            saved = acc.snapshot()
            acc = PartitionAccumulator(0, CFG, CoordinatorLedger(reg))
            acc.restore(saved)
            out += acc.process(recs)[0]  # re-delivery from an older offset is skipped
        out += acc.advance_messages(acc.idle_watermark())
        return merged(out)

    whole = run(None)
    assert whole[1] == 3 and whole[2] == 1 and sorted(whole[0]) == ["0", "1", "2", "3"]
    for split in (1, 4, 8, 11):
        assert run(split) == whole


def test_watermark_records_are_control_records():
    mark = watermark_record(1234, b"s", "default", 0)
    assert watermark_of((None, mark, 0, 0), b"s", "default") == 1234
    assert watermark_of((b"u", mark, 0, 0), b"s", "default") is None
    assert watermark_of((None, b'{"user": "u"}', 0, 0), b"s", "default") is None
    for forged in (b'{"watermark": 1, "x": 2}', b'{"watermark": 1234}', mark):
        with pytest.raises(RecordError, match="signature"):
            watermark_of((None, forged, 0, 0), b"other secret", "default")


def test_coordinator_waits_for_every_partition_and_dedupes(caplog):
    cfg = JobConfig(mechanism="pbd", domain={"kind": "cells", "size": 2}, slot_ms=100,
                    partitions=2, secret="s")
    coord = Coordinator(cfg)
    msg0 = {"partition": 0, "closed_through": 1, "users": {"4:1.0": 2}, "rejected": 0,
            "slots": {"0": {"counts": {"4:1.0": [2, 0]}, "accepted": 2},
                      "1": {"counts": {"4:1.0": [1, 1]}, "accepted": 2}}}
    assert coord.receive(msg0) == []
    msg1 = {"partition": 1, "closed_through": 0, "users": {"4:1.0": 1}, "rejected": 1,
            "slots": {"0": {"counts": {"4:1.0": [0, 1]}, "accepted": 1}}}
    with caplog.at_level("INFO", logger="pwevent.coordinator"):
        out = coord.receive(msg1)
    assert [s for s, r, _d in out if r is not None] == [0]
    assert out[0][1] is None and orjson.loads(out[0][2])["start"] == 0  # the start record
    release = orjson.loads(out[1][1])
    assert release["users"] == 3 and "accepted" not in release and "rejected" not in release
    assert "3 reports accepted, 1 records rejected" in caplog.text  # for the operator only
    assert coord.receive(msg1) == [] and coord.duplicates == 1
    saved = coord.snapshot()
    again = Coordinator(cfg)
    again.restore(saved)
    later = {"partition": 1, "closed_through": 1, "users": {"4:1.0": 1}, "rejected": 0,
             "slots": {}}
    a, b = coord.receive(later), again.receive(dict(later))
    assert a == b and [s for s, _r, _d in a] == [1]


def test_coordinator_rejects_unknown_partitions():
    coord = Coordinator(CFG)
    with pytest.raises(ValueError, match="partition 3"):
        coord.receive({"partition": 3, "closed_through": 0, "users": {}, "slots": {}})


def test_every_registered_user_is_charged_whether_or_not_they_report():
    """Decision 2: budgets and thresholds follow registrations, never the activity pattern."""
    from streams.job.pipeline import InProcessJob

    def run(reporting: int) -> list[dict]:
        cfg = JobConfig(mechanism="uniform", domain={"kind": "cells", "size": 3}, slot_ms=100,
                        partitions=2, secret="s", event_time="history")
        job = InProcessJob(cfg)
        users = [f"u{i}" for i in range(12)]
        job.register(req(u, w=2 + i % 2) for i, u in enumerate(users))
        for t in range(5):
            job.feed(rep(u, t * 100 + i, i % 3, 0)[:2] for i, u in enumerate(users[:reporting]))
        job.feed([rep("u0", 450, 1, 0)[:2]])  # every run reaches slot 4
        job.finish()
        return [orjson.loads(d) for d in job.coordinator.decisions.values()]

    everyone, half, one = run(12), run(6), run(1)
    assert len(everyone) == len(half) == len(one) == 5
    for a, b, c in zip(everyone, half, one, strict=True):
        assert a["users"] == b["users"] == c["users"] == {"2:1.0": 6, "3:1.0": 6}
        assert a["eps1"] == b["eps1"] == c["eps1"] and a["eps2"] == b["eps2"] == c["eps2"]
