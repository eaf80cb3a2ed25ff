"""The worker's flags of the source side (``--source-topic``, ``--user-field``, ``--time-field``,
``--value-field``, ``--default-requirement``; the records' format, ``--source-format`` and
``--schema-registry``) and :func:`source_settings`, which checks them."""

from __future__ import annotations

import argparse
from typing import Any

from streams.cli.options import option
from streams.job.config import JobConfig
from streams.job.source.defaults import DefaultRequirements
from streams.job.source.mapping import SourceMapping
from streams.job.source.rekey import SourceSettings

__all__ = ["SOURCE_OPTIONS", "source_settings"]


class Repeatable(argparse.Action):
    """A flag given once per value: the command line's values replace a default from the
    environment or the configuration file (a TOML list, or one string), they do not add to it."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        given = getattr(namespace, f"_{self.dest}_given", False)
        current = list(getattr(namespace, self.dest) or []) if given else []
        current.append(values)
        setattr(namespace, self.dest, current)
        setattr(namespace, f"_{self.dest}_given", True)


def _listed(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value]


#: The source flags, in the order ``--help`` lists them.
SOURCE_OPTIONS = (
    option("--source-topic", "an existing topic of JSON records to read (repeatable); read in "
           "place, never written to. Its records are mapped to reports by --user-field, "
           "--time-field and --value-field and re-keyed by user onto the job's reports topic. "
           "A new stream reads a source topic from its earliest retained record",
           action=Repeatable, default=None, metavar="TOPIC"),
    option("--user-field", "dotted path of the user id in a source record (e.g. device.id)",
           default=None, metavar="PATH"),
    option("--time-field", "dotted path of the event time in a source record: epoch s, ms or "
           "us, or ISO 8601 with an offset; a suffix :s, :ms, :us or :iso declares the unit, "
           "otherwise it is detected per value (default: the Kafka record timestamp)",
           default=None, metavar="PATH[:UNIT]"),
    option("--value-field", "dotted path of the value in a source record, mapped to a cell by "
           "the stream's domain; twice for a grid domain (longitude, then latitude)",
           action=Repeatable, default=None, metavar="PATH"),
    option("--default-requirement", "the requirement a user who declared none is registered "
           "with at its first source record, written to the requirements topic: w=W,E=E, or "
           "wB=..,EB=..,wF=..,EF=.. under dpbd and dpba; PATH=VALUE:SPEC applies SPEC only to "
           "records whose field PATH holds VALUE (repeatable; the first match wins)",
           action=Repeatable, default=None, metavar="SPEC"),
    option("--source-format", "how the source topics' record values are encoded: json, or avro "
           "(the Confluent wire format: magic byte 0, 4-byte schema id, Avro binary; decoded "
           "with the writer schema from --schema-registry; needs the avro extra) (default: "
           "%(default)s)", choices=("json", "avro"), default="json"),
    option("--schema-registry", "base URL of the schema registry serving Avro writer schemas "
           "by id at URL/schemas/ids/ID (the Confluent REST API; Apicurio Registry: "
           "http://HOST:PORT/apis/ccompat/v7); with --source-format avro",
           default=None, metavar="URL"),
)


def source_settings(args: argparse.Namespace, config: JobConfig) -> SourceSettings | None:
    """The source side from parsed flags (``None`` without ``--source-topic``); raises
    ``ValueError`` with a clear message."""
    topics = _listed(args.source_topic)
    values = _listed(args.value_field)
    defaults = _listed(args.default_requirement)
    if not topics:
        given = [f for f, v in (("--user-field", args.user_field),
                                ("--time-field", args.time_field),
                                ("--value-field", values),
                                ("--default-requirement", defaults),
                                ("--source-format avro", args.source_format == "avro"),
                                ("--schema-registry", args.schema_registry)) if v]
        if given:
            raise ValueError(f"{', '.join(given)} need --source-topic")
        return None
    reserved = {getattr(config_topics(config), k) for k in ("reports", "requirements")}
    if len(set(topics)) < len(topics) or reserved & set(topics):
        raise ValueError("--source-topic names each topic once, and never the job's own")
    if not args.user_field or not values:
        raise ValueError("--source-topic needs --user-field and --value-field")
    mapping = SourceMapping.from_flags(args.user_field, args.time_field, values, config.domain)
    DefaultRequirements(defaults, config)  # checked now: a bad spec stops the worker at start
    registry = _schema_registry(args.source_format, args.schema_registry)
    return SourceSettings(tuple(topics), mapping, tuple(defaults), args.source_format, registry)


def _schema_registry(source_format: str, url: str | None) -> str | None:
    """The checked ``--schema-registry`` URL (``None`` for JSON sources)."""
    if source_format != "avro":
        if url:
            raise ValueError("--schema-registry needs --source-format avro")
        return None
    from streams.job.source.avro import check_avro_installed
    from streams.job.source.schema_registry import SchemaRegistry

    check_avro_installed()
    if not url:
        raise ValueError("--source-format avro needs --schema-registry URL")
    return SchemaRegistry(url).url  # checked: an http(s) URL


def config_topics(config: JobConfig) -> Any:
    """The job's own topics."""
    from streams.kafka.topics import Topics

    return Topics(prefix=config.prefix, partitions=config.partitions)
