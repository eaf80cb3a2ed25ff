"""The record formats of the topics the job reads, reports and requirements, and of its dead
letters (the input records it rejected, with the reason)."""

from __future__ import annotations

from typing import Final

from streams.records.field_formats import (
    COUNT,
    TIME_LIMIT_MS,
    TIME_PATTERN,
    USER,
    Reason,
    budget_format,
    window_format,
)
from streams.records.format_nodes import (
    AnyOf,
    Array,
    Enum,
    Field,
    Format,
    Int,
    Num,
    OneOf,
    Record,
    Str,
)

__all__ = [
    "DEAD_LETTER",
    "DEAD_LETTERS",
    "DEAD_LETTER_BYTES_FIELDS",
    "DEAD_LETTER_FIELDS",
    "DEAD_LETTER_PAYLOAD_BYTES",
    "DEAD_LETTER_REQUIRED",
    "DEAD_LETTER_VERSION",
    "DYNAMIC_FIELDS",
    "FIXED_FIELDS",
    "REPORT",
    "REPORTS",
    "REPORT_FIELDS",
    "REQUIREMENT",
    "REQUIREMENTS",
]

_INTEGERS: Final = (
    " An integer is written without a fraction or exponent: JSON Schema counts 1.0 as an integer, "
    "the job rejects it (bad_type)."
)

# -- reports ------------------------------------------------------------------------------------

REPORT: Final = Record(
    (
        Field("user", USER),
        Field(
            "time",
            OneOf(
                (
                    Int(minimum=0, maximum=TIME_LIMIT_MS - 1),
                    Str(pattern=TIME_PATTERN),
                ),
                description="Event time: epoch milliseconds, or ISO 8601 with a UTC offset "
                "(Z, +hh:mm or +hhmm). The job also requires a valid calendar date and time "
                "and an instant not before 1970-01-01T00:00:00Z.",
            ),
        ),
        Field(
            "value",
            AnyOf(
                (
                    Num(),
                    Str(min_length=1),
                    Array(prefix=(Num(), Num()), min_items=2, max_items=2,
                          description="A point [lon, lat]."),
                ),
                description="A cell index, or a raw value the stream's domain maps to a "
                "cell. Which values a stream accepts is its domain's rule, not expressible "
                "here: cells take an integer in [0, size); bins a number in [low, high]; a "
                "grid a point [lon, lat] inside its box; labels one of its (non-empty) "
                "labels. Anything else is rejected as bad_type (wrong kind) or out_of_domain.",
            ),
        ),
        Field(
            "source",
            Array(prefix=(Int(minimum=0, maximum=127), Int(minimum=0, maximum=65535),
                          Int(minimum=0, maximum=2**40 - 1)), min_items=3, max_items=3,
                  description="Written by the job's source stage: the report's source "
                  "position [topic index, partition, offset]. Among reports of one user and "
                  "slot that carry one, the smallest (time, source) counts."),
            required=False,
        ),
    ),
    additional=True,
    description="One user report on the reports topic (key = user). Extra fields are "
    "ignored. The topic also carries the job's signed watermark control records "
    "({\"watermark\", \"mac\"}, keyless), which are not reports." + _INTEGERS,
)
REPORTS: Final = Format("reports", "report", REPORT)

#: The fields every report carries, in order.
REPORT_FIELDS: Final = REPORT.required

# -- requirements -------------------------------------------------------------------------------

#: A fixed (w-event) requirement: window and budget.
FIXED_FIELDS: Final = ("w", "E")
#: A dynamic requirement: backward and forward windows and budgets.
DYNAMIC_FIELDS: Final = ("wB", "EB", "wF", "EF")

REQUIREMENT: Final = Record(
    (
        Field("user", USER),
        Field("w", window_format("Fixed: the window, in slots."), required=False),
        Field("E", budget_format("Fixed: the budget over any w consecutive slots."),
              required=False),
        Field("wB", window_format("Dynamic: the backward window, in slots."), required=False),
        Field("EB", budget_format("Dynamic: the backward budget."), required=False),
        Field("wF", window_format("Dynamic: the forward window, in slots."), required=False),
        Field("EF", budget_format("Dynamic: the forward budget."), required=False),
    ),
    additional=True,
    groups=(FIXED_FIELDS, DYNAMIC_FIELDS),
    description="A user's privacy requirement (compacted topic, key = user; a null value "
    "unregisters the user). Either fixed (w, E) or dynamic (wB, EB, wF, EF), never both. "
    "Extra fields are ignored. The job admits a requirement only within its configured "
    "bounds (max_window, min_epsilon, max_epsilon of the stream's start record)."
    + _INTEGERS,
)
REQUIREMENTS: Final = Format("requirements", "requirement", REQUIREMENT)

# -- dead letters -------------------------------------------------------------------------------

#: Leading bytes of a rejected key or value a dead letter keeps: a record near the broker's size
#: limit must not make a dead letter larger than the producer may send.
DEAD_LETTER_PAYLOAD_BYTES: Final = 8192
#: The dead-letter format's version: version 1 allowed no other members (at the top or in
#: ``truncated``); from version 2 on, operators' consumers read the fields they know and ignore
#: the others, and additive changes keep the version.
DEAD_LETTER_VERSION: Final = 2

DEAD_LETTER: Final = Record(
    (
        Field("topic", Str(min_length=1, description="The topic the record was read from.")),
        Field("partition", COUNT),
        Field("offset", COUNT),
        Field("key", Str(content_encoding="base64", nullable=True,
                         description="Original key bytes, base64; null when absent.")),
        Field("value", Str(content_encoding="base64", nullable=True,
                           description="Original value bytes, base64; null for a "
                           "tombstone.")),
        Field("reason", Enum(tuple(r.value for r in Reason))),
        Field("detail", Str(description="What was wrong, for people.")),
        Field("truncated", Record(
            (
                Field("key_bytes", Int(minimum=0, nullable=True)),
                Field("value_bytes", Int(minimum=0, nullable=True)),
                Field("sha256", Str(pattern="^[0-9a-f]{64}$",
                                    description="SHA-256 of the original value (key when the "
                                    "value is null).")),
            ),
            additional=True,
            description=f"Present when the original key or value was longer than "
            f"{DEAD_LETTER_PAYLOAD_BYTES} bytes: only that many leading bytes are kept; the "
            "original sizes (null when absent) and a hash identify the record.",
        ), required=False),
    ),
    additional=True,
    description="A rejected input record with its original bytes (capped) and the reason. "
    "Read by operators: a later version may add fields; read the ones you know, ignore the "
    "others.",
)
DEAD_LETTERS: Final = Format("dead-letters", "dead letter", DEAD_LETTER,
                             version=DEAD_LETTER_VERSION)

#: The fields of a dead letter, in order.
DEAD_LETTER_FIELDS: Final = DEAD_LETTER.names
#: The dead-letter fields holding original bytes (base64 or null).
DEAD_LETTER_BYTES_FIELDS: Final = tuple(
    f.name for f in DEAD_LETTER.fields
    if isinstance(f.node, Str) and f.node.content_encoding == "base64"
)
#: The fields every dead letter has (``truncated`` only when a payload was capped).
DEAD_LETTER_REQUIRED: Final = tuple(f.name for f in DEAD_LETTER.fields if f.required)
