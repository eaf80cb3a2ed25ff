"""The job's validator of the fields every record shares, and how it reports a rejection.

Every rejection carries one reason from :class:`~streams.records.field_formats.Reason` (the fixed
set the dead-letter topic accepts) and a human-readable detail: :class:`Rejection` for a record of
a batch, :class:`RecordError` for a single record. Nothing is clipped or coerced silently: a value
outside the domain is rejected as ``out_of_domain`` (:mod:`streams.records.domains`); a float where
an integer is required is ``bad_type``.

Conventions:

* ``user`` is a non-empty string (at most 256 characters) or a non-negative integer; an integer id
  is normalised to its decimal string, so ``7`` and ``"7"`` are the same user. When the record key
  is given it must equal the user id (UTF-8), because the key decides the partition and a user's
  reports must meet in one partition worker; a mismatch is ``bad_type``. In the job every report
  and requirement must carry its key (``missing_key`` otherwise) and sit on the partition Kafka's
  default partitioner assigns to it (``wrong_partition``, :mod:`streams.job.partitions.admission`).
* ``time`` is the event time: integer epoch milliseconds in ``[0, 2**53)``, or an ISO 8601 string
  *with* a UTC offset (``Z`` or ``+hh:mm``); a string without one is ambiguous and ``bad_type``. A
  string must have the form of :data:`streams.records.field_formats.TIME_PATTERN` (``YYYY-MM-DD``,
  ``T`` or a space, ``hh:mm[:ss[.f]]``, then ``Z``, ``+hh:mm`` or ``+hhmm``) as well as name a
  valid instant: other forms that :meth:`datetime.fromisoformat` happens to read (basic format,
  week dates, any separator character) are ``bad_type``, so what the job accepts does not depend
  on the Python version.
* ``value`` is interpreted by the stream's :class:`~streams.records.domains.Domain`.

The formats themselves (field names, limits, the time pattern, the reasons) are defined once in
:mod:`streams.records.formats` and the modules it names, which also generate the JSON Schemas in
``streams/records/schemas/``; this module and the parsers next to it
(:mod:`~streams.records.report_parsing`, :mod:`~streams.records.requirement_parsing`,
:mod:`~streams.records.dead_letters`) are the job's fast validator of those formats.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Final, NamedTuple

from streams.records.field_formats import TIME_LIMIT_MS, TIME_PATTERN, USER_MAX_LENGTH, Reason

__all__ = [
    "REASONS",
    "RecordError",
    "Rejection",
    "json_type",
    "parse_time",
    "parse_user",
]

_MAX_TIME_MS: Final = TIME_LIMIT_MS
_MAX_USER_LEN: Final = USER_MAX_LENGTH
_ISO_TIME: Final = re.compile(TIME_PATTERN)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MS: Final = timedelta(milliseconds=1)


#: All reason strings, in a fixed order.
REASONS: Final = tuple(r.value for r in Reason)


class Rejection(NamedTuple):
    """A rejected record: its index in the input batch, the reason and a detail."""

    index: int
    reason: Reason
    detail: str


class RecordError(ValueError):
    """A single record is invalid; ``reason`` is one of :class:`Reason`."""

    def __init__(self, reason: Reason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


# -- fields -------------------------------------------------------------------------------------


def parse_user(user: object) -> str:
    """Validate a user id and return it as a string; raise :class:`RecordError`."""
    if type(user) is str:
        if 0 < len(user) <= _MAX_USER_LEN:
            return user
        raise RecordError(Reason.BAD_TYPE, f"user must have 1 to {_MAX_USER_LEN} characters")
    if type(user) is int:
        if user >= 0:
            return str(user)
        raise RecordError(Reason.BAD_TYPE, "an integer user id must be non-negative")
    raise RecordError(Reason.BAD_TYPE, f"user must be a string or integer, not {json_type(user)}")


def parse_time(value: object) -> int:
    """Validate an event time and return epoch milliseconds; raise :class:`RecordError`."""
    if type(value) is int:
        if 0 <= value < _MAX_TIME_MS:
            return value
        raise RecordError(Reason.BAD_TYPE, f"time {value} is outside [0, 2**53) ms")
    if type(value) is str:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise RecordError(Reason.BAD_TYPE, f"time {value[:64]!r} is not ISO 8601") from None
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise RecordError(Reason.BAD_TYPE, f"time {value[:64]!r} has no UTC offset")
        if _ISO_TIME.fullmatch(value) is None:
            raise RecordError(
                Reason.BAD_TYPE,
                f"time {value[:64]!r} is not of the form YYYY-MM-DDThh:mm[:ss[.f]] with Z or "
                "+hh:mm",
            )
        ms = (moment - _EPOCH) // _MS
        if 0 <= ms < _MAX_TIME_MS:
            return int(ms)
        raise RecordError(Reason.BAD_TYPE, f"time {value[:64]!r} is before 1970")
    raise RecordError(
        Reason.BAD_TYPE, f"time must be epoch ms or an ISO 8601 string, not {json_type(value)}"
    )


def json_type(value: object) -> str:
    """JSON type name of a decoded value, for details."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
