"""Command-line flags shared by the commands that run or feed the Kafka job."""

from __future__ import annotations

import argparse
import json
import os

from streams.job.config import JOB_MECHANISMS, JobConfig


def add_broker(p: argparse.ArgumentParser, required: bool = True) -> None:
    """``--broker`` (default ``$PWEVENT_BROKER``), ``--prefix`` and ``--partitions``."""
    p.add_argument("--broker", default=os.environ.get("PWEVENT_BROKER"),
                   help="bootstrap HOST:PORT (default: $PWEVENT_BROKER)")
    p.add_argument("--prefix", default="pwevent", help="topic name prefix (default: %(default)s)")
    p.add_argument("--partitions", type=int, default=4,
                   help="partitions of the reports and requirements topics (default: %(default)s)")


def add_releases_topic(p: argparse.ArgumentParser, stream_help: str) -> None:
    """``--broker``, ``--prefix`` and ``--stream`` of the commands that read the releases."""
    p.add_argument("--broker", metavar="HOST:PORT",
                   help="the Kafka broker (default: $PWEVENT_BROKER)")
    p.add_argument("--prefix", default="pwevent",
                   help="topic name prefix; reads <prefix>.releases (default: pwevent)")
    p.add_argument("--stream", metavar="NAME", help=stream_help)


def add_job(p: argparse.ArgumentParser) -> None:
    """Flags every worker of one deployment must agree on."""
    p.add_argument("--stream", default="default", help="stream name (default: %(default)s)")
    p.add_argument("--mechanism", choices=JOB_MECHANISMS, default="pbd",
                   help="pbd, pba and the baselines take fixed requirements {user, w, E}; "
                        "dpbd and dpba take dynamic ones {user, wB, EB, wF, EF} "
                        "(default: %(default)s)")
    p.add_argument("--max-window", type=int, default=200,
                   help="the longest window a requirement may declare; longer ones are "
                        "dead-lettered as invalid_requirement (default: %(default)s)")
    p.add_argument("--min-epsilon", type=float, default=0.01,
                   help="the smallest budget E (EB, EF) a requirement may declare "
                        "(default: %(default)s)")
    p.add_argument("--max-epsilon", type=float, default=10.0,
                   help="the largest budget E (EB, EF) a requirement may declare "
                        "(default: %(default)s)")
    p.add_argument("--neighbouring", choices=("add-remove", "replace"), default="add-remove",
                   help="add-remove: noise hides one report added or removed; replace: one "
                        "report's value changed, twice the noise (default: %(default)s)")
    p.add_argument("--event-time", choices=("live", "history"), default="live",
                   help="live: reject reports and watermarks more than --max-clock-skew-ms "
                        "ahead of the worker's clock; history: replaying recorded data, the "
                        "clock is not consulted (default: %(default)s)")
    p.add_argument("--max-clock-skew-ms", type=int, default=300_000,
                   help="live event time: how far ahead of the clock a report may be, in ms "
                        "(default: %(default)s)")
    p.add_argument("--cells", type=int, default=None,
                   help="domain of cell indices 0..CELLS-1 (default: 2)")
    p.add_argument("--domain", default=None,
                   help='domain as JSON, e.g. {"kind": "grid", ...}; overrides --cells '
                        '(default: unset, --cells applies)')
    p.add_argument("--slot-ms", type=int, default=60_000,
                   help="slot length in ms (default: %(default)s)")
    p.add_argument("--origin-ms", type=int, default=0,
                   help="start of slot 0 in epoch ms; replaying history (--event-time "
                        "history), reports before it are 'late' (default: %(default)s)")
    p.add_argument("--lateness-ms", type=int, default=0,
                   help="allowed lateness in ms (default: %(default)s)")
    p.add_argument("--horizon-ms", type=int, default=None,
                   help="reports more than this many ms ahead of the watermark are 'future' "
                        "(default: off; live, the clock bounds event times instead)")
    p.add_argument("--noise", choices=("discrete", "laplace"), default="discrete",
                   help="discrete Laplace (two-sided geometric) or continuous Laplace noise "
                        "(default: %(default)s)")
    p.add_argument("--secret", default=None,
                   help="randomness secret, the same on every worker "
                        "(default: $PWEVENT_SECRET)")
    p.add_argument("--idle-close-ms", type=int, default=2_000,
                   help="close open slots after this many ms without reports "
                        "(default: %(default)s)")


def job_config(args: argparse.Namespace) -> JobConfig:
    """A :class:`JobConfig` from parsed flags; raises ``ValueError`` with a clear message."""
    if args.domain:
        try:
            domain = json.loads(args.domain)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--domain is not JSON: {exc}") from None
    else:
        domain = {"kind": "cells", "size": args.cells or 2}
    return JobConfig(
        stream=args.stream,
        mechanism=args.mechanism,
        domain=domain,
        slot_ms=args.slot_ms,
        origin_ms=args.origin_ms,
        lateness_ms=args.lateness_ms,
        horizon_ms=args.horizon_ms,
        noise=args.noise,
        secret=args.secret or os.environ.get("PWEVENT_SECRET", ""),
        prefix=args.prefix,
        partitions=args.partitions,
        idle_close_ms=args.idle_close_ms,
        max_window=args.max_window,
        min_epsilon=args.min_epsilon,
        max_epsilon=args.max_epsilon,
        neighbouring=args.neighbouring,
        event_time=args.event_time,
        max_skew_ms=args.max_clock_skew_ms,
        nonce=getattr(args, "nonce", None) or "",
    )


def need_broker(args: argparse.Namespace, command: str) -> str:
    """The bootstrap address, or a clear error."""
    if not args.broker:
        raise ValueError(f"pwevent {command} needs --broker HOST:PORT or PWEVENT_BROKER")
    return args.broker
