"""The source stage's columnar fast paths give what the general per-record code gives.

:func:`~streams.records.time_columns.iso_times_ms` converts a time string only where
:func:`~streams.records.field_parsing.parse_time` gives that very value, and converts every
string of the usual shapes; :meth:`SourceMapping.map` gives the same batch, rejections and
counts with its typed decoder as with every record parsed whole (``typed=False``)."""

from __future__ import annotations

import asyncio
import gc
import json
from datetime import UTC, datetime, timedelta

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.job.source.mapping import SourceMapping
from streams.job.source.rekey import report_value, report_values
from streams.records.field_parsing import RecordError, parse_time
from streams.records.time_columns import iso_times_ms

DIGIT = st.sampled_from("0123456789")


@st.composite
def near_iso(draw: st.DrawFn) -> str:
    """Strings of the fast shapes with any digits (months 13, 30 February, hour 24...), and
    small mutations of them."""
    def digits(k: int) -> str:
        return "".join(draw(DIGIT) for _ in range(k))
    frac = draw(st.sampled_from(["", "." + digits(3), "." + digits(6), "." + digits(1)]))
    tz = draw(st.sampled_from(["Z", "+" + digits(2) + ":" + digits(2),
                               "-" + digits(2) + ":" + digits(2), "+0100", "z", ""]))
    year = draw(st.sampled_from(["19", "20", "00", "99"])) + digits(2)
    text = f"{year}-{digits(2)}-{digits(2)}T{digits(2)}:{digits(2)}:{digits(2)}{frac}{tz}"
    if draw(st.booleans()):
        i = draw(st.integers(0, len(text) - 1))
        text = text[:i] + draw(st.sampled_from("-T: 0x.Z+é")) + text[i + 1:]
    return text


@st.composite
def real_iso(draw: st.DrawFn) -> str:
    """Valid times of 1970 or later in the usual shapes."""
    moment = draw(st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30),
                               timezones=st.just(UTC)))
    frac = draw(st.sampled_from(["", "ms", "us"]))
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if frac == "ms":
        text += f".{moment.microsecond // 1000:03d}"
    elif frac == "us":
        text += f".{moment.microsecond:06d}"
    minutes = draw(st.integers(-23 * 60 - 59, 23 * 60 + 59))
    if minutes == 0 and draw(st.booleans()):
        return text + "Z"
    local = datetime.fromisoformat(text) + timedelta(minutes=minutes)
    if local.year < 1 or local.year > 9999:
        return text + "Z"
    sign = "-" if minutes < 0 else "+"
    text = local.strftime("%Y-%m-%dT%H:%M:%S") + text[19:]
    return f"{text}{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(near_iso(), real_iso(), st.text(max_size=30)), max_size=40))
def test_iso_columns_convert_only_what_parse_time_gives(values: list[str]) -> None:
    ms, done = iso_times_ms(values)
    for text, got, converted in zip(values, ms.tolist(), done.tolist(), strict=True):
        if converted:
            assert got == parse_time(text), text
        else:
            assert got == -1


@settings(max_examples=300, deadline=None)
@given(st.lists(real_iso(), min_size=1, max_size=40))
def test_iso_columns_take_every_valid_time_of_the_usual_shapes(values: list[str]) -> None:
    ms, done = iso_times_ms(values)
    assert done.all()
    assert ms.tolist() == [parse_time(v) for v in values]


def test_iso_columns_refuse_impossible_dates_and_times_before_1970() -> None:
    values = ["2026-02-29T00:00:00Z", "2024-02-29T00:00:00Z", "2026-13-01T00:00:00Z",
              "2026-12-03T24:00:00Z", "1969-12-31T23:59:59.999Z", "1970-01-01T00:30:00+01:00",
              "2026-12-03T10:15:00.123Z", "2026-12-03t10:15:00Z"]
    ms, done = iso_times_ms(values)
    assert done.tolist() == [False, True, False, False, False, False, True, False]
    for text in ("2026-02-29T00:00:00Z", "1970-01-01T00:30:00+01:00"):
        try:
            parse_time(text)
        except RecordError:
            continue
        raise AssertionError(f"{text} should be refused by parse_time too")


LEAF = st.one_of(
    st.text(max_size=6), st.sampled_from(["DE", "FR", "other", "d1", "d2", ""]),
    st.integers(-5, 5), st.integers(2**62, 2**66), st.integers(-(2**66), -(2**62)),
    st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from("ab"), st.integers(), max_size=1),
    near_iso(), real_iso(), st.integers(0, 2**53), st.floats(0, 1e16),
)


@st.composite
def source_value(draw: st.DrawFn) -> bytes | None:
    """A source record's value: mostly app events with the mapped fields in any shape."""
    kind = draw(st.sampled_from(["event"] * 6 + ["missing", "garbage", "none", "array",
                                                  "duplicate"]))
    if kind == "none":
        return None
    if kind == "garbage":
        return draw(st.binary(max_size=20))
    if kind == "array":
        return b"[1, 2]"
    doc: dict = {"app": draw(LEAF)}
    device = draw(st.sampled_from(["object", "leaf", "absent"]) if kind == "missing"
                  else st.just("object"))
    if device == "object":
        doc["device"] = {"id": draw(LEAF), "tier": draw(LEAF)} if draw(st.booleans()) else \
            {"id": draw(LEAF)}
    elif device == "leaf":
        doc["device"] = draw(LEAF)
    for key in ("ts", "country", "lon", "lat", "consent"):
        if kind != "missing" or draw(st.booleans()):
            doc[key] = draw(LEAF) if key != "consent" else draw(
                st.one_of(LEAF, st.fixed_dictionaries({"tier": LEAF})))
    raw = json.dumps(doc, ensure_ascii=draw(st.booleans())).encode()  # integers beyond 64 bits
    if kind == "duplicate":
        raw = raw[:-1] + b',"country":"FR","device":{"id":"dup"}}'
    return raw


MAPPINGS = [
    SourceMapping.from_flags("device.id", "ts", ["country"],
                             {"kind": "labels", "labels": ["DE", "FR", "other"], "other": "other"}),
    SourceMapping.from_flags("device.id", "ts:ms", ["country"],
                             {"kind": "labels", "labels": ["DE", "FR"]}),
    SourceMapping.from_flags("device.id", None, ["country"], {"kind": "cells", "size": 4}),
    SourceMapping.from_flags("device.id", "ts:iso", ["lon", "lat"],
                             {"kind": "grid", "lon_min": 0, "lon_max": 10, "lat_min": 0,
                              "lat_max": 10, "cols": 2, "rows": 2}),
    SourceMapping.from_flags("app", "ts:s", ["country"], {"kind": "bins", "low": 0, "high": 1,
                                                         "bins": 3}),
]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(range(len(MAPPINGS))), st.lists(source_value(), max_size=30),
       st.sampled_from([(), (("consent", "tier"),), (("device", "tier"), ("app",))]))
def test_typed_mapping_equals_the_general_path(which: int, values: list[bytes | None],
                                                extra: tuple) -> None:
    mapping = MAPPINGS[which]
    records = [(None, v, 0, i, 1_764_756_900_000 + i) for i, v in enumerate(values)]
    fast, general = mapping.map(records, extra), mapping.map(records, extra, typed=False)
    assert fast.index.tolist() == general.index.tolist()
    assert fast.users == general.users
    assert fast.times.tolist() == general.times.tolist()
    assert json.dumps(fast.values) == json.dumps(general.values)
    assert fast.cells.tolist() == general.cells.tolist()
    assert fast.rejected == general.rejected
    assert fast.seen == general.seen
    assert json.dumps(fast.extras) == json.dumps(general.extras)


def test_the_typed_path_takes_the_usual_events() -> None:
    mapping = MAPPINGS[0]
    events = [orjson.dumps({"device": {"id": f"d{i}"}, "ts": "2026-12-03T10:15:00.123Z",
                            "country": "DE", "app": {"v": [1, 2]}}) for i in range(50)]
    taken, _users, _times, _values, _extras, left = mapping._map_typed(
        [(None, v, 0, i, 0) for i, v in enumerate(events)], ())
    assert (len(taken), left) == (50, [])
    batch = mapping.map([(None, v, 0, i, 0) for i, v in enumerate(events)])
    assert batch.times.tolist() == [parse_time("2026-12-03T10:15:00.123Z")] * 50



def test_decoded_records_stay_out_of_the_cycle_collectors_way() -> None:
    """The typed decoders' records cannot form reference cycles (they hold decoded JSON only),
    so the collector does not track them: a batch's thousands of them alive during a young
    collection used to make it the worker's largest collection cost (docs/performance.md)."""
    from streams.job.source.typed_paths import PathDecoder
    from streams.records.report_parsing import decode_report

    decoder = PathDecoder([("device", "id"), ("ts",)], [("app", "v")])
    structs = decoder._structs([orjson.dumps({"device": {"id": "d1"}, "ts": "t",
                                              "app": {"v": [1, {"x": 2}]}})])[1]
    assert len(structs) == 1
    assert not gc.is_tracked(structs[0]) and not gc.is_tracked(structs[0].f0)
    assert gc.is_tracked(structs[0].f3.f4)  # a decoded list is tracked as ever
    report = decode_report(b'{"user": "u", "time": 1, "value": "a", "source": [0, 1, 2]}')
    assert not gc.is_tracked(report)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=8), st.integers(0, 2**53 - 1),
                          st.one_of(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1),
                                    st.floats(allow_nan=False, allow_infinity=False),
                                    st.lists(st.floats(-180, 180), min_size=2, max_size=2)),
                          st.integers(0, 2**62)), max_size=20),
       st.integers(0, 100), st.integers(0, 1000))
def test_report_values_are_report_value_byte_for_byte(rows: list, topic: int, part: int) -> None:
    users, times, values, offsets = (list(col) for col in zip(*rows, strict=True)) if rows \
        else ([], [], [], [])
    assert report_values(users, times, values, topic, part, offsets) == [
        report_value(u, t, v, (topic, part, o)) for u, t, v, o in rows]


class _Letters:
    """Dead letters as the stage hands them over (none in these batches)."""

    def __init__(self) -> None:
        self.sent: list = []

    async def send(self, dead: list, wait: bool = False) -> list:
        self.sent.extend(dead)
        return []


def _stage(sends: list, acks: list):
    from collections import Counter

    from streams.job.config import JobConfig
    from streams.job.source.rekey import Rekeyer, SourceSettings
    from streams.kafka.topics import Topics

    cfg = JobConfig(stream="s", mechanism="pbd", domain={"kind": "cells", "size": 2},
                    secret="x", partitions=2)
    settings = SourceSettings(("t",), SourceMapping.from_flags("u", None, ["v"], cfg.domain))

    async def send_reports(records: list, partitions: list):
        done = asyncio.get_running_loop().create_future()
        sends.append((records, done))
        return done

    return Rekeyer(cfg, settings, Topics(prefix="p", partitions=2), None, _Letters(), Counter(),
                   acknowledge=lambda topic, p, stop: acks.append((topic, p, stop)),
                   send_reports=send_reports)


def _batch(first: int, n: int) -> list:
    return [(None, orjson.dumps({"u": f"u{first + i}", "v": 1}), 0, first + i, 1000)
            for i in range(n)]


def test_batches_on_their_way_are_acknowledged_in_source_order() -> None:
    """The stage maps the next batch while the last one's reports travel; a batch's source
    offsets are acknowledged only once the broker has its reports and every earlier batch's."""
    from streams.job.source_progress import Progress, progress_of

    async def run() -> None:
        sends: list = []
        acks: list = []
        stage = _stage(sends, acks)
        assert await stage.on_batch("t", _batch(0, 3)) == 0  # on its way: hold from 0
        assert await stage.on_batch("t", _batch(3, 2)) == 0
        # the first batch moved its source partition's event time: a progress record for
        # each partition of reports follows its reports (streams/job/source_progress.py)
        assert [len(r) for r, _f in sends] == [5, 2]
        assert [k for k, _v in sends[0][0][3:]] == [None, None]
        assert [progress_of(v, b"x", "s", q) for q, (_k, v) in enumerate(sends[0][0][3:])] \
            == [Progress(0, 0, 1000, False)] * 2
        sends[1][1].set_result(2)  # the later batch first: nothing may be acknowledged yet
        await asyncio.sleep(0)
        assert acks == []
        sends[0][1].set_result(3)
        await asyncio.sleep(0)
        assert acks == [("t", 0, 3), ("t", 0, 5)]
        assert stage.counters["source_produced"] == 5 and stage.held == {}

    asyncio.run(run())


def test_a_refused_send_stops_the_stage_at_its_next_batch() -> None:
    async def run() -> None:
        sends: list = []
        acks: list = []
        stage = _stage(sends, acks)
        await stage.on_batch("t", _batch(0, 2))
        sends[0][1].set_exception(RuntimeError("broker said no"))
        await asyncio.sleep(0)
        try:
            await stage.on_batch("t", _batch(2, 2))
        except RuntimeError as exc:
            assert "broker said no" in str(exc)
        else:
            raise AssertionError("the next batch should raise the refused send")
        assert acks == [] and len(sends) == 1  # nothing acknowledged, nothing more sent

    asyncio.run(run())


def test_no_more_than_in_flight_batches_travel_at_once() -> None:
    from streams.job.source import rekey

    async def run() -> None:
        sends: list = []
        acks: list = []
        stage = _stage(sends, acks)
        for k in range(rekey.IN_FLIGHT):
            await stage.on_batch("t", _batch(2 * k, 2))
        nxt = asyncio.ensure_future(stage.on_batch("t", _batch(2 * rekey.IN_FLIGHT, 2)))
        await asyncio.sleep(0.01)
        assert len(sends) == rekey.IN_FLIGHT and not nxt.done()  # waits for the oldest
        sends[0][1].set_result(2)
        assert await nxt == 2  # the oldest is through: acknowledged up to the second batch
        assert len(sends) == rekey.IN_FLIGHT + 1 and acks == [("t", 0, 2)]

    asyncio.run(run())


def test_the_stage_forwards_only_reports_that_can_still_win() -> None:
    """Per (user, slot) the report with the smallest (event time, source position) counts: the
    stage forwards a device's event only when it comes before every one it forwarded for that
    slot, and counts the others (not dead letters)."""
    from streams.job.source_progress import PROGRESS_PREFIX

    def event(user: str, t: int, offset: int) -> tuple:
        return (None, orjson.dumps({"u": user, "v": 1}), 0, offset, t)

    def forwarded(sends: list, k: int) -> list[tuple[str, int]]:
        return [(orjson.loads(v)["user"], orjson.loads(v)["time"]) for _k, v in sends[k][0]
                if not v.startswith(PROGRESS_PREFIX)]

    async def run() -> None:
        sends: list = []
        stage = _stage(sends, [])
        # slot length 60 s: three events of u0 and two of u1 in slot 0, one of u0 in slot 1
        await stage.on_batch("t", [event("u0", 3_000, 0), event("u0", 1_000, 1),
                                   event("u1", 2_000, 2), event("u0", 1_000, 3),
                                   event("u1", 2_500, 4), event("u0", 61_000, 5)])
        assert forwarded(sends, 0) == [("u0", 1_000), ("u1", 2_000), ("u0", 61_000)]
        assert stage.counters["source_superseded"] == 3
        await stage.on_batch("t", [event("u0", 500, 6), event("u1", 2_000, 7)])
        assert forwarded(sends, 1) == [("u0", 500)], "only what comes first can still win"
        assert stage.counters["source_superseded"] == 4
        assert stage.dead_letters.sent == []

    asyncio.run(run())


def test_a_partition_forgotten_at_a_rebalance_is_read_again_in_full() -> None:
    """A batch still held when its source partition is revoked is dropped unsent and read
    again from the committed offset, here or by another worker. Its reports must go out then:
    the stage must not remember them as forwarded winners of their (user, slot), nor claim the
    event time they reached (a two-worker run once lost one source partition's last slots)."""
    from streams.job.source_progress import progress_of

    async def run() -> None:
        sends: list = []
        acks: list = []
        stage = _stage(sends, acks)
        assert await stage.on_batch("t", _batch(0, 3)) == 0  # on its way, unacknowledged
        stage.forget("t", 0)  # revoked: the batch is dropped, its offsets not acknowledged
        assert stage.held == {} and acks == []
        assert await stage.on_batch("t", _batch(0, 3)) == 0  # read again from offset 0
        reports, marks = sends[1][0][:3], sends[1][0][3:]
        assert reports == sends[0][0][:3]  # the same three reports, not superseded
        assert [progress_of(v, b"x", "s", q).ms for q, (_k, v) in enumerate(marks)] == [1000] * 2
        assert stage.counters["source_superseded"] == 0

    asyncio.run(run())


def test_a_source_partition_is_idle_only_once_its_records_reached_the_stage() -> None:
    """A quiet source partition stops holding the stream's event time back (idle progress)
    only once every record below its high watermark was handed to the stage, counted from the
    offset its reading began at (the group's commit): records the consumer fetched but has not
    handed over yet keep it busy, though the consumer's position is past them. Offsets that
    hold nothing to hand over (transaction markers) are counted past."""
    from dataclasses import replace

    from streams.job.source_progress import Progress, progress_of

    async def run() -> None:
        sends: list = []
        stage = _stage(sends, [])
        stage.config = replace(stage.config, idle_close_ms=1)
        asked: list[str] = []
        probed: list[tuple[int, int]] = []
        markers = {8}  # offset 8 is a transaction's commit marker

        async def committed() -> int | None:
            asked.append("t")
            return 3  # the group committed offset 3 of ("t", 0)

        async def unknown() -> int | None:
            return None

        async def holds(first: int, stop: int) -> bool:
            probed.append((first, stop))
            return any(o not in markers for o in range(first, stop))

        async def caught_up(topic: str, p: int) -> bool:
            return await stage.read_to_end((topic, p), 9, committed, holds)

        assert not await stage.read_to_end(("t", 1), None, committed, holds)  # not fetched
        assert not await stage.read_to_end(("t", 1), 0, unknown, holds)  # where it began?
        for _ in range(2):  # quiet since the first look, records 3-7 not handed over
            await stage.say_idle([("t", 0)], caught_up)
            await asyncio.sleep(0.01)
        assert sends == [] and asked == ["t"]  # asked once: the stage counts from there
        assert probed == [(3, 9)]  # records wait below the marker: not idle
        await stage.on_batch("t", _batch(3, 5))
        sends[0][1].set_result(5)
        await asyncio.sleep(0.01)
        idle = asyncio.ensure_future(stage.say_idle([("t", 0)], caught_up))
        await asyncio.sleep(0.01)
        sends[1][1].set_result(2)  # the broker has the idle progress records
        await idle
        marks = [progress_of(v, b"x", "s", q) for q, (_k, v) in enumerate(sends[1][0])]
        assert marks == [Progress(0, 0, 1000, True)] * 2 and asked == ["t"]
        assert probed[1:] == [(8, 9)] and stage.handed[("t", 0)] == 9  # past the marker
        stage.forget("t", 0)  # another worker took it: where reading begins is asked again
        assert not await stage.read_to_end(("t", 0), 10, committed, holds)
        assert asked == ["t", "t"]

    asyncio.run(run())


def test_busy_marks_of_a_rebalance_that_overtake_idle_marks_on_their_way_hold() -> None:
    """A rebalance's busy progress enqueued while the same partition's idle progress waits
    for the broker comes after it on ``reports``: the partition is busy, and the stage says it
    idle again once it is quiet (not never: that would hold the stream's last slot open for
    ever). Idle progress computed for a partition forgotten meanwhile (another worker took it)
    is not written."""
    from dataclasses import replace

    from streams.job.source_progress import progress_of

    async def run() -> None:
        sends: list = []
        stage = _stage(sends, [])
        stage.config = replace(stage.config, idle_close_ms=1)

        async def committed() -> int | None:
            return 0

        async def holds(first: int, stop: int) -> bool:
            return False

        async def caught_up(topic: str, p: int) -> bool:
            return await stage.read_to_end((topic, p), 0, committed, holds)  # an empty one

        async def idle_marks() -> None:
            await stage.say_idle([("t", 0)], caught_up)  # first look: quiet since now
            await asyncio.sleep(0.01)
            await stage.say_idle([("t", 0)], caught_up)

        idle = asyncio.ensure_future(idle_marks())
        await asyncio.sleep(0.05)
        assert len(sends) == 1  # the idle marks, on their way
        busy = asyncio.ensure_future(stage.say_busy([("t", 0)]))
        await asyncio.sleep(0.01)
        assert len(sends) == 2
        for _records, ack in sends:
            ack.set_result(2)
        await idle
        await busy
        said = [[progress_of(v, b"x", "s", q).idle for q, (_k, v) in enumerate(records)]
                for records, _ack in sends]
        assert said == [[True, True], [False, False]]
        assert ("t", 0) not in stage.idle_said, "busy: to be said idle again"
        again = asyncio.ensure_future(idle_marks())
        await asyncio.sleep(0.05)
        assert len(sends) == 3
        sends[2][1].set_result(2)
        await again
        assert [progress_of(v, b"x", "s", q).idle for q, (_k, v) in enumerate(sends[2][0])] \
            == [True, True]
        assert ("t", 0) in stage.idle_said
        # caught up, then forgotten before its idle marks are written: none are
        stage.forget("t", 0)

        async def taken_over(topic: str, p: int) -> bool:
            done = await caught_up(topic, p)
            stage.forget(topic, p)
            return done

        await stage.say_idle([("t", 0)], taken_over)
        await asyncio.sleep(0.01)
        await stage.say_idle([("t", 0)], taken_over)
        assert len(sends) == 3

    asyncio.run(run())
