"""``pwevent worker --mechanism lbu|lsp|lpu|plbu|lbd|lba|lpd|lpa|mtsp``: the local-DP collector on
Kafka
(:mod:`streams.ldp_collector.kafka_job`)."""

from __future__ import annotations

import argparse
import logging
import os
import sys

from streams.cli.job_args import need_broker
from streams.cli.options import option
from streams.ldp_collector.kafka_job import KAFKA_PROTOCOLS, LdpJobSettings

#: The flags of the stream a local-DP collector reads: what its clients are configured with.
LDP_OPTIONS = (
    option("--ldp-start", "local DP: the stream's first slot, the start its clients are "
           "configured with (required with a local-DP --mechanism)", type=int,
           default=None, metavar="SLOT"),
    option("--ldp-epsilon", "local DP, all but plbu: the stream's budget E over any "
           "--ldp-window slots (default: %(default)s)", type=float, default=1.0, metavar="E"),
    option("--ldp-window", "local DP, all but plbu: the stream's window w in slots "
           "(default: %(default)s)", type=int, default=10, metavar="W"),
    option("--lpu-key", "local DP, lpu, lpd, lpa, mtsp: the stream's public key of the users' "
           "groups and positions (default: the --stream name)", default="", metavar="KEY"),
    option("--lpu-rotate", "local DP, lpu: blocks of w slots per epoch of the groups, 0 for "
           "groups kept for good (default: %(default)s)", type=int, default=0, metavar="N"),
)


def settings(args: argparse.Namespace, broker: str) -> LdpJobSettings:
    """The collector's settings from parsed flags; ValueError with a clear message."""
    if args.mechanism not in KAFKA_PROTOCOLS:
        raise ValueError(f"--mechanism {args.mechanism} is not a local-DP protocol")
    if args.ldp_start is None:
        raise ValueError(f"--mechanism {args.mechanism} needs --ldp-start SLOT, the stream's "
                         "first slot its clients are configured with (docs/app-developers.md)")
    secret = getattr(args, "secret", None) or os.environ.get("PWEVENT_SECRET", "")
    if not secret:
        raise ValueError("the collector signs its watermark records: give --secret or "
                         "$PWEVENT_SECRET, the same on every worker and for pwevent replay")
    if getattr(args, "domain", None):
        raise ValueError("the local-DP collector takes --cells: its reports name cell indices")
    plbu = args.mechanism == "plbu"
    built = LdpJobSettings(
        broker=broker, prefix=args.prefix, stream=args.stream, protocol=args.mechanism,
        d=args.cells or 2, origin_ms=args.origin_ms, slot_ms=args.slot_ms, start=args.ldp_start,
        E=None if plbu else args.ldp_epsilon, w=None if plbu else args.ldp_window,
        secret=secret.encode(), lpu_key=args.lpu_key or args.stream, lpu_rotate=args.lpu_rotate,
        event_time=getattr(args, "event_time", "history"),
        lateness_ms=getattr(args, "lateness_ms", 0), partitions=args.partitions)
    if args.slot_ms < 1 or built.lateness_ms < 0:
        raise ValueError("--slot-ms must be >= 1 and --lateness-ms >= 0")
    built.collector()  # every parameter checked before the broker is asked anything
    return built


def run(args: argparse.Namespace) -> int:
    """Run the collector until SIGTERM or Ctrl-C; 2 with a one-line error for a wrong flag."""
    from streams.ldp_collector.kafka_job import StreamConflict, run_job

    try:
        job = settings(args, need_broker(args))
    except ValueError as exc:
        print(f"pwevent worker: error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.loglevel.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    from aiokafka.errors import KafkaError

    from streams.kafka.topics import TopicError

    try:
        return run_job(job, args.metrics_host, args.metrics_port)
    except StreamConflict as exc:
        print(f"pwevent worker: error: {exc}", file=sys.stderr)
        return 2
    except (KafkaError, TopicError, OSError) as exc:  # TimeoutError is an OSError
        print(f"pwevent worker: error: the broker {job.broker}: {exc!r}", file=sys.stderr)
        return 2
