"""``pwevent group``: the workers' consumer group, for operators: its members with their
identities, and removing the member a crashed worker left behind."""

from __future__ import annotations

import argparse
import asyncio
import logging
import math
import sys

from aiokafka.errors import KafkaError

from streams.cli.job_args import need_broker
from streams.cli.options import PREFIX, add_options, option
from streams.job.config import JobConfig
from streams.kafka.topics import Topics

#: The flags of ``pwevent group`` after its positional arguments.
GROUP_OPTIONS = (
    option("--broker", "bootstrap HOST:PORT (default: $PWEVENT_BROKER)", metavar="HOST:PORT"),
    PREFIX,
    option("--stream", "stream name; the group is pwevent-PREFIX-STREAM (default: %(default)s)",
           default="default"),
    option("--timeout", "seconds to wait for the broker (default: %(default)s)", type=float,
           default=10.0, metavar="S"),
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``group`` sub-command."""
    p = sub.add_parser(
        "group", help="list the workers' group members, or remove a dead worker's member",
        description="describe: the state of the workers' consumer group and one line per "
                    "member (its instance id, host and reports partitions). remove "
                    "INSTANCE_ID: remove the member that a worker which died without stopping "
                    "(SIGKILL, a lost machine) left in the group, so that the other workers, or "
                    "a replacement with another identity, take its partitions. Apache Kafka "
                    "expires such a member after the workers' session timeout (10 s); a broker "
                    "that never expires one, like the embedded broker, needs this. A running "
                    "worker removed by mistake joins again.")
    p.add_argument("action", choices=("describe", "remove"),
                   help="describe the group, or remove a member")
    p.add_argument("instance_id", nargs="?", metavar="INSTANCE_ID",
                   help="the member to remove: its worker's --instance-id, as describe lists "
                        "it and the worker logs it at start")
    add_options(p, GROUP_OPTIONS)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Describe the group or remove a member; status 2 and one line on any error."""
    from streams.job.worker.membership import GroupError, describe_group, remove_member

    logging.getLogger("aiokafka").addHandler(logging.NullHandler())  # failures: one line
    broker = args.broker
    group = JobConfig(prefix=args.prefix, stream=args.stream).app_id()
    try:
        broker = need_broker(args)
        if not (math.isfinite(args.timeout) and args.timeout > 0):
            raise ValueError("--timeout must be a positive number of seconds")
        if args.action == "remove" and not args.instance_id:
            raise ValueError("remove needs the INSTANCE_ID of the member to remove")
        if args.action == "describe" and args.instance_id:
            raise ValueError("describe takes no INSTANCE_ID")
        described = asyncio.run(describe_group(broker, group, args.timeout))
        if args.action == "describe":
            n = len(described.members)
            print(f"group {group}: {described.state}, {n} member{'' if n == 1 else 's'}")
            reports = Topics(prefix=args.prefix, partitions=1).reports
            for m in sorted(described.members, key=lambda m: m.instance_id or ""):
                held = ",".join(map(str, m.partitions.get(reports, ()))) or "none"
                print(f"{m.instance_id or '(dynamic)'} host {m.client_host} "
                      f"reports partitions {held}")
            return 0
        # the embedded broker starts a rebalance even for a LeaveGroup naming no member
        if described.member(args.instance_id) is None:
            known = ", ".join(sorted(m.instance_id or "(dynamic)" for m in described.members))
            raise ValueError(f"group {group} has no member {args.instance_id} "
                             f"(members: {known or 'none'})")
        error = asyncio.run(remove_member(broker, group, args.instance_id, args.timeout))
        if error == "UnknownMemberIdError":
            raise ValueError(f"group {group} has no member {args.instance_id}")
        if error is not None:
            raise GroupError(error)
    except ValueError as exc:
        print(f"pwevent group: error: {exc}", file=sys.stderr)
        return 2
    except GroupError as exc:
        print(f"pwevent group: error: the broker refused the request on group {group}: {exc}",
              file=sys.stderr)
        return 2
    except (KafkaError, OSError, TimeoutError) as exc:
        print(f"pwevent group: error: cannot reach the broker at {broker}: "
              f"{type(exc).__name__}: check --broker and that the broker is running",
              file=sys.stderr)
        return 2
    print(f"removed member {args.instance_id} from group {group}: the other workers take its "
          f"partitions at the next rebalance")
    return 0
