"""Encoding and decoding of dead letters: the rejected input records, with their original bytes
(base64, capped) and the reason."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

import orjson

from streams.records.field_formats import Reason
from streams.records.input_formats import (
    DEAD_LETTER_BYTES_FIELDS,
    DEAD_LETTER_PAYLOAD_BYTES,
    DEAD_LETTER_REQUIRED,
)

__all__ = ["dead_letter", "decode_dead_letter"]


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def dead_letter(
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    reason: Reason | str,
    detail: str,
) -> bytes:
    """Encode a dead-letter record; key and value are the original bytes, base64-encoded, capped
    at ``DEAD_LETTER_PAYLOAD_BYTES`` each (a ``truncated`` member then gives the original sizes
    and a hash), so a dead letter always fits the producer's record size."""
    reason = Reason(reason)
    cap = DEAD_LETTER_PAYLOAD_BYTES
    fields = (topic, partition, offset, _b64(key if key is None else key[:cap]),
              _b64(value if value is None else value[:cap]), reason.value, detail)
    doc: dict[str, Any] = dict(zip(DEAD_LETTER_REQUIRED, fields, strict=True))
    if (key is not None and len(key) > cap) or (value is not None and len(value) > cap):
        doc["truncated"] = {
            "key_bytes": None if key is None else len(key),
            "value_bytes": None if value is None else len(value),
            "sha256": hashlib.sha256(value if value is not None else key or b"").hexdigest(),
        }
    return orjson.dumps(doc)


def decode_dead_letter(data: bytes) -> dict[str, Any]:
    """Decode a dead-letter record, turning ``key`` and ``value`` back into bytes."""
    doc = orjson.loads(data)
    for field in DEAD_LETTER_BYTES_FIELDS:
        if doc.get(field) is not None:
            doc[field] = base64.b64decode(doc[field])
    return doc
