"""The typed building blocks of a record format and the JSON Schemas they produce.

A topic's format is a :class:`Format` whose root is a tree of these nodes: a :class:`Record` of
:class:`Field` members, :class:`Str`, :class:`Int`, :class:`Num`, :class:`Bool`, :class:`Null`,
:class:`Enum`, :class:`Array`, :class:`Map`, :class:`OneOf` and :class:`AnyOf`, each carrying its
JSON type, ranges, enums and description. :meth:`Node.schema` turns a node into JSON Schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Final

__all__ = [
    "JSON",
    "SCHEMA_BASE",
    "SCHEMA_DIALECT",
    "AnyOf",
    "Array",
    "Bool",
    "Enum",
    "Field",
    "Format",
    "Int",
    "Map",
    "Node",
    "Null",
    "Num",
    "OneOf",
    "Record",
    "Str",
]

JSON = dict[str, Any]

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

