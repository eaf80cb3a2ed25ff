"""The user index (:mod:`streams.job.partitions.user_index`) gives what a dict from id to index
and a list of ids give, a batch of keys at a time, also when hashes collide."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streams.job.partitions.user_index import Keys, UserIndex, hash_keys

ids = st.text(max_size=12).map(str.encode) | st.binary(max_size=20)


def _colliding(keys: Keys) -> np.ndarray:
    """Two hash values in all: every key collides with about half the others."""
    return (keys.lengths % 2).astype(np.uint64)


def _apply(index: UserIndex, model: dict[bytes, int], batches: list[list[bytes]]) -> None:
    for batch in batches:
        got = index.lookup(batch)
        assert got.tolist() == [model.get(k, -1) for k in batch]
        fresh = list(dict.fromkeys(k for k in batch if k not in model))
        new = index.add(fresh)
        assert new.tolist() == list(range(len(model), len(model) + len(fresh)))
        model.update(zip(fresh, new.tolist(), strict=True))
        assert index.lookup(batch).tolist() == [model[k] for k in batch]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(ids, max_size=30), max_size=6), st.sampled_from([None, _colliding]),
       st.lists(ids, max_size=20))
def test_batches_of_keys_are_looked_up_and_added_as_a_dict_would(
        batches: list[list[bytes]], hasher, probes: list[bytes]) -> None:
    index, model = UserIndex(hasher, capacity=2), {}
    _apply(index, model, batches)
    assert len(index) == len(model)
    assert index.lookup(probes).tolist() == [model.get(k, -1) for k in probes]
    assert index.ids().encoded() == list(model)
    pick = np.array([i for i in range(len(model))][::-2], dtype=np.int64)
    assert index.ids(pick).encoded() == [list(model)[i] for i in pick.tolist()]
    again = UserIndex(hasher)
    again.load(index.ids())
    assert again.lookup(list(model)).tolist() == list(range(len(model)))


def test_colliding_hashes_resolve_by_the_stored_bytes() -> None:
    index = UserIndex(lambda keys: np.zeros(len(keys), dtype=np.uint64), capacity=2)
    keys = [f"u{i}".encode() for i in range(300)]
    index.add(keys[:150])
    index.add(keys[150:])
    assert index.lookup(keys[::-1] + [b"u300", b""]).tolist() == list(range(299, -1, -1)) + [-1, -1]
    assert index._table.shape[0] == 1024  # at most half full


def test_the_hash_depends_on_every_byte_and_the_length() -> None:
    keys = [b"", b"\x00", b"\x00\x00", b"abcdefgh", b"abcdefgi", b"abcdefgh\x00", b"u1", b"u2"]
    h = hash_keys(Keys.of(keys))
    assert len(set(h.tolist())) == len(keys)
    assert hash_keys(Keys.of(keys[::-1])).tolist() == h.tolist()[::-1]


def test_the_views_behave_as_the_dict_and_the_list() -> None:
    index = UserIndex()
    index.add([b"a", "é".encode(), b"c"])
    assert index.index_of == {"a": 0, "é": 1, "c": 2} and index.users == ["a", "é", "c"]
    assert index.index_of["é"] == 1 and index.index_of.get("zz", -1) == -1
    assert "c" in index.index_of and "d" not in index.index_of
    assert index.users[-1] == "c" and index.users[1:] == ["é", "c"] and list(index.users)[0] == "a"
    with pytest.raises(KeyError):
        index.index_of["d"]
    with pytest.raises(IndexError):
        index.users[3]
    assert index.lookup_str(["c", "x", "a"]).tolist() == [2, -1, 0]
