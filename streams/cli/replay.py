"""``pwevent replay``: send a dataset or a recorded file into the job, or run it in-process.

The replay goes to the topics slot by slot (:func:`streams.cli.replay_produce.produce`) through
:class:`streams.cli.replay_sender.ResilientSender`, which rides out broker outages; that module
says what an outage costs, what may be sent twice and when the replay gives up.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Iterator
from typing import TextIO

import orjson

from mechanisms.run.dynamic import DYNAMIC_MECHANISMS
from streams.cli.job_args import add_broker, add_job, job_config, need_broker
from streams.cli.ldp_worker import LDP_OPTIONS
from streams.cli.options import RATE, USERS, add_options, option
from streams.cli.replay_produce import Declarations, produce
from streams.cli.replay_sender import ReplayInterrupted
from streams.data.sources import SOURCES, Records, Source, make_source, read_requirement_file
from streams.ldp_collector.kafka_job import KAFKA_PROTOCOLS

#: The flags that choose what is replayed (``pwevent replay`` and ``pwevent demo``).
SOURCE_OPTIONS = (
    option("--dataset", "a synthetic stream (sin, log, tlns), real data (taxi, foursquare; with "
           "--data) or a recorded file of reports (default: %(default)s)", choices=SOURCES,
           default="sin"),
    option("--data", "input path for taxi, foursquare or recorded", default=None,
           metavar="PATH"),
    USERS,
    # pwevent demo replays fewer slots by set_defaults; %(default)s shows the one in force
    option("--slots", "slots to replay (default: %(default)s)", type=int, default=100),
    option("--epsilon", "target E of the users' requirements, as in the paper's set-up "
           "(default: %(default)s)", type=float, default=0.6),
    option("--window", "target w of the users' requirements (default: %(default)s)", type=int,
           default=120),
    option("--seed", "seed of the synthetic stream and the requirements (default: %(default)s)",
           type=int, default=1),
)

#: The flags of ``pwevent replay`` after those of the job and the source.
REPLAY_OPTIONS = (
    RATE,
    option("--requirements", "the users' requirements, as the CSV pwevent plan reads: user,w,E "
           "for the fixed mechanisms, slot,user,wB,EB,wF,EF for dpbd and dpba (slots from 1, "
           "the stream's first slot); replaces the dataset's own, and is how a recorded file "
           "gets requirements", default=None, metavar="FILE"),
    option("--no-requirements", "do not send the users' requirements", action="store_true"),
    option("--register-timeout", "after sending requirements, wait up to this many seconds for "
           "the job to register them before sending reports, 0 not to wait "
           "(default: %(default)s)", type=float, default=60.0),
    option("--broker-timeout", "give up (exit status 2) when the broker has acknowledged "
           "nothing for this many seconds while records wait (default: %(default)s)",
           type=float, default=60.0),
    option("--request-timeout", "seconds the replay's Kafka client waits for the broker to "
           "answer one request (or for a partition's leader) before it retries the request (or "
           "gives the batch up, and the replay sends it again); an outage longer than this is "
           "ridden out all the same, up to --broker-timeout (default: %(default)s)",
           type=float, default=40.0, metavar="S"),
    option("--from-slot", "resume an interrupted replay at slot K (as its error line says): "
           "skip the slots before K (a recorded file: its records up to the first one of a "
           "slot >= K) and the requirements declared before K", type=int, default=None,
           metavar="K"),
    option("--in-process", "run through the job's code in this process and print the releases",
           action="store_true"),
    option("--nonce", "--in-process: the stream's nonce (hex, from the job's start record on "
           "the decisions topic) to reproduce a recorded run (default: a fresh one)",
           default=None),
)


def add_source(p: argparse.ArgumentParser) -> None:
    """Flags that choose what is replayed (:data:`SOURCE_OPTIONS`)."""
    add_options(p, SOURCE_OPTIONS)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``replay`` sub-command."""
    p = sub.add_parser(
        "replay",
        help="produce a dataset or recorded file into the reports topic (or run it in-process)",
        description="Registers the users' requirements, then produces their reports slot by "
                    "slot at --rate reports/s, with progress, and closes the last slot with "
                    "watermark records signed with the secret; rides out broker outages up to "
                    "--broker-timeout. --in-process runs the same stream through the job's "
                    "code without Kafka and prints the releases as JSON lines.",
    )
    add_broker(p)
    add_job(p, local=KAFKA_PROTOCOLS)
    add_source(p)
    add_options(p, REPLAY_OPTIONS)
    add_options(p, LDP_OPTIONS)
    # a replay is history, stamped from --origin-ms on, faster than real time (--in-process)
    p.set_defaults(func=run, event_time="history")


def build_source(args: argparse.Namespace) -> Source:
    """The source the flags describe; ``ValueError`` on bad flags or a bad requirements file."""
    if args.users < 1 or args.slots < 1:
        raise ValueError("--users and --slots must be >= 1")
    source = make_source(args.dataset, args.users, args.slots, args.seed, args.epsilon,
                         args.window, args.data)
    path = getattr(args, "requirements", None)
    if path is not None:
        if args.no_requirements:
            raise ValueError("--requirements and --no-requirements exclude each other")
        dynamic = getattr(args, "mechanism", "") in DYNAMIC_MECHANISMS
        source.declared = read_requirement_file(path, dynamic)
    return source


def warn_unregistered(args: argparse.Namespace, source: Source, in_process: bool) -> None:
    """One warning line when a recorded replay registers nobody."""
    if source.recorded is None or source.declared is not None:
        return
    if in_process:
        print("pwevent replay: warning: --dataset recorded without --requirements registers no "
              "users, so every report goes to dead letters as unregistered_user",
              file=sys.stderr)
    elif not args.no_requirements:
        print("pwevent replay: warning: --dataset recorded without --requirements registers no "
              "users: unless the job has registered them already, their reports go to dead "
              "letters as unregistered_user", file=sys.stderr)


Batches = Iterator[tuple[int, Records]]


def _peek_first(batches: Batches) -> tuple[int | None, Batches]:
    """The first batch's slot, and the batches with it put back."""
    first = next(batches, None)
    if first is None:
        return None, iter(())

    def again() -> Batches:
        yield first
        yield from batches

    return first[0], again()


def run_in_process(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``--in-process``: releases as JSON lines on stdout."""
    from streams.job.pipeline import InProcessJob

    out = out or sys.stdout
    config = job_config(args)
    config.secret_bytes()
    if getattr(args, "from_slot", None) is not None:
        raise ValueError("--from-slot resumes a replay into a broker; --in-process always runs "
                         "the whole stream")
    source = build_source(args)
    warn_unregistered(args, source, in_process=True)
    job = InProcessJob(config)
    first, batches = _peek_first(source.slot_batches(config.origin_ms, config.slot_ms))
    schedule = [] if args.no_requirements else source.requirement_schedule(config.dynamic)
    declarations = Declarations(schedule, first or 0)
    job.register(declarations.upfront)
    last: int | None = None
    for slot, records in batches:
        for _target, due in declarations.due(slot, after=False):
            job.register(due)
        job.feed(records)
        for _target, due in declarations.due(slot, after=True):
            job.register(due)
        last = slot if last is None else max(last, slot)
    for _target, due in declarations.due(None, after=True):
        job.register(due)
    # close the last slot as the live replay's watermark records do
    job.finish(None if last is None else config.origin_ms + (last + 1) * config.slot_ms)
    for release in job.releases:
        out.write(release.decode() + "\n")
    print(f"{len(job.releases)} releases, {len(job.dead)} records rejected", file=sys.stderr)
    return 0


def run(args: argparse.Namespace) -> int:
    """Execute ``pwevent replay``."""
    if args.mechanism in KAFKA_PROTOCOLS:
        from streams.cli import replay_ldp

        return replay_ldp.run(args)
    try:
        if args.in_process:
            return run_in_process(args)
        broker = need_broker(args)
        source = build_source(args)
        warn_unregistered(args, source, in_process=False)
        # the replay reports outages itself (a notice, or one error line); the client's own
        # retry messages would bury them
        logging.getLogger("aiokafka").setLevel(logging.CRITICAL)
        sent = asyncio.run(produce(args, source, broker))
    except (ValueError, ImportError, ReplayInterrupted) as exc:
        print(f"pwevent replay: error: {exc}", file=sys.stderr)
        return 2
    print(orjson.dumps(sent).decode())
    return 0
