"""Requirement records applied a batch at a time (:meth:`Registry.apply_batch`,
:meth:`DynamicRegistry.apply_batch`) give what applying them one by one gives, which is what a
plain model of the rules says; the registry's bulk form in the ``users`` table
(:mod:`streams.job.partitions.registry_store`) gives back the same registry."""

from __future__ import annotations

import random
from unittest.mock import patch

import numpy as np
import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from mechanisms.run.named_levels import level_key
from streams.job.config import JobConfig
from streams.job.partitions.admission import (
    DYNAMIC,
    FIXED,
    REMOVAL,
    admit_requirement,
    admit_requirements,
)
from streams.job.partitions.key_hashing import key_partitions
from streams.job.partitions.registries import DynamicRegistry, Registry
from streams.job.partitions.registry_store import (
    PREFIX,
    append_segment,
    decode_block,
    encode_block,
    key_partition_of,
    read_blocks,
    read_manifest,
    wants_snapshot,
    write_snapshot,
)
from streams.job.partitions.user_index import Keys
from streams.job.worker.faust_job import owner_partition
from streams.kafka.producer import key_partition
from streams.records.field_parsing import RecordError
from streams.records.requirement_parsing import (
    DynamicRequirement,
    FixedRequirement,
    RequirementRemoval,
)

PARTS = 3
FIXED_CFG = JobConfig(mechanism="pbd", partitions=PARTS, max_window=50)
DYN_CFG = JobConfig(mechanism="dpbd", partitions=PARTS, max_window=50)
NAMES = [f"u{i}" for i in range(40)]
OWN = [u for u in NAMES if key_partition(u.encode(), PARTS) == 0]


# -- records ---------------------------------------------------------------------------------

def _fixed(user: str, w: object, E: object) -> tuple[bytes, bytes]:
    return user.encode(), orjson.dumps({"user": user, "w": w, "E": E})


def _dynamic(user: str, wB: int, EB: float, wF: int, EF: float) -> tuple[bytes, bytes]:
    return user.encode(), orjson.dumps({"user": user, "wB": wB, "EB": EB, "wF": wF, "EF": EF})


users = st.sampled_from(OWN[:6] + NAMES[:2])  # mostly this partition's users, a few others
windows = st.sampled_from([1, 2, 5, 50, 51, 0])
budgets = st.sampled_from([0.5, 1, 1.0, 2.5, 10.0, 0.001, 11.0])
_O = OWN[0]
_N = next(str(i) for i in range(99) if key_partition(str(i).encode(), PARTS) == 0)
odd = st.sampled_from([  # every shape the long path handles, on this partition's keys
    (None, None), (None, b'{"user": "u0", "w": 2, "E": 1.0}'), (_O.encode(), b"not json"),
    (_O.encode(), b"[1]"), (_O.encode(), orjson.dumps({"user": _O, "w": 2})),
    (_O.encode(), orjson.dumps({"user": OWN[1], "w": 2, "E": 1})),
    (_O.encode(), orjson.dumps({"user": _O, "w": 2, "E": 1.0, "wB": 2})),
    (_N.encode(), orjson.dumps({"user": int(_N), "w": 2, "E": 1})),
    (_N.encode(), orjson.dumps({"user": int(_N), "wB": 2, "EB": 1, "wF": 3, "EF": 2.0})),
    (b"\xff", None), (b"", None), (_O.encode(), orjson.dumps({"user": _O, "w": 2.0, "E": 1})),
    (_O.encode(), orjson.dumps({"user": _O, "w": True, "E": 1})),
    (_O.encode(), orjson.dumps({"user": _O, "w": 3, "E": 1, "x": 1})),
    (_O.encode(), orjson.dumps({"user": _O, "w": 3, "E": "1"})),
    (_O.encode(), b'{"user": "%s", "w": 18446744073709551615, "E": 1}' % _O.encode()),
    (_O.encode(), orjson.dumps({"user": _O, "wB": 2, "EB": 1, "wF": 3})),
    (_O.encode(), orjson.dumps({"user": "", "w": 3, "E": 1})),
    (_O.encode(), orjson.dumps({"user": _O, "wB": 2, "EB": 1, "wF": 3, "EF": 20.0})),
])
fixed_records = st.one_of(
    st.builds(_fixed, users, windows, budgets),
    st.builds(lambda u: (u.encode(), None), users),
    st.builds(_dynamic, users, windows, budgets, windows, budgets),
    odd,
)
dynamic_records = st.one_of(
    st.builds(_dynamic, users, windows, budgets, windows, budgets),
    st.builds(lambda u: (u.encode(), None), users),
    st.builds(_fixed, users, windows, budgets),
    odd,
)


def _split(records: list, cuts: list[int]) -> list[list]:
    """``records`` cut at ``cuts`` into consecutive batches."""
    bounds = sorted({0, len(records), *(c % (len(records) + 1) for c in cuts)})
    return [records[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


# -- plain models of the rules, one record at a time ------------------------------------------

class FixedModel:
    """A user's first accepted (w, E) is fixed; a removal unregisters, the same (w, E)
    registers again, a different one is rejected."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.declared: list[str] = []
        self.active: list[bool] = []
        self.levels: list[str] = []

    def apply(self, key: bytes | None, value: bytes | None) -> tuple[str | None, str, str]:
        try:
            req = admit_requirement(key, value, 0, FIXED_CFG)
        except RecordError as exc:
            return None, exc.reason.value, exc.detail
        i = self.index.get(req.user)
        if isinstance(req, RequirementRemoval):
            if i is not None:
                self.active[i] = False
            return req.user, "", ""
        if isinstance(req, DynamicRequirement):
            return req.user, "invalid_requirement", \
                "this job runs a fixed-requirement mechanism; declare {user, w, E}"
        new = level_key(req.w, req.E)
        if i is not None:
            if self.declared[i] != new:
                return (req.user, "invalid_requirement",
                        f"user {req.user!r} already declared (w, E) = {self.declared[i]}; "
                        "fixed requirements cannot change")
            self.active[i] = True
            return req.user, "", ""
        if new not in self.levels:
            self.levels.append(new)
        self.index[req.user] = len(self.declared)
        self.declared.append(new)
        self.active.append(True)
        return req.user, "", ""


class DynamicModel:
    """A declaration is the user's latest and pending; a removal of a known user unregisters
    it and marks it removed."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.latest: list[tuple] = []
        self.active: list[bool] = []
        self.pending: dict[int, tuple] = {}
        self.removed: set[int] = set()

    def apply(self, key: bytes | None, value: bytes | None) -> tuple[str | None, str, str]:
        try:
            req = admit_requirement(key, value, 0, DYN_CFG)
        except RecordError as exc:
            return None, exc.reason.value, exc.detail
        i = self.index.get(req.user)
        if isinstance(req, RequirementRemoval):
            if i is not None:
                self.active[i] = False
                self.removed.add(i)
            return req.user, "", ""
        if isinstance(req, FixedRequirement):
            return (req.user, "invalid_requirement", "this job runs dpbd, which takes dynamic "
                    "requirements; declare {user, wB, EB, wF, EF}")
        decl = (req.wB, req.EB, req.wF, req.EF)
        if i is None:
            i = self.index[req.user] = len(self.latest)
            self.latest.append(decl)
            self.active.append(True)
        self.latest[i] = decl
        self.active[i] = True
        self.pending[i] = decl
        return req.user, "", ""


def _state(reg: Registry) -> tuple:
    return (reg.index_of, reg.users, reg.level_of_index.tolist(), reg.level_names,
            reg.users_per_level(), +reg.sizes, [reg.export(u) for u in reg.users])


def _dyn_state(reg: DynamicRegistry) -> tuple:
    return (reg.index_of, reg.users, reg.level_of_index.tolist(), reg.latest, reg.pending,
            reg.removed, [reg.export(u) for u in reg.users])


# -- the properties ---------------------------------------------------------------------------

@settings(max_examples=150, deadline=None)
@given(st.lists(st.binary(max_size=24), max_size=60), st.integers(1, 9))
def test_keys_are_partitioned_as_kafka_does(keys: list[bytes], n: int) -> None:
    assert key_partitions(keys, n).tolist() == [key_partition(k, n) for k in keys]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(fixed_records, dynamic_records), max_size=30))
def test_a_batch_is_admitted_as_its_records_one_by_one(records: list) -> None:
    batch = admit_requirements([k for k, _ in records], [v for _, v in records], 0, FIXED_CFG)
    for i, (key, value) in enumerate(records):
        try:
            req = admit_requirement(key, value, 0, FIXED_CFG)
        except RecordError as exc:
            assert i in batch.errors and batch.users[i] is None
            assert (batch.errors[i].reason, batch.errors[i].detail) == (exc.reason, exc.detail)
            continue
        assert i not in batch.errors and batch.users[i] == req.user
        if isinstance(req, RequirementRemoval):
            assert batch.kind[i] == REMOVAL
        elif isinstance(req, FixedRequirement):
            assert batch.kind[i] == FIXED
            assert (int(batch.w[i]), float(batch.E[i])) == (req.w, req.E)
        else:
            assert batch.kind[i] == DYNAMIC
            assert (int(batch.wB[i]), float(batch.EB[i]), int(batch.wF[i]),
                    float(batch.EF[i])) == (req.wB, req.EB, req.wF, req.EF)


@settings(max_examples=200, deadline=None)
@given(st.lists(fixed_records, max_size=40), st.lists(st.integers(0, 40), max_size=4))
def test_fixed_batches_apply_as_records_one_by_one(records: list, cuts: list[int]) -> None:
    model, single, batched = FixedModel(), Registry(FIXED_CFG, 0), Registry(FIXED_CFG, 0)
    expected = [model.apply(k, v) for k, v in records]
    assert [single.apply(k, v) for k, v in records] == expected
    got: list = []
    for batch in _split(records, cuts):
        outcome = batched.apply_batch([k for k, _ in batch], [v for _, v in batch])
        got += [outcome.outcome(i) for i in range(len(batch))]
    assert got == expected
    assert _state(batched) == _state(single)
    assert batched.index_of == model.index
    assert batched.level_of_index.tolist() == [
        batched.level_names.index(d) if a else -1
        for d, a in zip(model.declared, model.active, strict=True)]
    assert batched.level_names == model.levels


@settings(max_examples=200, deadline=None)
@given(st.lists(dynamic_records, max_size=40), st.lists(st.integers(0, 40), max_size=4))
def test_dynamic_batches_apply_as_records_one_by_one(records: list, cuts: list[int]) -> None:
    model = DynamicModel()
    single = DynamicRegistry("dpbd", 50, 0, DYN_CFG)
    batched = DynamicRegistry("dpbd", 50, 0, DYN_CFG)
    expected = [model.apply(k, v) for k, v in records]
    assert [single.apply(k, v) for k, v in records] == expected
    got: list = []
    for batch in _split(records, cuts):
        outcome = batched.apply_batch([k for k, _ in batch], [v for _, v in batch])
        got += [outcome.outcome(i) for i in range(len(batch))]
    assert got == expected
    assert _dyn_state(batched) == _dyn_state(single)
    assert (batched.index_of, batched.latest, batched.pending, batched.removed) == (
        model.index, model.latest, model.pending, model.removed)
    assert batched.level_of_index.tolist() == [0 if a else -1 for a in model.active]


def _colliding(keys: Keys) -> np.ndarray:
    """Two hash values in all, so that users' ids collide in the registry's table."""
    return (keys.lengths % 2).astype(np.uint64)


@settings(max_examples=100, deadline=None)
@given(st.lists(fixed_records, max_size=40), st.lists(dynamic_records, max_size=40),
       st.lists(st.integers(0, 40), max_size=4))
def test_batches_apply_the_same_when_user_ids_collide(fixed: list, dynamic: list,
                                                      cuts: list[int]) -> None:
    with patch("streams.job.partitions.user_index.hash_keys", _colliding):
        regs = [Registry(FIXED_CFG, 0), DynamicRegistry("dpbd", 50, 0, DYN_CFG)]
    plain = [Registry(FIXED_CFG, 0), DynamicRegistry("dpbd", 50, 0, DYN_CFG)]
    assert regs[0]._ids._hasher is _colliding
    for reg, ref, records in zip(regs, plain, (fixed, dynamic), strict=True):
        for batch in _split(records, cuts):
            keys, values = [k for k, _ in batch], [v for _, v in batch]
            got, want = reg.apply_batch(keys, values), ref.apply_batch(keys, values)
            assert [got.outcome(i) for i in range(len(batch))] == [
                want.outcome(i) for i in range(len(batch))]
        assert reg.index_of == ref.index_of and reg.users == ref.users
        assert reg.lookup(NAMES).tolist() == [ref.index_of.get(u, -1) for u in NAMES]
    assert _state(regs[0]) == _state(plain[0]) and _dyn_state(regs[1]) == _dyn_state(plain[1])


def _old_form(block: bytes) -> bytes:
    """A block as written before the ids were columns: the ids in the JSON header."""
    head, cols = decode_block(block)
    ids = Keys.packed(cols.pop("id_bytes"), cols.pop("id_len"))
    return encode_block(dict(head, users=[k.decode() for k in ids.encoded()]), cols)


@settings(max_examples=60, deadline=None)
@given(st.lists(fixed_records, max_size=40), st.lists(dynamic_records, max_size=40),
       st.lists(st.integers(0, 40), max_size=4))
def test_blocks_of_the_earlier_form_are_read(fixed: list, dynamic: list,
                                             cuts: list[int]) -> None:
    for make, records, state in ((lambda: Registry(FIXED_CFG, 0), fixed, _state),
                                 (lambda: DynamicRegistry("dpbd", 50, 0, DYN_CFG), dynamic,
                                  _dyn_state)):
        reg = make()
        blocks = [reg.dump()]
        for batch in _split(records, cuts):
            outcome = reg.apply_batch([k for k, _ in batch], [v for _, v in batch])
            blocks.append(reg.dump(outcome.touched))
        mixed = [_old_form(b) if k % 2 == 0 else b for k, b in enumerate(blocks)]
        again, new = make(), make()
        again.load_blocks(mixed)
        new.load_blocks(blocks)
        assert state(again) == state(new)
        assert again.index_of == reg.index_of and again.users == reg.users


@settings(max_examples=100, deadline=None)
@given(st.lists(fixed_records, max_size=40), st.lists(st.integers(0, 40), max_size=4))
def test_a_fixed_registry_comes_back_from_its_snapshot_and_segments(records: list,
                                                                    cuts: list[int]) -> None:
    reg, table = Registry(FIXED_CFG, 0), {}
    write_snapshot(table, 0, reg.dump())
    for batch in _split(records, cuts):
        outcome = reg.apply_batch([k for k, _ in batch], [v for _, v in batch])
        append_segment(table, 0, reg.dump(outcome.touched))
    again = Registry(FIXED_CFG, 0)
    again.load_blocks(read_blocks(table, 0))
    assert _state(again) == _state(reg)
    # and it goes on as the original would
    more = [_fixed(u, 5, 1.0) for u in OWN[:8]] + [(OWN[0].encode(), None)]
    assert [again.apply(k, v) for k, v in more] == [reg.apply(k, v) for k, v in more]
    assert _state(again) == _state(reg)


@settings(max_examples=100, deadline=None)
@given(st.lists(dynamic_records, max_size=40), st.lists(st.integers(0, 40), max_size=4))
def test_a_dynamic_registry_comes_back_from_its_snapshot_and_segments(records: list,
                                                                      cuts: list[int]) -> None:
    reg, table = DynamicRegistry("dpbd", 50, 0, DYN_CFG), {}
    write_snapshot(table, 0, reg.dump())
    for batch in _split(records, cuts):
        outcome = reg.apply_batch([k for k, _ in batch], [v for _, v in batch])
        append_segment(table, 0, reg.dump(outcome.touched))
    again = DynamicRegistry("dpbd", 50, 0, DYN_CFG)
    again.load_blocks(read_blocks(table, 0))
    legacy = DynamicRegistry("dpbd", 50, 0, DYN_CFG)
    legacy.load([(u, reg.export(u)) for u in reg.users])
    assert _dyn_state(again) == _dyn_state(legacy)
    assert again.pending == dict(enumerate(reg.latest))  # all pending until synced
    applied = reg.latest[: len(reg.latest) // 2]
    again.sync_pending(applied)
    legacy.sync_pending(applied)
    assert again.pending == {i: d for i, d in enumerate(reg.latest) if i >= len(applied)}
    assert again.pending == legacy.pending


def test_a_removed_user_whose_ledger_is_suspended_stays_so_after_a_restore() -> None:
    reg = DynamicRegistry("dpbd", 50, 0, DYN_CFG)
    a, b = OWN[:2]
    reg.apply_batch(*zip(_dynamic(a, 2, 1.0, 2, 1.0), _dynamic(b, 3, 1.0, 3, 1.0), strict=True))
    reg.apply(b.encode(), None)
    again = DynamicRegistry("dpbd", 50, 0, DYN_CFG)
    again.load_blocks([reg.dump()])
    again.sync_pending([(2, 1.0, 2, 1.0), (0, 0.0, 0, 0.0)])  # b's ledger is suspended
    assert again.pending == {}
    again.sync_pending([(2, 1.0, 2, 1.0), (3, 1.0, 3, 1.0)])
    assert again.pending == {}
    again.sync_pending([(2, 1.0, 2, 1.0)])
    assert again.pending == {1: (3, 1.0, 3, 1.0)}


def test_snapshots_replace_segments_and_drop_the_previous_generation() -> None:
    reg, table = Registry(FIXED_CFG, 0), {}
    write_snapshot(table, 0, reg.dump())
    assert read_blocks(table, 1) is None and read_manifest(table, 1) is None
    for k, u in enumerate(OWN):
        outcome = reg.apply_batch(*zip(_fixed(u, 1 + k % 3, 1.0), strict=True))
        manifest = append_segment(table, 0, reg.dump(outcome.touched))
    assert len(manifest.segments) == len(OWN) and not wants_snapshot(manifest)
    assert wants_snapshot(manifest, max_segments=len(OWN))
    before = set(table)
    write_snapshot(table, 0, reg.dump())
    after = set(table)
    assert len(after) == 2  # the manifest and the one piece of the new snapshot
    assert not (before - {PREFIX + b"0/manifest"}) & after
    again = Registry(FIXED_CFG, 0)
    again.load_blocks(read_blocks(table, 0))
    assert _state(again) == _state(reg)


def test_a_large_registry_is_stored_in_pieces_kafka_takes() -> None:
    reg, table = Registry(FIXED_CFG, 0), {}
    rng = random.Random(7)
    keys = [f"{rng.getrandbits(192):048x}".encode() for _ in range(100_000)]
    own = [k for k, p in zip(keys, key_partitions(keys, PARTS).tolist(), strict=True) if p == 0]
    reg.apply_batch(own, [orjson.dumps({"user": k.decode(), "w": 2, "E": 1.0}) for k in own])
    manifest = write_snapshot(table, 0, reg.dump())
    assert manifest.pieces > 1 and max(len(v) for v in table.values()) <= 512 * 1024
    again = Registry(FIXED_CFG, 0)
    again.load_blocks(read_blocks(table, 0))
    assert again.index_of == reg.index_of and again.users_per_level() == {"2:1.0": len(own)}


def test_registry_records_belong_to_the_partition_their_key_names() -> None:
    assert key_partition_of(PREFIX + b"2/manifest") == 2
    assert key_partition_of(PREFIX + b"2/3/d1/0") == 2
    assert key_partition_of(b"u1") is None and key_partition_of(PREFIX + b"x/manifest") is None
    assert owner_partition(PREFIX + b"1/manifest", PARTS) == 1
    assert all(owner_partition(u.encode(), PARTS) == key_partition(u.encode(), PARTS)
               for u in NAMES)
