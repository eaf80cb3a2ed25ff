"""Render ``deploy/topics.json``, the deployment's topic layout, from
``streams.kafka.topics.Topics``.

The file is generated, never edited by hand: it records what ``pwevent topics create --prefix
pwevent --partitions 4`` creates, for operators who provision topics with their own tooling and for
reviewers who want to see a layout change in a diff. ``tests/end_to_end/test_deploy.py`` fails when
the file and the code disagree.

    python deploy/render_topics.py          # rewrite deploy/topics.json
    python deploy/render_topics.py --check  # exit 1 when deploy/topics.json is out of date
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Final

from streams.kafka.topics import Topics

#: The deployment's topic prefix and ``reports`` partition count, as passed to every ``pwevent``
#: command in ``docker-compose.yml`` and ``deploy/kubernetes/``.
PREFIX: Final = "pwevent"
PARTITIONS: Final = 4

OUTPUT: Final = Path(__file__).with_name("topics.json")


def layout(prefix: str = PREFIX, partitions: int = PARTITIONS) -> dict[str, Any]:
    """The topic layout of one deployment as JSON-able data."""
    topics = Topics(prefix=prefix, partitions=partitions)
    return {
        "prefix": topics.prefix,
        "partitions": topics.partitions,
        "topics": [
            {
                "name": spec.name,
                "partitions": spec.partitions,
                "replication": spec.replication,
                "config": dict(sorted(spec.config.items())),
            }
            for spec in topics.specs()
        ],
    }


def render(prefix: str = PREFIX, partitions: int = PARTITIONS) -> str:
    """The text of ``topics.json``."""
    return json.dumps(layout(prefix, partitions), indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write ``topics.json``, or with ``--check`` compare it with the code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check, do not write")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python deploy/render_topics.py",
                  file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
