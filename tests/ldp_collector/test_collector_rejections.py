"""Every record the collector does not count goes to a dead letter with its reason and its raw
value, and none raises; what was refused leaves the releases and the ledgers as they were."""

from __future__ import annotations

import numpy as np
import pytest
from ldp_collector_kit import LPU_KEY, ORIGIN_MS, SLOT_MS

from mechanisms.local import CounterWords, encode_report, lpu_phase, pack_bits
from mechanisms.local.rounds import Decision
from streams.ldp_client import LdpClient, ReportConfig
from streams.ldp_collector import REASONS, DeadLetter, LdpCollector

D, W, E = 4, 2, 1.0


def lbu_collector(start: int = 10) -> LdpCollector:
    return LdpCollector("lbu", D, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=start, E=E, w=W)


def client(user: str, protocol: str = "lbu", *, d: int = D, w: int = W, E: float = E,  # noqa: N803
           start: int = 10) -> LdpClient:
    return LdpClient(ReportConfig(protocol, user, d=d, w=w, E=E, start=start, lpu_key=LPU_KEY),
                     words=CounterWords(f"rejections/{user}"))


def oue(protocol: str, user: str, slot: int, eps: float, E: float, w: int,  # noqa: N803
        d: int = D) -> bytes:
    """A hand-written OUE report (what no honest client of the stream would send)."""
    return encode_report(protocol, user, slot, eps, E, w, d, pack_bits(np.zeros(d + 1, bool)),
                         "t")


def offer(collector: LdpCollector, value: bytes | None, key: bytes | None = b"alice"
          ) -> DeadLetter | None:
    return collector.offer(key, value, ORIGIN_MS)


def reason(collector: LdpCollector, value: bytes | None, key: bytes | None = b"alice") -> str:
    dead = offer(collector, value, key)
    assert dead is not None and dead.value is value
    return dead.reason


GOOD = client("alice").report(10, 1)


@pytest.mark.parametrize("value", [
    None, b"", b"not json", b"\xff\xfe", b"[" * 100_000, b"{}", b"[1]", b"1e999",
    GOOD.replace(b'"v":2', b'"v":1'),  # a client from before the "no value" cell
    GOOD.replace(b'"client"', b'"extra":1,"client"'),
    GOOD.replace(b'"eps":0.5', b'"eps":0.25'),  # not what lbu spends with E and w
    GOOD.replace(b'"slot":10', b'"slot":-1'),
    GOOD.replace(b'"slot":10', b'"slot":10.0'),
    GOOD.replace(b'"d":4', b'"d":0'),
    oue("lbu", "alice", 10, 0.5, 1.0, 2).replace(b'"bits":"00"', b'"bits":"20"'),  # unused bit
    oue("lbu", "alice", 10, 0.5, 1.0, 2).replace(b'"bits":"00"', b'"bits":"0g"'),
    encode_report("plbu", "alice", 10, 0.5, 1.0, 2, D, D + 1, "t"),  # cell out of range
], ids=lambda v: repr(v)[:30])
def test_malformed(value: bytes | None) -> None:
    assert reason(lbu_collector(), value) == "malformed"


def test_each_stream_mismatch_has_its_reason() -> None:
    c = lbu_collector()
    assert reason(c, GOOD, b"bob") == "wrong_key"
    assert reason(c, GOOD, None) == "wrong_key"
    assert reason(c, GOOD, "alice") == "wrong_key"  # type: ignore[arg-type]
    assert reason(c, client("alice", "plbu").report(10, 1)) == "wrong_protocol"
    assert reason(c, client("alice", d=5).report(10, 1)) == "wrong_domain"
    assert reason(c, client("alice", E=2.0).report(10, 1)) == "wrong_requirement"
    assert reason(c, client("alice", w=4, E=2.0).report(10, 1)) == "wrong_requirement"  # eps same
    grr = encode_report("lbu", "alice", 10, 0.5, 1.0, 2, D, 1, "t")
    assert reason(c, grr) == "wrong_oracle"
    p = LdpCollector("plbu", 3, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=10)
    assert reason(p, oue("plbu", "alice", 10, 2.0, 2.0, 1, d=3)) == "wrong_oracle"  # GRR's budget
    assert c.close(10)["reporters"] == 0 and p.close(10)["reporters"] == 0


def test_schedules() -> None:
    c = lbu_collector()
    assert reason(c, client("alice", start=9).report(9, 1)) == "schedule"  # before start
    lsp = LdpCollector("lsp", D, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=10, E=E, w=3)
    assert offer(lsp, oue("lsp", "alice", 13, 1.0, 1.0, 3)) is None
    assert reason(lsp, oue("lsp", "bob", 14, 1.0, 1.0, 3), b"bob") == "schedule"
    lpu = LdpCollector("lpu", D, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=10, E=E, w=3,
                       lpu_key=LPU_KEY)
    group = lpu_phase(LPU_KEY, "alice", 3, 0)
    assert offer(lpu, oue("lpu", "alice", 10 + group, 1.0, 1.0, 3)) is None
    other = 10 + 3 + (group + 1) % 3
    assert reason(lpu, oue("lpu", "alice", other, 1.0, 1.0, 3)) == "schedule"
    rotated = LdpCollector("lpu", D, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=10, E=E, w=3,
                           lpu_key=LPU_KEY, lpu_rotate=1)
    made_count = 0
    for u in [f"user{i}" for i in range(40)]:  # the clients' slots are accepted, no other
        made = LdpClient(ReportConfig("lpu", u, d=D, w=3, E=E, start=10, lpu_key=LPU_KEY,
                                      rotate=1), words=CounterWords(u))
        for slot in range(10, 40):
            value = made.report(slot, 0)
            if value is not None:
                made_count += 1
                assert rotated.offer(u.encode(), value, ORIGIN_MS) is None
            else:
                dead = rotated.offer(u.encode(), oue("lpu", u, slot, 1.0, 1.0, 3), ORIGIN_MS)
                assert dead is not None and dead.reason == "schedule"
    assert 200 < made_count < 400  # 10 blocks of 40 users, some skipped when groups rotate


def test_late_duplicate_and_out_of_order() -> None:
    c = lbu_collector()
    alice = client("alice")
    first, second = alice.report(10, 0), client("alice").report(10, 3)
    assert offer(c, first) is None
    assert reason(c, second) == "duplicate_in_slot"
    assert reason(c, first) == "duplicate_in_slot"  # a resend counts once too
    twelve = alice.report(12, 2)
    assert offer(c, twelve) is None
    assert reason(c, alice.report(13, 2).replace(b'"slot":13', b'"slot":11')) == "not_after_last"
    only = c.estimate(10)
    release = c.close(10)
    assert release["reporters"] == 1
    np.testing.assert_allclose([*release["counts"], release["no_value"]], only.counts)
    expected = lbu_collector()  # the first report alone gives the same release
    assert offer(expected, first) is None
    assert expected.close(10) == release
    assert reason(c, client("bob").report(10, 1), b"bob") == "late"
    assert reason(c, first) == "late"
    with pytest.raises(ValueError, match="in order"):
        c.close(12)  # an error of the caller, not of a record
    assert c.close(11)["reporters"] == 0 and c.close(12)["reporters"] == 1


def test_over_budget_and_a_changed_requirement() -> None:
    c = LdpCollector("plbu", D, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=0)
    loose = client("alice", "plbu", w=1, E=1.0, start=0)  # eps 1 a slot
    tight = client("alice", "plbu", w=2, E=1.0, start=0)  # eps 0.5
    assert offer(c, loose.report(0, 1)) is None
    assert reason(c, tight.report(1, 1)) == "over_budget"  # (-1, 1]: 1 + 0.5 > 1
    assert offer(c, tight.report(2, 1)) is None  # (0, 2]: 0.5
    # back to w = 1: as a client loading its kept state, only the window (2, 3] is checked
    assert offer(c, loose.report(3, 1)) is None
    assert reason(c, tight.report(4, 2)) == "over_budget"  # (2, 4]: 1 + 0.5 > 1
    assert offer(c, tight.report(5, 2)) is None  # (3, 5]: 0.5
    lowered = client("alice", "plbu", w=2, E=0.5, start=0)  # eps 0.25
    assert reason(c, lowered.report(6, 2)) == "over_budget"  # (4, 6]: 0.5 + 0.25 > 0.5
    assert offer(c, tight.report(7, 2)) is None  # the refusal did not change alice's ledger
    assert [c.close(s)["reporters"] for s in range(8)] == [1, 0, 1, 1, 0, 1, 0, 1]


def test_every_reason_is_reached_and_nothing_raises() -> None:
    c = LdpCollector("plbu", D, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=1)
    bob = client("bob", "plbu", start=1)
    records = [
        (b"bob", b"\x00"),  # malformed
        (b"eve", bob.report(1, 0)),  # wrong_key
        (b"bob", client("bob", "lbu").report(10, 0)),  # wrong_protocol
        (b"bob", client("bob", "plbu", d=3).report(10, 0)),  # wrong_domain
        (b"bob", oue("plbu", "bob", 2, 2.0, 2.0, 1)),  # wrong_oracle
        (b"bob", client("bob", "plbu", start=0).report(0, 0)),  # schedule
    ]
    lbu = lbu_collector()
    lbu_records = [(b"bob", client("bob", E=3.0).report(10, 0))]  # wrong_requirement
    dead = c.offer_all((k, v, None) for k, v in records)
    dead += lbu.offer_all((k, v, None) for k, v in lbu_records)
    kept = bob.report(3, 1)
    assert offer(c, kept, b"bob") is None
    dead += c.offer_all([(b"bob", kept, None),  # duplicate_in_slot
                         (b"bob", client("bob", "plbu", start=1).report(2, 1), None)])  # order
    lowered = client("bob", "plbu", w=2, E=0.5, start=1).report(4, 1)  # (2, 4]: 0.5 + 0.25
    dead += c.offer_all([(b"bob", lowered, None)])
    c.close(1)
    dead += c.offer_all([(b"bob", client("bob", "plbu", start=1).report(1, 1), None)])  # late
    rounds = LdpCollector("lbd", D, origin_ms=ORIGIN_MS, slot_ms=SLOT_MS, start=1, E=E, w=W)
    undecided = Decision("s", "lbd", 1, E / 2, E / (2 * W))
    dead += rounds.offer_all([(b"bob", client("bob", "lbd", start=1).answer(undecided, 0),
                               None)])  # unasked_round
    assert [d.reason for d in dead] == [
        "malformed", "wrong_key", "wrong_protocol", "wrong_domain", "wrong_oracle", "schedule",
        "wrong_requirement", "duplicate_in_slot", "not_after_last", "over_budget", "late",
        "unasked_round"]
    assert set(REASONS) == {d.reason for d in dead}


def test_parameters_and_empty_slots() -> None:
    with pytest.raises(ValueError, match="plbu"):
        LdpCollector("plbu", D, origin_ms=0, slot_ms=1, start=0, E=1.0, w=2)
    with pytest.raises(ValueError, match="w must"):
        LdpCollector("lbu", D, origin_ms=0, slot_ms=1, start=0, E=1.0)
    with pytest.raises(ValueError, match="lpu_key"):
        LdpCollector("lpu", D, origin_ms=0, slot_ms=1, start=0, E=1.0, w=2)
    with pytest.raises(ValueError, match="lpu_key"):  # mtsp's levels come from positions
        LdpCollector("mtsp", D, origin_ms=0, slot_ms=1, start=0, E=1.0, w=2)
    with pytest.raises(ValueError, match="protocol"):
        LdpCollector("oue", D, origin_ms=0, slot_ms=1, start=0, E=1.0, w=2)
    c = lbu_collector()
    assert c.offer(b"alice", GOOD, ORIGIN_MS + 11 * SLOT_MS + 5) is None
    assert c.watermark == ORIGIN_MS + 11 * SLOT_MS + 5
    released = c.close_until(c.watermark)
    assert [r["slot"] for r in released] == [10]  # slot 11 is not over yet
    assert released[0]["reporters"] == 1 and len(released[0]["std"]) == D
    empty = c.close(11)
    assert empty == {"slot": 11, "protocol": "lbu", "reporters": 0, "counts": [0.0] * D,
                     "std": None, "no_value": 0.0, "no_value_std": None}
    tiny = LdpCollector("lbu", D, origin_ms=0, slot_ms=1, start=0, E=1e-12, w=1)
    made = client("alice", E=1e-12, w=1, start=0).report(0, 1)
    assert tiny.offer(b"alice", made) is None  # a budget whose thresholds tell nothing apart
    nothing = tiny.close(0)
    assert nothing["reporters"] == 1 and nothing["std"] is None and nothing["counts"] == [0.0] * D
