"""Avro writer schemas by id from a schema registry (``--schema-registry URL``).

A record in the Confluent wire format names its writer schema by a 4-byte id; the registry serves
it at ``GET {URL}/schemas/ids/{id}`` (the Confluent Schema Registry REST API, which other
registries offer too, e.g. Apicurio Registry under ``/apis/ccompat/v7``). :class:`SchemaRegistry`
fetches each id once and keeps its parsed schema for the life of the worker (an id never changes
meaning). Schema references (``references``: named types of other subjects) are fetched from
``GET {URL}/subjects/{subject}/versions/{version}`` and parsed first.

Before anything is decoded with it, a schema is analysed (:func:`schema_refusal`): one whose
records could nest without bound (a named type that contains itself), that nests records, arrays,
maps and unions more than :data:`MAX_DEPTH` deep, or whose datum could decode to far more values
than its body has bytes (an array of nulls) raises :class:`UnsupportedSchema`. fastavro decodes
recursively in compiled code: a record of a recursive schema nested a few thousand deep would
overflow the C stack and kill the worker, and again after every restart. An accepted schema
decodes a body of ``n`` bytes at most :data:`MAX_DEPTH` deep into at most
``VALUES_PER_BYTE * n + SPARE_VALUES`` values. A refusal is kept for the life of the worker and
reported through ``refuse``, once per id.

An id the registry does not know (HTTP 404), a schema that is not Avro or does not parse raises
:class:`UnknownSchema`; a registry that cannot be reached (a refused connection, a timeout, any
other HTTP error) raises :class:`RegistryUnavailable`. After a failure the registry is not asked
about that id again for ``retry_s`` seconds (the records of those seconds fail at once rather
than each waiting for a time-out), and while it is down, about no id. The first failure to reach
it is reported through ``report`` (once per outage); reaching it again is logged.

Avro logical types are read as their underlying types (the ``logicalType`` annotations are
dropped before parsing): a ``timestamp-millis`` or ``timestamp-micros`` field is the epoch number
the time field reads (detected by magnitude, or declared with ``:ms`` / ``:us``), a ``uuid`` its
string, a ``decimal`` its bytes.

Fetching blocks; the source stage calls :meth:`SchemaRegistry.fetch` off its event loop.
"""

from __future__ import annotations

import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from streams.records.field_formats import Reason

log = logging.getLogger("pwevent.source")

__all__ = ["MAX_DEPTH", "SPARE_VALUES", "VALUES_PER_BYTE", "RegistryUnavailable", "SchemaError",
           "SchemaRegistry", "UnknownSchema", "UnsupportedSchema", "schema_refusal",
           "without_logical_types"]

_ACCEPT = "application/vnd.schemaregistry.v1+json, application/json"

#: The deepest nesting of records, arrays, maps and unions an accepted writer schema may have.
MAX_DEPTH: Final = 64
#: An accepted writer schema decodes a body of ``n`` bytes into at most
#: ``VALUES_PER_BYTE * n + SPARE_VALUES`` values (records, list items, map entries, scalars).
VALUES_PER_BYTE: Final = 8
SPARE_VALUES: Final = 4096


class SchemaError(Exception):
    """A writer schema that cannot be had; ``reason`` is the dead letter's reason."""

    reason: Reason = Reason.UNKNOWN_SCHEMA

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class UnknownSchema(SchemaError):
    """The registry does not know the id, or its schema is no Avro schema that parses."""

    reason = Reason.UNKNOWN_SCHEMA


class RegistryUnavailable(SchemaError):
    """The registry could not be reached or failed to answer."""

    reason = Reason.SCHEMA_UNAVAILABLE


class UnsupportedSchema(SchemaError):
    """A writer schema the source refuses to decode with (:func:`schema_refusal`)."""

    reason = Reason.UNSUPPORTED_SCHEMA


def without_logical_types(schema: Any) -> Any:
    """``schema`` (parsed JSON) without its ``logicalType`` annotations (module doc)."""
    if isinstance(schema, dict):
        return {k: without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [without_logical_types(s) for s in schema]
    return schema


# -- which writer schemas are accepted ---------------------------------------------------------

#: The fewest bytes a value of each primitive type takes in a body.
_PRIMITIVE_BYTES: Final = {"null": 0, "boolean": 1, "int": 1, "long": 1, "float": 4,
                           "double": 8, "bytes": 1, "string": 1}
_RECORD: Final = ("record", "error")
_NAMED: Final = ("record", "error", "enum", "fixed")


def schema_refusal(schema: Any, references: Sequence[Any] = ()) -> str | None:
    """Why the writer schema ``schema`` (its parsed JSON; ``references``: the parsed JSON of
    the schemas it references) must not be decoded with, or ``None`` when it may be.

    Refused are schemas

    - in which a named type can contain itself, directly or through unions, arrays, maps,
      other records or referenced schemas (``"next": ["null", "Node"]`` in record ``Node``):
      one record could then nest as deep as its bytes allow;
    - that nest records, arrays, maps and unions more than :data:`MAX_DEPTH` (64) deep (a
      record of primitive fields is 1 deep, a union of it in a record's field 3);
    - whose datum could decode to more than ``VALUES_PER_BYTE * n + SPARE_VALUES`` (8n + 4096)
      values from ``n`` bytes: an array whose items can take no bytes (nulls, empty records)
      or decode to more than :data:`VALUES_PER_BYTE` values per byte, a map whose entries can,
      or a datum of more than :data:`SPARE_VALUES` values beyond that (records of nulls,
      doubled level by level).

    Every named type of ``schema`` and ``references`` is checked, used or not. Names follow
    Avro's rules: a name with a dot is a full name; otherwise the named type's ``namespace``
    applies, or else the enclosing one (a record's namespace encloses its fields); a type
    name that is not a primitive type is resolved the same way. Whatever is no Avro shape is
    left to the parser, which refuses it."""
    definitions = _definitions([*references, schema])
    costs = _Costs(definitions)
    try:
        root = costs.of(schema, "", 0)
        for name in definitions:
            costs.named(name, 0)
    except _Refused as exc:
        return str(exc)
    if root.peak > SPARE_VALUES:
        return (f"a datum can decode to {root.peak} values more than {VALUES_PER_BYTE} per byte "
                f"of its body (at most {SPARE_VALUES} are accepted)")
    return None


class _Refused(Exception):
    pass


@dataclass(frozen=True)
class _Cost:
    """What decoding a type can cost: ``depth``, the records, arrays, maps and unions nested
    (this type's included); ``excess``, the most values a datum of it decodes to beyond
    :data:`VALUES_PER_BYTE` per byte it takes; ``peak``, the same for any part of a datum read
    so far (a body cut short), at least 0."""

    depth: int
    excess: int
    peak: int


def _leaf(size: int) -> _Cost:
    excess = 1 - VALUES_PER_BYTE * size
    return _Cost(0, excess, max(0, excess))


_UNKNOWN: Final = _leaf(0)  # a shape that is no Avro: the parser refuses it


def _full_name(node: dict[str, Any], namespace: str) -> tuple[str, str] | None:
    """The full name of the named type ``node`` in the enclosing ``namespace``, and the
    namespace it encloses; ``None`` without a name."""
    name = node.get("name")
    if not isinstance(name, str):
        return None
    if "." in name:
        return name, name.rsplit(".", 1)[0]
    space = node.get("namespace", namespace)
    space = str(space) if space else ""
    return (f"{space}.{name}" if space else name), space


def _definitions(docs: Sequence[Any]) -> dict[str, list[tuple[dict[str, Any], str]]]:
    """Every named type defined in ``docs``: full name -> (definition, enclosed namespace),
    one for each place it is defined."""
    found: dict[str, list[tuple[dict[str, Any], str]]] = {}
    todo: list[tuple[Any, str]] = [(doc, "") for doc in docs]
    while todo:
        node, namespace = todo.pop()
        if isinstance(node, list):
            todo += [(branch, namespace) for branch in node]
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind in _NAMED:
                named = _full_name(node, namespace)
                if named is None:
                    continue
                found.setdefault(named[0], []).append((node, named[1]))
                if kind in _RECORD and isinstance(node.get("fields"), list):
                    todo += [(f.get("type"), named[1]) for f in node["fields"]
                             if isinstance(f, dict)]
            elif kind == "array":
                todo.append((node.get("items"), namespace))
            elif kind == "map":
                todo.append((node.get("values"), namespace))
    return found


class _Costs:
    """The :class:`_Cost` of type expressions, each named type's computed once."""

    def __init__(self, definitions: dict[str, list[tuple[dict[str, Any], str]]]) -> None:
        self.definitions = definitions
        self.done: dict[str, _Cost] = {}
        self.path: list[str] = []  # the named types being costed, outermost first

    def of(self, node: Any, namespace: str, level: int) -> _Cost:
        """The cost of the type expression ``node`` inside ``level`` nested containers."""
        if isinstance(node, str):
            if node in _PRIMITIVE_BYTES:
                return _leaf(_PRIMITIVE_BYTES[node])
            return self.named(node if "." in node or not namespace else f"{namespace}.{node}",
                              level)
        if isinstance(node, list):
            self._enter(level)
            branches = [self.of(branch, namespace, level + 1) for branch in node] or [_UNKNOWN]
            return _Cost(1 + max(b.depth for b in branches),
                         max(b.excess for b in branches) - VALUES_PER_BYTE,
                         max(0, max(b.peak for b in branches) - VALUES_PER_BYTE))
        if not isinstance(node, dict):
            return _UNKNOWN
        kind = node.get("type")
        if isinstance(kind, str) and kind in _PRIMITIVE_BYTES:
            return _leaf(_PRIMITIVE_BYTES[kind])
        if kind in _NAMED:
            named = _full_name(node, namespace)
            if named is not None:
                return self.named(named[0], level)
            return self.define(node, namespace, level)
        if kind == "array":
            self._enter(level)
            items = self.of(node.get("items"), namespace, level + 1)
            if items.excess > 0:
                raise _Refused(f"an array's items ({_shown(node.get('items'))}) can decode to "
                               f"more than {VALUES_PER_BYTE} values per byte they take")
            return _Cost(1 + items.depth, 1 - VALUES_PER_BYTE,
                         max(1, 1 - VALUES_PER_BYTE + items.peak))
        if kind == "map":
            self._enter(level)
            values = self.of(node.get("values"), namespace, level + 1)
            entry = _Cost(values.depth, 1 - VALUES_PER_BYTE + values.excess,
                          max(0, 1 - VALUES_PER_BYTE + values.peak))  # a string key, a value
            if entry.excess > 0:
                raise _Refused(f"a map's entries ({_shown(node.get('values'))} values) can "
                               f"decode to more than {VALUES_PER_BYTE} values per byte they take")
            return _Cost(1 + entry.depth, 1 - VALUES_PER_BYTE,
                         max(1, 1 - VALUES_PER_BYTE + entry.peak))
        return _UNKNOWN

    def named(self, name: str, level: int) -> _Cost:
        """The cost of the named type ``name`` (of every definition it has)."""
        cost = self.done.get(name)
        if cost is not None:
            if level + cost.depth > MAX_DEPTH:
                raise self._too_deep()
            return cost
        if name in self.path:
            cycle = [*self.path[self.path.index(name):], name]
            raise _Refused(f"recursive: the named type {name} can contain itself "
                           f"({' -> '.join(cycle)})")
        definitions = self.definitions.get(name)
        if not definitions:
            return _UNKNOWN
        self.path.append(name)
        costs = [self.define(node, namespace, level) for node, namespace in definitions]
        self.path.pop()
        cost = _Cost(max(c.depth for c in costs), max(c.excess for c in costs),
                     max(c.peak for c in costs))
        self.done[name] = cost
        return cost

    def define(self, node: dict[str, Any], namespace: str, level: int) -> _Cost:
        """The cost of the named type defined by ``node`` (its fields in ``namespace``)."""
        kind = node.get("type")
        if kind == "enum":
            return _leaf(1)
        if kind == "fixed":
            size = node.get("size")
            return _leaf(size if isinstance(size, int) and size > 0 else 0)
        self._enter(level)
        fields = node.get("fields")
        costs = [self.of(f.get("type"), namespace, level + 1)
                 for f in (fields if isinstance(fields, list) else ()) if isinstance(f, dict)]
        before, peak = 0, 0  # the excess of the fields read so far; the highest part-way
        for c in costs:
            peak = max(peak, before + c.peak)
            before += c.excess
        return _Cost(1 + max((c.depth for c in costs), default=0), 1 + before, 1 + peak)

    def _enter(self, level: int) -> None:
        if level >= MAX_DEPTH:
            raise self._too_deep()

    @staticmethod
    def _too_deep() -> _Refused:
        return _Refused(f"records, arrays, maps and unions nest more than {MAX_DEPTH} deep")


def _shown(node: Any) -> str:
    """A type expression in a few words: its name, or its kind."""
    if isinstance(node, str):
        return node[:60]
    if isinstance(node, list):
        return "a union"
    if isinstance(node, dict):
        name, kind = node.get("name"), node.get("type")
        return (f"{kind} {name}" if isinstance(name, str) else str(kind))[:60]
    return type(node).__name__


# -- the registry ------------------------------------------------------------------------------

class SchemaRegistry:
    """The schemas of one registry at ``url``, fetched by id and cached (module doc).
    ``report(message)`` is called when the registry cannot be reached, once per outage;
    ``refuse(message)`` when a schema is refused (:class:`UnsupportedSchema`), once per id."""

    def __init__(self, url: str, *, timeout: float = 5.0, retry_s: float = 5.0,
                 report: Callable[[str], None] | None = None,
                 refuse: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"--schema-registry must be an http:// or https:// URL, not {url!r}")
        self.url = url.rstrip("/")
        self.timeout, self.retry_s = timeout, retry_s
        self.report = report or (lambda message: log.error(message))
        self.refuse = refuse or (lambda message: log.error(message))
        self.clock = clock
        self.schemas: dict[int, Any] = {}  # id -> parsed schema
        self.refused: dict[int, UnsupportedSchema] = {}  # id -> why, for good
        self.failed: dict[int, tuple[float, SchemaError]] = {}  # id -> (retry after, error)
        self.down_until = 0.0  # while the registry is down: no request before this time
        self.down: RegistryUnavailable | None = None
        self._lock = threading.Lock()

    def cached(self, schema_id: int) -> Any | None:
        """The parsed schema of ``schema_id`` if it was fetched already."""
        return self.schemas.get(schema_id)

    def fetch(self, schema_id: int) -> Any:
        """The parsed writer schema of ``schema_id``, from the cache or the registry; raises
        :class:`UnsupportedSchema`, :class:`UnknownSchema` or :class:`RegistryUnavailable`
        (module doc). Blocks."""
        with self._lock:
            found = self.schemas.get(schema_id)
            if found is not None:
                return found
            refused = self.refused.get(schema_id)
            if refused is not None:
                raise refused
            now = self.clock()
            if self.down is not None and now < self.down_until:
                raise self.down
            failed = self.failed.get(schema_id)
            if failed is not None and now < failed[0]:
                raise failed[1]
            try:
                parsed = self._load(schema_id)
            except RegistryUnavailable as exc:
                if self.down is None:
                    self.report(f"schema registry {self.url} cannot be reached ({exc.detail}); "
                                "Avro records whose schema is not cached yet go to "
                                "dead-letters as schema_unavailable until it answers again")
                self.down, self.down_until = exc, self.clock() + self.retry_s
                raise
            except UnsupportedSchema as exc:
                self._reachable()
                self.failed.pop(schema_id, None)
                self.refused[schema_id] = exc
                self.refuse(f"Avro {exc.detail}; the records written with it go to "
                            "dead-letters as unsupported_schema")
                raise
            except UnknownSchema as exc:
                self._reachable()
                self.failed[schema_id] = (self.clock() + self.retry_s, exc)
                raise
            self._reachable()
            self.failed.pop(schema_id, None)
            self.schemas[schema_id] = parsed
            return parsed

    def _reachable(self) -> None:
        if self.down is not None:
            log.warning("schema registry %s answers again", self.url)
            self.down = None

    def _get(self, path: str) -> Any:
        """``GET {url}{path}`` as parsed JSON; ``None`` for HTTP 404."""
        request = urllib.request.Request(self.url + path, headers={"Accept": _ACCEPT})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise RegistryUnavailable(f"HTTP {exc.code} from {self.url}{path}") from None
        except (OSError, ValueError) as exc:  # refused, unreachable, timed out, bad response
            raise RegistryUnavailable(f"{type(exc).__name__}: {exc}"[:200]) from None
        try:
            return orjson.loads(body)
        except orjson.JSONDecodeError:
            raise RegistryUnavailable(f"{self.url}{path} answered no JSON") from None

    def _load(self, schema_id: int) -> Any:
        """Fetch, analyse (:func:`schema_refusal`) and parse the schema of ``schema_id``."""
        from fastavro import parse_schema

        doc = self._get(f"/schemas/ids/{schema_id}")
        if doc is None:
            raise UnknownSchema(f"schema id {schema_id} is not in the registry")
        kind = doc.get("schemaType", "AVRO") if isinstance(doc, dict) else None
        if kind != "AVRO":
            raise UnknownSchema(f"schema id {schema_id} is a {kind} schema, not Avro")
        try:
            references: list[Any] = []
            self._references(doc.get("references"), references, set(), schema_id)
            schema = orjson.loads(doc["schema"])
            why = schema_refusal(schema, references)
            if why is not None:
                raise UnsupportedSchema(f"schema id {schema_id} is refused: {why}")
            named: dict[str, Any] = {}
            for referenced in references:
                parse_schema(without_logical_types(referenced), named_schemas=named)
            return parse_schema(without_logical_types(schema), named_schemas=named)
        except SchemaError:
            raise
        except RecursionError:
            raise UnsupportedSchema(f"schema id {schema_id} is refused: its JSON nests too "
                                    "deep to parse") from None
        except Exception as exc:  # noqa: BLE001 - any answer that is no Avro schema
            raise UnknownSchema(f"schema id {schema_id} is no Avro schema that parses: "
                                f"{type(exc).__name__}: {exc}"[:300]) from None

    def _references(self, refs: Any, out: list[Any], seen: set[tuple[str, int]],
                    schema_id: int, depth: int = 0) -> None:
        """Append to ``out`` the parsed JSON of the schemas ``refs`` references, each after
        those it references itself, each once."""
        for ref in refs or ():
            key = (str(ref["subject"]), int(ref["version"]))
            if key in seen:
                continue
            seen.add(key)
            if depth >= MAX_DEPTH:
                raise UnsupportedSchema(f"schema id {schema_id} is refused: its references "
                                        f"nest more than {MAX_DEPTH} deep")
            subject = urllib.parse.quote(key[0], safe="")
            doc = self._get(f"/subjects/{subject}/versions/{key[1]}")
            if doc is None:
                raise UnknownSchema(f"schema id {schema_id} references {key[0]} version "
                                    f"{key[1]}, which is not in the registry")
            self._references(doc.get("references"), out, seen, schema_id, depth + 1)
            out.append(orjson.loads(doc["schema"]))
