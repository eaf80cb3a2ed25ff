"""``pwevent worker``: one worker of the Kafka job."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from streams.job_args import add_broker, add_job, job_config, need_broker


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``worker`` sub-command."""
    p = sub.add_parser("worker", help="run one worker of the Kafka job",
                       description="Run one worker: partition workers for its share of the "
                                   "reports partitions and, on one worker, the coordinator.")
    add_broker(p)
    add_job(p)
    p.add_argument("--data-dir", type=Path, default=Path("pwevent-data"),
                   help="where RocksDB tables live (default ./pwevent-data)")
    p.add_argument("--instance-id", default=None,
                   help="this worker's stable identity in the consumer group (default: host "
                        "name and data directory); a restarted worker keeps its partitions")
    p.add_argument("--loglevel", default="info")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run until stopped (SIGTERM or Ctrl-C)."""
    try:
        broker = need_broker(args, "worker")
        config = job_config(args)
        config.secret_bytes()
    except ValueError as exc:
        print(f"pwevent worker: error: {exc}", file=sys.stderr)
        return 2
    import faust

    from streams.job import Job

    args.data_dir.mkdir(parents=True, exist_ok=True)
    job = Job(config, broker, args.data_dir, args.instance_id)
    worker = faust.Worker(job.app, loglevel=args.loglevel, quiet=True)
    worker.execute_from_commandline()
    return 0
