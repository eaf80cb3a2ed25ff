"""``pwevent demo``: the whole job on this machine, with the embedded broker by default.

Starts the embedded Kafka-protocol broker (unless ``--broker`` or ``PWEVENT_BROKER`` names one, or
``--apache-kafka`` asks for a local Apache Kafka node started from the jars ``./setup.sh test``
fetches),
creates the topics, starts a worker, registers the users, replays a stream, follows the
``releases`` topic with live progress, prints a summary, and stops everything it started. Against
a broker of one's own, the connection flags (TLS, SASL) apply to the demo's clients and, through
the environment, to its worker, and its topics get ``--replication-factor`` replicas; a broker it
cannot reach, or that refuses the login, is one line and exit status 2. With
``--dashboard`` it also serves the stream's live page (:mod:`streams.releases.dashboard`) and keeps
serving it after the replay, until Ctrl-C or for ``--dashboard-seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from mechanisms.run.dynamic import DYNAMIC_MECHANISMS
from streams.cli.ldp_worker import LDP_OPTIONS
from streams.cli.options import MECHANISM, PARTITIONS, RATE, SLOT_MS, add_options, option
from streams.cli.replay import add_source, build_source
from streams.cli.replay_produce import produce
from streams.data.sources import Source
from streams.job.config import JOB_MECHANISMS
from streams.kafka.consumer_stop import stop_consumer
from streams.kafka.topics import Topics
from streams.ldp_collector.kafka_job import KAFKA_PROTOCOLS
from streams.releases.dashboard import DEFAULT_PORT


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``demo`` sub-command."""
    p = sub.add_parser("demo", help="run the Kafka job end to end on this machine",
                       description="Run the whole job on this machine, with the embedded "
                                   "Kafka-protocol broker unless --broker names one.")
    add_options(p, (
        option("--broker", "use this broker instead of starting the embedded one "
               "(default: $PWEVENT_BROKER, else the embedded broker)",
               default=os.environ.get("PWEVENT_BROKER"), metavar="HOST:PORT"),
        option("--apache-kafka", "start a local Apache Kafka (one KRaft node, from the jars "
               "./setup.sh test fetches) instead of the embedded broker, and stop it at the end",
               action="store_true"),
        MECHANISM.but(help="the job's mechanism; dpbd and dpba register dynamic requirements; "
                           f"{', '.join(KAFKA_PROTOCOLS[:-1])} and {KAFKA_PROTOCOLS[-1]} run "
                           "the local-DP collector, each device randomising its own reports "
                           "(default: %(default)s)",
                      choices=(*JOB_MECHANISMS, *KAFKA_PROTOCOLS)),
        PARTITIONS.but(default=2),
        SLOT_MS.but(default=1000),
        RATE,
        option("--timeout", "give up after this many seconds (default: %(default)s)",
               type=float, default=180.0),
        option("--json-summary", "print the summary as one JSON object", action="store_true"),
        option("--dashboard", "also serve the live dashboard of the demo's stream, with the "
               "worker's metrics, print its URL, and keep serving it after the replay until "
               "Ctrl-C", action="store_true"),
        option("--dashboard-port", "port of the dashboard on 127.0.0.1, 0 for a free one "
               f"(default: {DEFAULT_PORT})", type=int, default=DEFAULT_PORT, metavar="PORT"),
        option("--dashboard-seconds", "with --dashboard, stop serving this many seconds after "
               "the replay (default: serve until Ctrl-C)", type=float, default=None,
               metavar="S"),
    ))
    add_source(p)
    add_options(p, LDP_OPTIONS)
    # two windows of the requirements' target w (120): a privacy window is a promise about a
    # long stream, and a run inside its first window shows only its start (docs/results.md,
    # "The default configuration")
    p.set_defaults(func=run, slots=240, register_timeout=0.0)


async def follow_releases(bootstrap: str, topic: str, expected: int, deadline: float,
                          show: bool) -> dict[int, dict]:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from tqdm import tqdm

    from streams.kafka.settings import consumer_options

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **consumer_options(),
                                enable_auto_commit=False,
                                auto_offset_reset="earliest")
    await consumer.start()
    got: dict[int, dict] = {}
    # disable=None: drawn on a terminal only, silent when stderr is a file or a pipe (CI logs)
    bar = tqdm(total=expected, desc="releases", unit="slot", disable=None) if show else None
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        while len(got) < expected and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=250)
            for rec in batch.get(tp, []):
                doc = orjson.loads(rec.value)
                if doc["slot"] not in got and bar is not None:
                    bar.set_postfix_str(f"slot {doc['slot']}", refresh=False)
                    bar.update()
                got[doc["slot"]] = doc
    finally:
        await stop_consumer(consumer)
        if bar is not None:
            bar.close()
    return got


def _create_topics(bootstrap: str, topics: Topics) -> str | None:
    """Create the demo's topics; what went wrong, in one line, or ``None``."""
    from aiokafka.errors import KafkaError

    from streams.kafka.errors import broker_failure
    from streams.kafka.topics import TopicError, create_topics

    logging.getLogger("aiokafka").addHandler(logging.NullHandler())  # failures: one line
    try:
        asyncio.run(create_topics(bootstrap, topics.specs()))
    except (KafkaError, TimeoutError) as exc:  # TimeoutError first: it is an OSError
        return broker_failure(bootstrap, exc)
    except (TopicError, OSError) as exc:
        return str(exc)
    return None


def log_excerpt(path: Path, limit: int = 4000) -> str:
    """The worker log from its first error on (or its end), for a failure message."""
    text = path.read_text(errors="replace")
    at = min((i for i in (text.find("Traceback"), text.find("[ERROR]")) if i >= 0), default=-1)
    return text[at: at + limit] if at >= 0 else text[-limit:]


def _summary(source: Source, releases: dict[int, dict], sent: dict, seconds: float,
             slot0: int, rejected: int | None) -> dict:
    true = source.true_histograms()
    amre = None
    if true is not None and releases:
        rows = [t for t in range(true.shape[0]) if slot0 + t in releases]
        if rows:
            # what the stream publishes for analysts: the estimate when releases carry one
            released = np.array([(releases[slot0 + t].get("estimate") or releases[slot0 + t])[
                "histogram"] for t in rows], dtype=float)
            amre = float(np.mean(np.mean((released - true[rows]) ** 2, axis=1)))
    return {
        "slots_expected": source.slots,
        "slots_released": len(releases),
        "reports_sent": sent.get("reports", 0),
        "reports_rejected": rejected,
        "amre": amre,
        "seconds": round(seconds, 3),
    }


def last_release(releases: dict[int, dict]) -> str:
    """The last slot's release as ``pwevent releases`` shows it, under its header."""
    from streams.cli.releases import header, row
    from streams.releases.client import DEFAULT_CONFIDENCE
    from streams.releases.decoding import parse_release

    release = parse_release(releases[max(releases)])
    return (f"\nthe last release, as pwevent releases shows it:\n"
            f"{header(DEFAULT_CONFIDENCE, False)}\n{row(release, False)}")


def _print_summary(args: argparse.Namespace, summary: dict,
                   releases: dict[int, dict]) -> None:
    if args.json_summary:
        print(orjson.dumps(summary).decode(), flush=True)
    else:
        if releases and args.mechanism not in KAFKA_PROTOCOLS:
            print(last_release(releases), flush=True)
        print(f"\n{summary['slots_released']}/{summary['slots_expected']} slots released, "
              f"{summary['reports_sent']:,} reports sent, "
              f"{'?' if summary['reports_rejected'] is None else summary['reports_rejected']} "
              "rejected, "
              f"AMRE {summary['amre'] if summary['amre'] is None else round(summary['amre'], 2)}"
              f", {summary['seconds']} s", flush=True)


def _keep_serving(url: str, seconds: float | None, quiet: bool) -> None:
    """Keep the dashboard (and the worker behind its metrics) up until Ctrl-C or ``seconds``."""
    until = "Ctrl-C" if seconds is None else f"{seconds:g} s have passed"
    print(f"serving the dashboard at {url} until {until}", file=sys.stderr if quiet else
          sys.stdout, flush=True)
    try:
        if seconds is None:
            while True:
                time.sleep(3600)
        time.sleep(max(seconds, 0.0))
    except KeyboardInterrupt:
        pass


def stop_process(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """Stop a process this command started, if it still runs: SIGTERM, then SIGKILL after
    ``timeout`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _stop_worker_with(worker: subprocess.Popen, broker: Any, timeout: float = 20.0) -> None:
    """SIGTERM the worker and wait for it; kill it when the embedded ``broker`` (``None``: an
    outside one) is gone, as after a terminal's Ctrl-C, which reaches the broker too: a worker
    cannot stop cleanly without its broker."""
    if worker.poll() is not None:
        return
    worker.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while worker.poll() is None:
        if time.monotonic() > deadline or (broker is not None and not broker.running):
            worker.kill()
            break
        time.sleep(0.1)
    worker.wait()


def run(args: argparse.Namespace) -> int:  # noqa: C901 - one orchestration, step by step
    """Execute ``pwevent demo``."""
    if args.mechanism in KAFKA_PROTOCOLS:
        from streams.cli import demo_ldp

        return demo_ldp.run(args)
    from local_kafka.embedded import BrokerError, EmbeddedBroker, broker_binary, free_port
    from streams.kafka.offsets import wait_consumed
    from streams.kafka.settings import current

    kafka_settings = current()
    started = time.monotonic()
    show = not args.json_summary
    try:
        source = build_source(args)
    except (ValueError, ImportError) as exc:
        print(f"pwevent demo: error: {exc}", file=sys.stderr)
        return 2
    if args.apache_kafka and args.broker:
        print("pwevent demo: error: --apache-kafka starts a broker; it does not go with --broker",
              file=sys.stderr)
        return 2
    if args.apache_kafka:
        from local_kafka.apache import kafka_libs

        try:
            kafka_libs()
        except BrokerError as exc:
            print(f"pwevent demo: error: {exc}", file=sys.stderr)
            return 2
    elif not args.broker:
        try:
            broker_binary()
        except BrokerError as exc:
            print(f"pwevent demo: error: {exc} (or use a broker: --broker HOST:PORT)",
                  file=sys.stderr)
            return 2
    if args.partitions < 1 or args.slot_ms < 1:
        print("pwevent demo: error: --partitions and --slot-ms must be >= 1", file=sys.stderr)
        return 2
    dashboard = getattr(args, "dashboard", False)
    if dashboard and not 0 <= args.dashboard_port <= 65535:
        print("pwevent demo: error: --dashboard-port must lie in [0, 65535]", file=sys.stderr)
        return 2
    prefix = "pwevent" if not args.broker else f"pwevent-demo-{int(time.time())}"
    secret = secrets.token_hex(16)
    stream = "demo"
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pwevent-demo-")))
        embedded = None
        if args.broker:
            bootstrap = args.broker
        elif args.apache_kafka:
            from local_kafka.apache import ApacheKafka

            if show:
                print("starting Apache Kafka (one KRaft node) ...", flush=True)
            try:
                embedded = stack.enter_context(ApacheKafka(1, root=workdir / "kafka"))
            except BrokerError as exc:
                print(f"pwevent demo: error: {exc}", file=sys.stderr)
                return 2
            bootstrap = embedded.bootstrap
        else:
            if show:
                print("starting the embedded broker ...", flush=True)
            embedded = stack.enter_context(EmbeddedBroker())
            bootstrap = embedded.bootstrap
        topics = Topics(prefix=prefix, partitions=args.partitions,
                        replication=kafka_settings.replication_factor)
        problem = _create_topics(bootstrap, topics)
        if problem is not None:
            print(f"pwevent demo: error: {problem}", file=sys.stderr)
            return 2
        worker_log = (workdir / "worker.log").open("wb")
        stack.callback(worker_log.close)
        cmd = [sys.executable, "-m", "streams.cli", "worker", "--broker", bootstrap,
               "--prefix", prefix, "--partitions", str(args.partitions), "--stream", stream,
               "--mechanism", args.mechanism, "--cells", str(source.d or 2),
               "--slot-ms", str(args.slot_ms), "--data-dir", str(workdir / "data"),
               "--idle-close-ms", "1000", "--event-time", "history", "--loglevel", "warning"]
        url = server = None
        if dashboard:
            from streams.releases.dashboard import BackgroundDashboard

            metrics_port = free_port()
            cmd += ["--metrics-host", "127.0.0.1", "--metrics-port", str(metrics_port)]
            server = BackgroundDashboard(
                bootstrap, topics.releases, stream=stream, decisions_topic=topics.decisions,
                metrics_urls=[f"http://127.0.0.1:{metrics_port}/metrics"],
                port=args.dashboard_port)
            try:
                url = server.start()
            except OSError as exc:
                why = os.strerror(exc.errno) if exc.errno else str(exc)
                print(f"pwevent demo: error: the dashboard cannot listen on 127.0.0.1:"
                      f"{args.dashboard_port} ({why}); choose another --dashboard-port",
                      file=sys.stderr)
                return 2
            stack.callback(server.stop)
        # the worker connects as this command does (TLS, SASL, replication of the topics it
        # creates), through the environment: the password stays out of its argument list
        env = dict(os.environ, PWEVENT_SECRET=secret, **kafka_settings.environment())
        # with --dashboard, Ctrl-C ends the demo: the worker, in a session of its own, does not
        # get the terminal's SIGINT but is stopped below like at any other end
        worker = subprocess.Popen(cmd, stdout=worker_log, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=dashboard)

        stack.callback(stop_process, worker)
        if url is not None:  # once the worker behind the page's metrics runs too
            print(f"dashboard: {url}", flush=True)
        if show:
            print(f"worker started (pid {worker.pid}); registering {len(source.users)} users",
                  flush=True)
        deadline = started + args.timeout
        args.prefix, args.origin_ms = prefix, 0
        args.no_requirements = True  # sent below, and waited for, before the reports
        from streams.kafka.producer import produce_raw

        records = source.requirement_records(dynamic=args.mechanism in DYNAMIC_MECHANISMS)
        asyncio.run(produce_raw(bootstrap, topics.requirements, records,
                                partitions=args.partitions))
        group = f"pwevent-{prefix}-{stream}"
        if not asyncio.run(wait_consumed(bootstrap, group, topics.requirements, args.partitions,
                                         max(1.0, deadline - time.monotonic()),
                                         alive=lambda: worker.poll() is None)):
            print("pwevent demo: error: the worker did not register the users in time; see "
                  "its log:\n" + log_excerpt(workdir / "worker.log"), file=sys.stderr)
            return 1
        # the replay signs the watermark that closes the last slot of the demo's stream
        args.secret, args.stream = secret, stream
        from streams.kafka.offsets import read_topic

        sent: dict = {}
        releases: dict[int, dict] = {}
        dead: list | None = None  # None: not read (interrupted before)
        interrupted = False
        try:
            sent = asyncio.run(produce(args, source, bootstrap, show_progress=show))
            releases = asyncio.run(follow_releases(bootstrap, topics.releases, source.slots,
                                                   deadline, show))
            # the operator's count, from the dead-letter topic (releases carry no exact counts)
            try:
                dead = asyncio.run(read_topic(bootstrap, topics.dead_letters, limit=10.0))
            except TimeoutError as exc:
                print(f"pwevent demo: dead letters not counted: {exc}", file=sys.stderr)
        except KeyboardInterrupt:
            if url is None:
                raise
            # with --dashboard, Ctrl-C ends the demo at any point: it reports what it saw and
            # stops everything it started, as at the end of the page's serving time
            interrupted = True
        summary = _summary(source, releases, sent, time.monotonic() - started, 0,
                           None if dead is None else len(dead))
        if worker.poll() is not None and len(releases) < source.slots:
            print("pwevent demo: the worker stopped early; its log:\n"
                  + log_excerpt(workdir / "worker.log"), file=sys.stderr)
        if url is not None:
            _print_summary(args, summary, releases)
            if not interrupted:
                _keep_serving(url, args.dashboard_seconds, args.json_summary)
            if server is not None:
                server.stop()  # before the worker and the broker it follows
            _stop_worker_with(worker, embedded)
            if interrupted:
                return 0
    if url is None:
        _print_summary(args, summary, releases)
    return 0 if summary["slots_released"] == summary["slots_expected"] else 1
