"""Avro source records (``--source-format avro``): the Confluent wire format decoded with fastavro.

A record's value is a magic byte 0, the writer schema's id (4 bytes, big-endian) and the Avro
binary encoding of one datum. :class:`AvroSource` decodes a fetched batch in one call
(:meth:`AvroSource.decode`), fetching from the schema registry the ids it has not seen yet
(:mod:`streams.job.source.schema_registry`), and hands the decoded records, as Python objects,
to the same :class:`~streams.job.source.mapping.SourceMapping` as JSON records
(:meth:`AvroSource.map`), so ``--user-field``, ``--time-field`` and ``--value-field`` are dotted
paths into the decoded record.

A record that cannot be decoded is rejected with its reason, never dropped: ``malformed_avro``
(a tombstone, no wire-format header, a magic byte other than 0, a body that does not decode with
its schema or has bytes left after the datum, a datum that is not an Avro record),
``unknown_schema`` (an id the registry does not know, or a schema that is not Avro),
``unsupported_schema`` (a schema refused before anything is decoded with it: recursive, nested
too deep, or decoding to far more values than its bytes;
:func:`~streams.job.source.schema_registry.schema_refusal`) or ``schema_unavailable`` (the
registry could not be reached for an id not cached yet).

Decoding is bounded for every schema accepted: at most
:data:`~streams.job.source.schema_registry.MAX_DEPTH` deep, into a number of values linear in
the body's length; a length or an item count larger than the body holds fails once its bytes
are used up (``malformed_avro``), nothing of the declared size allocated.

Needs the ``avro`` extra (fastavro).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from io import BytesIO
from typing import Any, Final

import numpy as np

from streams.job.isolation import isolated
from streams.job.source.mapping import MappedBatch, SourceMapping, SourceRecord
from streams.job.source.schema_registry import SchemaError, SchemaRegistry
from streams.records.field_formats import Reason
from streams.records.field_parsing import Rejection, json_type

__all__ = ["AVRO_EXTRA", "UNDECODED", "AvroSource", "DecodedBatch", "check_avro_installed"]

#: The wire format's magic byte and header length.
MAGIC: Final = 0
HEADER: Final = 5
#: The reasons of records that were never decoded (so the mapping never saw them).
UNDECODED: Final = frozenset({Reason.MALFORMED_AVRO, Reason.UNKNOWN_SCHEMA,
                              Reason.SCHEMA_UNAVAILABLE, Reason.UNSUPPORTED_SCHEMA})
#: What to install for ``--source-format avro``.
AVRO_EXTRA: Final = "the avro extra: pip install 'pwevent[avro]'"


def check_avro_installed() -> None:
    """Raise ``ValueError`` naming the extra when fastavro is not installed."""
    try:
        import fastavro  # noqa: F401
    except ImportError:
        raise ValueError(f"--source-format avro needs {AVRO_EXTRA}") from None


@dataclasses.dataclass(frozen=True)
class DecodedBatch:
    """The decoded records of a batch: their positions in it (``index``), the decoded
    ``records`` (dicts) and a rejection for every other value (sorted by index)."""

    index: list[int]
    records: list[dict[str, Any]]
    rejected: list[Rejection]


class AvroSource:
    """Decodes the Avro records of a batch and maps them (module doc)."""

    def __init__(self, registry: SchemaRegistry) -> None:
        from fastavro import schemaless_reader

        self.registry = registry
        self._read = schemaless_reader

    async def decode(self, values: Sequence[bytes | None]) -> DecodedBatch:
        """Decode one batch of record values; schemas not cached yet are fetched first, off
        the event loop. Never raises on bad input."""
        ids: list[int] = []
        missing: set[int] = set()
        cached = self.registry.schemas
        for v in values:
            if v is not None and len(v) >= HEADER and v[0] == MAGIC:
                sid = int.from_bytes(v[1:HEADER], "big")
                ids.append(sid)
                if sid not in cached:
                    missing.add(sid)
            else:
                ids.append(-1)
        errors: dict[int, SchemaError] = {}
        refused = self.registry.refused
        for sid in sorted(missing):
            if sid in refused:  # for good: no need to ask again
                errors[sid] = refused[sid]
                continue
            try:
                await asyncio.to_thread(self.registry.fetch, sid)
            except SchemaError as exc:
                errors[sid] = exc
        return self._decode(values, ids, errors)

    def _decode(self, values: Sequence[bytes | None], ids: list[int],
                errors: dict[int, SchemaError]) -> DecodedBatch:
        read, schemas = self._read, self.registry.schemas
        index: list[int] = []
        records: list[dict[str, Any]] = []
        rejected: list[Rejection] = []
        for i, (v, sid) in enumerate(zip(values, ids, strict=True)):
            if sid < 0:
                rejected.append(Rejection(i, Reason.MALFORMED_AVRO, _no_header(v)))
                continue
            schema = schemas.get(sid)
            if schema is None:
                err = errors[sid]
                rejected.append(Rejection(i, err.reason, err.detail))
                continue
            body = BytesIO(v[HEADER:])  # type: ignore[index]
            try:
                doc = read(body, schema, None)
            except Exception as exc:  # noqa: BLE001 - fastavro raises many kinds on bad bytes
                rejected.append(Rejection(i, Reason.MALFORMED_AVRO, f"the body does not decode "
                                          f"with schema id {sid}: {type(exc).__name__}: "
                                          f"{exc}"[:200]))
                continue
            left = len(v) - HEADER - body.tell()  # type: ignore[arg-type]
            if left:
                rejected.append(Rejection(i, Reason.MALFORMED_AVRO, f"{left} bytes after the "
                                          f"datum of schema id {sid}"))
            elif type(doc) is not dict:
                rejected.append(Rejection(i, Reason.BAD_TYPE, "a source record must be an Avro "
                                          f"record, not {json_type(doc)} (schema id {sid})"))
            else:
                index.append(i)
                records.append(doc)
        return DecodedBatch(index, records, rejected)

    async def map(self, mapping: SourceMapping, records: Sequence[SourceRecord],
                  extra: Sequence[tuple[str, ...]] = (), topic: str = "source") -> MappedBatch:
        """Decode one batch and map it with ``mapping``, as :meth:`SourceMapping.map` maps JSON
        records: indices and rejections refer to positions in ``records``. A decoded record the
        mapping raises on is taken out of the batch (:func:`~streams.job.isolation.isolated`,
        ``unprocessable``; ``topic`` names it in the log)."""
        decoded = await self.decode([r[1] for r in records])
        docs = [(records[i][0], doc, records[i][2], records[i][3], records[i][4])
                for i, doc in zip(decoded.index, decoded.records, strict=True)]
        keep, batch, broken = isolated(docs, lambda sub: mapping.map_decoded(sub, extra),
                                       lambda j: (topic, docs[j][2], docs[j][3]))
        at = [decoded.index[j] for j in keep]
        rejected = decoded.rejected + [Rejection(decoded.index[r.index], r.reason, r.detail)
                                       for r in broken]
        rejected += [Rejection(at[r.index], r.reason, r.detail) for r in batch.rejected]
        rejected.sort(key=lambda r: r.index)
        return dataclasses.replace(batch, index=np.asarray(at, dtype=np.int64)[batch.index],
                                   rejected=rejected)


def _no_header(value: bytes | None) -> str:
    if value is None:
        return "empty value (tombstone)"
    if len(value) < HEADER:
        return (f"{len(value)} bytes, shorter than the Confluent wire format's 5-byte header "
                "(magic byte 0, schema id)")
    return f"magic byte {value[0]}, not 0: not the Confluent wire format"
