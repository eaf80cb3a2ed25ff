"""The source side in one process: mapping telemetry records to reports, the bad-mapping
check, default requirements, and which report of a user counts when reports carry a source
position."""

from __future__ import annotations

import random

import orjson
import pytest

from streams.job.config import JobConfig
from streams.job.pipeline import InProcessJob
from streams.job.source.defaults import DEFAULT_PRIOR, DefaultRequirements, default_levels
from streams.job.source.mapping import MappingWatch, SourceMapping
from streams.job.source.rekey import report_value

LABELS = {"kind": "labels", "labels": ["DE", "FR", "other"], "other": "other"}


def recs(*docs, ts: int = 7):
    return [(None, d if isinstance(d, bytes) or d is None else orjson.dumps(d), 3, 100 + i, ts)
            for i, d in enumerate(docs)]


def test_nested_paths_iso_and_epoch_units_are_detected():
    m = SourceMapping.from_flags("device.id", "meta.ts", ["country"], {"kind": "labels",
                                                                       "labels": ["DE", "FR"]})
    b = m.map(recs({"device": {"id": "d17"}, "meta": {"ts": "2026-12-03T10:15:00.123Z"},
                    "country": "DE"},
                   {"device": {"id": 42}, "meta": {"ts": 1764756900}, "country": "FR"},
                   {"device": {"id": "d3"}, "meta": {"ts": 1764756900.5}, "country": "FR"},
                   {"device": {"id": "d4"}, "meta": {"ts": 1764756900123}, "country": "DE"},
                   {"device": {"id": "d5"}, "meta": {"ts": 1764756900123456}, "country": "DE"}))
    assert b.rejected == []
    assert b.users == ["d17", "42", "d3", "d4", "d5"]
    assert b.times.tolist() == [1796292900123, 1764756900000, 1764756900500, 1764756900123,
                                1764756900123]
    assert b.cells.tolist() == [0, 1, 1, 0, 0]


def test_declared_units_and_the_record_timestamp():
    domain = {"kind": "cells", "size": 4}
    ms = SourceMapping.from_flags("u", "t:ms", ["v"], domain).map(recs({"u": "a", "t": 5,
                                                                         "v": 1}))
    assert ms.times.tolist() == [5]  # 5 would be detected as seconds
    s = SourceMapping.from_flags("u", "t:s", ["v"], domain).map(recs({"u": "a", "t": 5, "v": 1}))
    assert s.times.tolist() == [5000]
    iso = SourceMapping.from_flags("u", "t:iso", ["v"], domain).map(recs({"u": "a", "t": 5,
                                                                           "v": 1}))
    assert [r.reason.value for r in iso.rejected] == ["bad_type"]
    kafka = SourceMapping.from_flags("u", None, ["v"], domain).map(recs({"u": "a", "v": 2},
                                                                         ts=1234))
    assert kafka.times.tolist() == [1234]


def test_unmappable_records_get_their_reasons():
    m = SourceMapping.from_flags("u", "t", ["v"], {"kind": "bins", "low": 0, "high": 10,
                                                   "bins": 5})
    b = m.map(recs({"u": "a", "t": 1000, "v": 3.0}, None, b"{nope", [1, 2], {"t": 1, "v": 1},
                   {"u": "b", "t": "yesterday", "v": 1}, {"u": "c", "t": 1000, "v": 11},
                   {"u": "d", "t": -1, "v": 1}, {"u": "e", "t": 1000, "v": "x"},
                   {"u": ["x"], "t": 1000, "v": 1}))
    assert b.users == ["a"] and b.cells.tolist() == [1]
    reasons = [(r.index, r.reason.value) for r in b.rejected]
    assert reasons == [(1, "malformed_json"), (2, "malformed_json"), (3, "bad_type"),
                       (4, "missing_field"), (5, "bad_type"), (6, "out_of_domain"),
                       (7, "bad_type"), (8, "bad_type"), (9, "bad_type")]
    assert "no u" in b.rejected[3].detail


def test_other_label_takes_values_outside_the_domain():
    m = SourceMapping.from_flags("u", "t", ["c"], LABELS)
    b = m.map(recs({"u": "a", "t": 1000, "c": "US"}, {"u": "b", "t": 1000, "c": "FR"},
                   {"u": "c", "t": 1000, "c": 3}))
    assert b.values == ["other", "FR"] and b.cells.tolist() == [2, 1]
    assert [r.reason.value for r in b.rejected] == ["bad_type"]  # a wrong kind is not "other"
    without = SourceMapping.from_flags("u", "t", ["c"], {"kind": "labels", "labels": ["FR"]})
    assert [r.reason.value for r in without.map(recs({"u": "a", "t": 1000, "c": "US"})).rejected
            ] == ["out_of_domain"]
    with pytest.raises(ValueError, match="other"):
        SourceMapping.from_flags("u", "t", ["c"], {"kind": "labels", "labels": ["FR"],
                                                   "other": "XX"})


def test_grid_takes_two_value_paths():
    grid = {"kind": "grid", "lon_min": 0, "lon_max": 2, "lat_min": 0, "lat_max": 2, "cols": 2,
            "rows": 2}
    m = SourceMapping.from_flags("u", "t", ["pos.lon", "pos.lat"], grid)
    b = m.map(recs({"u": "a", "t": 1000, "pos": {"lon": 1.5, "lat": 0.5}},
                   {"u": "b", "t": 1000, "pos": {"lon": 1.5}},
                   {"u": "c", "t": 1000, "pos": {"lon": 5, "lat": 0.5}}))
    assert b.cells.tolist() == [1] and b.values == [[1.5, 0.5]]
    assert [r.reason.value for r in b.rejected] == ["missing_field", "out_of_domain"]
    with pytest.raises(ValueError, match="two value fields"):
        SourceMapping.from_flags("u", "t", ["pos.lon"], grid)
    with pytest.raises(ValueError, match="only a grid"):
        SourceMapping.from_flags("u", "t", ["a", "b"], LABELS)


def test_bad_mappings_are_reported_once():
    said: list[tuple[str, str]] = []
    watch = MappingWatch(lambda topic, problem, message: said.append((topic, problem)), first=10)
    m = SourceMapping.from_flags("user.id", "ts", ["v"], {"kind": "cells", "size": 2})
    now = 1_800_000_000_000
    for _ in range(3):  # the user field is never there; times are ms read as seconds
        batch = recs(*[{"uid": "a", "ts": now // 1000, "v": 1}] * 5)
        watch.take("t1", m.map(batch), len(batch), now)
    assert said == [("t1", "field_never_present")]
    said.clear()
    ok = SourceMapping.from_flags("u", "ts:s", ["v"], {"kind": "cells", "size": 2})
    for _ in range(3):
        batch = recs(*[{"u": "a", "ts": now, "v": 1}] * 5)  # seconds declared, ms given
        watch.take("t2", ok.map(batch), len(batch), now)
    assert said == [("t2", "time_decades_away")]
    said.clear()
    for _ in range(3):
        batch = recs(*[{"u": "a", "ts": now // 1000, "v": 1}] * 5)
        watch.take("t3", ok.map(batch), len(batch), now)
    assert said == []


def test_default_requirement_rules_first_match_wins():
    d = DefaultRequirements(["consent.tier=full:w=10,E=2", "consent.tier=3:w=4,E=1",
                             "w=20,E=0.5"], JobConfig())
    assert d.paths == (("consent", "tier"), ("consent", "tier"))
    assert d.choose(("full", "full")).fields == {"w": 10, "E": 2.0}
    assert d.choose((3, 3)).fields == {"w": 4, "E": 1.0}
    assert d.choose((None, None)).fields == {"w": 20, "E": 0.5}
    only = DefaultRequirements(["tier=full:w=10,E=2"], JobConfig())
    assert only.choose(("basic",)) is None
    assert orjson.loads(only.rules[0].requirement("u1")) == {
        "user": "u1", "w": 10, "E": 2.0, "registered": "default"}
    # each rule's level, with its public prior (summed where two rules share a level)
    assert [r.prior for r in d.rules] == [DEFAULT_PRIOR] * 3
    assert default_levels(["a=1:w=10,E=2,n=50", "w=10,E=2,n=7", "w=3,E=1"], JobConfig()) == (
        ("10:2.0", 57), ("3:1.0", DEFAULT_PRIOR))
    # a dynamic ledger per user would publish when a device appeared: refused
    with pytest.raises(ValueError, match="declare dynamic requirements"):
        DefaultRequirements(["wB=4,EB=1,wF=3,EF=1"], JobConfig(mechanism="dpbd"))
    with pytest.raises(ValueError, match="fixed-requirement"):
        JobConfig(mechanism="dpba", default_levels=(("4:1.0", 10),))
    for bad, why in (("w=4", "takes"), ("w=4,E=1,E=2", "expected"), ("w=0,E=1", "w"),
                     ("w=4,E=100", "bounds"), ("tier:w=4,E=1", "PATH=VALUE"),
                     ("wB=4,EB=1,wF=3,EF=1", "takes"), ("w=4,E=1,n=0", "n "),
                     ("w=4,E=1,n=x", "n "), ("w=4,E=1,n=2,n=3", "expected")):
        with pytest.raises(ValueError, match=why):
            DefaultRequirements([bad], JobConfig())


# -- which report counts -------------------------------------------------------------------------

def _cfg(mechanism: str = "pbd") -> JobConfig:
    return JobConfig(stream="s", mechanism=mechanism, domain={"kind": "cells", "size": 3},
                     slot_ms=1000, partitions=2, secret="k", event_time="history",
                     lateness_ms=5000,  # arrival order spans every slot: nothing is late
                     nonce="00" * 16)


def _requirements(users, mechanism):
    if mechanism == "dpbd":
        return [(u.encode(), orjson.dumps({"user": u, "wB": 3, "EB": 1.0, "wF": 2, "EF": 1.0}))
                for u in users]
    return [(u.encode(), orjson.dumps({"user": u, "w": 3, "E": 1.0})) for u in users]


def _source_reports(rng: random.Random, users, slots: int):
    """Several reports per user and slot, spread over three source partitions."""
    out = []
    offsets = [0, 0, 0]
    for s in range(slots):
        for u in users:
            for _ in range(rng.randint(1, 3)):
                sp = rng.randrange(3)
                out.append((u.encode(), report_value(u, s * 1000 + rng.randrange(1000),
                                                     rng.randrange(3), (0, sp, offsets[sp]))))
                offsets[sp] += 1
    return out


def _run(cfg, users, records, batches: int, mechanism: str):
    job = InProcessJob(cfg)
    job.register(_requirements(users, mechanism))
    step = max(1, len(records) // batches)
    for k in range(0, len(records), step):
        job.feed(records[k:k + step])
    job.finish(4 * 1000)
    return job


def _winners(records):
    """Per (user, slot), the cell of the report with the smallest (time, source)."""
    best: dict[tuple[str, int], tuple] = {}
    for _key, value in records:
        doc = orjson.loads(value)
        k = (doc["user"], doc["time"] // 1000)
        cand = (doc["time"], tuple(doc["source"]), doc["value"])
        if k not in best or cand < best[k]:
            best[k] = cand
    return best


@pytest.mark.parametrize("mechanism", ["pbd", "dpbd"])
def test_the_smallest_source_position_counts_whatever_the_order(mechanism):
    rng = random.Random(5)
    users = [f"u{i}" for i in range(30)]
    records = _source_reports(rng, users, 4)
    cfg = _cfg(mechanism)
    first = _run(cfg, users, records, 1, mechanism)
    assert len(first.releases) == 4
    for seed in range(3):  # other arrival orders, other batches, repeats read again
        shuffled = [r for r in records]
        random.Random(seed).shuffle(shuffled)
        shuffled += rng.sample(records, 40)
        other = _run(cfg, users, shuffled, 7, mechanism)
        assert other.releases == first.releases
    # every (user, slot) counted once, the winner's cell: the in-process counts equal those of
    # the winners alone, fed as plain reports
    winners = _winners(records)
    plain = [(u.encode(), orjson.dumps({"user": u, "time": t, "value": v}))
             for (u, _s), (t, _src, v) in sorted(winners.items())]
    assert _run(cfg, users, plain, 1, mechanism).releases == first.releases
    # the others are counted as superseded, not dead-lettered: many events per device and
    # slot are no bad input
    assert not any(d.reason == "duplicate_in_slot" for d in first.dead)
    assert sum(a.superseded for a in first.accumulators) == len(records) - len(winners)


def test_a_report_without_source_position_keeps_first_in_partition_order():
    cfg = _cfg()
    job = InProcessJob(cfg)
    job.register(_requirements(["a"], "pbd"))
    plain = (b"a", orjson.dumps({"user": "a", "time": 500, "value": 2}))
    sourced = (b"a", report_value("a", 10, 1, (0, 0, 0)))
    job.feed([plain])
    job.feed([sourced])  # earlier in time, but the plain report came first
    assert [d.reason for d in job.dead] == ["duplicate_in_slot"]
    assert job.dead[0].value == sourced[1]
    bad = (b"a", orjson.dumps({"user": "a", "time": 600, "value": 1, "source": [0, -1, 3]}))
    job.feed([bad])
    assert job.dead[-1].reason == "bad_type"


# -- the worker's flags ----------------------------------------------------------------------------

def test_source_flags_from_the_command_line_and_the_config_file(tmp_path):
    from streams.job.source.options import source_settings
    from tests.jobkit import parse_worker_args as parse

    cfg = JobConfig(domain=LABELS)
    conf = {"worker": {"source-topic": ["a", "b"], "user-field": "device.id",
                       "time-field": "ts:ms", "value-field": ["country"],
                       "default-requirement": ["w=5,E=1"]}}
    got = source_settings(parse([], conf), cfg)
    assert got.topics == ("a", "b") and got.defaults == ("w=5,E=1",)
    assert got.mapping.user_field == "device.id" and got.mapping.time_unit == "ms"
    flags = parse(["--source-topic", "c", "--default-requirement", "tier=x:w=3,E=1",
                   "--default-requirement", "w=4,E=1"], conf)
    got = source_settings(flags, cfg)  # the command line replaces the file's lists
    assert got.topics == ("c",) and got.defaults == ("tier=x:w=3,E=1", "w=4,E=1")
    assert source_settings(parse([]), cfg) is None
    for argv, why in ((["--user-field", "u"], "need --source-topic"),
                      (["--source-topic", "a"], "needs --user-field"),
                      (["--source-topic", "a", "--user-field", "u", "--value-field", "v",
                        "--default-requirement", "w=4"], "takes"),
                      (["--source-topic", "pwevent.reports", "--user-field", "u",
                        "--value-field", "v"], "never the job's own")):
        with pytest.raises(ValueError, match=why):
            source_settings(parse(argv), JobConfig(prefix="pwevent"))


def test_requirements_not_yet_applied_hold_their_users_until_the_group_commits_them() -> None:
    """After a restart the stage reads ``requirements`` again: a record the job's group has
    committed is applied (its user is declared); one past the commit (a default written just
    before the restart) is not yet, and its user's reports wait as for a default just written."""
    from collections import Counter
    from types import SimpleNamespace

    from streams.job.config import JobConfig
    from streams.job.source.rekey import Rekeyer, SourceSettings
    from streams.kafka.topics import Topics

    cfg = JobConfig(stream="s", mechanism="pbd", domain={"kind": "cells", "size": 2},
                    secret="x", partitions=2)
    settings = SourceSettings(("t",), SourceMapping.from_flags("u", None, ["v"], cfg.domain),
                              ("w=3,E=1",))
    stage = Rekeyer(cfg, settings, Topics(prefix="p", partitions=2), None, None, Counter(),
                    send_reports=None)
    stage.take_commits({0: 2})

    def rec(user: str | None, offset: int) -> SimpleNamespace:
        return SimpleNamespace(key=None if user is None else user.encode(), offset=offset)

    stage.take_requirements(0, [rec("a", 0), rec(None, 1), rec("b", 2), rec("c", 3)])
    stage.take_requirements(1, [rec("d", 0)])  # nothing committed on partition 1
    assert stage.declared == {"a"}
    assert stage.defaulted == {"b": (0, 2), "c": (0, 3), "d": (1, 0)}
    stage.take_commits({0: 3, 1: 1})
    assert stage.declared == {"a", "b", "d"} and stage.defaulted == {"c": (0, 3)}
