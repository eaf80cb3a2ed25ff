"""Watermark records: the signed control records that move a partition's watermark.

Only the job moves time (docs/design.md, decision 10): a keyless record of ``reports`` whose
value is ``{"watermark": ms, "mac": ...}`` closes the partition's slots up to ``ms`` when its
HMAC-SHA256, under the deployment secret, over the stream, the partition and ``ms`` verifies.
The job writes them to quiet partitions and at the ``--max-hold-ms`` bound, ``pwevent replay``
to close its last slot; the partition worker (:mod:`streams.job.partitions.accumulator`) reads
them with :func:`watermark_of`.
"""

from __future__ import annotations

import hashlib
import hmac
import time

import orjson

from streams.job.batch_handling import RawRecord
from streams.records.field_formats import Reason
from streams.records.field_parsing import RecordError

WATERMARK_PREFIX = b'{"watermark":'


def _watermark_mac(secret: bytes, stream: str, partition: int, ms: int) -> str:
    message = b"\0".join((b"pwevent-watermark", stream.encode(), str(int(partition)).encode(),
                          str(int(ms)).encode()))
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def watermark_record(ms: int, secret: bytes, stream: str, partition: int) -> bytes:
    """The value of a control record that moves ``partition``'s watermark to ``ms``, signed
    with the deployment secret (HMAC-SHA256 over the stream, the partition and ``ms``)."""
    mac = _watermark_mac(secret, stream, partition, ms)
    return WATERMARK_PREFIX + str(int(ms)).encode() + b',"mac":"' + mac.encode() + b'"}'


def watermark_of(rec: RawRecord, secret: bytes, stream: str) -> int | None:
    """The watermark an authentic control record carries; ``None`` for an ordinary record.

    A keyless record shaped like a control record whose signature does not verify (or that
    carries none) raises :class:`RecordError` (``unauthenticated_control``): whoever may write
    reports must not be able to close slots.
    """
    key, value = rec[0], rec[1]
    if key is not None or value is None or not value.startswith(WATERMARK_PREFIX):
        return None
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict):
        return None
    mark, mac = doc.get("watermark"), doc.get("mac")
    if type(mark) is not int or type(mac) is not str or len(doc) != 2 or not hmac.compare_digest(
            mac, _watermark_mac(secret, stream, rec[2], mark)):
        raise RecordError(Reason.UNAUTHENTICATED_CONTROL,
                          "a watermark record needs the signature of the deployment secret")
    return mark


def wall_clock_ms() -> int:
    """The worker's clock, epoch ms."""
    return int(time.time() * 1000)


