"""``pwevent topics create``: create the job's topics (idempotent)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from aiokafka.errors import KafkaError

from streams.cli.job_args import add_broker, need_broker
from streams.kafka.errors import broker_failure


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``topics`` sub-command."""
    p = sub.add_parser("topics", help="create the job's topics",
                       description="Create the job's topics (idempotent) or describe them.")
    p.add_argument("action", choices=("create", "describe"),
                   help="create the topics that do not exist yet, or describe them")
    add_broker(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Create or describe the topics."""
    from streams.kafka.settings import current
    from streams.kafka.topics import TopicError, Topics, create_topics, describe_topics

    logging.getLogger("aiokafka").addHandler(logging.NullHandler())  # failures: one line
    broker = args.broker
    try:
        broker = need_broker(args)
        topics = Topics(prefix=args.prefix, partitions=args.partitions,
                        replication=current().replication_factor)
        if args.action == "create":
            created = asyncio.run(create_topics(broker, topics.specs()))
            for spec in topics.specs():
                state = "created" if created.get(spec.name) else "exists"
                print(f"{spec.name}: {spec.partitions} partitions ({state})")
        else:
            described = asyncio.run(describe_topics(broker, [s.name for s in topics.specs()]))
            for name, info in described.items():
                print(f"{name}: {info}")
    except (KafkaError, TimeoutError) as exc:  # TimeoutError first: it is an OSError
        print(f"pwevent topics: error: {broker_failure(broker, exc)}", file=sys.stderr)
        return 2
    except (ValueError, TopicError, OSError) as exc:
        print(f"pwevent topics: error: {exc}", file=sys.stderr)
        return 2
    return 0
