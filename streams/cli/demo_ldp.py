"""``pwevent demo --mechanism lbu|lsp|lpu|plbu|lbd|lba|lpd|lpa|mtsp``: the local-DP collector end to
end on this machine. One client per user randomises its reports
(:mod:`streams.cli.replay_ldp`), a worker collects them from ``<prefix>.ldp-reports``
(:mod:`streams.ldp_collector.kafka_job`), and the demo follows ``<prefix>.ldp-releases`` and
scores them against what the devices held."""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import numpy as np
import orjson

from streams.cli.replay import build_source
from streams.cli.replay_ldp import produce, settings
from streams.ldp_client.devices import Devices


def score(releases: dict[int, dict], devices: Devices) -> dict:
    """The releases against the true counts of the users who reported: mean absolute error
    per cell ("no value" one of them), and the share of cells whose 95% bars (counts ± 1.96
    std) hold the true count, over the slots with bars (a two-round stream's: those that
    published a fresh estimate; the others repeat an earlier slot's) and the cells with bars
    (an mtsp cell sharing its interval has none)."""
    errors, inside, cells = [], 0, 0
    for slot, doc in releases.items():
        if doc.get("std") is None or doc.get("published") is False:
            continue
        true = devices.truth.get(slot, np.zeros(len(doc["counts"]) + 1, dtype=np.int64))
        counts = np.array([*doc["counts"], doc["no_value"]])
        std = np.array([np.nan if s is None else s for s in [*doc["std"], doc["no_value_std"]]])
        errors.append(np.abs(counts - true).mean())
        barred = ~np.isnan(std)
        inside += int((np.abs(counts - true)[barred] <= 1.96 * std[barred]).sum())
        cells += int(barred.sum())
    return {"mean_abs_error": float(np.mean(errors)) if errors else None,
            "coverage_95": inside / cells if cells else None}


def run(args: argparse.Namespace) -> int:
    """The demo of a local-DP stream; 0 when every slot was released."""
    from local_kafka.embedded import BrokerError, EmbeddedBroker
    from streams.cli.demo import follow_releases, log_excerpt, stop_process
    from streams.kafka.offsets import read_topic
    from streams.kafka.settings import current
    from streams.kafka.topics import create_topics
    from streams.ldp_collector.kafka_job import topic_specs

    started, show = time.monotonic(), not args.json_summary
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pwevent-demo-")))
        try:
            if args.broker:
                bootstrap = args.broker
            elif args.apache_kafka:
                from local_kafka.apache import ApacheKafka

                bootstrap = stack.enter_context(ApacheKafka(1, root=workdir / "kafka")).bootstrap
            else:
                if show:
                    print("starting the embedded broker ...", flush=True)
                bootstrap = stack.enter_context(EmbeddedBroker()).bootstrap
        except BrokerError as exc:
            print(f"pwevent demo: error: {exc}", file=sys.stderr)
            return 2
        args.prefix = "pwevent" if not args.broker else f"pwevent-demo-{int(time.time())}"
        args.secret, args.stream, args.broker = secrets.token_hex(16), "demo", bootstrap
        args.origin_ms, args.nonce, args.in_process = 0, None, False
        if args.ldp_start is None:
            args.ldp_start = 0
        try:
            source = build_source(args)
            built = settings(args, source)
            asyncio.run(create_topics(bootstrap, topic_specs(args.prefix, args.partitions)))
        except (ValueError, ImportError, OSError) as exc:
            print(f"pwevent demo: error: {exc}", file=sys.stderr)
            return 2
        log = (workdir / "worker.log").open("wb")
        stack.callback(log.close)
        cmd = [sys.executable, "-m", "streams.cli", "worker", "--broker", bootstrap,
               "--prefix", args.prefix, "--partitions", str(args.partitions), "--stream",
               args.stream, "--mechanism", args.mechanism, "--cells", str(built.d),
               "--slot-ms", str(args.slot_ms), "--origin-ms", "0", "--ldp-start",
               str(built.start), "--ldp-epsilon", str(args.ldp_epsilon), "--ldp-window",
               str(args.ldp_window), "--lpu-key", args.lpu_key, "--lpu-rotate",
               str(args.lpu_rotate), "--event-time", "history", "--loglevel", "warning",
               "--metrics-port", "0"]
        # the worker connects as this command does (TLS, SASL), through the environment
        env = dict(os.environ, PWEVENT_SECRET=args.secret, **current().environment())
        worker = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        stack.callback(stop_process, worker)
        if show:
            print(f"collector started (pid {worker.pid}, {args.mechanism}); "
                  f"{args.users} devices report", flush=True)
        sent, devices = asyncio.run(produce(args, built, source, show=show))
        expected = sent["last_slot"] - built.start + 1
        releases = asyncio.run(follow_releases(bootstrap, built.releases_topic, expected,
                                               started + args.timeout, show))
        dead = asyncio.run(read_topic(bootstrap, built.dead_letters_topic, limit=10.0))
        if worker.poll() is not None and len(releases) < expected:
            print("pwevent demo: the collector stopped early; its log:\n"
                  + log_excerpt(workdir / "worker.log"), file=sys.stderr)
    summary = {"mechanism": args.mechanism, "slots_expected": expected,
               "slots_released": len(releases), "reports_sent": sent.get("reports", 0),
               "reports_rejected": len(dead), **score(releases, devices),
               "seconds": round(time.monotonic() - started, 3)}
    if args.json_summary:
        print(orjson.dumps(summary).decode(), flush=True)
    else:
        error, cover = summary["mean_abs_error"], summary["coverage_95"]
        print(f"\n{summary['slots_released']}/{expected} slots released, "
              f"{summary['reports_sent']:,} randomised reports sent, "
              f"{summary['reports_rejected']} rejected, mean absolute error per cell "
              f"{'-' if error is None else round(error, 1)}, 95% bars held "
              f"{'-' if cover is None else f'{cover:.1%}'} of the true counts, "
              f"{summary['seconds']} s", flush=True)
    return 0 if len(releases) == expected else 1

