"""The record formats of the job's topics, defined once.

Each topic's format is a :class:`Format`: a tree of small typed nodes (a :class:`Record` of
:class:`Field` members, :class:`Str`, :class:`Int`, :class:`Num`, ...) carrying field names, JSON
types, ranges, enums, required/optional and descriptions. Two things are derived from it:

* the JSON Schemas in ``streams/records/schemas/<topic>.json`` (:func:`json_schema`,
  :func:`render`), for producers and consumers outside the job; the committed files are generated,
  never edited by hand::

      python -m streams.records.formats --write   # regenerate streams/records/schemas/*.json
      python -m streams.records.formats --check   # exit 1 when a committed schema differs

* the constants of the job's own fast validator in :mod:`streams.records.parsing`: the report and
  requirement field names, the user and time limits, the ISO time pattern, the window and budget
  bounds and the dead-letter reasons (:class:`Reason`).

The validator enforces everything the schemas say (an ISO time string must match
:data:`TIME_PATTERN`, not merely be readable by :meth:`datetime.fromisoformat`); the rules a JSON
Schema cannot express (how a stream's domain maps values to cells, that ``1.0`` is not an integer
for the job, calendar validity of ISO times and no instant before 1970) are stated in the
descriptions. ``tests/streams/test_formats.py`` checks both directions on generated documents.

Every schema carries its version twice: in ``$id`` (``.../schemas/v<n>/<topic>.json``) and as
``x-schema-version``. Output records (releases, decisions) allow additional properties, so a
consumer validating against version 1 keeps accepting records that gained a field; a change that
removes or retypes a field needs a new version. Releases are at version 2
(:data:`RELEASE_VERSION`, also each release's ``schema_version``): version 1 had no
``schema_version``, ``cells``, ``noise`` or ``approximates``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Final

__all__ = [
    "CELLS_INLINE_MAX",
    "CELL_LABELS",
    "DEAD_LETTER",
    "DEAD_LETTERS",
    "DEAD_LETTER_BYTES_FIELDS",
    "DEAD_LETTER_FIELDS",
    "DECISIONS",
    "DYNAMIC_FIELDS",
    "FIXED_FIELDS",
    "FORMATS",
    "NOISE_DISTRIBUTIONS",
    "RELEASES",
    "RELEASE_VERSION",
    "REPORT",
    "REPORTS",
    "REPORT_FIELDS",
    "REQUIREMENT",
    "REQUIREMENTS",
    "SCHEMA_BASE",
    "SCHEMA_DIR",
    "SLOT_PARTIALS",
    "TIME_LIMIT_MS",
    "TIME_PATTERN",
    "USER_MAX_LENGTH",
    "WINDOW_MIN",
    "AnyOf",
    "Array",
    "Bool",
    "Enum",
    "Field",
    "Format",
    "Int",
    "Map",
    "Node",
    "Num",
    "OneOf",
    "Reason",
    "Record",
    "Str",
    "json_schema",
    "main",
    "render",
    "stale",
    "write",
]

JSON = dict[str, Any]

SCHEMA_DIR: Final = Path(__file__).with_name("schemas")
SCHEMA_DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_BASE: Final = "https://pwevent.invalid/schemas"

# -- the building blocks ------------------------------------------------------------------------


class Node:
    """A JSON value's format; :meth:`schema` is its JSON Schema."""

    description: str | None

    def schema(self) -> JSON:
        """The JSON Schema of this node (a fresh dict)."""
        body = self._body()
        return {"description": self.description, **body} if self.description else body

    def _body(self) -> JSON:
        raise NotImplementedError


def _typed(name: str, nullable: bool) -> JSON:
    return {"type": [name, "null"] if nullable else name}


def _set(out: JSON, **constraints: Any) -> JSON:
    """Add the constraints that are not ``None``, under their JSON Schema keywords."""
    for key, value in constraints.items():
        if value is not None:
            out[key] = value
    return out


@dataclass(frozen=True)
class Str(Node):
    """A string; ``nullable`` also admits ``null``."""

    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    content_encoding: str | None = None
    nullable: bool = False
    description: str | None = None

    def _body(self) -> JSON:
        return _set(_typed("string", self.nullable), minLength=self.min_length,
                    maxLength=self.max_length, pattern=self.pattern,
                    contentEncoding=self.content_encoding)


@dataclass(frozen=True)
class Int(Node):
    """An integer with optional inclusive bounds; ``nullable`` also admits ``null``."""

    minimum: int | None = None
    maximum: int | None = None
    nullable: bool = False
    description: str | None = None

    def _body(self) -> JSON:
        return _set(_typed("integer", self.nullable), minimum=self.minimum, maximum=self.maximum)


@dataclass(frozen=True)
class Num(Node):
    """A number with an optional inclusive or exclusive lower bound."""

    minimum: float | None = None
    exclusive_minimum: float | None = None
    description: str | None = None

    def _body(self) -> JSON:
        return _set({"type": "number"}, minimum=self.minimum,
                    exclusiveMinimum=self.exclusive_minimum)


@dataclass(frozen=True)
class Bool(Node):
    """``true`` or ``false``."""

    description: str | None = None

    def _body(self) -> JSON:
        return {"type": "boolean"}


@dataclass(frozen=True)
class Null(Node):
    """``null``."""

    description: str | None = None

    def _body(self) -> JSON:
        return {"type": "null"}


@dataclass(frozen=True)
class Enum(Node):
    """One of a fixed set of strings."""

    values: tuple[str, ...]
    description: str | None = None

    def _body(self) -> JSON:
        return {"enum": list(self.values)}


@dataclass(frozen=True)
class Array(Node):
    """An array: of ``items``, or a tuple of ``prefix`` positions."""

    items: Node | None = None
    prefix: tuple[Node, ...] = ()
    min_items: int | None = None
    max_items: int | None = None
    description: str | None = None

    def _body(self) -> JSON:
        out: JSON = {"type": "array"}
        if self.prefix:
            out["prefixItems"] = [node.schema() for node in self.prefix]
        if self.items is not None:
            out["items"] = self.items.schema()
        return _set(out, minItems=self.min_items, maxItems=self.max_items)


@dataclass(frozen=True)
class Map(Node):
    """An object used as a map: any keys, every value of format ``values``."""

    values: Node
    description: str | None = None

    def _body(self) -> JSON:
        return {"type": "object", "additionalProperties": self.values.schema()}


@dataclass(frozen=True)
class OneOf(Node):
    """Exactly one of the options."""

    options: tuple[Node, ...]
    description: str | None = None
    keyword: ClassVar[str] = "oneOf"

    def _body(self) -> JSON:
        return {self.keyword: [node.schema() for node in self.options]}


@dataclass(frozen=True)
class AnyOf(OneOf):
    """At least one of the options."""

    keyword: ClassVar[str] = "anyOf"


@dataclass(frozen=True)
class Field:
    """A named member of a :class:`Record`."""

    name: str
    node: Node
    required: bool = True


@dataclass(frozen=True)
class Record(Node):
    """A JSON object with named fields.

    ``additional``: whether other members are allowed (and ignored). ``groups``: when given,
    exactly one group of (optional) fields must be present, in full, and no field of another
    group.
    """

    fields: tuple[Field, ...]
    additional: bool
    groups: tuple[tuple[str, ...], ...] = ()
    description: str | None = None

    def __post_init__(self) -> None:
        names = self.names
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate field in {names}")
        unknown = {name for group in self.groups for name in group} - set(names)
        if unknown:
            raise ValueError(f"groups name unknown fields {sorted(unknown)}")

    @property
    def names(self) -> tuple[str, ...]:
        """Every field name, in order."""
        return tuple(f.name for f in self.fields)

    @property
    def required(self) -> tuple[str, ...]:
        """The names of the required fields, in order."""
        return tuple(f.name for f in self.fields if f.required)

    def field(self, name: str) -> Node:
        """The format of one field."""
        for f in self.fields:
            if f.name == name:
                return f.node
        raise KeyError(name)

    def _body(self) -> JSON:
        out: JSON = {"type": "object"}
        if self.required:
            out["required"] = list(self.required)
        out["additionalProperties"] = self.additional
        out["properties"] = {f.name: f.node.schema() for f in self.fields}
        if self.groups:
            out["oneOf"] = [
                {
                    "required": list(group),
                    "not": {"anyOf": [{"required": [name]} for other in self.groups
                                      if other is not group for name in other]},
                }
                for group in self.groups
            ]
        return out


@dataclass(frozen=True)
class Format:
    """A topic's record format, versioned."""

    topic: str
    title: str
    root: Record | OneOf
    version: int = 1

    @property
    def id(self) -> str:
        """The schema's ``$id``."""
        return f"{SCHEMA_BASE}/v{self.version}/{self.topic}.json"

    def schema(self) -> JSON:
        """The complete JSON Schema document."""
        return {
            "$schema": SCHEMA_DIALECT,
            "$id": self.id,
            "x-schema-version": self.version,
            "title": self.title,
            **self.root.schema(),
        }


# -- shared values ------------------------------------------------------------------------------

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


_INTEGERS: Final = (
    " An integer is written without a fraction or exponent: JSON Schema counts 1.0 as an integer, "
    "the job rejects it (bad_type)."
)

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


def _window(description: str) -> Int:
    return Int(minimum=WINDOW_MIN, description=description)


def _budget(description: str) -> Num:
    return Num(exclusive_minimum=0, description=description + " Finite.")


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
        Field("w", _window("Fixed: the window, in slots."), required=False),
        Field("E", _budget("Fixed: the budget over any w consecutive slots."),
              required=False),
        Field("wB", _window("Dynamic: the backward window, in slots."), required=False),
        Field("EB", _budget("Dynamic: the backward budget."), required=False),
        Field("wF", _window("Dynamic: the forward window, in slots."), required=False),
        Field("EF", _budget("Dynamic: the forward budget."), required=False),
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

# -- releases -----------------------------------------------------------------------------------

#: The release format's version: 1 had no ``schema_version``, ``cells``, ``noise`` or
#: ``approximates``; additive changes keep the version.
RELEASE_VERSION: Final = 2
#: A domain of more cells than this names its cell labels by reference in releases (they are in
#: the stream's start record on the decisions topic, under ``config.cells``).
CELLS_INLINE_MAX: Final = 1000
#: The ``noise.distribution`` of each ``noise`` setting of the job.
NOISE_DISTRIBUTIONS: Final = {"discrete": "discrete_laplace", "laplace": "laplace"}

CELL_LABELS: Final = Array(items=Str(), min_items=1,
                           description="Every cell's label, in histogram order.")

RELEASES: Final = Format(
    "releases",
    "release",
    Record(
        (
            Field("schema_version", Int(minimum=2, description=f"The release format's version "
                                        f"({RELEASE_VERSION} here; absent in version 1). A "
                                        "later version may add fields: read the ones you know, "
                                        "ignore the others.")),
            Field("stream", STREAM),
            Field("slot", Int()),
            Field("start", Int(description="Slot start, epoch ms (inclusive).")),
            Field("end", Int(description="Slot end, epoch ms (exclusive); also the record's "
                                         "Kafka timestamp.")),
            Field("mechanism", Str(min_length=1)),
            Field("published", Bool(description="true: a fresh noisy histogram; false: the last "
                                                "one, approximating this slot.")),
            Field("nullified", Bool(description="Approximated because an earlier publication "
                                                "borrowed this slot's budget.")),
            Field("histogram", Array(items=Num(), min_items=1)),
            Field("threshold", Num(minimum=0, description="The OBS threshold of the publication "
                                                         "budgets (0 when none applied).")),
            Field("users", Int(minimum=0, description="Registered users charged at this slot.")),
            Field(
                "cells",
                OneOf(
                    (
                        CELL_LABELS,
                        Record(
                            (
                                Field("ref", Str(min_length=1, description="The key of the "
                                                 "stream's start record (\"<stream>/start\") "
                                                 "on the decisions topic, whose config.cells "
                                                 "holds the labels.")),
                                Field("size", Int(minimum=1, description="How many cells.")),
                            ),
                            additional=True,
                            description=f"A domain of more than {CELLS_INLINE_MAX} cells: the "
                            "labels by reference.",
                        ),
                    ),
                    description="The configured domain's cell labels, in histogram order: a "
                    "cell index (\"0\", \"1\", ...), a bin \"[low, high)\", a grid cell "
                    "\"lon [a, b) lat [c, d)\" or a label; by reference for a large domain.",
                ),
            ),
            Field(
                "noise",
                OneOf(
                    (
                        Record(
                            (
                                Field("distribution", Str(min_length=1, description="\""
                                      "discrete_laplace\" (integer k with probability "
                                      "proportional to a^|k|, 0 < a < 1, variance "
                                      "2a/(1-a)^2) or \"laplace\" (density proportional to "
                                      "exp(-|x|/b), variance 2b^2); zero-mean, drawn "
                                      "independently per cell.")),
                                Field("scale", Array(items=Num(exclusive_minimum=0), min_items=1,
                                                     description="Per cell, in histogram "
                                                     "order: the standard deviation of the noise "
                                                     "added (for a count summed over several "
                                                     "noisy terms, the square root of the sum "
                                                     "of their variances).")),
                            ),
                            additional=True,
                            description="Published: the noise added to the sampled counts in "
                            "this slot.",
                        ),
                        Null(description="Not published: no noise was drawn in this slot, the "
                             "histogram repeats the publication of slot approximates."),
                    ),
                    description="The noise added in this slot, from the configuration and the "
                    "publication threshold alone. It does not cover the Sampling Mechanism's "
                    "thinning of users whose budget is below the threshold.",
                ),
            ),
            Field("approximates", Int(nullable=True, description="Not published: the slot whose "
                                      "publication the histogram repeats (null: none yet, the "
                                      "histogram is all zeros). Published: null.")),
        ),
        additional=True,
        description="One private histogram per released slot (key = \"<stream>/<slot>\"; "
        "Kafka timestamp = end). Every field is the noisy histogram or a function of public "
        "inputs (configuration, requirements, slot, the publish/approximate decision): no exact "
        "count of reports accepted or rejected. A release emitted again (after a restart) is "
        "byte-identical: keep the first per key. Consumers must ignore fields they do not "
        "know.",
    ),
    version=RELEASE_VERSION,
)

# -- slot partials ------------------------------------------------------------------------------

SLOT_PARTIALS: Final = Format(
    "slot-partials",
    "slot partial",
    OneOf(
        (
            Record(
                (
                    Field("partition", COUNT),
                    Field("closed_through", Int(description="Every slot up to this one is "
                                                            "closed in this partition.")),
                    Field(
                        "slots",
                        Map(
                            Record(
                                (
                                    Field("counts", Map(CELL_COUNTS, description="Per "
                                                        "requirement level \"<w>:<E>\", "
                                                        "reports per cell.")),
                                    Field("accepted", COUNT),
                                ),
                                additional=False,
                            )
                        ),
                    ),
                    Field("users", COUNTS_PER_LEVEL),
                    Field("rejected", COUNT),
                ),
                additional=False,
                description="One partition closing slots (key = \"<stream>/<partition>\"): the "
                "counts of every slot it closed that had reports, its registered users per "
                "requirement level (public), and how many records it rejected since its "
                "previous partial.",
            ),
            Record(
                (
                    Field("partition", COUNT),
                    Field("closed_through", Int()),
                    Field("first", Int(nullable=True)),
                    Field("rejected", COUNT),
                ),
                additional=False,
                description="Dynamic mechanisms (dpbd, dpba): the partition closed every slot up "
                "to closed_through; first is its earliest slot with a report (null: none yet); "
                "rejected counts its rejected records since its previous message.",
            ),
            Record(
                (
                    Field("partition", COUNT),
                    Field("plan", Int(description="The slot planned.")),
                    Field("counts", Map(CELL_COUNTS, description="Per budget level "
                                        "\"<c1>:<c2>\" (grid codes of eps1 and eps2), reports "
                                        "per cell; levels without reports left out.")),
                    Field("users", COUNTS_PER_LEVEL),
                    Field("accepted", COUNT),
                    Field("nullified", Bool()),
                    Field("projected", COUNTS_PER_LEVEL),
                ),
                additional=False,
                description="Dynamic mechanisms (dpbd, dpba): the partition's plan of one slot: "
                "its report counts and registered users per budget level, whether its users "
                "nullify the slot (dpba), and per budget level how many of them had a backward "
                "budget projected.",
            ),
        ),
        description="A partition's message to the coordinator (key = \"<stream>/<partition>\"). "
        "Fixed mechanisms: one partial per slot close. Dynamic mechanisms: a closure, or the plan "
        "of one slot. Internal topic: the job writes and reads it with the same version.",
    ),
)

# -- decisions ----------------------------------------------------------------------------------

EPS_PER_LEVEL: Final = Map(Num(minimum=0))

DECISIONS: Final = Format(
    "decisions",
    "decision",
    OneOf(
        (
            Record(
                (
                    Field("stream", STREAM),
                    Field("slot", Int()),
                    Field("published", Bool()),
                    Field("nullified", Bool()),
                    Field("eps1", EPS_PER_LEVEL),
                    Field("eps2", EPS_PER_LEVEL),
                    Field("users", COUNTS_PER_LEVEL),
                    Field(
                        "projected",
                        Map(COUNT, description="dpbd, dpba: per budget level, the users whose "
                            "lowered backward budget was projected (raised to what their window "
                            "already spent)."),
                        required=False,
                    ),
                ),
                additional=True,
                description="What one slot charged (key = \"<stream>/<slot>\"): the decision "
                "and, per level, the dissimilarity budget eps1 and the publication budget eps2 "
                "every user of the level was charged, with the level's user count. A level is a "
                "requirement \"<w>:<E>\" under a fixed mechanism, a budget level \"<c1>:<c2>\" "
                "(grid codes of eps1 and eps2) under dpbd and dpba, which also count the users "
                "whose backward budget was projected.",
            ),
            Record(
                (
                    Field("stream", STREAM),
                    Field("start", Int()),
                    Field("nonce", Str(pattern="^[0-9a-f]+$")),
                    Field("secret_check", Str(pattern="^[0-9a-f]{16}$", description="HMAC-SHA256 "
                          "under the deployment secret of a fixed message and the stream, cut to "
                          "16 hex digits: a worker started with another secret refuses to run."),
                          required=False),
                    Field(
                        "config",
                        Record(
                            (
                                Field("mechanism", Str()),
                                Field("d", Int(minimum=1)),
                                Field("partitions", Int(minimum=1)),
                                Field("min_epsilon", Num(exclusive_minimum=0)),
                                Field("max_epsilon", Num(exclusive_minimum=0)),
                                Field("max_window", Int(minimum=1)),
                                Field("neighbouring", Enum(("add-remove", "replace"))),
                                Field("noise", Enum(("discrete", "laplace")), required=False),
                                Field("slot_ms", Int(minimum=1), required=False),
                                Field("origin_ms", Int(), required=False),
                                Field("cells", CELL_LABELS, required=False),
                            ),
                            additional=True,
                        ),
                    ),
                ),
                additional=True,
                description="Key = \"<stream>/start\": the stream's first slot (where every "
                "dynamic ledger starts), the nonce drawn when the stream started (it keys the "
                "stream's randomness with the secret) and the job's public parameters, for "
                f"auditors; config.cells holds the cell labels of a domain of more than "
                f"{CELLS_INLINE_MAX} cells (its releases refer to them).",
            ),
            Record(
                (
                    Field("stream", STREAM),
                    Field("declared", Int(description="The slot the declarations took effect "
                                          "at.")),
                    Field("partition", COUNT),
                    Field("chunk", COUNT),
                    Field("chunks", Int(minimum=1)),
                    Field(
                        "users",
                        Map(OneOf((
                            Array(prefix=(_window("wB."), _budget("EB."), _window("wF."),
                                          _budget("EF.")), min_items=4, max_items=4),
                            Null(description="The user's ledger was suspended (it left)."),
                        ))),
                    ),
                ),
                additional=True,
                description="Dynamic mechanisms, key = \"<stream>/declared/<slot>/<partition>/"
                "<chunk>\": whose declarations (wB, EB, wF, EF) took effect at the slot, and "
                "whose ledgers were suspended, on one partition; requirements are public. Written "
                "by the partitions for auditors; the workers ignore them.",
            ),
        ),
        description="The coordinator's records: one decision per released slot and the stream's "
        "start record; under dpbd and dpba also the partitions' declaration records. Consumers "
        "must ignore fields they do not know.",
    ),
)

# -- dead letters -------------------------------------------------------------------------------

#: Leading bytes of a rejected key or value a dead letter keeps: a record near the broker's size
#: limit must not make a dead letter larger than the producer may send.
DEAD_LETTER_PAYLOAD_BYTES: Final = 8192

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
            additional=False,
            description=f"Present when the original key or value was longer than "
            f"{DEAD_LETTER_PAYLOAD_BYTES} bytes: only that many leading bytes are kept; the "
            "original sizes (null when absent) and a hash identify the record.",
        ), required=False),
    ),
    additional=False,
    description="A rejected input record with its original bytes (capped) and the reason.",
)
DEAD_LETTERS: Final = Format("dead-letters", "dead letter", DEAD_LETTER)

#: The fields of a dead letter, in order.
DEAD_LETTER_FIELDS: Final = DEAD_LETTER.names
#: The dead-letter fields holding original bytes (base64 or null).
DEAD_LETTER_BYTES_FIELDS: Final = tuple(
    f.name for f in DEAD_LETTER.fields
    if isinstance(f.node, Str) and f.node.content_encoding == "base64"
)
#: The fields every dead letter has (``truncated`` only when a payload was capped).
DEAD_LETTER_REQUIRED: Final = tuple(f.name for f in DEAD_LETTER.fields if f.required)

#: Every topic's format, in the order of :data:`streams.kafka.topics.TOPIC_KEYS`.
FORMATS: Final[dict[str, Format]] = {
    f.topic: f for f in (REPORTS, REQUIREMENTS, RELEASES, SLOT_PARTIALS, DECISIONS, DEAD_LETTERS)
}

# -- schema files -------------------------------------------------------------------------------


def json_schema(topic: str) -> JSON:
    """The JSON Schema of a logical topic (``"reports"``, ``"dead-letters"``, ...)."""
    return FORMATS[topic].schema()


def render(topic: str) -> str:
    """The text of ``streams/records/schemas/<topic>.json``."""
    return json.dumps(json_schema(topic), indent=2, ensure_ascii=False) + "\n"


def stale(directory: Path = SCHEMA_DIR) -> list[str]:
    """The topics whose schema file in ``directory`` is missing or differs from :func:`render`."""
    out = []
    for topic in FORMATS:
        path = directory / f"{topic}.json"
        if not path.is_file() or path.read_text(encoding="utf-8") != render(topic):
            out.append(topic)
    return out


def write(directory: Path = SCHEMA_DIR) -> list[str]:
    """Write every stale schema file into ``directory``; return the topics written."""
    written = stale(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for topic in written:
        (directory / f"{topic}.json").write_text(render(topic), encoding="utf-8")
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m streams.records.formats [--write | --check] [--dir DIR]``."""
    parser = argparse.ArgumentParser(
        prog="python -m streams.records.formats",
        description="Generate the topics' JSON Schemas from their format definitions.",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the stale schema files")
    mode.add_argument("--check", action="store_true",
                      help="exit 1 when a schema file differs from its definition")
    parser.add_argument("--dir", type=Path, default=SCHEMA_DIR, help="the schema directory")
    parser.add_argument("topic", nargs="?", choices=list(FORMATS),
                        help="print one topic's schema (default without --write/--check)")
    args = parser.parse_args(argv)
    if args.write:
        for topic in write(args.dir):
            print(f"wrote {args.dir / f'{topic}.json'}")
        return 0
    if args.check:
        out_of_date = stale(args.dir)
        for topic in out_of_date:
            print(f"{args.dir / f'{topic}.json'} is out of date: "
                  "run python -m streams.records.formats --write", file=sys.stderr)
        return 1 if out_of_date else 0
    for topic in [args.topic] if args.topic else list(FORMATS):
        sys.stdout.write(render(topic))
    return 0


if __name__ == "__main__":
    sys.exit(main())
