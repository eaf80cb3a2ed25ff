"""``pwevent dashboard``: a live web page of a stream's releases
(:mod:`streams.releases.dashboard`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import warnings
from urllib.parse import urlsplit

from streams.cli.job_args import add_releases_reader, confidence_option, need_broker
from streams.cli.options import option
from streams.kafka.topics import Topics
from streams.releases.client import ReleaseFormatWarning
from streams.releases.dashboard import (
    DEFAULT_HOST,
    DEFAULT_PORT,
    ReleaseFeed,
    build_app,
    start,
    url_of,
)

DESCRIPTION = """\
Serve a web page that follows a stream's releases live: the released histogram of each cell over
time with the confidence band of the noise (published slots), a strip of marks showing which
slots were published, approximated or nullified, the latest slot's histogram with error bars,
and an operator panel with the last released slot, the consumer lag, dead letters by reason and
the budget left per requirement level, scraped from the workers' metrics endpoints given with
--metrics-url. The page and its JSON feeds (/api/releases?after=SLOT, /api/operator) need
nothing but this server: no internet access. The releases are differentially private; the dead
letters are exact counts, like everything on the workers' metrics port: with --metrics-url, keep
the dashboard for operators.

Exit status: 0 interrupted (Ctrl-C), 2 a usage error or a port that cannot be had."""


#: The flags of ``pwevent dashboard`` after those naming the releases topic.
DASHBOARD_OPTIONS = (
    option("--host", "address to listen on; 0.0.0.0 for every interface "
           f"(default: {DEFAULT_HOST})", default=DEFAULT_HOST),
    option("--port", f"port to listen on, 0 for a free one (default: {DEFAULT_PORT})",
           type=int, default=DEFAULT_PORT),
    option("--metrics-url", "a worker's metrics endpoint, such as http://worker-0:9464/metrics; "
           "repeat it for every worker (default: none, and the operator panel says that metrics "
           "are not configured)", action="append", default=[], metavar="URL"),
    confidence_option("the bands and error bars"),
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``dashboard`` sub-command."""
    add_releases_reader(
        sub, "dashboard", "serve a live web page of a stream's releases", DESCRIPTION,
        "the stream to show (default: the first stream found on the topic)", DASHBOARD_OPTIONS,
        run)


def metrics_urls(value: list[str] | str) -> list[str]:
    """The ``--metrics-url`` values (a string from the environment: separated by spaces);
    ``ValueError`` for one that is not an http(s) URL."""
    urls = value.split() if isinstance(value, str) else list(value)
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"--metrics-url {url!r} is not an http:// or https:// URL")
    return urls


def run(args: argparse.Namespace) -> int:
    """Execute ``pwevent dashboard``: serve until interrupted; returns the exit status."""
    try:
        broker = need_broker(args)
    except ValueError as exc:
        print(f"pwevent dashboard: error: {exc}", file=sys.stderr)
        return 2
    if not 0.0 < args.confidence < 1.0:
        print("pwevent dashboard: error: --confidence must be in (0, 1)", file=sys.stderr)
        return 2
    if not 0 <= args.port <= 65535:
        print("pwevent dashboard: error: --port must lie in [0, 65535]", file=sys.stderr)
        return 2
    try:
        urls = metrics_urls(args.metrics_url)
    except ValueError as exc:
        print(f"pwevent dashboard: error: {exc}", file=sys.stderr)
        return 2
    logging.getLogger("aiokafka").addHandler(logging.NullHandler())
    topics = Topics(prefix=args.prefix)
    feed = ReleaseFeed(args.stream, args.confidence)
    app = build_app(feed, urls, bootstrap=broker, topic=topics.releases,
                    decisions_topic=topics.decisions)

    async def serve() -> None:
        runner, port = await start(app, args.host, args.port)
        try:
            print(f"pwevent dashboard: serving {topics.releases} on {broker} at "
                  f"{url_of(args.host, port)} (Ctrl-C to stop)", flush=True)
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    with warnings.catch_warnings():
        warnings.simplefilter("once", ReleaseFormatWarning)
        try:
            asyncio.run(serve())
        except OSError as exc:
            print(f"pwevent dashboard: error: cannot listen on {args.host}:{args.port} "
                  f"({os.strerror(exc.errno) if exc.errno else exc})", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 0
    return 0
