"""Command-line flags shared by the commands that run or feed the Kafka job, and by those that
read what it publishes."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Iterable

from streams.cli.options import (
    MECHANISM,
    PARTITIONS,
    PREFIX,
    SLOT_MS,
    Option,
    add_options,
    option,
)
from streams.job.config import JOB_MECHANISMS, POSTPROCESS, JobConfig
from streams.releases.client import DEFAULT_CONFIDENCE


def add_broker(p: argparse.ArgumentParser) -> None:
    """``--broker`` (default ``$PWEVENT_BROKER``), ``--prefix`` and ``--partitions``."""
    broker = option("--broker", "bootstrap HOST:PORT (default: $PWEVENT_BROKER)",
                    default=os.environ.get("PWEVENT_BROKER"))
    add_options(p, (broker, PREFIX, PARTITIONS))


def add_releases_reader(sub: argparse._SubParsersAction, name: str, help: str, description: str,
                        stream_help: str, options: Iterable[Option],
                        run: Callable[[argparse.Namespace], int]) -> None:
    """Register ``name``, a command that reads the releases topic: ``description`` shown as
    written, ``--broker``, ``--prefix`` and ``--stream`` (``stream_help``), then ``options``."""
    p = sub.add_parser(name, help=help, description=description,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(p, (
        option("--broker", "the Kafka broker (default: $PWEVENT_BROKER)", metavar="HOST:PORT"),
        PREFIX.but(help="topic name prefix; reads <prefix>.releases (default: pwevent)"),
        option("--stream", stream_help, metavar="NAME"),
        *options,
    ))
    p.set_defaults(func=run)


def confidence_option(bars: str) -> Option:
    """``--confidence`` of the commands that show the releases' ``bars``."""
    return option("--confidence", f"confidence level of {bars}, in (0, 1) (default: "
                  f"{DEFAULT_CONFIDENCE})", type=float, default=DEFAULT_CONFIDENCE, metavar="C")


#: The flags every worker of one deployment must agree on, in the order ``--help`` lists them.
JOB_OPTIONS = (
    option("--stream", "stream name, one a prefix: a worker of another stream on the same "
           "topics refuses to start (default: %(default)s)", default="default"),
    MECHANISM,
    option("--max-window", "the longest window a requirement may declare; longer ones are "
           "dead-lettered as invalid_requirement (default: %(default)s)", type=int, default=200),
    option("--min-epsilon", "the smallest budget E (EB, EF) a requirement may declare; with "
           "discrete noise its per-slot share, E / (2 * max window) or E / 4 when smaller, "
           "halved under replace, must be at least 2**-29 for the exact noise sampler "
           "(default: %(default)s)",
           type=float, default=0.01),
    option("--max-epsilon", "the largest budget E (EB, EF) a requirement may declare; with "
           "discrete noise at most 2**20, twice that under replace (default: %(default)s)",
           type=float, default=10.0),
    option("--neighbouring", "add-remove: noise hides one report added or removed; replace: one "
           "report's value changed, twice the noise (default: %(default)s)",
           choices=("add-remove", "replace"), default="add-remove"),
    option("--postprocess", "besides each release's noisy histogram, a post-processed one "
           "(field estimate; no privacy cost): auto, the default configuration's under "
           "--mechanism default and none under a named mechanism; round, the histogram "
           "rounded and clipped at 0; "
           "kalman, a Kalman filter over the slots' releases, then rounded; kalman_bank, "
           "per cell the best predicting of a bank of such filters, then rounded; "
           "kalman_split, per cell that bank or the banks of the cells' mean and of their "
           "deviations from it, whichever predicted better, then rounded; the raw "
           "histogram stays in the record (default: %(default)s)", choices=POSTPROCESS,
           default="auto"),
    option("--event-time", "live: reject reports and watermarks more than --max-clock-skew-ms "
           "ahead of the worker's clock; history: replaying recorded data, the clock is not "
           "consulted (default: %(default)s)", choices=("live", "history"), default="live"),
    option("--max-clock-skew-ms", "live event time: how far a report may lie ahead of the "
           "worker's clock, and behind it when a partition's stream starts, in ms "
           "(default: %(default)s)", type=int, default=300_000),
    option("--cells", "domain of cell indices 0..CELLS-1 (default: 2)", type=int, default=None),
    option("--domain", 'domain as JSON, e.g. {"kind": "grid", ...}; overrides --cells '
           "(default: unset, --cells applies)", default=None),
    SLOT_MS,
    option("--origin-ms", "start of slot 0 in epoch ms; replaying history (--event-time "
           "history), reports before it are 'late' (default: %(default)s)", type=int, default=0),
    option("--lateness-ms", "allowed lateness in ms (default: %(default)s)", type=int, default=0),
    option("--horizon-ms", "reports more than this many ms ahead of the watermark are 'future' "
           "(default: off; live, the clock bounds event times instead)", type=int, default=None),
    option("--noise", "discrete Laplace (two-sided geometric) or continuous Laplace noise "
           "(default: %(default)s)", choices=("discrete", "laplace"), default="discrete"),
    option("--secret", "randomness secret, the same on every worker (default: $PWEVENT_SECRET)",
           default=None),
    option("--idle-close-ms", "close open slots after this many ms without reports "
           "(default: %(default)s)", type=int, default=2_000),
    option("--max-hold-ms", "live: the longest a slot waits past its end, by the worker's "
           "clock, for an input partition that lags (a restart's backlog, a rebalance); then it "
           "closes and what comes later is 'late' (default: %(default)s, 10 minutes)",
           type=int, default=600_000),
)


def add_job(p: argparse.ArgumentParser, local: tuple[str, ...] = ()) -> None:
    """Flags every worker of one deployment must agree on (:data:`JOB_OPTIONS`); ``local``:
    the local-DP protocols ``--mechanism`` also takes (the collector,
    docs/ldp-reports.md)."""
    if not local:
        add_options(p, JOB_OPTIONS)
        return
    help = (MECHANISM.help.replace(" (default: %(default)s)", "") + "; "
            + ", ".join(local) + " run the local-DP collector, which reads the devices' "
            "randomised reports from <prefix>.ldp-reports (default: %(default)s)")
    add_options(p, [o.but(choices=(*JOB_MECHANISMS, *local), help=help) if o is MECHANISM
                    else o for o in JOB_OPTIONS])


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
        max_hold_ms=getattr(args, "max_hold_ms", 600_000),
        max_window=args.max_window,
        min_epsilon=args.min_epsilon,
        max_epsilon=args.max_epsilon,
        neighbouring=args.neighbouring,
        postprocess=getattr(args, "postprocess", "auto"),
        event_time=args.event_time,
        max_skew_ms=args.max_clock_skew_ms,
        nonce=getattr(args, "nonce", None) or "",
    )


def need_broker(args: argparse.Namespace) -> str:
    """The bootstrap address: ``--broker``, else ``PWEVENT_BROKER`` as the command runs; or a
    ``ValueError`` saying so, which the command prints after its name."""
    broker = args.broker or os.environ.get("PWEVENT_BROKER")
    if not broker:
        raise ValueError("give --broker HOST:PORT (or set PWEVENT_BROKER)")
    return broker
