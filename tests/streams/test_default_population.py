"""Default requirements publish nothing about who showed up when (docs/design.md, "Default
requirements"): a default rule's level is a latent population, present from the stream's first
slot with its public prior as size, so the releases' ``users``, the decisions' levels and users
and OBS's threshold are the same whenever the devices first appear."""

from __future__ import annotations

import orjson
import pytest

from streams.job.config import JobConfig
from streams.job.pipeline import InProcessJob
from streams.job.source.defaults import DEFAULT_PRIOR, DefaultRequirements, default_levels

SLOT, SLOTS = 1000, 6
NONCE = "ab" * 8


def _config(rules: list[str], **kw) -> JobConfig:
    kw = {"stream": "s", "mechanism": "pbd", "domain": {"kind": "cells", "size": 3},
          "slot_ms": SLOT, "partitions": 2, "secret": "k", "event_time": "history",
          "nonce": NONCE, **kw}
    base = JobConfig(**kw)
    return JobConfig(**{**base.__dict__, "default_levels": default_levels(rules, base)}
                     ) if rules else base


def _run(cfg: JobConfig, rules: list[str], first: dict[str, int],
         tier: dict[str, str] | None = None) -> tuple[list[dict], list[dict]]:
    """Each device reports at every slot from its first on; its default requirement is
    registered just before its first report, as the source stage writes it."""
    job = InProcessJob(cfg)
    defaults = DefaultRequirements(rules, cfg)
    for slot in range(SLOTS):
        fresh = [u for u, f in first.items() if f == slot]
        if rules:
            job.register([(u.encode(), defaults.choose(((tier or {}).get(u),)).requirement(u))
                          for u in fresh])
        else:
            job.register([(u.encode(), orjson.dumps({"user": u, "w": 10, "E": 1.0}))
                          for u in fresh])
        job.feed([(u.encode(), orjson.dumps({"user": u, "time": slot * SLOT + 10,
                                              "value": hash(u) % 3}))
                  for u, f in sorted(first.items()) if f <= slot])
    job.finish(SLOTS * SLOT)
    releases = [orjson.loads(r) for r in job.releases]
    decisions = [d for d in map(orjson.loads, job.decisions) if "slot" in d]
    assert [r["slot"] for r in releases] == list(range(SLOTS))
    return releases, decisions


def _devices(moved_to: int) -> dict[str, int]:
    """The issue's check: 60 devices, 15 first seen in each of the first four slots; device
    d00 first seen at ``moved_to``."""
    first = {f"d{i:02d}": i // 15 for i in range(60)}
    first["d00"] = moved_to
    return first


def test_moving_one_devices_first_event_changes_no_public_count():
    rules = ["w=10,E=1"]
    cfg = _config(rules)
    assert cfg.default_levels == (("10:1.0", DEFAULT_PRIOR),)
    assert cfg.public()["default_levels"] == {"10:1.0": DEFAULT_PRIOR}
    a_rel, a_dec = _run(cfg, rules, _devices(0))
    b_rel, b_dec = _run(cfg, rules, _devices(2))
    # every slot: the level's public prior, never the devices seen so far (15, 30, 45, 60)
    assert [r["users"] for r in a_rel] == [DEFAULT_PRIOR] * SLOTS
    assert [r["users"] for r in b_rel] == [r["users"] for r in a_rel]
    assert [d["users"] for d in a_dec] == [{"10:1.0": DEFAULT_PRIOR}] * SLOTS
    assert [d["users"] for d in b_dec] == [d["users"] for d in a_dec]
    # the charges and the threshold are functions of public inputs and past decisions: equal
    # wherever both streams took the same decisions so far
    for a, b, ra, rb in zip(a_dec, b_dec, a_rel, b_rel, strict=True):
        if a["published"] != b["published"]:
            break
        assert (a["eps1"], a["eps2"]) == (b["eps1"], b["eps2"])
        assert ra["threshold"] == rb["threshold"]
        assert ra["noise"] == rb["noise"]


def test_declared_requirements_keep_counting_registered_users():
    """Without default requirements the population is declared and public: ``users`` is the
    count of registered users, as the paper has it."""
    rel, dec = _run(_config([]), [], _devices(0))
    # (a slot counts who was registered when its partition closed it: here, as the next
    # slot's first report arrived, after that slot's registrations)
    assert [r["users"] for r in rel] == [30, 45, 60, 60, 60, 60]
    assert [d["users"] for d in dec][:2] == [{"10:1.0": 30}, {"10:1.0": 45}]


def test_every_default_level_exists_from_the_first_slot():
    """Two rules; the second rule's devices appear only at slot 3. Its level is charged and
    counted with its prior from slot 0 on, so the decisions do not show when its first device
    came; the releases' users never move."""
    rules = ["tier=full:w=10,E=2,n=300", "w=20,E=1,n=500"]
    cfg = _config(rules)
    first = {f"d{i:02d}": 0 if i < 30 else 3 for i in range(40)}
    tier = {u: "full" for u, f in first.items() if f == 0}
    rel, dec = _run(cfg, rules, first, tier)
    assert all(d["users"] == {"10:2.0": 300, "20:1.0": 500} for d in dec)
    assert all(set(d["eps1"]) == {"10:2.0", "20:1.0"} for d in dec)
    assert [r["users"] for r in rel] == [800] * SLOTS
    # the same stream with every device present from slot 0 decides the same levels and sizes
    same, same_dec = _run(cfg, rules, dict.fromkeys(first, 0), tier)
    assert [d["users"] for d in same_dec] == [d["users"] for d in dec]


@pytest.mark.parametrize("mechanism", ["bd", "uniform"])
def test_homogeneous_baselines_take_the_strictest_rule_from_the_start(mechanism):
    """BD and Uniform run at the strictest requirement among the levels: every rule's level is
    there from slot 0, so the strictest does not change when a stricter rule's first device
    appears."""
    rules = ["tier=full:w=10,E=2", "w=4,E=1"]
    cfg = _config(rules, mechanism=mechanism)
    first = {f"d{i}": 0 if i < 10 else 4 for i in range(12)}
    tier = {u: "full" for u, f in first.items() if f == 0}
    _rel, early = _run(cfg, rules, dict.fromkeys(first, 0), tier)
    _rel, late = _run(cfg, rules, first, tier)
    # (later slots' charges follow the noisy publish decisions, which differ with the data)
    # E = 1 over w = 10, the strictest of both rules, from slot 0: BD's test takes E/(2w) per
    # slot, Uniform publishes E/w every slot
    want = ({"4:1.0": 0.05, "10:2.0": 0.05} if mechanism == "bd" else
            {"4:1.0": 0.0, "10:2.0": 0.0})
    assert late[0]["eps1"] == early[0]["eps1"] == want
    if mechanism == "uniform":
        assert [d["eps2"] for d in late] == [{"4:1.0": 0.1, "10:2.0": 0.1}] * SLOTS


# -- pwevent audit --------------------------------------------------------------------------------

def _audited(cfg: JobConfig, rules: list[str], first: dict[str, int]) -> dict:
    """Run the job in process as :func:`_run` does and audit its topics."""
    from streams.audit.accounting import audit
    from streams.audit.report import Record
    from streams.kafka.producer import key_partition

    job = InProcessJob(cfg)
    defaults = DefaultRequirements(rules, cfg)
    reqs: list[Record] = []
    for slot in range(SLOTS):
        fresh = [(u.encode(), defaults.choose(()).requirement(u) if rules else
                  orjson.dumps({"user": u, "w": 10, "E": 1.0}))
                 for u, f in sorted(first.items()) if f == slot]
        job.register(fresh)
        reqs += [Record(key_partition(k, cfg.partitions), len(reqs), k.decode(), orjson.loads(v))
                 for k, v in fresh]
        job.feed([(u.encode(), orjson.dumps({"user": u, "time": slot * SLOT + 10, "value": 1}))
                  for u, f in sorted(first.items()) if f <= slot])
    job.finish(SLOTS * SLOT)
    decs = [Record(0, i, f"s/{d['slot']}" if "slot" in d else "s/start", d)
            for i, d in enumerate(map(orjson.loads, job.decisions))]
    rels = [Record(0, i, f"s/{r['slot']}", r) for i, r in enumerate(map(orjson.loads,
                                                                         job.releases))]
    return audit(reqs, decs, rels, stream="s").to_dict()


def test_audit_passes_a_stream_whose_default_levels_count_their_priors():
    rules = ["w=10,E=1,n=200"]
    out = _audited(_config(rules), rules, _devices(0))
    assert out["violations"] == [], out["violations"]
    pop = out["population"]
    assert pop["registration"].startswith("data-driven") and pop["defaulted_users"] == 60
    assert pop["default_levels"] == {"10:1.0": 200}
    assert pop["fields"]["releases.users"].startswith("public")
    assert pop["fields"]["decisions.users"].startswith("public")
    assert pop["fields"]["releases.histogram"].startswith("noisy")


def test_audit_refuses_a_stream_that_counts_devices_registered_by_defaults():
    """The job as it was: default registrations, but realised counts in the decisions (no
    public sizes in the start record). The audit names the leak and fails."""
    rules = ["w=10,E=1"]
    leaky = _config([])  # the coordinator counts the devices registered so far
    out = _audited(leaky, rules, _devices(0))
    kinds = {v["kind"] for v in out["violations"]}
    assert kinds == {"registration_leak"}, out["violations"]
    assert out["population"]["fields"]["releases.users"].startswith("LEAKS")
    # a declared stream: public, no section flagged
    declared = _audited(_config([]), [], _devices(0))
    assert declared["violations"] == [] and declared["population"]["registration"] == "declared"
