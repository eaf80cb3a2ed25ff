"""The collector's event time over the partitions of its topic (streams/ldp_collector/
stream_time.py): per-partition watermarks, slots closed at the smallest, and outcomes that do
not depend on how a consumer interleaves the partitions."""

from __future__ import annotations

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from ldp_collector_kit import ORIGIN_MS, SLOT_MS, client_reports

from streams.job.partitions.key_hashing import key_partitions
from streams.job.partitions.watermarks import watermark_record
from streams.ldp_collector import LdpCollector
from streams.ldp_collector.stream_time import PartitionedCollector, release_record

SECRET = b"partition-secret"
STREAM = "s"
PARTITIONS = 3
D = 4


def _collector() -> PartitionedCollector:
    inner = LdpCollector("lbu", D, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=0, E=1.0, w=4)
    return PartitionedCollector(inner, PARTITIONS, SECRET, STREAM)


def _mark(slot_end: int, partition: int) -> tuple[None, bytes]:
    return None, watermark_record(ORIGIN_MS + slot_end * SLOT_MS, SECRET, STREAM, partition)


def _topic(users: int = 24, slots: int = 6, seed: int = 0) -> list[list[tuple]]:
    """Each partition's records in offset order: the clients' reports of slot after slot, a
    watermark record after each slot, and some reports that arrive after their slot's mark."""
    rng = np.random.default_rng(seed)
    cells = rng.integers(0, D, size=(users, slots))
    sent = client_reports("lbu", cells, d=D, start=0, requirements=[(4, 1.0)] * users)
    home = key_partitions([s.key for s in sent], PARTITIONS)
    parts: list[list[tuple]] = [[] for _ in range(PARTITIONS)]
    for slot in range(slots):
        for s, p in zip(sent, home.tolist(), strict=True):
            if s.slot == slot and (s.user, slot) != ("u1", 2):
                parts[p].append((s.key, s.value))
        for p in range(PARTITIONS):
            parts[p].append(_mark(slot + 1, p))
    late = next(s for s in sent if (s.user, s.slot) == ("u1", 2))
    parts[int(key_partitions([late.key], PARTITIONS)[0])].append((late.key, late.value))
    return [[(k, v, offset) for offset, (k, v) in enumerate(records)] for records in parts]


def _run(topic: list[list[tuple]], order: list[tuple[int, int]]) -> tuple[list, list]:
    """Feed the partitions in chunks: ``order`` lists (partition, chunk size) until each is
    exhausted; then the rest of each."""
    stream = _collector()
    at = [0] * PARTITIONS
    releases, refused = [], []
    for p, size in [*order, *[(p, len(topic[p])) for p in range(PARTITIONS)]]:
        chunk = topic[p][at[p]:at[p] + size]
        at[p] += len(chunk)
        refused += [(p, r) for r in stream.take(p, chunk)]
        releases += stream.ready()
    return releases, sorted(refused)


def test_every_slot_closes_once_every_partition_passed_it() -> None:
    topic = _topic()
    stream = _collector()
    refused = []
    for p in range(PARTITIONS - 1):
        refused += [r.reason for r in stream.take(p, topic[p])]
        assert stream.ready() == []  # the last partition has no watermark: nothing closes
    assert stream.holding() == (PARTITIONS - 1, -(1 << 62))
    refused += [r.reason for r in stream.take(PARTITIONS - 1, topic[PARTITIONS - 1])]
    assert refused == ["late"]  # u1's report of slot 2, behind its partition's watermark
    released = [orjson.loads(v) for _k, v in stream.ready()]
    assert [r["slot"] for r in released] == list(range(6))
    assert all(r["reporters"] == 24 - (r["slot"] == 2) for r in released)


def test_a_report_behind_its_partitions_watermark_is_late_while_others_lag() -> None:
    topic = _topic()
    home = next(p for p in range(PARTITIONS) if any(k == b"u1" for k, _v, _o in topic[p]))
    stream = _collector()
    refused = stream.take(home, topic[home])  # the others hold slot 2 open
    assert stream.collector.next_slot == 0
    assert [(r.offset, r.reason) for r in refused] == [(len(topic[home]) - 1, "late")]


def test_unsigned_watermarks_and_misplaced_reports_are_refused() -> None:
    stream = _collector()
    forged = b'{"watermark":' + str(ORIGIN_MS + 10 * SLOT_MS).encode() + b',"mac":"00"}'
    key = b"u0"
    wrong = (int(key_partitions([key], PARTITIONS)[0]) + 1) % PARTITIONS
    refused = stream.take(wrong, [(None, forged, 0), (key, b"{}", 1)])
    assert [(r.offset, r.reason) for r in refused] == [(0, "unauthenticated_control"),
                                                        (1, "wrong_partition")]
    assert int(stream.marks[wrong]) == -(1 << 62)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, PARTITIONS - 1), st.integers(1, 12)), max_size=30),
       st.integers(0, 3))
def test_the_outcome_does_not_depend_on_the_interleaving(order: list[tuple[int, int]],
                                                        seed: int) -> None:
    topic = _topic(seed=seed)
    assert _run(topic, order) == _run(topic, [])


def test_release_records_are_keyed_by_stream_and_slot() -> None:
    key, value = release_record("trips", 1000, 60, {"slot": 3, "protocol": "lbu",
                                                    "reporters": 0, "counts": [0.0],
                                                    "std": None, "no_value": 0.0,
                                                    "no_value_std": None})
    assert key == b"trips/3"
    assert orjson.loads(value) == {"schema": "pwevent-ldp-release/2", "stream": "trips",
                                   "slot": 3, "start": 1180, "end": 1240, "protocol": "lbu",
                                   "reporters": 0, "counts": [0.0], "std": None,
                                   "no_value": 0.0, "no_value_std": None}


def test_every_refusal_is_a_dead_letter_reason_with_a_detail() -> None:
    from streams.ldp_collector import REASONS
    from streams.ldp_collector.stream_time import REASON_DETAILS
    from streams.records.field_formats import Reason

    assert set(REASON_DETAILS) == set(REASONS)
    assert {*REASONS, "unauthenticated_control", "wrong_partition"} <= {r.value for r in Reason}
