"""The record formats of the job's topics, defined once, and the JSON Schema files made from them.

Each topic's format is a :class:`~streams.records.format_nodes.Format`: a tree of small typed
nodes (:mod:`streams.records.format_nodes`: a ``Record`` of ``Field`` members, ``Str``, ``Int``,
``Num``, ...) carrying field names, JSON types, ranges, enums, required/optional and descriptions.
The formats are in :mod:`streams.records.input_formats` (reports, requirements, dead letters) and
:mod:`streams.records.output_formats` (releases, slot partials, decisions), with what they share in
:mod:`streams.records.field_formats`; :data:`FORMATS` names them all. Two things are derived from
them:

* the JSON Schemas in ``streams/records/schemas/<topic>.json`` (:func:`json_schema`,
  :func:`render`), for producers and consumers outside the job; the committed files are generated,
  never edited by hand::

      python -m streams.records.formats --write   # regenerate streams/records/schemas/*.json
      python -m streams.records.formats --check   # exit 1 when a committed schema differs

* the constants of the job's own fast validator (:mod:`streams.records.field_parsing`,
  :mod:`~streams.records.domains`, :mod:`~streams.records.report_parsing`,
  :mod:`~streams.records.requirement_parsing`, :mod:`~streams.records.dead_letters`): the report
  and requirement field names, the user and time limits, the ISO time pattern, the window and
  budget bounds and the dead-letter reasons (:class:`~streams.records.field_formats.Reason`).

The validator enforces everything the schemas say (an ISO time string must match
:data:`~streams.records.field_formats.TIME_PATTERN`, not merely be readable by
:meth:`datetime.fromisoformat`); the rules a JSON Schema cannot express (how a stream's domain maps
values to cells, that ``1.0`` is not an integer for the job, calendar validity of ISO times and no
instant before 1970) are stated in the descriptions. ``tests/streams/test_formats.py`` checks both
directions on generated documents.

Every schema carries its version twice: in ``$id`` (``.../schemas/v<n>/<topic>.json``) and as
``x-schema-version``. The records consumers outside the job read (releases, decisions, dead
letters) allow additional properties, so a consumer validating against a version keeps accepting
records that gained a field; a change that removes or retypes a field, or opens a closed format,
needs a new version. Releases are at version 2
(:data:`~streams.records.output_formats.RELEASE_VERSION`, also each release's ``schema_version``):
version 1 had no ``schema_version``, ``cells``, ``noise`` or ``approximates``. Dead letters are
at version 2 (:data:`~streams.records.input_formats.DEAD_LETTER_VERSION`): version 1 allowed no
other members. The internal ``slot-partials`` stay closed: the job writes and reads them with the
same version, and a member they gain is optional (a record written before it lacks it).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

import orjson

from streams.records.format_nodes import JSON, Format
from streams.records.input_formats import DEAD_LETTERS, REPORTS, REQUIREMENTS
from streams.records.output_formats import DECISIONS, RELEASES, SLOT_PARTIALS

__all__ = [
    "FORMATS",
    "SCHEMA_DIR",
    "json_schema",
    "load_schema",
    "main",
    "render",
    "stale",
    "write",
]

SCHEMA_DIR: Final = Path(__file__).with_name("schemas")

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


def load_schema(topic_key: str) -> dict[str, Any]:
    """Load the JSON Schema of a logical topic (``"reports"``, ``"dead-letters"``, ...).

    The committed file, generated by :func:`json_schema` (a test keeps the two equal).
    """
    return orjson.loads((SCHEMA_DIR / f"{topic_key}.json").read_bytes())


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
