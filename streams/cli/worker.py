"""``pwevent worker``: one worker of the Kafka job."""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from streams.cli import ldp_worker
from streams.cli.job_args import add_broker, add_job, job_config, need_broker
from streams.cli.ldp_worker import LDP_OPTIONS
from streams.cli.options import add_options, option
from streams.job.operations.observe import METRICS_HOST, METRICS_PORT
from streams.job.source.options import SOURCE_OPTIONS
from streams.ldp_collector.kafka_job import KAFKA_PROTOCOLS

if TYPE_CHECKING:
    from streams.job.config import JobConfig
    from streams.job.source.history_start import HistoryStart

#: The flags of ``pwevent worker`` after those of the job.
WORKER_OPTIONS = (
    option("--data-dir", "where RocksDB tables live (default: ./pwevent-data)", type=Path,
           default=Path("pwevent-data")),
    option("--instance-id", "this worker's stable identity in the consumer group (default: host "
           "name and data directory; logged at start): a worker restarted after a crash takes "
           "its partitions back at once; a worker stopped by SIGTERM or Ctrl-C leaves the group "
           "and hands them over to the others; pwevent group remove removes the member of one "
           "that died", default=None),
    option("--startup-timeout", "seconds to wait for the broker at start (default: 30); before "
           "the job starts, the worker checks that every topic exists with its partition count "
           "and that --data-dir belongs to this --prefix and --stream, and otherwise exits with "
           "status 2 and a one-line error", type=float, default=30.0, metavar="S"),
    option("--reset-local-state", "delete the worker's table stores in --data-dir before it "
           "starts (they are rebuilt from the changelog topics), having put back on the topics "
           "the releases its coordinator store holds and the broker lost: the way out when the "
           "worker refuses to start because the broker lost writes its state holds, or because "
           "--data-dir holds table state without a binding", action="store_true"),
    option("--loglevel", "log level, e.g. debug, info or warning (default: %(default)s)",
           default="info"),
    option("--log-format", "text, or json: every log line, Faust's included, as one JSON object "
           "{time, level, logger, message, ...} (default: %(default)s)",
           choices=("text", "json"), default="text"),
    option("--metrics-port", "port of the worker's HTTP server: Prometheus metrics on /metrics, "
           "liveness on /healthz, readiness on /readyz; 0 disables it (default: %(default)s)",
           type=int, default=METRICS_PORT, metavar="PORT"),
    option("--metrics-host", "address the metrics server listens on (default: %(default)s)",
           default=METRICS_HOST, metavar="HOST"),
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``worker`` sub-command."""
    p = sub.add_parser("worker", help="run one worker of the Kafka job",
                       description="Run one worker: partition workers for its share of the "
                                   "reports partitions and, on one worker, the coordinator.")
    add_broker(p)
    add_job(p, local=KAFKA_PROTOCOLS)
    add_options(p, WORKER_OPTIONS)
    add_options(p, SOURCE_OPTIONS)
    add_options(p, LDP_OPTIONS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check the deployment (exit status 2 with a one-line error), then run until stopped
    (SIGTERM or Ctrl-C)."""
    if args.mechanism in KAFKA_PROTOCOLS:
        return ldp_worker.run(args)
    from streams.job.source.defaults import default_levels
    from streams.job.source.options import source_settings
    from streams.job.worker.data_dir import bind_data_dir
    from streams.job.worker.local_state import (
        check_local_state,
        reset_local_state,
        restore_lost_releases,
    )
    from streams.job.worker.preflight import (
        StartupError,
        changelog_specs,
        check_source_topics,
        check_stream,
        check_topics,
        create_changelogs,
    )
    from streams.kafka.settings import current as current_settings
    from streams.kafka.topics import Topics

    try:
        broker = need_broker(args)
        config = job_config(args)
        config.secret_bytes()
        source = source_settings(args, config)
        if source is not None and source.defaults:
            # the default rules' levels and public sizes: what the mechanism sees of them
            config = dataclasses.replace(config, default_levels=default_levels(source.defaults,
                                                                               config))
        topics = Topics(prefix=config.prefix, partitions=config.partitions)
        if not (math.isfinite(args.startup_timeout) and args.startup_timeout > 0):
            raise ValueError("--startup-timeout must be a positive number of seconds")
        if not 0 <= args.metrics_port <= 65535:
            raise ValueError("--metrics-port must lie in [0, 65535]")
    except ValueError as exc:
        print(f"pwevent worker: error: {exc}", file=sys.stderr)
        return 2
    try:
        # the topics first: a data directory is bound only once the deployment is known right
        check_topics(broker, topics, args.startup_timeout)
        if source is not None:
            counts = check_source_topics(broker, source.topics, args.startup_timeout)
            # the stream's event time is the smallest any source partition reached
            config = dataclasses.replace(config, source_partitions=tuple(
                counts[t] for t in source.topics))
        bound = bind_data_dir(args.data_dir, config.prefix, config.stream,
                              reset=args.reset_local_state)
        if args.reset_local_state:
            # the coordinator store's releases that the broker lost go back on the topics
            # before the store goes (only from a directory bound to this stream before)
            restored = (restore_lost_releases(args.data_dir, config, topics, broker,
                                              args.startup_timeout) if bound else 0)
            if restored:
                print(f"pwevent worker: put back {restored} records of stream {config.stream} "
                      f"that the broker lost on {topics.decisions} and {topics.releases}, from "
                      f"the coordinator store in {args.data_dir}", file=sys.stderr)
            if reset_local_state(args.data_dir):
                print(f"pwevent worker: deleted the table stores in {args.data_dir}; they are "
                      f"rebuilt from the changelog topics", file=sys.stderr)
        check_local_state(args.data_dir, config.app_id(), broker, args.startup_timeout)
        check_stream(broker, topics.decisions, config.stream, config.secret_bytes(),
                     args.startup_timeout)
        create_changelogs(broker, changelog_specs(config.app_id(), config.partitions,
                                                  current_settings().replication_factor),
                          args.startup_timeout)
        # last: a worker refused above has not moved its group's offsets
        history = (skip_source_history(broker, config, source.topics)
                   if source is not None and config.event_time == "live" else [])
    except StartupError as exc:
        print(f"pwevent worker: error: {exc}", file=sys.stderr)
        return 2
    from streams.job.operations.json_logs import json_logging_config
    from streams.job.worker.faust_job import Job, Worker

    job = Job(config, broker, args.data_dir, args.instance_id,
              metrics_host=args.metrics_host, metrics_port=args.metrics_port, source=source,
              history=history)
    logging_config = json_logging_config(args.loglevel) if args.log_format == "json" else None
    worker = Worker(job, loglevel=args.loglevel, quiet=True, logging_config=logging_config)
    tune_collector()
    worker.execute_from_commandline()
    return 0


def skip_source_history(broker: str, config: JobConfig, topics: Sequence[str]
                        ) -> list[HistoryStart]:
    """A new live stream starts its source partitions after the retained records that could
    only be late (:mod:`streams.job.source.history_start`), and says so on stderr."""
    from streams.job.source.history_start import (
        describe,
        history_cutoff_ms,
        start_after_history,
    )

    cutoff = history_cutoff_ms(int(time.time() * 1000), config.max_skew_ms, config.lateness_ms)
    counts = dict(zip(topics, config.source_partitions, strict=True))
    history = start_after_history(broker, config.app_id(), counts, cutoff)
    for line in describe(history, cutoff):
        print(f"pwevent worker: {line}", file=sys.stderr)
    return history


#: Allocations between two young-generation collections of Python's cycle collector (its
#: default is 700). A batch allocates a few objects per record, so at the default the collector
#: ran dozens of times a batch, each pass also walking the survivors of the last; with 50,000 a
#: batch of the source stage took about 30% less time in process (docs/performance.md). The
#: collector still runs, so garbage cycles are freed as before, a little later.
YOUNG_COLLECTION_EVERY = 50_000


def tune_collector() -> None:
    """Set the cycle collector's thresholds for a worker's batches, and move what was
    allocated at start-up (modules, the app) out of its way."""
    import gc

    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, 20, 100)
