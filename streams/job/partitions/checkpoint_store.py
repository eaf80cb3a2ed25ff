"""How a partition's checkpoint is kept in a table (the job's ``checkpoints`` table): cut into
records small enough for Kafka (:func:`write_chunked`), named by a manifest, so that a crash
between writes still leaves a readable checkpoint (:func:`read_chunked`)."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

CHECKPOINT_CHUNK = 512 * 1024  # bytes per checkpoint record: well below Kafka's 1 MiB default
MANIFEST = "chunks|"


def _manifest(value: bytes | None) -> tuple[int, int] | None:
    """(generation, chunks) of a checkpoint manifest; ``None`` for anything else."""
    if not value or not value.startswith(MANIFEST.encode()):
        return None
    gen, count = value[len(MANIFEST):].decode().split("|")
    return int(gen), int(count)


def write_chunked(table: MutableMapping[bytes, bytes], p: int, data: bytes,
                  chunk: int = CHECKPOINT_CHUNK) -> None:
    """Store ``data`` under partition ``p`` of ``table``, cut into records of at most ``chunk``
    bytes: the chunks of a new generation first, then the manifest that names them, then the
    previous generation's chunks are deleted (a crash in between leaves a readable state)."""
    key = str(p).encode()
    old = _manifest(table.get(key))
    gen = old[0] + 1 if old else 1
    parts = [data[i:i + chunk] for i in range(0, len(data), chunk)] or [b""]
    for i, part in enumerate(parts):
        table[f"{p}/{gen}/{i}".encode()] = part
    table[key] = f"{MANIFEST}{gen}|{len(parts)}".encode()
    if old:
        for i in range(old[1]):
            table.pop(f"{p}/{old[0]}/{i}".encode(), None)


def read_chunked(table: Mapping[bytes, bytes], p: int) -> bytes | None:
    """What :func:`write_chunked` stored under partition ``p`` (a value stored whole is read as
    it is); ``None`` when nothing was."""
    value = table.get(str(p).encode())
    manifest = _manifest(value)
    if manifest is None:
        return value or None
    gen, count = manifest
    parts = [table.get(f"{p}/{gen}/{i}".encode()) for i in range(count)]
    if any(part is None for part in parts):
        raise RuntimeError(f"checkpoint of partition {p} lacks chunks of generation {gen}")
    return b"".join(parts)  # type: ignore[arg-type]
