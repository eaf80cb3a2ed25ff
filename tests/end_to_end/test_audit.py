"""``pwevent audit``: a clean recorded stream passes; every planted fault is caught by its kind."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from brokers import broker_fixture

from local_kafka.embedded import free_port
from streams.audit.registrations import registrations
from streams.cli.audit import to_records
from streams.cli.main import main
from streams.kafka.producer import RawProducer, key_partition
from streams.kafka.topics import Topics, create_topics

STREAM, PARTS, START = "s", 2, 100
CONFIG = {"mechanism": "pbd", "d": 3, "partitions": PARTS, "min_epsilon": 0.01,
          "max_epsilon": 10.0, "max_window": 50, "neighbouring": "add-remove"}
LEVELS = {"4:1.0": (4, 1.0), "2:0.5": (2, 0.5)}
USERS = {"u0": "4:1.0", "u1": "4:1.0", "u2": "4:1.0", "u3": "4:1.0", "u4": "2:0.5", "u5": "2:0.5"}
#: per slot: a = approximated, p = published, n = nullified; slots 4..7 spend all of (4, 1.0)
SCHEDULE = "appappppan"

Data = dict[str, list[dict]]


class Rows:
    """Dump rows with offsets counted per partition, as a topic would assign them."""

    def __init__(self) -> None:
        self.rows: list[dict] = []

    def add(self, key: str | None, value: object, partition: int = 0) -> None:
        offset = sum(r["partition"] == partition for r in self.rows)
        self.rows.append({"partition": partition, "offset": offset, "key": key, "value": value})


def requirement(rows: Rows, user: str, value: object, placement: str = "valid") -> None:
    """A requirement record keyed and placed like the job expects, or keyless / misplaced."""
    right = key_partition(user.encode(), PARTS)
    if placement == "keyless":
        rows.add(None, value, right)
    else:
        rows.add(user, value, right if placement == "valid" else 1 - right)


def fixed(user: str, level: str) -> dict:
    w, E = LEVELS.get(level) or (int(level.split(":")[0]), float(level.split(":")[1]))
    return {"user": user, "w": w, "E": E}


def clean_stream() -> Data:
    """Requirements, decisions and releases of a consistent BD-style pbd stream: every level
    (w, E) is charged E/(2w) per slot as eps1 and E/(2w) as eps2 when published."""
    reqs = Rows()
    for user, level in USERS.items():
        requirement(reqs, user, fixed(user, level))
    requirement(reqs, "u5", None)  # unregistered, then registered again at the same level
    requirement(reqs, "u5", fixed("u5", "2:0.5"))
    requirement(reqs, "u1", fixed("u1", "2:0.5"))  # a changed fixed requirement: rejected
    requirement(reqs, "big", {"user": "big", "w": 2, "E": 20.0})  # above max_epsilon
    requirement(reqs, "wide", {"user": "wide", "w": 99, "E": 1.0})  # above max_window
    decs, rels = Rows(), Rows()
    decs.add(f"{STREAM}/start", {"stream": STREAM, "start": START, "nonce": "ab12",
                                 "config": CONFIG})
    users = {k: sum(v == k for v in USERS.values()) for k in LEVELS}
    last = [0, 0, 0]
    for i, kind in enumerate(SCHEDULE):
        slot, published = START + i, kind == "p"
        half = {k: E / (2 * w) for k, (w, E) in LEVELS.items()}
        decs.add(f"{STREAM}/{slot}", {
            "stream": STREAM, "slot": slot, "published": published, "nullified": kind == "n",
            "eps1": half, "eps2": {k: e if published else 0.0 for k, e in half.items()},
            "users": dict(users)})
        if published:
            last = [slot % 7, -2, 5 + i]
        rels.add(f"{STREAM}/{slot}", {
            "stream": STREAM, "slot": slot, "start": slot * 1000, "end": slot * 1000 + 1000,
            "mechanism": "pbd", "published": published, "nullified": kind == "n",
            "histogram": list(last), "threshold": 0.5, "users": sum(users.values())})
    # identical re-emissions after a restart; they share the value, so a fault planted in one
    # of these slots applies to both copies
    decs.rows.append({**decs.rows[3], "offset": len(decs.rows)})
    rels.rows.append({**rels.rows[2], "offset": len(rels.rows)})
    return {"requirements": reqs.rows, "decisions": decs.rows, "releases": rels.rows}


def value(data: Data, topic: str, slot: int | str) -> dict:
    """The (first) record value of a slot."""
    return next(r["value"] for r in data[topic] if r["key"] == f"{STREAM}/{slot}")


def write(tmp_path: Path, data: Data) -> list[str]:
    args = []
    for topic, rows in data.items():
        path = tmp_path / f"{topic}.jsonl"
        path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
        args += [f"--{topic}", str(path)]
    return args


def audit_json(tmp_path: Path, data: Data, capsys: pytest.CaptureFixture) -> tuple[int, dict]:
    status = main(["audit", "--stream", STREAM, "--json", *write(tmp_path, data)])
    return status, json.loads(capsys.readouterr().out)


def kinds(doc: dict) -> set[str]:
    return {v["kind"] for v in doc["violations"]}


def test_clean_stream_has_no_violation(tmp_path, capsys):
    status, doc = audit_json(tmp_path, clean_stream(), capsys)
    assert status == 0, doc["violations"]
    assert set(doc) == {"stream", "mechanism", "slots_audited", "windows_checked", "violations",
                        "population"}
    # declared requirements only: every published field a function of public inputs or noisy
    assert doc["population"]["registration"] == "declared"
    assert doc["population"]["fields"]["releases.users"].startswith("public")
    assert (doc["stream"], doc["mechanism"]) == (STREAM, "pbd")
    assert doc["slots_audited"] == len(SCHEDULE)
    assert doc["windows_checked"] == len(SCHEDULE) * len(USERS)
    assert doc["violations"] == []


def test_human_summary_ends_with_the_counts(tmp_path, capsys):
    data = clean_stream()
    value(data, "decisions", START + 5)["eps2"]["4:1.0"] += 0.1
    assert main(["audit", "--stream", STREAM, *write(tmp_path, data)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[-4:-1] == [f"slots audited: {len(SCHEDULE)}",
                            f"windows checked: {len(SCHEDULE) * len(USERS)}", "violations: 1"]
    assert lines[-1].startswith(f"slot {START + 7}: overspend: level 4:1.0")


Fault = Callable[[Data], None]


def raise_eps2(data: Data) -> None:
    # slots 4..7 already spend E = 1 at level (4, 1.0): 0.1 more in slot 5 overspends 4..7 only
    value(data, "decisions", START + 5)["eps2"]["4:1.0"] += 0.1


def count_more(level: str, by: int = 1) -> Fault:
    def fault(data: Data) -> None:
        for i in range(len(SCHEDULE)):
            dec, rel = value(data, "decisions", START + i), value(data, "releases", START + i)
            dec["users"][level] = dec["users"].get(level, 0) + by
            dec["eps1"].setdefault(level, 0.0)
            dec["eps2"].setdefault(level, 0.0)
            rel["users"] += by
    return fault


def shift_user(data: Data) -> None:
    # the total stays 6, but level (2, 0.5) counts 3 users while only 2 registered there
    for i in range(len(SCHEDULE)):
        users = value(data, "decisions", START + i)["users"]
        users["4:1.0"], users["2:0.5"] = 3, 3


def redecide(data: Data) -> None:
    other = copy.deepcopy(value(data, "decisions", START + 6))
    other["eps1"]["4:1.0"] = 0.0
    data["decisions"].append({"partition": 0, "offset": 99, "key": f"{STREAM}/{START + 6}",
                              "value": other})


def miscount(data: Data) -> None:
    value(data, "releases", START + 5)["users"] = 5


def drop(topic: str, slot: int) -> Fault:
    def fault(data: Data) -> None:
        data[topic] = [r for r in data[topic] if r["key"] != f"{STREAM}/{slot}"]
    return fault


def second_release(data: Data) -> None:
    other = copy.deepcopy(value(data, "releases", START + 4))
    other["histogram"][0] += 1
    data["releases"].append({"partition": 0, "offset": 99, "key": f"{STREAM}/{START + 4}",
                             "value": other})


def leak(data: Data) -> None:
    value(data, "releases", START + 6)["accepted"] = 12


def flip_published(data: Data) -> None:
    value(data, "releases", START + 3)["published"] = True


def repeat_wrongly(slot: int) -> Fault:
    def fault(data: Data) -> None:
        value(data, "releases", slot)["histogram"][1] += 1
    return fault


def charge(slot: int) -> Fault:
    def fault(data: Data) -> None:
        value(data, "decisions", slot)["eps2"]["4:1.0"] = 0.01
    return fault


def uncharge(data: Data) -> None:
    dec = value(data, "decisions", START + 2)
    del dec["eps1"]["2:0.5"], dec["eps2"]["2:0.5"]


@pytest.mark.parametrize(("fault", "kind", "slot"), [
    (raise_eps2, "overspend", START + 7),
    (count_more("2:0.5"), "double_registration", START),  # u1 also counted at its 2nd level
    (shift_user, "double_registration", START),
    (count_more("8:2.0"), "unregistered_level", START),
    (drop("releases", START + 3), "missing_release", START + 3),
    (drop("decisions", START + 3), "missing_decision", START + 3),
    (redecide, "duplicate_decision", START + 6),
    (second_release, "duplicate_release", START + 4),
    (leak, "exact_count_field", START + 6),
    (flip_published, "release_mismatch", START + 3),
    (miscount, "release_mismatch", START + 5),
    (repeat_wrongly(START), "release_mismatch", START),  # not zeros before any publication
    (repeat_wrongly(START + 8), "release_mismatch", START + 8),  # not the last publication
    (charge(START + 9), "nullified_charged", START + 9),
    (charge(START + 3), "approximated_charged", START + 3),
    (uncharge, "uncharged_level", START + 2),
])
def test_planted_fault_is_caught(tmp_path, capsys, fault: Fault, kind: str, slot: int):
    data = clean_stream()
    fault(data)
    status, doc = audit_json(tmp_path, data, capsys)
    assert status == 1
    assert kinds(doc) == {kind}, doc["violations"]
    assert doc["violations"][0]["slot"] == slot


@pytest.mark.parametrize(("placement", "status"),
                         [("valid", 0), ("keyless", 1), ("wrong_partition", 1)])
def test_only_keyed_and_well_placed_requirements_register(tmp_path, capsys, placement, status):
    data = clean_stream()
    rows = Rows()
    rows.rows = data["requirements"]
    requirement(rows, "k", fixed("k", "2:0.5"), placement)
    count_more("2:0.5")(data)
    got, doc = audit_json(tmp_path, data, capsys)
    assert got == status
    assert kinds(doc) == ({"double_registration"} if status else set())


def test_registrations_follow_the_admission_rules():
    reqs = Rows()
    for user, level in USERS.items():
        requirement(reqs, user, fixed(user, level))
    requirement(reqs, "u0", None)
    requirement(reqs, "u0", fixed("u0", "2:0.5"))  # changed after a removal: still rejected
    requirement(reqs, "u1", fixed("u1", "4:1.0"))  # the same again: fine
    requirement(reqs, "u9", {"user": "u9", "w": 2, "E": 0.001})  # below min_epsilon
    requirement(reqs, "u8", {"user": "u7", "w": 2, "E": 0.5})  # key differs from the user
    requirement(reqs, "u6", {"user": "u6", "wB": 2, "EB": 0.5, "wF": 2, "EF": 0.5})
    regs = registrations(to_records(reqs.rows), PARTS, CONFIG, dynamic=False)
    assert regs.levels == {"4:1.0": {"u0", "u1", "u2", "u3"}, "2:0.5": {"u4", "u5"}}
    assert regs.users == set(USERS)
    assert regs.rejected == {"changed_requirement": 1, "out_of_bounds": 1, "bad_type": 1,
                             "wrong_requirement_kind": 1}
    dynamic = registrations(to_records(reqs.rows), PARTS, CONFIG, dynamic=True)
    assert (dynamic.users, dynamic.max_eb) == ({"u6"}, 0.5)


def dynamic_stream() -> Data:
    reqs, decs, rels = Rows(), Rows(), Rows()
    for i, eb in enumerate((0.8, 1.2)):
        requirement(reqs, f"d{i}", {"user": f"d{i}", "wB": 3, "EB": eb, "wF": 2, "EF": 0.5})
    requirement(reqs, "x", {"user": "x", "wB": 3, "EB": 50.0, "wF": 2, "EF": 0.5})  # too big
    decs.add(f"{STREAM}/start", {"stream": STREAM, "start": 0, "nonce": "00",
                                 "config": {**CONFIG, "mechanism": "dpbd"}})
    for slot, published in enumerate((True, False, True)):
        decs.add(f"{STREAM}/{slot}", {
            "stream": STREAM, "slot": slot, "published": published, "nullified": False,
            "eps1": {"3:5": 0.2, "4:6": 0.3}, "eps2": {"3:5": 0.4 * published,
                                                      "4:6": 0.9 * published},
            "users": {"3:5": 1, "4:6": 1}, "projected": {"3:5": 0, "4:6": 0}})
        rels.add(f"{STREAM}/{slot}", {
            "stream": STREAM, "slot": slot, "start": 0, "end": 1, "mechanism": "dpbd",
            "published": published, "nullified": False, "histogram": [1, 2, 3],
            "threshold": 0.0, "users": 2})
    return {"requirements": reqs.rows, "decisions": decs.rows, "releases": rels.rows}


def test_dynamic_stream_checks_per_slot_charges(tmp_path, capsys):
    status, doc = audit_json(tmp_path, dynamic_stream(), capsys)
    assert (status, doc["mechanism"], doc["windows_checked"]) == (0, "dpbd", 0)
    assert doc["slots_audited"] == 3
    data = dynamic_stream()
    value(data, "decisions", 2)["eps2"]["4:6"] = 1.0  # 0.3 + 1.0 > the largest valid EB 1.2
    value(data, "decisions", 1)["users"]["3:5"] = 2  # 3 users counted, 2 valid
    value(data, "releases", 1)["users"] = 3
    status, doc = audit_json(tmp_path, data, capsys)
    assert status == 1
    assert {(v["kind"], v["slot"]) for v in doc["violations"]} == {
        ("overspend", 2), ("double_registration", 1)}


def test_input_errors_exit_2(tmp_path, capsys):
    files = write(tmp_path, clean_stream())
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    cases = [
        [*files[:-1], str(tmp_path / "missing.jsonl")],
        [*files[:-1], str(tmp_path / "bad.jsonl")],
        files[:2],
        ["--broker", f"127.0.0.1:{free_port()}", "--timeout", "5"],
    ]
    for extra in cases:
        assert main(["audit", "--stream", STREAM, *extra]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("pwevent audit: error:") and "\n" not in err, err


# -- against the embedded broker ---------------------------------------------------------------


broker = broker_fixture()


async def produce(bootstrap: str, topics: Topics, data: Data) -> None:
    for key, rows in data.items():
        producer = RawProducer(bootstrap, topics.name(key), topics.spec(key).partitions)
        await producer.start()
        try:
            for r in sorted(rows, key=lambda r: (r["partition"], r["offset"])):
                await producer.send_many(
                    [(None if r["key"] is None else r["key"].encode(),
                      None if r["value"] is None else orjson.dumps(r["value"]))],
                    partition=r["partition"])
        finally:
            await producer.stop()


def test_broker_audit_matches_the_dumps(broker, tmp_path, capsys, monkeypatch):
    topics = Topics(prefix="audit", partitions=PARTS)
    asyncio.run(create_topics(broker.bootstrap, topics.specs()))
    data = clean_stream()
    asyncio.run(produce(broker.bootstrap, topics, data))
    args = ["audit", "--broker", broker.bootstrap, "--prefix", "audit", "--stream", STREAM,
            "--json"]
    assert main([*args, "--dump", str(tmp_path / "dump")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert (doc["slots_audited"], doc["windows_checked"], doc["violations"]) == (
        len(SCHEDULE), len(SCHEDULE) * len(USERS), [])
    for key, rows in data.items():
        dumped = [json.loads(line) for line in (tmp_path / "dump" / f"{key}.jsonl").open()]
        assert sorted(dumped, key=lambda r: (r["partition"], r["offset"])) == sorted(
            rows, key=lambda r: (r["partition"], r["offset"]))

    extra = copy.deepcopy(value(data, "releases", START + 4))
    extra["histogram"][0] += 1
    extra["accepted"] = 7
    row = {"partition": 0, "offset": len(data["releases"]), "key": f"{STREAM}/{START + 4}",
           "value": extra}
    asyncio.run(produce(broker.bootstrap, topics, {"releases": [row]}))
    monkeypatch.setenv("PWEVENT_BROKER", broker.bootstrap)
    assert main([a for a in args if a not in ("--broker", broker.bootstrap)]) == 1
    from_broker = json.loads(capsys.readouterr().out)
    data["releases"].append(row)
    assert audit_json(tmp_path, data, capsys) == (1, from_broker)
    assert {(v["kind"], v["slot"]) for v in from_broker["violations"]} == {
        ("duplicate_release", START + 4), ("exact_count_field", START + 4)}
