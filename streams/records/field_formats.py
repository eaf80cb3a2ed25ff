"""The limits, rejection reasons and field formats that several topics' record formats share.

The limits (:data:`USER_MAX_LENGTH`, :data:`TIME_LIMIT_MS`, :data:`TIME_PATTERN`,
:data:`WINDOW_MIN`) and the dead-letter reasons (:class:`Reason`) are also the constants of the
job's own validator (:mod:`streams.records.field_parsing` and the parsers next to it).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from streams.records.format_nodes import Array, Int, Map, Num, OneOf, Str

__all__ = [
    "CELL_COUNTS",
    "COUNT",
    "COUNTS_PER_LEVEL",
    "STREAM",
    "TIME_LIMIT_MS",
    "TIME_PATTERN",
    "USER",
    "USER_MAX_LENGTH",
    "WINDOW_MIN",
    "Reason",
    "budget_format",
    "window_format",
]

#: A user id string has 1 to this many characters.
USER_MAX_LENGTH: Final = 256
#: Event times are epoch milliseconds in ``[0, TIME_LIMIT_MS)``.
TIME_LIMIT_MS: Final = 2**53
#: An event time string: ISO 8601 date and time with a UTC offset.
TIME_PATTERN: Final = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?"
    r"(Z|[+-][0-9]{2}:?[0-9]{2})$"
)
#: The smallest window of a requirement, in slots.
WINDOW_MIN: Final = 1


class Reason(StrEnum):
    """Why a record was rejected (the ``reason`` of a dead letter)."""

    MALFORMED_JSON = "malformed_json"
    MISSING_FIELD = "missing_field"
    BAD_TYPE = "bad_type"
    OUT_OF_DOMAIN = "out_of_domain"
    DUPLICATE_IN_SLOT = "duplicate_in_slot"
    LATE = "late"
    FUTURE = "future"
    UNREGISTERED_USER = "unregistered_user"
    INVALID_REQUIREMENT = "invalid_requirement"
    MISSING_KEY = "missing_key"
    WRONG_PARTITION = "wrong_partition"
    UNAUTHENTICATED_CONTROL = "unauthenticated_control"
    # Avro source records (streams/job/source/avro.py)
    MALFORMED_AVRO = "malformed_avro"
    UNKNOWN_SCHEMA = "unknown_schema"
    SCHEMA_UNAVAILABLE = "schema_unavailable"
    UNSUPPORTED_SCHEMA = "unsupported_schema"
    # any input topic (streams/records/json_limits.py, streams/job/isolation.py)
    TOO_DEEP = "too_deep"
    TOO_LARGE = "too_large"
    UNPROCESSABLE = "unprocessable"
    # local-DP reports (streams/ldp_collector/checks.py)
    MALFORMED = "malformed"
    WRONG_KEY = "wrong_key"
    WRONG_PROTOCOL = "wrong_protocol"
    WRONG_DOMAIN = "wrong_domain"
    WRONG_REQUIREMENT = "wrong_requirement"
    WRONG_ORACLE = "wrong_oracle"
    SCHEDULE = "schedule"
    NOT_AFTER_LAST = "not_after_last"
    OVER_BUDGET = "over_budget"
    UNASKED_ROUND = "unasked_round"


USER: Final = OneOf(
    (
        Str(min_length=1, max_length=USER_MAX_LENGTH),
        Int(minimum=0),
    ),
    description="User id; an integer id is the same user as its decimal string. The record key "
    "must be the id (UTF-8, the decimal string for an integer id).",
)

STREAM: Final = Str(min_length=1)
COUNT: Final = Int(minimum=0)
COUNTS_PER_LEVEL: Final = Map(COUNT)
CELL_COUNTS: Final = Array(items=COUNT)


def window_format(description: str) -> Int:
    """The format of a requirement's window: an integer of at least :data:`WINDOW_MIN` slots."""
    return Int(minimum=WINDOW_MIN, description=description)


def budget_format(description: str) -> Num:
    """The format of a requirement's budget: a positive finite number."""
    return Num(exclusive_minimum=0, description=description + " Finite.")

