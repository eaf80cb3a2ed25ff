"""``pwevent audit``: check a job's privacy accounting from its topics alone
(:mod:`streams.audit.accounting`).

Also reads the topics into JSON-lines dumps (``--dump DIR``, :func:`dump_topics`), one record per
line: ``{"partition", "offset", "key", "value"}`` with the key as text and the value's JSON decoded
(``null``: a tombstone; a value that is not JSON is kept as a string).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import orjson

from streams.audit.report import AuditReport, Record
from streams.cli import audit_empirical, audit_ldp
from streams.cli.options import PREFIX, add_options, option
from streams.kafka.consumer_stop import stop_consumer
from streams.kafka.topics import Topics

AUDITED = ("requirements", "decisions", "releases")

DESCRIPTION = """\
Re-derive, from the requirements, decisions and releases topics alone (never the job's state),
which users were validly registered at which level and what every slot charged each level, and
check them: every window of w slots charges a level (w, E) at most E; no decision counts more
users at a level than were validly registered there; eps2 is 0 on nullified and approximated
slots; one decision and one release per slot; releases agree with their decisions, repeat the
last publication when not published and carry no exact counts.

"windows checked" counts user windows: every user of a level is charged what the level is
charged, so each slot contributes, per level, the users the decision counts there (one window
of that level's w slots ends at the slot for each of them).

Dynamic mechanisms (dpbd, dpba): the partitions publish on the decisions topic which users'
declarations took effect at which slot. Every user's ledger is rebuilt from them and the
decisions' publish flags and checked against the decisions (levels, users per level, budgets,
nullification: "ledger_mismatch"); every user's backward window (the slot's charge fits what the
window leaves) and forward window (at most EF) is checked at every slot where a requirement is
in force, two windows per user and slot. Every level's charge per slot is also checked against
the largest EB of any valid requirement.

Exit status: 0 no violation, 1 a violation, 2 a usage or input error."""


class AuditInputError(Exception):
    """The topics or dump files could not be read."""


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register the ``audit`` sub-command."""
    p = sub.add_parser("audit", help="check the job's privacy accounting from its topics",
                       description=DESCRIPTION,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_options(p, (
        option("--broker", "read the topics from this broker (default: $PWEVENT_BROKER)",
               metavar="HOST:PORT"),
        PREFIX,
        option("--stream", "the stream to audit (decision and release keys <NAME>/<slot>; "
               "required unless --empirical or --ldp)", metavar="NAME"),
        option("--partitions", "partitions of the requirements topic (default: the broker's "
               "count, or the start record's config.partitions, else 1)", type=int,
               metavar="N"),
        option("--json", "print one JSON object", action="store_true"),
        *(option(f"--{name}", f"a JSON-lines dump of {name}", metavar="FILE")
          for name in AUDITED),
        option("--dump", "with --broker: also write the records read to "
               "DIR/requirements.jsonl, decisions.jsonl and releases.jsonl (one {partition, "
               "offset, key, value} object per line), to audit again later with the file "
               "options", metavar="DIR"),
        option("--timeout", "seconds allowed for reading the broker (default: %(default)s)",
               type=float, default=30.0, metavar="S"),
        option("--empirical", "instead of a stream's topics, audit every mechanism of the job "
               "empirically: neighbouring inputs run --trials times each, and a 95%%-confidence "
               "lower bound on the privacy loss compared with the user's E (exit status 1 when "
               "one lies above it)", action="store_true"),
        option("--ldp", "instead of the central job's topics, audit the stream's local-DP "
               "reports (<prefix>.ldp-reports): from each report's own metadata, every client's "
               "spend over every window of its w slots is at most its E, one report per slot, "
               "in slot order (exit status 1 on a violation)", action="store_true"),
    ))
    audit_empirical.add_arguments(p)
    p.set_defaults(func=run)


def dump_row(partition: int, offset: int, key: bytes | None, value: bytes | None) -> dict:
    """One dump line's object for a raw Kafka record."""
    decoded: Any = None
    if value is not None:
        try:
            decoded = orjson.loads(value)
        except orjson.JSONDecodeError:
            decoded = value.decode("utf-8", "replace")
    text = None if key is None else key.decode("utf-8", "replace")
    return {"partition": partition, "offset": offset, "key": text, "value": decoded}


def write_dump(path: Path, rows: Sequence[dict]) -> None:
    """Write dump rows as JSON lines."""
    path.write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))


def read_dump(path: str | Path) -> list[Record]:
    """Records of a JSON-lines dump; :class:`AuditInputError` when unreadable or malformed."""
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise AuditInputError(f"cannot read {path}: {exc.strerror or exc}") from None
    out = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise AuditInputError(f"{path}:{n}: not JSON") from None
        if (type(row) is not dict or type(row.get("partition")) is not int
                or type(row.get("offset")) is not int or "value" not in row
                or not (row.get("key") is None or type(row["key"]) is str)):
            raise AuditInputError(f"{path}:{n}: expected {{partition, offset, key, value}}")
        out.append(Record(row["partition"], row["offset"], row["key"], row["value"]))
    return out


def to_records(rows: Sequence[dict]) -> list[Record]:
    """Dump rows as :class:`Record` objects."""
    return [Record(r["partition"], r["offset"], r["key"], r["value"]) for r in rows]


async def fetch_topics(bootstrap: str, names: Sequence[str], timeout: float = 30.0,
                       row: Callable[[int, int, bytes | None, bytes | None], Any] = dump_row
                       ) -> dict[str, tuple[int, list]]:
    """Read topics from the beginning to their current end: ``{name: (partitions, rows)}``,
    each record made a row by ``row(partition, offset, key, value)`` (:func:`dump_row`)."""
    from aiokafka import AIOKafkaConsumer

    from streams.kafka.errors import authentication_failed, authentication_failure
    from streams.kafka.offsets import records_to_end, topic_partitions
    from streams.kafka.settings import consumer_options

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **consumer_options(),
                                enable_auto_commit=False,
                                auto_offset_reset="earliest",
                                request_timeout_ms=int(timeout * 1000))

    async def read() -> dict[str, tuple[int, list]]:
        await consumer.start()
        existing = await consumer.topics()
        missing = [n for n in names if n not in existing]
        if missing:
            raise AuditInputError(f"no topic {', '.join(missing)} on {bootstrap}")
        tps = [tp for n in names for tp in await topic_partitions(consumer, n)]
        parts = {n: [tp.partition for tp in tps if tp.topic == n] for n in names}
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = await records_to_end(consumer, tps, timeout)
        rows: dict[str, list] = {n: [] for n in names}
        for tp in tps:
            rows[tp.topic] += [row(tp.partition, r.offset, r.key, r.value) for r in got[tp]]
        return {n: (len(parts[n]), rows[n]) for n in names}

    try:
        return await asyncio.wait_for(read(), timeout)
    except AuditInputError:
        raise
    except TimeoutError:
        raise AuditInputError(f"reading {bootstrap} took longer than {timeout:g} s") from None
    except Exception as exc:  # aiokafka's connection and protocol errors
        refused = await authentication_failure(bootstrap, exc, timeout)
        if refused is not None:
            raise AuditInputError(authentication_failed(bootstrap, refused)) from None
        raise AuditInputError(f"cannot read from {bootstrap}: {exc}") from None
    finally:
        with contextlib.suppress(Exception):  # a consumer that never started
            await stop_consumer(consumer)


def dump_topics(bootstrap: str, prefix: str, out_dir: str | Path,
                timeout: float = 30.0) -> dict[str, tuple[int, list[dict]]]:
    """Write ``out_dir/{requirements,decisions,releases}.jsonl`` from a broker; returns what
    :func:`fetch_topics` read, by logical topic name."""
    read = _fetch(bootstrap, prefix, timeout)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for key, (_parts, rows) in read.items():
        write_dump(out / f"{key}.jsonl", rows)
    return read


def _fetch(bootstrap: str, prefix: str, timeout: float) -> dict[str, tuple[int, list[dict]]]:
    topics = Topics(prefix=prefix)
    names = [topics.name(key) for key in AUDITED]
    got = asyncio.run(fetch_topics(bootstrap, names, timeout))
    return {key: got[name] for key, name in zip(AUDITED, names, strict=True)}


def _audit(args: argparse.Namespace) -> AuditReport:
    from streams.audit.accounting import audit  # with the mechanisms: only when it runs

    files = [getattr(args, name) for name in AUDITED]
    if any(files):
        if not all(files):
            raise AuditInputError("--requirements, --decisions and --releases go together")
        if args.broker or args.dump:
            raise AuditInputError("read either dump files or --broker, not both")
        reqs, decs, rels = (read_dump(f) for f in files)
        return audit(reqs, decs, rels, stream=args.stream, partitions=args.partitions)
    broker = args.broker or os.environ.get("PWEVENT_BROKER")
    if not broker:
        raise AuditInputError("give --broker HOST:PORT (or set PWEVENT_BROKER), or the three dump "
                              "files")
    logging.getLogger("aiokafka").addHandler(logging.NullHandler())
    read = (dump_topics(broker, args.prefix, args.dump, args.timeout) if args.dump
            else _fetch(broker, args.prefix, args.timeout))
    partitions = args.partitions or read["requirements"][0]
    reqs, decs, rels = (to_records(read[key][1]) for key in AUDITED)
    return audit(reqs, decs, rels, stream=args.stream, partitions=partitions)


def summary(report: AuditReport) -> str:
    """The human summary: what was read, the counts, then one line per violation."""
    lines = [f"audit of stream {report.stream!r} (mechanism {report.mechanism or 'unknown'})",
             *(f"  {note}" for note in report.notes)]
    if report.population:
        pop = report.population
        lines.append(f"registration: {pop['registration']}"
                     + (f", {pop['defaulted_users']} users registered by defaults"
                        if pop["defaulted_users"] else ""))
        lines += [f"  {name}: {verdict}" for name, verdict in pop["fields"].items()]
    lines += [f"slots audited: {report.slots_audited}",
              f"windows checked: {report.windows_checked}",
              f"violations: {len(report.violations)}"]
    lines += [f"slot {v.slot}: {v.kind}: {v.detail}" for v in report.sorted_violations()]
    return "\n".join(lines) + "\n"


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Execute ``pwevent audit``; returns the exit status."""
    out = out or sys.stdout
    if args.empirical:
        return audit_empirical.run(args, out)
    if args.ldp:
        return audit_ldp.run(args, out)
    if not args.stream:
        print("pwevent audit: error: --stream is required (or --empirical)", file=sys.stderr)
        return 2
    if args.partitions is not None and args.partitions < 1:
        print("pwevent audit: error: --partitions must be at least 1", file=sys.stderr)
        return 2
    try:
        report = _audit(args)
    except (AuditInputError, OSError, ValueError) as exc:
        print(f"pwevent audit: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        out.write(orjson.dumps(report.to_dict()).decode() + "\n")
    else:
        out.write(summary(report))
    return 1 if report.violations else 0
