"""``pwevent replay``: send a dataset or a recorded file into the job, or run it in-process."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

import orjson

from mechanisms.dynamic import DYNAMIC_MECHANISMS
from streams.job_args import add_broker, add_job, job_config, need_broker
from streams.sources import SOURCES, Source, make_source


def add_source(p: argparse.ArgumentParser) -> None:
    """Flags that choose what is replayed."""
    p.add_argument("--dataset", choices=SOURCES, default="sin")
    p.add_argument("--data", default=None, help="input path for taxi, foursquare or recorded")
    p.add_argument("--users", type=int, default=2000, help="synthetic users (default 2000)")
    p.add_argument("--slots", type=int, default=100, help="slots to replay (default 100)")
    p.add_argument("--epsilon", type=float, default=0.6,
                   help="target E of the requirements (papers/000 Table 4)")
    p.add_argument("--window", type=int, default=120, help="target w of the requirements")
    p.add_argument("--seed", type=int, default=1)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``replay`` sub-command."""
    p = sub.add_parser(
        "replay",
        help="produce a dataset or recorded file into the reports topic (or run it in-process)",
        description="Registers the users' requirements, then produces their reports slot by "
                    "slot at --rate reports/s, with progress; --in-process runs the same stream "
                    "through the job's code without Kafka and prints the releases as JSON lines.",
    )
    add_broker(p)
    add_job(p)
    add_source(p)
    p.add_argument("--rate", type=float, default=0.0,
                   help="reports per second (default 0: as fast as possible)")
    p.add_argument("--no-requirements", action="store_true",
                   help="do not send the users' requirements")
    p.add_argument("--register-timeout", type=float, default=60.0,
                   help="after sending requirements, wait up to this many seconds for the job "
                        "to register them before sending reports (0: do not wait)")
    p.add_argument("--in-process", action="store_true",
                   help="run through the job's code in this process and print the releases")
    p.add_argument("--nonce", default=None,
                   help="--in-process: the stream's nonce (hex, from the job's start record on "
                        "the decisions topic) to reproduce a recorded run; default: a fresh one")
    p.set_defaults(func=run)


def build_source(args: argparse.Namespace) -> Source:
    """The source the flags describe; ``ValueError`` on bad flags."""
    if args.users < 1 or args.slots < 1:
        raise ValueError("--users and --slots must be >= 1")
    return make_source(args.dataset, args.users, args.slots, args.seed, args.epsilon,
                       args.window, args.data)


def run_in_process(args: argparse.Namespace, out=None) -> int:
    """``--in-process``: releases as JSON lines on stdout."""
    from streams.pipeline import InProcessJob

    out = out or sys.stdout
    config = job_config(args)
    config.secret_bytes()
    source = build_source(args)
    job = InProcessJob(config)
    job.register(source.requirement_records(dynamic=config.dynamic))
    for records in source.slot_records(config.origin_ms, config.slot_ms):
        job.feed(records)
    job.finish()
    for release in job.releases:
        out.write(release.decode() + "\n")
    print(f"{len(job.releases)} releases, {len(job.dead)} records rejected", file=sys.stderr)
    return 0


async def produce(args: argparse.Namespace, source: Source, broker: str,
                  show_progress: bool = True) -> dict:
    """Send requirements, then reports at the requested rate; returns counts."""
    from tqdm import tqdm

    from streams.ingest import RawProducer
    from streams.partition import watermark_record
    from streams.topics import Topics

    topics = Topics(prefix=args.prefix, partitions=args.partitions)
    sent = {"requirements": 0, "reports": 0}
    if not args.no_requirements and source.requirements is not None:
        req = RawProducer(broker, topics.requirements, args.partitions)
        await req.start()
        try:
            dynamic = getattr(args, "mechanism", "") in DYNAMIC_MECHANISMS
            sent["requirements"] = await req.send_many(source.requirement_records(dynamic))
        finally:
            await req.stop()
        if args.register_timeout > 0:
            from streams.kafka_util import wait_consumed

            group = f"pwevent-{args.prefix}-{args.stream}"
            if show_progress:
                print(f"waiting for the job ({group}) to register {sent['requirements']:,} "
                      "users ...", file=sys.stderr, flush=True)
            if not await wait_consumed(broker, group, topics.requirements, args.partitions,
                                       args.register_timeout):
                print(f"pwevent replay: warning: the job did not register the users within "
                      f"{args.register_timeout:g} s; reports of unregistered users go to "
                      "dead letters", file=sys.stderr)
    producer = RawProducer(broker, topics.reports, args.partitions)
    await producer.start()
    # disable=None: drawn on a terminal only, silent when stderr is a file or a pipe (CI logs)
    bar = (tqdm(total=source.slots or 1, desc="replay", unit="slot", disable=None)
           if show_progress else None)
    start = time.monotonic()
    last_slot = None
    try:
        for t, records in enumerate(source.slot_records(args.origin_ms, args.slot_ms)):
            sent["reports"] += await producer.send_many(records)
            last_slot = t
            if args.rate > 0:
                ahead = sent["reports"] / args.rate - (time.monotonic() - start)
                if ahead > 0:
                    await asyncio.sleep(ahead)
            if bar is not None:
                bar.set_postfix_str(f"{sent['reports']:,} reports", refresh=False)
                bar.update()
        secret = (getattr(args, "secret", None) or os.environ.get("PWEVENT_SECRET", "")).encode()
        if last_slot is not None and source.cells is not None and not secret:
            print("pwevent replay: warning: no secret (--secret or PWEVENT_SECRET), so the last "
                  "slot is left to the job's idle close", file=sys.stderr)
        elif last_slot is not None and source.cells is not None:
            end = args.origin_ms + (last_slot + 1) * args.slot_ms
            for p in range(args.partitions):
                mark = watermark_record(end, secret, args.stream, p)
                await producer.send_many([(None, mark)], partition=p)
    finally:
        await producer.stop()
        if bar is not None:
            bar.close()
    sent["seconds"] = round(time.monotonic() - start, 3)
    return sent


def run(args: argparse.Namespace) -> int:
    """Execute ``pwevent replay``."""
    try:
        if args.in_process:
            return run_in_process(args)
        broker = need_broker(args, "replay")
        source = build_source(args)
        sent = asyncio.run(produce(args, source, broker))
    except ValueError as exc:
        print(f"pwevent replay: error: {exc}", file=sys.stderr)
        return 2
    print(orjson.dumps(sent).decode())
    return 0
