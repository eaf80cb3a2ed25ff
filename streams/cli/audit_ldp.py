"""``pwevent audit --ldp``: the stream's local-DP reports read from the broker and audited from
their own metadata (:mod:`streams.audit.ldp_spend`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import TextIO

import orjson

from streams.audit.ldp_spend import audit_spend, summary
from streams.ldp_client.client import topic_name


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Audit ``<prefix>.ldp-reports`` on ``--broker``; 0 clean, 1 a violation, 2 an error."""
    from streams.cli.audit import AuditInputError, fetch_topics

    broker = args.broker or os.environ.get("PWEVENT_BROKER")
    if not broker:
        print("pwevent audit: error: --ldp reads the reports from --broker (or "
              "$PWEVENT_BROKER)", file=sys.stderr)
        return 2
    topic = topic_name(args.prefix)
    logging.getLogger("aiokafka").addHandler(logging.NullHandler())
    try:
        _parts, rows = asyncio.run(fetch_topics(broker, [topic], args.timeout,
                                                row=lambda *record: record))[topic]
    except AuditInputError as exc:
        print(f"pwevent audit: error: {exc}", file=sys.stderr)
        return 2
    report = audit_spend(rows)
    if args.json:
        out.write(orjson.dumps({"topic": topic, **report.as_dict()}).decode() + "\n")
    else:
        out.write(summary(report, topic))
    return 1 if report.violations else 0
