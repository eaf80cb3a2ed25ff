"""``pwevent releases``: print a stream's releases with error bars
(:mod:`streams.releases.client`)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import warnings
from datetime import UTC, datetime
from typing import TextIO

import orjson

from streams.cli.job_args import add_releases_reader, confidence_option, need_broker
from streams.cli.options import option
from streams.kafka.topics import Topics
from streams.releases.client import (
    Release,
    ReleaseFormatWarning,
    ReleaseReadError,
    iter_releases,
)

DESCRIPTION = """\
Read the releases topic and print one line per released slot: its start, whether it was
published, approximated or nullified, and the histogram with error bars at --confidence. The
bars cover the noise the job added: a published cell's interval holds the count the noise was
added to with at least that probability (exact discrete Laplace or Laplace quantiles). An
approximated or nullified slot repeats an earlier publication and has no bars. A release
emitted twice (after a restart) is printed once.

--json prints one JSON object per line instead, with the fields key, stream, slot, start, end
(epoch ms), timestamp_ms (the Kafka timestamp, the slot's end), mechanism, status, published,
nullified, approximates, cells, histogram, confidence, lower, upper (null when not published,
or when the publication sampled users away: noise.thinned), noise, threshold, users and
schema_version.

--ldp reads the local-DP collector's releases instead (<prefix>.ldp-releases): per cell the
estimated count with normal error bars, count ± z·std, from the standard deviation the release
carries; --json adds confidence, lower and upper to each record. --range A:B (with --stream)
answers MTSP-LDP's range query on every release, the count of the value cells A..B, with
--delta N its count over the last N slots and with --event RATIO the event flag; --json adds
them as "range": {"from", "to", "count", "std", "period", "event"}.

Exit status: 0 done (or interrupted while following), 2 a usage or broker error."""


#: The flags of ``pwevent releases`` after those naming the releases topic.
RELEASES_OPTIONS = (
    option("--from-slot", "skip slots before N (default: from the first slot on the topic)",
           type=int, metavar="N"),
    option("--follow", "keep printing new releases until interrupted (default: "
           "--no-follow, print what is on the topic and exit)",
           action=argparse.BooleanOptionalAction, default=False),
    confidence_option("the error bars"),
    option("--json", "one JSON object per line (default: a table)", action="store_true"),
    option("--ldp", "read the local-DP collector's releases (<prefix>.ldp-releases): per "
           "cell the estimated count with normal error bars from its standard deviation",
           action="store_true"),
    option("--range", "with --ldp and --stream: add each release's count of the value cells "
           "A to B (MTSP-LDP's range query, from the released tree; budget-free), with its "
           "standard deviation where the bars cover the range", metavar="A:B"),
    option("--delta", "with --range: also the range's count over the N slots ending at each "
           "release (default: 1)", type=int, default=1, metavar="N"),
    option("--event", "with --range: flag a slot whose --delta period's count exceeds RATIO "
           "times the previous period's (MTSP-LDP's event monitoring)", type=float,
           metavar="RATIO"),
    option("--timeout", "seconds allowed to connect and, without --follow, for reading to "
           "make progress (default: 30)", type=float, default=30.0, metavar="S"),
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``releases`` sub-command."""
    add_releases_reader(
        sub, "releases", "print a stream's releases with error bars", DESCRIPTION,
        "only this stream's releases (default: every stream on the topic)", RELEASES_OPTIONS, run)


def _number(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:.1f}"


def _time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


#: column widths of the table: stream (longer names overflow), slot, start, status
WIDTHS = (12, 6, 24, 12)


def _columns(stream: str | None, slot: str, start: str, status: str, rest: str) -> str:
    ws, wn, wt, wu = WIDTHS
    lead = [] if stream is None else [f"{stream:<{ws}}"]
    return "  ".join([*lead, f"{slot:>{wn}}", f"{start:<{wt}}", f"{status:<{wu}}", rest])


def header(confidence: float, with_stream: bool) -> str:
    """The table's header line."""
    return _columns("stream" if with_stream else None, "slot", "start (UTC)", "status",
                    f"histogram (±{confidence * 100:g}%)")


def row(rel: Release, with_stream: bool) -> str:
    """One release as a table line: ``label: value±margin`` per cell, then, when the release
    carries one, its post-processed estimate (``| method: v0 v1 ...``, in cell order)."""
    labels = rel.cells or tuple(str(i) for i in range(len(rel.histogram)))
    if rel.upper is not None:
        cells = [f"{label}: {_number(h)}±{_number(u - h)}"
                 for label, h, u in zip(labels, rel.histogram, rel.upper, strict=True)]
    else:
        cells = [f"{label}: {_number(h)}" for label, h in zip(labels, rel.histogram,
                                                              strict=True)]
    if not rel.published:
        cells.append(f"(repeats slot {rel.approximates})" if rel.approximates is not None
                     else "(no publication yet)")
    if rel.estimate is not None:  # the post-processed release, after the raw one
        cells.append(f"| {rel.estimate_method}: " + " ".join(map(str, rel.estimate)))
    return _columns(rel.stream if with_stream else None, str(rel.slot), _time(rel.start),
                    rel.status, "  ".join(cells))


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Execute ``pwevent releases``; returns the exit status."""
    out = out or sys.stdout
    try:
        broker = need_broker(args)
    except ValueError as exc:
        print(f"pwevent releases: error: {exc}", file=sys.stderr)
        return 2
    if not 0.0 < args.confidence < 1.0:
        print("pwevent releases: error: --confidence must be in (0, 1)", file=sys.stderr)
        return 2
    logging.getLogger("aiokafka").addHandler(logging.NullHandler())
    if args.ldp:
        return run_ldp(args, broker, out)
    topics = Topics(prefix=args.prefix)
    with_stream = args.stream is None

    def warn(message: Warning | str, *_: object, **__: object) -> None:
        print(f"pwevent releases: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.simplefilter("always", ReleaseFormatWarning)
        warnings.showwarning = warn
        try:
            if not args.json:
                out.write(header(args.confidence, with_stream) + "\n")
            for rel in iter_releases(broker, topics.releases, stream=args.stream,
                                     follow=args.follow, from_slot=args.from_slot,
                                     confidence=args.confidence,
                                     decisions_topic=topics.decisions, timeout=args.timeout):
                if args.json:
                    out.write(orjson.dumps(rel.to_json()).decode() + "\n")
                else:
                    out.write(row(rel, with_stream) + "\n")
                out.flush()
        except ReleaseReadError as exc:
            print(f"pwevent releases: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 0
        except BrokenPipeError:  # the reader went away (| head)
            with open(os.devnull, "w") as devnull:
                os.dup2(devnull.fileno(), sys.stdout.fileno())
            return 0
    return 0


def run_ldp(args: argparse.Namespace, broker: str, out: TextIO) -> int:
    """``pwevent releases --ldp``: the collector's releases on the topic, as a table or JSON."""
    import asyncio

    from streams.kafka.offsets import read_topic
    from streams.releases.ldp import decode_ldp_releases, range_queries

    if args.follow:
        print("pwevent releases: error: --ldp reads what is on the topic; --follow is not "
              "offered for it", file=sys.stderr)
        return 2
    try:
        records = asyncio.run(read_topic(broker, f"{args.prefix}.ldp-releases",
                                         limit=args.timeout))
    except Exception as exc:  # noqa: BLE001 - any failure to read is one line, status 2
        print(f"pwevent releases: error: reading {args.prefix}.ldp-releases: {exc}",
              file=sys.stderr)
        return 2
    docs = decode_ldp_releases(records, stream=args.stream, from_slot=args.from_slot,
                               confidence=args.confidence)
    if args.range is not None:
        try:
            a, b = (int(x) for x in args.range.split(":"))
            if args.stream is None:
                raise ValueError("--range needs --stream: one stream's releases")
            docs = range_queries(docs, a, b, delta=args.delta, ratio=args.event)
        except ValueError as exc:
            print(f"pwevent releases: error: --range {args.range}: {exc}", file=sys.stderr)
            return 2
    with_stream = args.stream is None
    if not args.json:
        out.write(_columns("stream" if with_stream else None, "slot", "start (UTC)",
                           "reporters", f"counts (±{args.confidence * 100:g}%)") + "\n")
    for doc in docs:
        if args.json:
            out.write(orjson.dumps(doc).decode() + "\n")
            continue
        upper = doc["upper"] or [None] * len(doc["counts"])
        cells = [f"{j}: {c:.1f}" if u is None else f"{j}: {c:.1f}±{u - c:.1f}"
                 for j, (c, u) in enumerate(zip(doc["counts"], upper, strict=True))]
        if "range" in doc:
            r = doc["range"]
            cells.append(f"| {r['from']}..{r['to']}: {r['count']:.1f}"
                         + ("" if r["std"] is None else f" (std {r['std']:.1f})")
                         + ("" if r["period"] is None else f", last {args.delta}: "
                            f"{r['period']:.1f}")
                         + (f", event {r['event']}" if "event" in r else ""))
        out.write(_columns(doc["stream"] if with_stream else None, str(doc["slot"]),
                           _time(doc["start"]), str(doc["reporters"]), "  ".join(cells)) + "\n")
    return 0
