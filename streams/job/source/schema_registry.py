"""Avro writer schemas by id from a schema registry (``--schema-registry URL``).

A record in the Confluent wire format names its writer schema by a 4-byte id; the registry serves
it at ``GET {URL}/schemas/ids/{id}`` (the Confluent Schema Registry REST API, which other
registries offer too, e.g. Apicurio Registry under ``/apis/ccompat/v7``). :class:`SchemaRegistry`
fetches each id once and keeps its parsed schema for the life of the worker (an id never changes
meaning). Schema references (``references``: named types of other subjects) are fetched from
``GET {URL}/subjects/{subject}/versions/{version}`` and parsed first.

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
from collections.abc import Callable
from typing import Any

import orjson

from streams.records.field_formats import Reason

log = logging.getLogger("pwevent.source")

__all__ = ["RegistryUnavailable", "SchemaError", "SchemaRegistry", "UnknownSchema",
           "without_logical_types"]

_ACCEPT = "application/vnd.schemaregistry.v1+json, application/json"


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


def without_logical_types(schema: Any) -> Any:
    """``schema`` (parsed JSON) without its ``logicalType`` annotations (module doc)."""
    if isinstance(schema, dict):
        return {k: without_logical_types(v) for k, v in schema.items() if k != "logicalType"}
    if isinstance(schema, list):
        return [without_logical_types(s) for s in schema]
    return schema


class SchemaRegistry:
    """The schemas of one registry at ``url``, fetched by id and cached (module doc).
    ``report(message)`` is called when the registry cannot be reached, once per outage."""

    def __init__(self, url: str, *, timeout: float = 5.0, retry_s: float = 5.0,
                 report: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"--schema-registry must be an http:// or https:// URL, not {url!r}")
        self.url = url.rstrip("/")
        self.timeout, self.retry_s = timeout, retry_s
        self.report = report or (lambda message: log.error(message))
        self.clock = clock
        self.schemas: dict[int, Any] = {}  # id -> parsed schema
        self.failed: dict[int, tuple[float, SchemaError]] = {}  # id -> (retry after, error)
        self.down_until = 0.0  # while the registry is down: no request before this time
        self.down: RegistryUnavailable | None = None
        self._lock = threading.Lock()

    def cached(self, schema_id: int) -> Any | None:
        """The parsed schema of ``schema_id`` if it was fetched already."""
        return self.schemas.get(schema_id)

    def fetch(self, schema_id: int) -> Any:
        """The parsed writer schema of ``schema_id``, from the cache or the registry; raises
        :class:`UnknownSchema` or :class:`RegistryUnavailable` (module doc). Blocks."""
        with self._lock:
            found = self.schemas.get(schema_id)
            if found is not None:
                return found
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
        from fastavro import parse_schema
        from fastavro.schema import SchemaParseException, UnknownType

        doc = self._get(f"/schemas/ids/{schema_id}")
        if doc is None:
            raise UnknownSchema(f"schema id {schema_id} is not in the registry")
        kind = doc.get("schemaType", "AVRO") if isinstance(doc, dict) else None
        if kind != "AVRO":
            raise UnknownSchema(f"schema id {schema_id} is a {kind} schema, not Avro")
        named: dict[str, Any] = {}
        try:
            for ref in doc.get("references") or []:
                self._parse_reference(ref, named, schema_id)
            return parse_schema(without_logical_types(orjson.loads(doc["schema"])),
                                named_schemas=named)
        except (KeyError, TypeError, orjson.JSONDecodeError, SchemaParseException,
                UnknownType) as exc:
            raise UnknownSchema(f"schema id {schema_id} is no Avro schema that parses: "
                                f"{type(exc).__name__}: {exc}"[:300]) from None

    def _parse_reference(self, ref: dict[str, Any], named: dict[str, Any],
                         schema_id: int) -> None:
        """Parse a referenced schema (and its own references) into ``named``."""
        from fastavro import parse_schema

        subject = urllib.parse.quote(str(ref["subject"]), safe="")
        doc = self._get(f"/subjects/{subject}/versions/{int(ref['version'])}")
        if doc is None:
            raise UnknownSchema(f"schema id {schema_id} references {ref['subject']} version "
                                f"{ref['version']}, which is not in the registry")
        for inner in doc.get("references") or []:
            self._parse_reference(inner, named, schema_id)
        parse_schema(without_logical_types(orjson.loads(doc["schema"])), named_schemas=named)
