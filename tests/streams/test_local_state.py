"""The worker's start-up reading of its own RocksDB stores (``local_offsets``), on real stores."""

from __future__ import annotations

from pathlib import Path

import pytest
from jobkit import creation_cut_short
from rocksdict import Options, Rdict

from streams.job.worker.data_dir import TABLES_DIR
from streams.job.worker.local_state import local_offsets
from streams.job.worker.preflight import StartupError

OFFSET_KEY = b"__faust\0offset__"  # where Faust's RocksDB store keeps its applied offset


def write_store(path: Path, items: dict[bytes, bytes]) -> None:
    """A store as Faust opens and writes it (read-write, created if missing, raw keys)."""
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    db = Rdict(str(path), options=options)
    try:
        for key, value in items.items():
            db[key] = value
    finally:
        db.close()


@pytest.fixture()
def tables(tmp_path: Path) -> Path:
    root = tmp_path / TABLES_DIR
    root.mkdir(parents=True)
    return root


def test_the_offsets_the_stores_applied_are_read(tables: Path, tmp_path: Path) -> None:
    write_store(tables / "users-0.db", {OFFSET_KEY: b"41", b"u1": b"x"})
    write_store(tables / "checkpoints-3.db", {OFFSET_KEY: b"7"})
    write_store(tables / "users-1.db", {b"u2": b"y"})  # nothing applied yet: left out
    assert local_offsets(tmp_path) == {("users", 0): 41, ("checkpoints", 3): 7}


def test_a_store_whose_creation_was_cut_short_holds_nothing(tables: Path,
                                                            tmp_path: Path) -> None:
    write_store(tables / "users-0.db", {OFFSET_KEY: b"41"})
    creation_cut_short(tables / "checkpoints-1.db")
    assert local_offsets(tmp_path) == {("users", 0): 41}
    # and Faust's own opening of it makes a new store, which the next start reads
    write_store(tables / "checkpoints-1.db", {OFFSET_KEY: b"3"})
    assert local_offsets(tmp_path) == {("users", 0): 41, ("checkpoints", 1): 3}


def test_a_damaged_store_is_still_refused_with_its_path(tables: Path, tmp_path: Path) -> None:
    write_store(tables / "users-0.db", {OFFSET_KEY: b"41"})
    (tables / "users-0.db" / "CURRENT").write_text("MANIFEST-999999\n")  # names no manifest
    with pytest.raises(StartupError, match=r"cannot read the table store .*users-0\.db"):
        local_offsets(tmp_path)
