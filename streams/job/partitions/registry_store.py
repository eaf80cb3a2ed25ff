"""How a partition's registry is kept in the ``users`` table: in bulk, not an entry per user.

A registry is written as a *snapshot* (every user) and, after it, *segments* (the users a
batch of requirement records touched), each an encoded block (:func:`encode_block`): a JSON
header (the user ids, level names) and numpy columns, compressed. Restoring reads the snapshot
and the segments in order and takes each user's last entry, in a few numpy passes
(:func:`decode_block`). A manifest names what is current; a new snapshot is written when the
segments outgrow it, and the older generation is then deleted (the compacted changelog drops
it too). Every record is cut into pieces small enough for Kafka, and written before the
manifest that names it, so a crash in between leaves the previous state readable.

Keys start with the byte 0xFF, which begins no UTF-8 text, so they never meet a user's key
(users are keyed by their id in UTF-8), and name their partition (:func:`key_partition_of`):
restoring the table from its changelog takes such a record only from the partition it names.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass

import numpy as np
import orjson

PREFIX = b"\xffregistry/"
PIECE = 512 * 1024  # bytes per table record: well below Kafka's 1 MiB default
MAGIC = b"PWRB"


def encode_block(header: dict, columns: dict[str, np.ndarray]) -> bytes:
    """``header`` (JSON) and equal-length ``columns``, compressed into one block."""
    head = dict(header, columns=[[k, str(v.dtype), int(v.shape[0])] for k, v in columns.items()])
    doc = orjson.dumps(head)
    body = b"".join(np.ascontiguousarray(v).tobytes() for v in columns.values())
    return MAGIC + zlib.compress(len(doc).to_bytes(8, "big") + doc + body, 1)


def decode_block(block: bytes) -> tuple[dict, dict[str, np.ndarray]]:
    """The header and columns of an :func:`encode_block` block."""
    if block[:4] != MAGIC:
        raise ValueError("not a registry block")
    raw = zlib.decompress(block[4:])
    size = int.from_bytes(raw[:8], "big")
    head = orjson.loads(raw[8:8 + size])
    pos, columns = 8 + size, {}
    for name, dtype, count in head.pop("columns"):
        dt = np.dtype(dtype)
        columns[name] = np.frombuffer(raw, dtype=dt, count=count, offset=pos)
        pos += dt.itemsize * count
    return head, columns


def _key(p: int, rest: str) -> bytes:
    return PREFIX + f"{p}/{rest}".encode()


def key_partition_of(key: bytes) -> int | None:
    """The partition a registry record's key names; ``None`` for any other key."""
    if not key.startswith(PREFIX):
        return None
    head = key[len(PREFIX):].split(b"/", 1)[0]
    return int(head) if head.isdigit() else None


@dataclass
class Manifest:
    """What is current of a partition's registry: the snapshot's generation and pieces, its
    size, and the pieces of each segment written after it (and their total size)."""

    gen: int = 0
    pieces: int = 0
    size: int = 0
    segments: tuple[int, ...] = ()
    segment_bytes: int = 0

    def encode(self) -> bytes:
        segs = ",".join(map(str, self.segments))
        return f"{self.gen}|{self.pieces}|{self.size}|{self.segment_bytes}|{segs}".encode()

    @classmethod
    def decode(cls, value: bytes) -> Manifest:
        gen, pieces, size, seg_bytes, segs = value.decode().split("|")
        return cls(int(gen), int(pieces), int(size),
                   tuple(int(s) for s in segs.split(",") if s), int(seg_bytes))


def read_manifest(table: Mapping[bytes, bytes], p: int) -> Manifest | None:
    """Partition ``p``'s manifest; ``None`` when its registry was never stored in bulk."""
    value = table.get(_key(p, "manifest"))
    return Manifest.decode(value) if value else None


def _write(table: MutableMapping[bytes, bytes], p: int, name: str, data: bytes) -> int:
    parts = [data[i:i + PIECE] for i in range(0, len(data), PIECE)] or [b""]
    for i, part in enumerate(parts):
        table[_key(p, f"{name}/{i}")] = part
    return len(parts)


def _read(table: Mapping[bytes, bytes], p: int, name: str, pieces: int) -> bytes:
    parts = [table.get(_key(p, f"{name}/{i}")) for i in range(pieces)]
    if any(part is None for part in parts):
        raise RuntimeError(f"registry of partition {p} lacks pieces of {name}")
    return b"".join(parts)  # type: ignore[arg-type]


def write_snapshot(table: MutableMapping[bytes, bytes], p: int, data: bytes) -> Manifest:
    """Store ``data`` as partition ``p``'s registry: a new generation, then its manifest, then
    the previous generation's records are deleted."""
    old = read_manifest(table, p)
    gen = old.gen + 1 if old else 1
    pieces = _write(table, p, f"{gen}/s", data)
    new = Manifest(gen, pieces, len(data))
    table[_key(p, "manifest")] = new.encode()
    if old:
        _drop(table, p, old)
    return new


def _drop(table: MutableMapping[bytes, bytes], p: int, old: Manifest) -> None:
    for i in range(old.pieces):
        table.pop(_key(p, f"{old.gen}/s/{i}"), None)
    for j, count in enumerate(old.segments):
        for i in range(count):
            table.pop(_key(p, f"{old.gen}/d{j}/{i}"), None)


def append_segment(table: MutableMapping[bytes, bytes], p: int, data: bytes) -> Manifest:
    """Store ``data`` as the next segment of partition ``p``'s registry (which must have a
    snapshot), then the manifest that names it."""
    old = read_manifest(table, p)
    if old is None:
        raise RuntimeError(f"registry of partition {p} has no snapshot to append to")
    j = len(old.segments)
    pieces = _write(table, p, f"{old.gen}/d{j}", data)
    new = Manifest(old.gen, old.pieces, old.size, (*old.segments, pieces),
                   old.segment_bytes + len(data))
    table[_key(p, "manifest")] = new.encode()
    return new


def read_blocks(table: Mapping[bytes, bytes], p: int) -> list[bytes] | None:
    """Partition ``p``'s snapshot and segments, in order; ``None`` when never stored in bulk."""
    m = read_manifest(table, p)
    if m is None:
        return None
    blocks = [_read(table, p, f"{m.gen}/s", m.pieces)]
    blocks += [_read(table, p, f"{m.gen}/d{j}", count) for j, count in enumerate(m.segments)]
    return blocks


def wants_snapshot(m: Manifest, max_segments: int = 256) -> bool:
    """Whether the segments have outgrown the snapshot (rewriting it then costs no more than
    the segments written since, so the table's writes stay linear in the registrations)."""
    return m.segment_bytes > max(m.size, 1 << 20) or len(m.segments) >= max_segments
