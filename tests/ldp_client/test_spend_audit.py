"""``pwevent audit --ldp``: every client's spend over every window, from the reports' own
metadata (streams/audit/ldp_spend.py). Honest clients pass; a device that lost its ledger and
reports again, a second device under one user id, a record keyed by someone else and bytes no
client writes are each found, with the report's place; and the command reads the topic from the
embedded broker and exits 0 or 1 accordingly."""

from __future__ import annotations

import asyncio
import io
from types import SimpleNamespace

import orjson

from local_kafka.embedded import EmbeddedBroker
from streams.audit.ldp_spend import audit_spend
from streams.cli import audit_ldp
from streams.kafka.topics import TopicSpec, create_topics
from streams.ldp_client import LdpClient, ReportConfig, topic_name
from streams.ldp_client.kafka import ReportProducer


def honest(protocol: str, users: int = 6, slots: int = 12) -> list[tuple[str, bytes]]:
    """Each user's client reporting at every slot it is due, in slot order."""
    key = {"lpu_key": "public"} if protocol == "lpu" else {}
    clients = [LdpClient(ReportConfig(protocol, f"u{i}", d=4, w=3, E=1.2, **key))
               for i in range(users)]
    return [(c.reporter.config.user, data) for slot in range(slots) for c in clients
            if (data := c.report(slot, slot % 4)) is not None]


def records(reports: list[tuple[str, bytes]], keys: dict[int, bytes] | None = None) -> list:
    """(partition, offset, key, value): all on one partition, in order."""
    keys = keys or {}
    return [(0, i, keys.get(i, user.encode()), value)
            for i, (user, value) in enumerate(reports)]


def test_honest_clients_of_every_protocol_pass():
    for protocol in ("lbu", "lsp", "lpu", "plbu"):
        report = audit_spend(records(honest(protocol)))
        assert report.violations == [], protocol
        assert report.users == 6 and report.protocols == {protocol: report.reports}
        assert 0 < report.largest_share <= 1 + 1e-9


def test_a_device_that_lost_its_ledger_is_found_where_it_overspends():
    sent = honest("lsp")  # w = 3: reports at 0, 3, 6, 9, each spending E
    again = LdpClient(ReportConfig("lsp", "u0", d=4, w=3, E=1.2, start=1))  # reinstalled
    late = [("u0", again.report(s, 1)) for s in (1, 4)]
    reports = sent[:6] + late[:1] + sent[6:]  # u0 at slot 1, after its report at slot 0
    found = audit_spend(records(reports)).violations
    assert [(v.user, v.slot, v.reason, v.offset) for v in found] == [("u0", 1, "over_budget", 6)]


def test_a_second_device_under_one_user_id_repeats_slots():
    first = honest("lbu", users=1, slots=4)
    twin = LdpClient(ReportConfig("lbu", "u0", d=4, w=3, E=1.2))
    reports = [r for pair in zip(first, [("u0", twin.report(s, 2)) for s in range(4)],
                                 strict=True) for r in pair]
    found = audit_spend(records(reports)).violations
    assert [(v.slot, v.reason) for v in found] == [(s, "not_after_last") for s in range(4)]


def test_foreign_keys_and_unwritten_bytes_are_violations_not_errors():
    reports = honest("lbu", users=2, slots=2)
    forged = orjson.loads(reports[1][1]) | {"eps": 5.0}
    reports += [("u9", orjson.dumps(forged)), ("u9", b"\xff{"), ("u9", None)]  # type: ignore[list-item]
    found = audit_spend(records(reports, keys={0: b"u1"})).violations
    assert [(v.offset, v.reason) for v in found] == [
        (0, "wrong_key"), (4, "malformed"), (5, "malformed"), (6, "malformed")]


def test_the_command_reads_the_topic_and_exits_on_what_it_finds():
    async def send(broker: EmbeddedBroker, reports: list[tuple[str, bytes]]) -> None:
        async with ReportProducer(broker.bootstrap, "p") as producer:
            for user, data in reports:
                await producer.send(user, data)

    def audit(broker: EmbeddedBroker) -> tuple[int, dict]:
        out = io.StringIO()
        args = SimpleNamespace(broker=broker.bootstrap, prefix="p", timeout=30.0, json=True)
        status = audit_ldp.run(args, out)  # type: ignore[arg-type]
        return status, orjson.loads(out.getvalue())

    with EmbeddedBroker() as broker:
        asyncio.run(create_topics(broker.bootstrap, [TopicSpec("ldp", topic_name("p"), 3)]))
        asyncio.run(send(broker, honest("plbu")))
        status, doc = audit(broker)
        assert status == 0 and doc["violations"] == [] and doc["users"] == 6
        assert doc["topic"] == "p.ldp-reports" and doc["reports"] == 6 * 12
        reinstalled = LdpClient(ReportConfig("plbu", "u3", d=4, w=3, E=1.2))
        asyncio.run(send(broker, [("u3", reinstalled.report(11, 0))]))  # slot 11 again
        status, doc = audit(broker)
    assert status == 1
    assert [(v["user"], v["slot"], v["reason"]) for v in doc["violations"]] == [
        ("u3", 11, "not_after_last")]


def test_two_round_clients_are_audited_on_their_own_time_line():
    from mechanisms.local.rounds import Decision

    w, E = 3, 1.2
    clients = [LdpClient(ReportConfig("lbd", f"u{i}", d=4, w=w, E=E)) for i in range(4)]
    reports: list[tuple[str, bytes]] = []
    previous = None
    for slot in range(10):  # a publication round at E/4 every other slot: within E/2 a window
        decision = Decision("s", "lbd", slot, E / 4 if slot % 2 else 0.0, E / (2 * w))
        for c in clients:
            for data in (c.report(slot, 1, previous), c.answer(decision, 2)):
                if data is not None:
                    reports.append((c.reporter.config.user, data))
        previous = decision
    report = audit_spend(records(reports))
    assert report.violations == [] and report.protocols == {"lbd": 4 * 15}
    assert abs(report.largest_share - 1.0) < 1e-9  # E/2 of round 1, E/2 of round 2 at most
    # a device that answers a forged decision past its ledger cannot send it; one that lost its
    # ledger can, and the audit finds it where its window overspends
    lost = LdpClient(ReportConfig("lbd", "u0", d=4, w=w, E=E))
    extra = lost.answer(Decision("s", "lbd", 9, E / 2, E / (2 * w)), 3)
    found = audit_spend(records([*reports, ("u0", extra)])).violations
    assert [(v.user, v.slot, v.reason) for v in found] == [("u0", 9, "not_after_last")]
    overspent = LdpClient(ReportConfig("lbd", "u0", d=4, w=w, E=E, start=10))
    late = overspent.answer(Decision("s", "lbd", 10, E / 2, E / (2 * w)), 3)
    found = audit_spend(records([*reports, ("u0", late)])).violations
    assert [(v.user, v.slot, v.reason) for v in found] == [("u0", 10, "over_budget")]


def test_population_rounds_are_checked_on_real_slots():
    """lpd, lpa: every report spends E, at most one in any w slots (a client's ledger over real
    slots); a publication user named by two decisions within w slots is found."""
    from mechanisms.local.population import HALF, position
    from mechanisms.local.rounds import Decision

    users = [f"u{i}" for i in range(12)]
    upper = [u for u in users if position("public", u) >= HALF]
    clients = {u: LdpClient(ReportConfig("lpa", u, d=4, w=3, E=1.2, lpu_key="public"))
               for u in users}
    sent = []
    for slot in range(9):
        previous = Decision("s", "lpa", slot - 1, 0, 1.2) if slot else None
        sent += [(u, data) for u, c in clients.items()
                 if (data := c.report(slot, slot % 4, previous)) is not None]
        if slot % 3 == 0:  # every upper user once every w slots
            named = Decision("s", "lpa", slot, 1.2, 1.2, 0, HALF)
            sent += [(u, data) for u in upper
                     if (data := clients[u].answer(named, 2)) is not None]
    report = audit_spend(records(sent))
    assert report.violations == [] and len(sent) > len(users)
    assert 0 < report.largest_share <= 1 + 1e-9
    twin = LdpClient(ReportConfig("lpa", upper[0], d=4, w=3, E=1.2, lpu_key="public"))
    again = twin.answer(Decision("s", "lpa", 1, 1.2, 1.2, 0, HALF), 1)  # slot 1, after 0
    first = next(i for i, (u, _) in enumerate(sent) if u == upper[0])
    forged = sent[:first + 1] + [(upper[0], again)] + sent[first + 1:]
    found = audit_spend(records(forged)).violations
    assert [(v.user, v.slot, v.reason) for v in found] == [(upper[0], 1, "over_budget")]
